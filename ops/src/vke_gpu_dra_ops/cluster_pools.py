"""The GPU nodes of a running cluster as the capacity planner's pools: what `vke-gpu-dra plan` reads for a
stack that deploys into an existing cluster (`target=existing-cluster`, the `local` stack), which has no
node pool of its own to model.

The cluster's Kubernetes version comes from its `/version`; its GPUs from the ResourceSlices the driver
(`gpu.nvidia.com`) publishes, per node: the product (`productName`) and how many devices. Nodes alike
(same product, same count) are one pool of that many nodes, its labels the ones they share and its taints
theirs. The planner models each node's devices as the driver publishes that product (its simulated source
of the catalog's profile), so a product without a profile is refused by name.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vke_gpu_dra_core import facts, versions
from vke_gpu_dra_core.config import StackConfig
from vke_gpu_dra_core.profiles import UnknownProductError, get_profile
from vke_gpu_dra_planner.inventory import GpuPool

#: The label a node's instance type is published under (kubelet's well-known label).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


class ClusterReadError(ValueError):
    """The cluster cannot be read, or what it publishes cannot be planned; the message is one line."""


@dataclass(frozen=True)
class ClusterPools:
    """What the plan takes from a running cluster."""

    server: str
    #: `1.37`, from the server's gitVersion.
    kubernetes_version: str
    pools: list[GpuPool]


def _attribute(device: Mapping[str, Any], name: str) -> str | None:
    value = (device.get("attributes") or {}).get(name) or {}
    found = value.get("string") if isinstance(value, Mapping) else None
    return found if isinstance(found, str) else None


def pools_from_objects(
    nodes: Sequence[Mapping[str, Any]],
    slices: Sequence[Mapping[str, Any]],
    *,
    consumable_shares: bool = False,
    dynamic_mig: bool = False,
) -> list[GpuPool]:
    """One pool per kind of GPU node (product and device count) from the cluster's Nodes and the driver's
    ResourceSlices."""
    devices: dict[str, list[Mapping[str, Any]]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") == facts.DRIVER_NAME and spec.get("nodeName"):
            devices.setdefault(str(spec["nodeName"]), []).extend(spec.get("devices") or [])
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
    kinds: dict[tuple[str, int], list[str]] = {}
    for node, gpus in sorted(devices.items()):
        products = {_attribute(d, facts.ATTR_PRODUCT_NAME) for d in gpus}
        if len(products) != 1 or None in products:
            shown = ", ".join(sorted(str(p) for p in products))
            raise ClusterReadError(
                f"node {node}: its {facts.DRIVER_NAME} devices name no single {facts.ATTR_PRODUCT_NAME} "
                f"({shown}): the plan models a node of one GPU product"
            )
        product = str(products.pop())
        try:
            get_profile(product)
        except UnknownProductError as exc:
            raise ClusterReadError(f"node {node}: {exc.args[0]}") from None
        kinds.setdefault((product, len(gpus)), []).append(node)
    pools = []
    for (product, count), names in sorted(kinds.items()):
        labels = [dict(((by_name.get(n) or {}).get("metadata") or {}).get("labels") or {}) for n in names]
        shared = {k: v for k, v in labels[0].items() if all(other.get(k) == v for other in labels[1:])}
        taints = {
            (str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
            for n in names
            for t in ((by_name.get(n) or {}).get("spec") or {}).get("taints") or []
        }
        types = sorted({lb.get(INSTANCE_TYPE_LABEL, "") for lb in labels} - {""})
        pools.append(
            GpuPool(
                name=names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} alike",
                instance_type=", ".join(types) or "nodes of the cluster",
                product=product,
                gpus_per_node=count,
                min_nodes=len(names),
                max_nodes=len(names),
                notes=(f"read from the cluster: {', '.join(names)} publish {count}x {product} each",),
                labels=tuple(sorted(shared.items())),
                taints=tuple(sorted(taints)),
                consumable_shares=consumable_shares,
                dynamic_mig=dynamic_mig,
            )
        )
    return pools


def read_cluster(cfg: StackConfig, *, consumable_shares: bool, dynamic_mig: bool) -> ClusterPools:
    """The stack's cluster (its `kubeconfig` text or `kubeconfigPath`, and `kubeconfigContext`) read
    through the operator tools' Kubernetes client set-up; ClusterReadError when it cannot be."""
    try:
        from kubernetes import client  # noqa: PLC0415 - the `cluster` extra; plan needs it only here

        from vke_gpu_dra_ops import kube, procedure  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        from vke_gpu_dra_ops.verify import missing_cluster_client  # noqa: PLC0415

        raise ClusterReadError(
            f"the stack deploys into an existing cluster, which the plan reads: {missing_cluster_client(exc)}"
        ) from None
    path, written = cfg.kubeconfig_path or kube.default_kubeconfig(), None
    if cfg.kubeconfig is not None:
        fd, written = tempfile.mkstemp(prefix="vke-gpu-dra-plan-", suffix=".kubeconfig")
        with os.fdopen(fd, "w") as file:
            file.write(cfg.kubeconfig.reveal())
        path = written
    try:
        with kube.connect(path, cfg.kubeconfig_context or None) as api:
            fetcher = kube.Fetcher(api, procedure.Settings())
            version = fetcher.call("/version", client.VersionApi(api).get_code)
            nodes = fetcher.call("nodes", fetcher.core.list_node)["items"]
            slices = fetcher.call("resourceslices", fetcher.resource.list_resource_slice)["items"]
            server = kube.server_of(api)
    except kube.ClusterError as exc:
        raise ClusterReadError(f"the stack's cluster cannot be read: {exc}") from None
    finally:
        if written:
            os.unlink(written)
    git_version = str((version or {}).get("gitVersion", ""))
    major_minor = versions.parse_major_minor(git_version)
    if major_minor is None:
        raise ClusterReadError(f"the API server at {server} reports no version: {git_version!r}")
    pools = pools_from_objects(nodes, slices, consumable_shares=consumable_shares, dynamic_mig=dynamic_mig)
    return ClusterPools(server, f"{major_minor[0]}.{major_minor[1]}", pools)
