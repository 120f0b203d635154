"""`pulumi preview --stack dev|prod --policy-pack policy` as a user runs it on a pull request, on the real
CLI, language host and Kubernetes provider, the Volcengine, docker-build and command providers being the
input-checking double (workspace.DOUBLES): what is planned, and what the pack says of it."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import policy_names as names
from vke_gpu_dra_core import pulumi_types as pt

from .conftest import timed
from .workspace import Events, Run, Workspace

CR_TOKEN = "volcengine:cr/getAuthorizationTokens:getAuthorizationTokens"
#: What `scripts/up` asks for before the first `pulumi up` of dev and prod (tools/up.py's missing keys).
CREDENTIALS = {"volcengine:accessKey": "AKLTengine-tier", "volcengine:secretKey": "engine-tier-secret"}
#: The resources of a VKE stack by type, both stacks alike (prod has three zones and so three subnets and
#: SNAT entries, and uses an existing CR instance).
COMMON = {
    pt.CLUSTER: 1,
    pt.NODE_POOL: 1,
    pt.NODE_POOL_RUNTIME: 1,
    "pulumi-python:dynamic/vke:NodeReadinessGate": 1,
    "volcengine:vke/kubeconfig:Kubeconfig": 1,
    "volcengine:vpc/vpc:Vpc": 1,
    "volcengine:vpc/securityGroup:SecurityGroup": 1,
    "volcengine:nat/gateway:Gateway": 1,
    "volcengine:cr/namespace:Namespace": 1,
    "volcengine:cr/repository:Repository": 1,
    "volcengine:vke/addon:Addon": 1,
    "docker-build:index:Image": 1,
    pt.HELM_RELEASE: 1,
    pt.DEVICE_CLASS: 2,
    pt.RESOURCE_CLAIM_TEMPLATE: 1,
    pt.DEPLOYMENT: 1,
}


def _prepare(ws: Workspace, stack: str) -> None:
    ws.stack_init(stack)
    ws.config_set(stack, {"driver.registry.name": f"vke-gpu-dra-{stack}"})
    ws.config_set(stack, CREDENTIALS, secret=True)
    # The loopback stand-in for the CR API: the push token of an existing registry (prod), which the
    # program asks for during the preview.
    ws.set_invokes(
        {
            CR_TOKEN: {
                "id": "token-engine-tier",
                "registry": f"vke-gpu-dra-{stack}",
                "tokens": [
                    {"username": "engine", "token": "token-engine-tier", "expireTime": "2026-12-02T12:00:00Z"}
                ],
            }
        }
    )


def _planned(workspace: Workspace, stack: str, what: str) -> tuple[Run, Events, Counter[str]]:
    """A successful preview of `stack` (timed as `what`), and the resources it creates by type, which
    must include COMMON."""
    _prepare(workspace, stack)
    run, events = workspace.preview(stack)
    timed(what, run.seconds)
    assert events.result == "succeeded", events.errors()
    counts = Counter(s.type for s in events.steps if s.op == "create")
    assert {t: counts[t] for t in COMMON} == COMMON
    return run, events, counts


def test_dev_preview_plans_the_stack_and_passes_the_pack(workspace: Workspace) -> None:
    run, events, counts = _planned(workspace, "dev", "dev preview (37 resources, the pack)")

    assert counts["volcengine:cr/registry:Registry"] == 1, "dev creates its CR instance"
    assert counts["volcengine:vpc/subnet:Subnet"] == 1
    assert all(s.op == "create" for s in events.steps)
    pool = events.one(pt.NODE_POOL).inputs
    labels = {label["key"]: label["value"] for label in pool["kubernetesConfig"]["labels"]}
    assert labels[facts.LABEL_GPU_SCHEDULE] == facts.LABEL_GPU_SCHEDULE_DRA
    assert labels[facts.LABEL_GPU_PRESENT] == facts.LABEL_GPU_PRESENT_VALUE
    cluster = events.one(pt.CLUSTER).inputs
    assert cluster["kubernetesVersion"].startswith("1.34")
    assert not events.one(pt.CLUSTER).protect, "dev is not a production stack"
    # The pack: every stack policy passed, and the one verdict is the public API server's advisory.
    assert {
        names.DEVICE_CLASSES,
        names.CLAIM_REFERENCES,
        names.NODE_POOL_RUNTIME,
        names.CAPACITY,
    } <= events.passed
    assert [(v.policy, v.level) for v in events.violations] == [(names.API_SERVER_PUBLIC_ACCESS, "advisory")]
    # Secrets stay secret: the credentials reach the provider encrypted, never in the stream.
    assert CREDENTIALS["volcengine:secretKey"] not in run.stdout
    # The program asks for the Kubernetes provider's own release: no "expected to have version" warning.
    assert events.one(pt.K8S_PROVIDER).inputs["version"] == pt.KUBERNETES_PROVIDER_VERSION
    assert "expected to have version" not in run.output


def test_prod_preview_protects_the_cluster_and_asks_the_existing_registry(workspace: Workspace) -> None:
    _, events, counts = _planned(workspace, "prod", "prod preview (40 resources, the pack)")

    assert counts["volcengine:cr/registry:Registry"] == 0, "prod pushes to an existing CR instance"
    assert counts["volcengine:vpc/subnet:Subnet"] == 3
    assert events.one(pt.CLUSTER).protect and events.one(pt.NODE_POOL).protect
    image = events.one("docker-build:index:Image").inputs
    assert image["push"] is True
    assert image["registries"][0]["username"] == "engine", "the token came from the CR API's answer"
    assert [v.policy for v in events.violations if v.level == "mandatory"] == []


def test_a_mandatory_policy_fails_the_preview_naming_itself(workspace: Workspace) -> None:
    """The pack's own configuration marks dev a production stack: its unprotected cluster and node pool
    fail production-protection, and the preview fails."""
    _prepare(workspace, "dev")
    policy_config = workspace.root / "policy-config.json"
    policy_config.write_text(json.dumps({names.PRODUCTION_PROTECTION: {"production": True}}))

    run, events = workspace.preview("dev", "--policy-pack-config", str(policy_config), check=False)

    assert run.returncode != 0
    assert events.result == "failed"
    mandatory = sorted(
        (v.policy, v.urn.rsplit("::", 1)[-1]) for v in events.violations if v.level == "mandatory"
    )
    assert mandatory == [
        (names.PRODUCTION_PROTECTION, "gpu-pool"),
        (names.PRODUCTION_PROTECTION, "vke-cluster"),
    ]
    assert "protect is false in a production stack" in events.violations[0].message


def test_a_stack_config_the_program_takes_but_a_mandatory_policy_refuses_fails_the_preview(
    workspace: Workspace,
) -> None:
    """A non-GPU instance type for the GPU pool: the program deploys it as asked, the pack refuses it."""
    _prepare(workspace, "dev")
    workspace.config_set("dev", {"nodePool.instanceTypes": '["ecs.g3i.large"]'})

    run, events = workspace.preview("dev", check=False)

    assert run.returncode != 0 and events.result == "failed"
    mandatory = [(v.policy, v.urn.rsplit("::", 1)[-1]) for v in events.violations if v.level == "mandatory"]
    assert mandatory == [(names.NODE_POOL_INSTANCE_TYPES, "gpu-pool")]
    assert "ecs.g3i.large" in next(v.message for v in events.violations if v.level == "mandatory")


def test_a_config_the_program_refuses_fails_before_anything_is_planned(workspace: Workspace) -> None:
    _prepare(workspace, "dev")
    workspace.config_set("dev", {"nodePool.containerdVersion": "1.7"})

    run, events = workspace.preview("dev", check=False)

    assert run.returncode != 0
    assert [s for s in events.steps if s.op == "create" and s.type != "pulumi:pulumi:Stack"] == []
    [error, *_] = events.errors()
    assert "vke-gpu-dra:nodePool.containerdVersion = '1.7'" in error


def test_a_list_item_set_with_path_is_refused_with_the_commands_that_work(workspace: Workspace) -> None:
    """`pulumi config set --path 'nodePool.instanceTypes[0]' …`, the usual Pulumi habit, writes an object
    under `nodePool`; the program names the commands that set the dotted key, and they work."""
    _prepare(workspace, "dev")
    workspace.pulumi(
        "config", "set", "--stack", "dev", "--path", "nodePool.instanceTypes[0]", "ecs.gni2.3xlarge"
    )

    run, events = workspace.preview("dev", check=False)
    assert run.returncode != 0
    [error, *_] = events.errors()
    fix = "pulumi config rm nodePool, then pulumi config set nodePool.instanceTypes '[\"ecs.gni2.3xlarge\"]'"
    assert fix in error, error

    workspace.config_rm("dev", ["nodePool"])
    workspace.config_set("dev", {"nodePool.instanceTypes": '["ecs.gni2.3xlarge"]'})
    run, events = workspace.preview("dev")
    assert events.result == "succeeded", events.errors()
    assert events.one(pt.NODE_POOL).inputs["nodeConfig"]["instanceTypeIds"] == ["ecs.gni2.3xlarge"]


@pytest.mark.parametrize("missing", ["volcengine:accessKey", "volcengine:secretKey"])
def test_the_volcengine_provider_refuses_to_start_without_credentials(
    workspace: Workspace, missing: str
) -> None:
    """The program reads credentials from config or VOLCENGINE_*; with none the provider's Configure refuses
    (the provider double applies terraform-provider-volcengine's rule)."""
    _prepare(workspace, "dev")
    workspace.config_rm("dev", [missing])
    workspace.extra_env.update({"VOLCENGINE_ACCESS_KEY": "", "VOLCENGINE_SECRET_KEY": ""})

    run, events = workspace.preview("dev", check=False)

    assert run.returncode != 0
    assert any(
        "volcengine:accessKey: access_key and secret_key are required" in e for e in events.errors()
    ), events.errors()
