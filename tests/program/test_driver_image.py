"""The driver image under mocks: CR build and push, kind build and load, a given image, bad references."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra_core import config as config_mod
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt

from components import driver_image
from tests.program import harness
from tests.program.test_chart_values import daemonset, render

IMAGE = harness.DOCKER_IMAGE
REGISTRY = "volcengine:cr/registry:Registry"
ENDPOINT = "volcengine:cr/endpoint:Endpoint"
CR_NAMESPACE = "volcengine:cr/namespace:Namespace"
REPOSITORY = "volcengine:cr/repository:Repository"
ADDON = pt.ADDON
COMMAND = "command:local:Command"
RELEASE = pt.HELM_RELEASE
GATE = pt.NODE_READINESS_GATE
CR_TYPES = (REGISTRY, ENDPOINT, CR_NAMESPACE, REPOSITORY)
DOMAIN = "vke-gpu-dra-dev-cn-beijing.cr.volces.com"
REPO = f"{DOMAIN}/vke-gpu-dra/dra-gpu-kubelet-plugin"


def release_values(run: harness.ProgramRun) -> dict[str, Any]:
    return run.one(RELEASE).inputs["values"]


def test_dev_stack_builds_pushes_and_deploys_by_digest() -> None:
    run = harness.run_stack("dev")
    image = run.one(IMAGE)
    inputs = image.inputs
    assert inputs["context"] == {"location": "driver", "named": {"project": {"location": "."}}}
    assert inputs["dockerfile"] == {"location": "driver/Dockerfile"}
    assert inputs["platforms"] == ["linux/amd64"]
    assert inputs["push"] is True
    content = driver_image.source_hash()
    assert inputs["tags"] == [f"{REPO}:{driver_image.driver_version()}", f"{REPO}:src-{content[:12]}"]
    assert inputs["buildArgs"]["VERSION"] == driver_image.driver_version()
    (registry,) = inputs["registries"]
    assert registry["address"] == DOMAIN
    assert registry["username"] == harness.FAKE_CR_USERNAME
    assert registry["password"] == harness.FAKE_CR_TOKEN
    assert "registries" in image.secret_inputs
    # The chart gets the pushed digest, never a tag, plus the add-on's pull secret.
    digest = harness.fake_digest(inputs["tags"])
    assert release_values(run)["image"] == {
        "repository": REPO,
        "digest": digest,
        "pullPolicy": "IfNotPresent",
    }
    assert release_values(run)["imagePullSecrets"] == [{"name": driver_image.CR_CREDENTIAL_SECRET}]
    assert run.exports["driverImage"] == f"{REPO}@{digest}"
    assert image.provider_urn == run.one("pulumi:providers:docker-build").urn


def test_push_token_never_reaches_outputs_or_other_resources() -> None:
    run = harness.run_stack("dev")
    assert harness.FAKE_CR_TOKEN not in json.dumps(run.exports, default=str)
    holders = [r.name for r in run.resources if harness.FAKE_CR_TOKEN in json.dumps(r.inputs, default=str)]
    assert holders == ["driver-image-build"]
    assert (
        "volcengine:cr/getAuthorizationTokens:getAuthorizationTokens",
        {"registry": "vke-gpu-dra-dev"},
    ) in [(t, a) for t, a in run.invokes]


def test_first_preview_asks_no_token_of_the_registry_it_creates() -> None:
    """The CR API has no push token for a registry that does not exist yet: a first preview of a stack
    that creates its registry must not ask for one (the real engine makes an invoke whose arguments are
    known, in previews too)."""
    run = harness.run_stack("dev", preview=True)
    assert run.one(REGISTRY).inputs["name"] == "vke-gpu-dra-dev"
    assert all(t != harness.CR_TOKEN_INVOKE for t, _ in run.invokes)


def test_preview_asks_an_existing_registry_for_its_token() -> None:
    run = harness.run_stack("prod", {"driver.registry.name": "vke-gpu-dra-prod"}, preview=True)
    assert (harness.CR_TOKEN_INVOKE, {"registry": "vke-gpu-dra-prod"}) in run.invokes


def test_dev_stack_creates_the_registry_namespace_and_repository() -> None:
    run = harness.run_stack("dev")
    registry = run.one(REGISTRY).inputs
    assert registry["name"] == "vke-gpu-dra-dev"
    assert registry["type"] == "Enterprise"
    assert registry["project"] == "default"
    assert run.one(ENDPOINT).inputs == {"registry": "vke-gpu-dra-dev", "enabled": True}
    ns = run.one(CR_NAMESPACE)
    assert ns.inputs == {"registry": "vke-gpu-dra-dev", "name": "vke-gpu-dra"}
    repo = run.one(REPOSITORY)
    assert repo.inputs["registry"] == "vke-gpu-dra-dev"
    assert repo.inputs["namespace"] == "vke-gpu-dra"
    assert repo.inputs["name"] == "dra-gpu-kubelet-plugin"
    assert repo.inputs["accessLevel"] == "Private"
    assert run.depends_on(ns, run.one(REGISTRY))
    assert run.depends_on(run.one(IMAGE), repo)
    volc = run.one("pulumi:providers:volcengine").urn
    for type_ in (*CR_TYPES, ADDON):
        assert run.one(type_).provider_urn == volc, type_


def test_prod_stack_uses_an_existing_registry() -> None:
    run = harness.run_stack("prod")
    assert run.by_type(REGISTRY) == [] and run.by_type(ENDPOINT) == []
    assert run.one(CR_NAMESPACE).inputs["registry"] == "vke-gpu-dra-prod"
    assert run.one(IMAGE).inputs["registries"][0]["address"] == "vke-gpu-dra-prod-cn-beijing.cr.volces.com"


def test_pull_path_add_on_covers_the_driver_namespace_and_the_daemonset_refers_to_it(tmp_path: Path) -> None:
    run = harness.run_stack("dev")
    addon = run.one(ADDON)
    assert addon.inputs["name"] == "cr-credential-controller"
    assert (addon.inputs["deployMode"], addon.inputs["deployNodeType"]) == ("Unmanaged", "Node")
    assert addon.inputs["clusterId"] == run.one(pt.CLUSTER).id
    data = json.loads(addon.inputs["config"])["CrConfigmapData"]
    assert data["Namespace"] == facts.DRIVER_NAMESPACE
    assert data["Registries"] == [
        {"Instance": "vke-gpu-dra-dev", "Region": "cn-beijing", "Domains": [DOMAIN]}
    ]
    assert run.depends_on(addon, run.one(GATE))  # the add-on's controller needs nodes
    # The chart's DaemonSet (the real chart, the release's values) pulls by digest with the add-on's secret.
    values = release_values(run)
    pod = daemonset(render(run, tmp_path))
    assert pod["imagePullSecrets"] == [{"name": driver_image.CR_CREDENTIAL_SECRET}]
    assert pod["containers"][0]["image"] == f"{REPO}@{values['image']['digest']}"


def test_release_waits_for_image_and_pull_credentials() -> None:
    run = harness.run_stack("dev")
    release = run.one(RELEASE)
    assert run.depends_on(release, run.one(IMAGE))
    assert run.depends_on(release, run.one(ADDON))


def test_a_source_change_is_a_new_tag_and_digest(tmp_path: Path) -> None:
    for name in driver_image.IMAGE_INPUTS:
        target = tmp_path / name
        if name.endswith("src"):
            (target / "pkg").mkdir(parents=True)
            (target / "pkg" / "mod.py").write_text("x = 1\n")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(name)
    before = driver_image.source_hash(tmp_path)
    (tmp_path / "driver/src/pkg/__pycache__").mkdir()
    (tmp_path / "driver/src/pkg/__pycache__/mod.cpython-311.pyc").write_bytes(b"cache")
    assert driver_image.source_hash(tmp_path) == before  # caches are not sources
    (tmp_path / "driver/src/pkg/mod.py").write_text("x = 2\n")
    after = driver_image.source_hash(tmp_path)
    assert after != before
    tags = driver_image.image_tags("r/x", "0.1.0", after)
    assert tags != driver_image.image_tags("r/x", "0.1.0", before)
    assert harness.fake_digest(tags) != harness.fake_digest(driver_image.image_tags("r/x", "0.1.0", before))


def test_local_stack_builds_into_docker_and_loads_into_kind() -> None:
    run = harness.run_stack("local")
    image = run.one(IMAGE).inputs
    assert image["push"] is False and image["load"] is True
    assert "registries" not in image
    tag = f"src-{driver_image.source_hash()[:12]}"
    assert image["tags"] == [f"{driver_image.KIND_REPOSITORY}:{tag}"]
    load = run.one(COMMAND)
    assert (
        load.inputs["create"]
        == f"kind load docker-image {driver_image.KIND_REPOSITORY}:{tag} --name vke-gpu-dra"
    )
    assert load.inputs["triggers"] == [harness.fake_digest(image["tags"])]
    assert run.depends_on(load, run.one(IMAGE))
    assert load.provider_urn == run.one("pulumi:providers:command").urn
    assert run.one(IMAGE).provider_urn == run.one("pulumi:providers:docker-build").urn
    assert "platforms" not in image  # the kind node's platform is this machine's
    assert run.depends_on(run.one(RELEASE), load)
    assert release_values(run)["image"] == {
        "repository": driver_image.KIND_REPOSITORY,
        "tag": tag,
        "pullPolicy": "IfNotPresent",
    }
    assert [r for r in run.resources if r.type.startswith("volcengine:")] == []


@pytest.mark.parametrize(
    "image",
    [
        "mycr-cn-beijing.cr.volces.com/vke/dra-driver:0.1.0",
        "mycr-cn-beijing.cr.volces.com/vke/dra-driver@sha256:" + "a" * 64,
    ],
)
def test_given_image_builds_nothing(image: str) -> None:
    run = harness.run_stack("dev", {"driver.image": image}, remove=("driver.registry.create",))
    for type_ in (IMAGE, COMMAND, *CR_TYPES, ADDON):
        assert run.by_type(type_) == [], type_
    assert all(t != "volcengine:cr/getAuthorizationTokens:getAuthorizationTokens" for t, _ in run.invokes)
    values = release_values(run)["image"]
    assert values["repository"] == "mycr-cn-beijing.cr.volces.com/vke/dra-driver"
    if "@" in image:
        assert values["digest"] == "sha256:" + "a" * 64 and "tag" not in values
    else:
        assert values["tag"] == "0.1.0" and "digest" not in values
    assert run.exports["driverImage"] == image


def _issues(stack: str, overrides: dict[str, Any], remove: tuple[str, ...] = ()) -> list[config_mod.Issue]:
    with pytest.raises(config_mod.StackConfigError) as info:
        config_mod.load(harness.stack_raw_config(stack, overrides, remove=remove))
    return list(info.value.issues)


@pytest.mark.parametrize(
    ("image", "words"),
    [
        ("UPPER/case:tag", ("repository path 'UPPER/case'", "lower-case")),
        ("repo@sha256:short", ("digest 'sha256:short'", "64 lower-case hex")),
        ("mycr-cn-beijing.cr.volces.com/vke/driver", ("a tag (repo:tag) or a digest",)),
        ("registry.example.com/vke-gpu-dra/dra-gpu-kubelet-plugin:0.1.0", ("placeholder domain",)),
        ("localhost/vke/driver:1", ("local machine",)),
    ],
)
def test_bad_image_references_fail_with_one_message_each(image: str, words: tuple[str, ...]) -> None:
    (issue,) = _issues("dev", {"driver.image": image}, remove=("driver.registry.create",))
    assert issue.key == "driver.image"
    assert repr(image) == issue.value
    for word in words:
        assert word in issue.allowed, issue.allowed


def test_vke_stack_without_registry_or_image_names_the_keys_to_set() -> None:
    (issue,) = _issues("dev", {}, remove=("driver.registry.name",))
    assert issue.key == "driver.registry.name"
    assert "pulumi config set driver.registry.name" in issue.allowed
    assert "driver.image" in issue.allowed
    assert "allowed" in str(config_mod.StackConfigError([issue]))


def test_local_stack_without_image_or_build_target_fails_with_one_message() -> None:
    (issue,) = _issues("local", {}, remove=("driver.image.build",))
    assert issue.key == "driver.image"
    assert "driver.image.build=kind:<cluster>" in issue.allowed
    assert "scripts/kind-up" in issue.allowed


@pytest.mark.parametrize(
    ("stack", "overrides", "key", "words"),
    [
        ("local", {"driver.image.build": "cr"}, "driver.image.build", "target=vke"),
        ("dev", {"driver.image.build": "kind:x"}, "driver.image.build", "VKE nodes cannot pull from kind"),
        ("local", {"driver.image.build": "docker"}, "driver.image.build", "cr or kind:<cluster>"),
        ("local", {"driver.image.build": "kind:Bad_Name"}, "driver.image.build", "kind cluster name"),
        ("dev", {"driver.registry.name": "Bad_Name"}, "driver.registry.name", "CR instance name"),
        ("dev", {"driver.registry.edition": "Premium"}, "driver.registry.edition", "Enterprise, Micro"),
        ("dev", {"driver.registry.namespace": "A"}, "driver.registry.namespace", "lower-case"),
        ("dev", {"driver.imageRepository": "r/x"}, "driver.imageRepository", "replaced by driver.image"),
    ],
)
def test_bad_image_settings(stack: str, overrides: dict[str, Any], key: str, words: str) -> None:
    (issue,) = _issues(stack, overrides)
    assert issue.key == key
    assert words in issue.allowed, issue.allowed


def test_image_and_build_target_together_are_refused() -> None:
    (issue,) = _issues("local", {"driver.image": "busybox:1.37"})
    assert issue.key == "driver.image.build"


def test_nvidia_driver_takes_no_image_settings() -> None:
    run = harness.run_stack("dev", {"driver.implementation": "nvidia"})
    for type_ in (IMAGE, *CR_TYPES, ADDON):
        assert run.by_type(type_) == [], type_
    (issue,) = _issues("dev", {"driver.implementation": "nvidia", "driver.image": "busybox:1.37"})
    assert issue.key == "driver.image"


def test_build_and_command_sdks_are_pinned_and_setup_needs_no_docker() -> None:
    requirements = (harness.ROOT / "requirements.txt").read_text().splitlines()
    constraints = (harness.ROOT / "constraints.txt").read_text().splitlines()
    for package, version in (("pulumi-docker-build", "0.0.22"), ("pulumi-command", "1.2.1")):
        assert f"{package}=={version}" in requirements
        assert f"{package.replace('-', '_')}=={version}" in constraints
    setup = (harness.ROOT / "scripts" / "setup").read_text()
    assert "docker" not in setup.lower() and "kind " not in setup


def test_a_demo_of_the_dev_stack_reuses_its_cr_instance_in_a_namespace_of_its_own() -> None:
    """`vke-gpu-dra demo up --base-stack dev` must not create dev's CR instance a second time."""
    from vke_gpu_dra_ops import demo_stacks

    base = {**harness.stack_file_config("dev"), "vke-gpu-dra:driver.registry.name": "vke-gpu-dra-dev"}
    assert base["vke-gpu-dra:driver.registry.create"] == "true"  # the dev stack creates its CR instance
    run = harness.run_program(config_mod.raw_from_stack_file(demo_stacks.demo_config(base, "demo-a-1")))
    assert run.by_type(REGISTRY) == []
    assert run.one(CR_NAMESPACE).inputs["name"] == "demo-a-1"
    assert run.one(REPOSITORY).inputs["namespace"] == "demo-a-1"
