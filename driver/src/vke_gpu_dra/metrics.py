"""Prometheus metrics of the kubelet plugin (one registry per plugin instance).

The HTTP endpoint is started by the plugin wiring; this module only defines the metrics and
how the rest of the driver records into them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_PREFIX = "vke_gpu_dra"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 45.0)


class Metrics:
    """All metrics of one plugin instance, registered in their own `CollectorRegistry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.prepare_claims = Counter(
            f"{_PREFIX}_prepare_claims",
            "ResourceClaims handled by NodePrepareResources, by result.",
            ["result"],
            registry=r,
        )
        self.unprepare_claims = Counter(
            f"{_PREFIX}_unprepare_claims",
            "ResourceClaims handled by NodeUnprepareResources, by result.",
            ["result"],
            registry=r,
        )
        self.prepare_seconds = Histogram(
            f"{_PREFIX}_prepare_duration_seconds",
            "Duration of NodePrepareResources calls with claims.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.unprepare_seconds = Histogram(
            f"{_PREFIX}_unprepare_duration_seconds",
            "Duration of NodeUnprepareResources calls with claims.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.devices_published = Gauge(
            f"{_PREFIX}_devices_published",
            "Devices published in this node's ResourceSlices.",
            registry=r,
        )
        self.resource_slices = Gauge(
            f"{_PREFIX}_resource_slices",
            "ResourceSlices this plugin currently publishes.",
            registry=r,
        )
        self.pool_generation = Gauge(
            f"{_PREFIX}_pool_generation",
            "Generation of the published resource pool.",
            registry=r,
        )
        self.slice_sync_errors = Counter(
            f"{_PREFIX}_slice_sync_errors",
            "Failed ResourceSlice reconciliations.",
            registry=r,
        )
        self.registered = Gauge(
            f"{_PREFIX}_kubelet_registered",
            "1 when kubelet reported a successful registration, 0 after a failed one or before any.",
            registry=r,
        )
        self.registration_notifications = Counter(
            f"{_PREFIX}_registration_notifications",
            "Registration status notifications from kubelet.",
            ["registered"],
            registry=r,
        )
        self.devices_discovered = Gauge(
            f"{_PREFIX}_devices_discovered",
            "Devices found at start-up.",
            registry=r,
        )
        self.devices_unhealthy = Gauge(
            f"{_PREFIX}_devices_unhealthy",
            "Devices currently reported unhealthy.",
            registry=r,
        )
        self.driver_userspace_ready = Gauge(
            f"{_PREFIX}_driver_userspace_ready",
            "1 when the driver root has libcuda, libnvidia-ml.so.1 and nvidia-smi for containers, else 0.",
            registry=r,
        )
        self.driver_userspace_missing = Gauge(
            f"{_PREFIX}_driver_userspace_missing",
            "1 for each driver file containers need that the driver root lacks.",
            ["item"],
            registry=r,
        )
        self.driver_libraries = Gauge(
            f"{_PREFIX}_driver_libraries",
            "Driver libraries mounted into GPU containers through CDI.",
            registry=r,
        )
        # --- claim reconciliation (reconcile.py) ---
        self.claim_reconcile_rounds = Counter(
            f"{_PREFIX}_claim_reconcile_rounds",
            "Rounds that checked the checkpoint's claims against the API server.",
            registry=r,
        )
        self.claim_ghosts_cleaned = Counter(
            f"{_PREFIX}_claim_ghosts_cleaned",
            "Entries of claims the API server no longer has for this node, cleaned as an unprepare, by "
            "reason (gone, replaced, deallocated).",
            ["reason"],
            registry=r,
        )
        self.claim_reconcile_failures = Counter(
            f"{_PREFIX}_claim_reconcile_failures",
            "Claim checks that decided nothing and kept the entry, by reason (timeout, unreachable, "
            "unauthorized, forbidden, api-error, cleanup).",
            ["reason"],
            registry=r,
        )
        # --- claim status (status_publisher.py) ---
        self.claim_status_writes = Counter(
            f"{_PREFIX}_claim_status_writes",
            "Writes of prepared claims' status.devices, by result (success, gone, dropped, unsupported, "
            "timeout, unreachable, unauthorized, forbidden, api-error, error; cancelled: a claim unprepared "
            "before its entries were written).",
            ["result"],
            registry=r,
        )
        self.cdi_hooks_enabled = Gauge(
            f"{_PREFIX}_cdi_hooks_enabled",
            "1 when CDI specs carry nvidia-cdi-hook hooks, 0 when libraries also get SONAME mounts.",
            registry=r,
        )
        self.device_health_problem = Gauge(
            f"{_PREFIX}_device_health_problem",
            "1 while a device has this health problem (reason: xid, gpu-lost, unmonitored), else 0.",
            ["device", "reason"],
            registry=r,
        )
        self.device_health_transitions = Counter(
            f"{_PREFIX}_device_health_transitions",
            "Device health changes, by device and the health reached (healthy, unhealthy, unknown).",
            ["device", "to"],
            registry=r,
        )
        self.health_events = Counter(
            f"{_PREFIX}_health_events",
            "Health events by kind (xid, double-bit-ecc, gpu-lost) and outcome (fatal, ignored, unmatched).",
            ["kind", "outcome"],
            registry=r,
        )
        self.device_taints_supported = Gauge(
            f"{_PREFIX}_device_taints_supported",
            "1 when the API server keeps ResourceSlice device taints (unhealthy devices are tainted), "
            "0 when unhealthy devices are left out of the slices instead.",
            registry=r,
        )
        self.cluster_slice_field = Gauge(
            f"{_PREFIX}_cluster_slice_field",
            "1 when the API server keeps this optional ResourceSlice field (taints, "
            "allowMultipleAllocations, bindingConditions, sharedCounters), 0 when it drops it; "
            "detected once at start by server-side dry-runs.",
            ["field"],
            registry=r,
        )
