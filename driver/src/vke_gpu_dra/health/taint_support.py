"""Device taints as this API server takes them: read from the cluster features detected at start
(`vke_gpu_dra.cluster_features`: /version and server-side dry-runs).

Device taints exist from 1.33, as an alpha field behind the DRADeviceTaints gate, beta and on by
default from 1.36, GA (still on by default, locked from 1.38) in 1.37; the `None` effect is valid from 1.35;
4 taints per device on 1.34, 16 from 1.35, and then at most 64 devices in a slice whose devices carry taints
(`resource.k8s.io/v1` DeviceTaintsMaxLength and ResourceSliceMaxDevicesWithAdvancedFeatures, unchanged in
1.37).
"""

from __future__ import annotations

from ..cluster_features import FIRST_VERSION, ClusterFeatures, parse_version
from ..cluster_features import detect as detect_features
from ..kubeapi import KubeAPI
from .policy import NO_TAINTS, TaintSupport

__all__ = ["detect", "parse_version", "support_of"]


def support_of(features: ClusterFeatures) -> TaintSupport:
    """TaintSupport of a server whose features are known."""
    if features.version is None:
        return NO_TAINTS
    if features.version < FIRST_VERSION:
        return TaintSupport(taints=False, none_effect=False, detail=features.detail)
    modern = features.modern_taints
    return TaintSupport(
        taints=features.taints,
        none_effect=modern,
        max_taints=16 if modern else 4,
        max_devices_with_taints=64 if modern else 128,
        detail=features.detail,
    )


def detect(api: KubeAPI, *, driver: str, node_name: str) -> TaintSupport:
    """TaintSupport for this server (detects the cluster features; the plugin detects them once and
    uses `support_of`)."""
    return support_of(detect_features(api, driver=driver, node_name=node_name))
