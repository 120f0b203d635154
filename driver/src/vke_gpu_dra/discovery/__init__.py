"""Device discovery: where this node's allocatable devices come from (NVML or simulation).

Every source returns the same `Device` model, so publishing, prepare and CDI are one code path.
"""

from __future__ import annotations

from .base import DeviceSource, DiscoveryError, DiscoveryResult

__all__ = ["DeviceSource", "DiscoveryError", "DiscoveryResult"]
