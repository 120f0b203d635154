"""`DriverImage`: the python driver's image, built from driver/Dockerfile and deployed by digest.

Three sources (`DriverImageConfig.build`, see docs/image-supply-chain.md):

* `cr` (VKE stacks): a Volcengine CR instance (existing by name, or created), a CR namespace and
  repository, push credentials from `cr.get_authorization_tokens` (a secret; a one-hour token, used
  only by the push during this `pulumi up`), a BuildKit build (`docker_build.Image`, linux/amd64)
  pushed there with two tags, the driver's version and the source's content hash. The chart gets
  `repository` + `digest`, so the DaemonSet changes exactly when the image does. Nodes pull through
  VKE's `cr-credential-controller` add-on, which keeps a refreshed pull secret in the driver's
  namespace (the CR tokens expire after an hour; a pull secret made from one here would not).
* `kind`: the same build loaded into the local Docker daemon, then `kind load docker-image` (a
  pulumi-command local command); the chart gets the content-hash tag (a loaded image has no
  registry digest).
* a given `driver.image`: nothing is built; the chart gets its tag or digest.

Pure parts (source hash, tags, chart values, add-on config) are plain functions; the component only
wires resources.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pulumi
import pulumi_command as command
import pulumi_docker_build as docker_build
import pulumi_volcengine as volcengine
import yaml
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.config import BUILD_CR, BUILD_KIND, DriverImageConfig

from .project_files import DOCKERFILE, DRIVER_CHART_FILE, DRIVER_DIR, IMAGE_INPUTS, PROJECT_DIR

_SKIP_PARTS: Final = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
PLATFORM: Final = docker_build.Platform.LINUX_AMD64
#: Repository of images built for a kind cluster (never pushed; `localhost` marks it as local).
KIND_REPOSITORY: Final = "localhost/vke-gpu-dra/dra-gpu-kubelet-plugin"
#: VKE's add-on that keeps CR pull credentials in the namespaces it is configured for.
CR_CREDENTIAL_ADDON: Final = "cr-credential-controller"
#: The image pull secret that add-on writes into those namespaces.
CR_CREDENTIAL_SECRET: Final = "volcengine-cr-credential"


def source_hash(root: Path = PROJECT_DIR, inputs: Iterable[str] = IMAGE_INPUTS) -> str:
    """sha256 over the image's inputs (relative paths and contents, sorted); caches are skipped."""
    digest = hashlib.sha256()
    files: list[Path] = []
    for name in inputs:
        path = root / name
        if path.is_dir():
            files.extend(
                p
                for p in path.rglob("*")
                if p.is_file()
                and not _SKIP_PARTS & set(p.parts)
                and not p.name.endswith((".pyc", ".egg-info"))
                and not any(part.endswith(".egg-info") for part in p.relative_to(root).parts)
            )
        elif path.is_file():
            files.append(path)
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root).as_posix()
        digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def driver_version(root: Path = PROJECT_DIR) -> str:
    """The chart's appVersion, which driver/Dockerfile's VERSION must equal."""
    chart = yaml.safe_load((root / DRIVER_CHART_FILE).read_text(encoding="utf-8"))
    return str(chart["appVersion"])


def image_tags(repository: str, version: str, content_hash: str) -> list[str]:
    """The driver's version and `src-<first 12 hex of the content hash>`."""
    return [f"{repository}:{version}", f"{repository}:src-{content_hash[:12]}"]


def registry_domain(registry_name: str, region: str) -> str:
    """Public domain of a CR instance: `<instance>-<region>.cr.volces.com`."""
    return f"{registry_name}-{region}.cr.volces.com"


def credential_addon_config(registry_name: str, region: str, domain: str) -> str:
    """Config of cr-credential-controller: credentials for this instance in the driver's namespace."""
    return json.dumps(
        {
            "CrConfigmapData": {
                "Namespace": facts.DRIVER_NAMESPACE,
                "ServiceAccount": "*",
                "Registries": [{"Instance": registry_name, "Region": region, "Domains": [domain]}],
            }
        },
        sort_keys=True,
    )


def image_values(repository: str, *, tag: str = "", digest: str = "") -> dict[str, str]:
    """The chart's `image` values for a reference (pullPolicy is added by the driver's values)."""
    values = {"repository": repository}
    if digest:
        values["digest"] = digest
    elif tag:
        values["tag"] = tag
    return values


@dataclass(frozen=True)
class ChartImage:
    """What the driver's release needs: image values, pull secrets and resources to wait for."""

    values: pulumi.Input[dict[str, Any]]
    pull_secrets: tuple[str, ...] = ()
    depends_on: tuple[pulumi.Resource, ...] = ()


class DriverImage(pulumi.ComponentResource):
    """The driver image for the chart: built and pushed to CR, built into kind, or given."""

    chart: ChartImage
    reference: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cfg: DriverImageConfig,
        *,
        region: str = "",
        volcengine_provider: pulumi.ProviderResource | None = None,
        cluster_id: pulumi.Input[str] | None = None,
        addon_depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("vke-gpu-dra:index:DriverImage", name, None, opts)
        self._docker: docker_build.Provider | None = None
        if cfg.image is not None:
            image = cfg.image
            self.chart = ChartImage(image_values(image.repository, tag=image.tag, digest=image.digest))
            self.reference = pulumi.Output.from_input(str(image))
        elif cfg.build == BUILD_CR:
            assert volcengine_provider is not None and cluster_id is not None
            self._cr(
                name,
                cfg=cfg,
                region=region,
                provider=volcengine_provider,
                cluster_id=cluster_id,
                addon_depends_on=addon_depends_on,
            )
        elif cfg.build == BUILD_KIND:
            self._kind(name, cfg)
        else:  # load() refuses a python driver without an image source
            raise ValueError("DriverImage needs driver.image or a build target")
        self.register_outputs({"reference": self.reference})

    def _docker_provider(self, name: str) -> docker_build.Provider:
        """The BuildKit provider (explicit, like every provider of the stack)."""
        if self._docker is None:
            self._docker = docker_build.Provider(
                f"{name}-docker-build", opts=pulumi.ResourceOptions(parent=self)
            )
        return self._docker

    def _build_args(self, content_hash: str) -> dict[str, str]:
        return {"VERSION": driver_version(), "REVISION": f"src-{content_hash}"}

    def _cr(
        self,
        name: str,
        *,
        cfg: DriverImageConfig,
        region: str,
        provider: pulumi.ProviderResource,
        cluster_id: pulumi.Input[str],
        addon_depends_on: Sequence[pulumi.Resource],
    ) -> None:
        volc = pulumi.ResourceOptions(parent=self, provider=provider)
        registry_deps: list[pulumi.Resource] = []
        registry_name: pulumi.Input[str] = cfg.registry_name
        #: The registry whose push token is asked for (the CR API has none for a registry that does not
        #: exist yet).
        token_registry: pulumi.Input[str] = cfg.registry_name
        if cfg.registry_create:
            registry = volcengine.cr.Registry(
                f"{name}-registry",
                name=cfg.registry_name,
                type=cfg.registry_edition,
                project=cfg.registry_project,
                delete_immediately=False,
                opts=volc,
            )
            endpoint = volcengine.cr.Endpoint(
                f"{name}-registry-endpoint", registry=registry.name, enabled=True, opts=volc
            )
            registry_name = registry.name
            registry_deps = [registry, endpoint]
            # Known once the registry exists: its id is unknown in a preview that creates it, and an invoke
            # with an unknown argument is not made then (pulumi-volcengine's output functions ignore an
            # invoke's depends_on).
            token_registry = pulumi.Output.all(registry.id, registry.name).apply(lambda ids: str(ids[1]))
        deps = pulumi.ResourceOptions.merge(volc, pulumi.ResourceOptions(depends_on=registry_deps))
        namespace = volcengine.cr.Namespace(
            f"{name}-namespace", registry=registry_name, name=cfg.registry_namespace, opts=deps
        )
        repo = volcengine.cr.Repository(
            f"{name}-repository",
            registry=registry_name,
            namespace=namespace.name,
            name=cfg.registry_repository,
            access_level="Private",
            description="DRA kubelet plugin (driver/Dockerfile), pushed by the vke-gpu-dra stack",
            opts=volc,
        )
        domain = registry_domain(cfg.registry_name, region)
        repository = f"{domain}/{cfg.registry_namespace}/{cfg.registry_repository}"
        token = volcengine.cr.get_authorization_tokens_output(
            registry=token_registry, opts=pulumi.InvokeOptions(parent=self, provider=provider)
        ).tokens[0]
        content_hash = source_hash()
        image = docker_build.Image(
            f"{name}-build",
            context=docker_build.BuildContextArgs(
                location=DRIVER_DIR, named={"project": docker_build.ContextArgs(location=str(PROJECT_DIR))}
            ),
            dockerfile=docker_build.DockerfileArgs(location=DOCKERFILE),
            platforms=[PLATFORM],
            build_args=self._build_args(content_hash),
            push=True,
            tags=image_tags(repository, driver_version(), content_hash),
            registries=[
                docker_build.RegistryArgs(
                    address=domain,
                    username=token.username,
                    password=pulumi.Output.secret(token.token),
                )
            ],
            opts=pulumi.ResourceOptions(parent=self, provider=self._docker_provider(name), depends_on=[repo]),
        )
        addon = volcengine.vke.Addon(
            f"{name}-cr-credentials",
            cluster_id=cluster_id,
            name=CR_CREDENTIAL_ADDON,
            deploy_mode="Unmanaged",  # how VKE lists this add-on (ListSupportedAddons)
            deploy_node_type="Node",
            config=credential_addon_config(cfg.registry_name, region, domain),
            opts=pulumi.ResourceOptions.merge(
                volc, pulumi.ResourceOptions(depends_on=[*addon_depends_on, *registry_deps])
            ),
        )
        self.chart = ChartImage(
            image.digest.apply(lambda d: image_values(repository, digest=d)),
            pull_secrets=(CR_CREDENTIAL_SECRET,),
            depends_on=(image, addon),
        )
        self.reference = image.digest.apply(lambda d: f"{repository}@{d}")

    def _kind(self, name: str, cfg: DriverImageConfig) -> None:
        content_hash = source_hash()
        tag = f"src-{content_hash[:12]}"
        reference = f"{KIND_REPOSITORY}:{tag}"
        image = docker_build.Image(
            f"{name}-build",
            context=docker_build.BuildContextArgs(
                location=DRIVER_DIR, named={"project": docker_build.ContextArgs(location=str(PROJECT_DIR))}
            ),
            dockerfile=docker_build.DockerfileArgs(location=DOCKERFILE),
            # The kind node runs on this machine: its platform, whatever the machine is.
            build_args=self._build_args(content_hash),
            push=False,
            load=True,
            tags=[reference],
            opts=pulumi.ResourceOptions(parent=self, provider=self._docker_provider(name)),
        )
        shell = command.Provider(f"{name}-command", opts=pulumi.ResourceOptions(parent=self))
        load = command.local.Command(
            f"{name}-kind-load",
            create=f"kind load docker-image {reference} --name {cfg.kind_cluster}",
            triggers=[image.digest],
            opts=pulumi.ResourceOptions(parent=self, provider=shell, depends_on=[image]),
        )
        self.chart = ChartImage(image_values(KIND_REPOSITORY, tag=tag), depends_on=(image, load))
        self.reference = pulumi.Output.from_input(reference)
