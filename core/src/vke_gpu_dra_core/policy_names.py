"""The names of the policy pack's policies, as `pulumi preview --policy-pack` reports and configures them.

The pack (`policy/vke_dra_policies/pack.py`) registers one policy per name; `policy/README.md` has one
row per name; the operator tools' capacity check is the `CAPACITY` policy's.
"""

from __future__ import annotations

from typing import Final

KUBERNETES_VERSION: Final = "kubernetes-version"
KUBERNETES_VERSION_FORCED: Final = "kubernetes-version-forced"
NODE_POOL_LABELS: Final = "gpu-node-pool-labels"
NODE_POOL_INSTANCE_TYPES: Final = "gpu-node-pool-instance-types"
NODE_POOL_RUNTIME: Final = "gpu-node-pool-runtime"
NO_DEVICE_PLUGIN: Final = "no-device-plugin-beside-dra"
NO_DEVICE_PLUGIN_ON_DRA_NODES: Final = "no-device-plugin-on-dra-nodes"
DRIVER_VALUES: Final = "dra-driver-values"
DEVICE_CLASSES: Final = "device-classes"
CLAIM_REFERENCES: Final = "claim-references"
SECRETS: Final = "secrets"
PRODUCTION_PROTECTION: Final = "production-protection"
API_SERVER_PUBLIC_ACCESS: Final = "api-server-public-access"
NODE_POOL_AUTO_SCALING: Final = "node-pool-auto-scaling"
CAPACITY: Final = "gpu-claims-fit-node-pools"
DRIVER_IMAGE_REGISTRY: Final = "driver-image-registry"
DRIVER_IMAGE_DIGEST: Final = "driver-image-digest"
DRIVER_IMAGE_DIGEST_ADVISORY: Final = "driver-image-digest-advisory"
SHARING_FEATURE_GATES: Final = "gpu-sharing-feature-gates"
