"""The pure half of device discovery: what every source returns, normalisation, the simulated source.

Every source (the driver's NVML source, the simulated one) returns the same `Device` model, so
publishing, prepare, CDI and the capacity planner share one code path.
"""

from __future__ import annotations

from .base import DeviceSource, DiscoveryError, DiscoveryResult

__all__ = ["DeviceSource", "DiscoveryError", "DiscoveryResult"]
