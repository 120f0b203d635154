"""`DeviceClasses`: gpu.nvidia.com and mig.nvidia.com (resource.k8s.io/v1) from the shared facts."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from . import manifests


class DeviceClasses(pulumi.ComponentResource):
    """One `resource.k8s.io/v1` DeviceClass per entry of `facts.DEVICE_CLASSES`.

    Registered only when the driver chart does not render them itself (our chart with
    `deviceClasses.enabled=false`); NVIDIA's chart always renders the same two classes. With
    `extended_resource` gpu.nvidia.com maps nvidia.com/gpu (stack config driver.extendedResource).
    """

    names: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        *,
        provider: k8s.Provider,
        extended_resource: bool = False,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("vke-gpu-dra:index:DeviceClasses", name, None, opts)
        classes = []
        for manifest in manifests.device_classes(extended_resource):
            class_name = manifest["metadata"]["name"]
            classes.append(
                k8s.resource.v1.DeviceClass(
                    f"{name}-{class_name}",
                    metadata=manifest["metadata"],
                    spec=manifest["spec"],
                    opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(depends_on)),
                )
            )
        self.names = pulumi.Output.all(*[c.metadata.name for c in classes]).apply(list)
        self.register_outputs({"names": self.names})
