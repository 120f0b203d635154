"""Plugin wiring and lifecycle: discovery, device state, gRPC servers, slices, health, metrics.

Start order (`_start`, one method per step): serve kubelet first (the DRA socket, then the registration
socket: kubelet registers the plugin within milliseconds of the process start, and its calls wait at the
start gate, within their own deadline, until the claims are loaded) -> open the API -> the cluster's
features (which ResourceSlice fields the API server keeps, shared counters included: feature gate
DynamicMIG needs them before discovery) -> discover devices -> (DynamicMIG) add the MIG placements ->
create the directories -> set up the driver's user-space -> build the takeover of NVIDIA's claims (on the
API) -> load the prepared claims (the claims NVIDIA's plugin prepared adopted first, then the checkpoint
read and restored, with the sharing manager on the API; after a reboot every completed claim gets its
GPU settings, MPS daemons and CDI spec back here, before any call goes through) -> reconcile the claims
(a round at once, then periodically, in the background) -> open for calls (the gate opens, the health
streams get the devices) -> ResourceSlices and the GPU health watching that changes them -> health and
metrics. A start that fails answers the waiting calls with why, and removes both sockets.
Stop (SIGTERM/SIGINT): the registration socket goes first, in-flight calls get a grace period,
both sockets are removed, the slice controller stops; the slices are left in place.

Seamless upgrades (`--rolling-update-id`): two plugin pods run on one node for a while. Each has
its own socket names and removes only those; prepared claims live only on disk (checkpoint and
CDI specs, under the node lock, see `state`); neither deletes or re-creates the slices, and the
newcomer's first reconcile finds the pool the other one published already in sync.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import start_http_server
from vke_gpu_dra_core.device_model import Device
from vke_gpu_dra_core.discovery import DeviceSource, DiscoveryError

from . import __version__, cluster_features, userspace
from .claims.checkpoint import BootIdError, read_boot_id
from .cluster_features import NONE_KEPT, ClusterFeatures
from .config import Config
from .health.policy import DEFAULT_IGNORED_XIDS
from .health.setup import HealthWatching
from .kubeapi import KubeAPI
from .kubelet.endpoints import FAILED_START_GRACE, KubeletEndpoints
from .kubelet.healthcheck import PluginHealthServicer, start_health_server
from .kubelet.pod_resources import PodResourcesClient
from .kubelet.registration import (
    RegistrationSnapshot,
)
from .metrics import Metrics
from .reconcile import Reconciler
from .recovery import LostClaimsRecovery
from .sharing.manager import SharingManager
from .sharing.runners import Mounter, NvidiaSmi
from .shutdown import StopSignals
from .slice_controller import SliceController
from .slices import Layout
from .state import DeviceState, StateLockTimeout
from .status_publisher import ClaimStatusPublisher, StatusReporting
from .takeover import Takeover
from .takeover import Tools as TakeoverTools
from .takeover.node_claims import NodeClaimLookup
from .userspace import DriverEdits, DriverRoot

if TYPE_CHECKING:
    from .partitions.publish import CounterLayout
    from .partitions.setup import DynamicMig

log = logging.getLogger(__name__)

#: How long in-flight kubelet calls may take to finish at shutdown (kubelet's call timeout is 45 s,
#: the pod's default termination grace period 30 s).
STOP_GRACE_SECONDS = 20.0


class StartupError(Exception):
    """The plugin cannot start; the message is one line for the operator."""


def make_source(config: Config, *, dynamic_mig: bool = False) -> DeviceSource:
    """The configured device source; `dynamic_mig`: GPUs with MIG mode on are discovered whole."""
    if config.device_source == "simulated":
        from vke_gpu_dra_core.discovery.simulated import SimulatedSource  # noqa: PLC0415  (only the chosen source is loaded)

        return SimulatedSource(
            config.simulated_gpus, config.simulated_product, config.node_name, config.simulated_numa_nodes
        )
    from .discovery import nvml  # noqa: PLC0415  (NVML bindings load only in nvml mode)

    return nvml.NvmlSource(driver_root=config.driver_root_path, dynamic_mig=dynamic_mig)


class Plugin:
    """One running kubelet plugin. `start()` then `stop()`; or `run()` until a signal."""

    def __init__(
        self,
        config: Config,
        *,
        source: DeviceSource | None = None,
        api: KubeAPI | None = None,
        metrics: Metrics | None = None,
        stop_grace: float = STOP_GRACE_SECONDS,
        endpoints: KubeletEndpoints | None = None,
    ) -> None:
        """`endpoints`: kubelet's sockets, served already by the entry point (before this module loaded);
        None: served first thing by `start`."""
        self.config = config
        self.metrics = metrics or Metrics()
        self.endpoints = endpoints or KubeletEndpoints.of(config)
        self.registration = self.endpoints.registration
        self.registration.add_listener(self._on_registration)
        #: The devices' health as kubelet's health streams report it.
        self.health_board = self.endpoints.health_board
        self._source = source
        self._api = api
        self._owns_api = api is None
        self._stop_grace = stop_grace
        self._stopped = threading.Event()
        self.devices: list[Device] = []
        self.driver_version: str | None = None
        self.driver_edits: DriverEdits | None = None
        self.takeover: Takeover | None = None
        self.state: DeviceState | None = None
        self.slices: SliceController | None = None
        #: DynamicMIG on a server keeping shared counters: the slice layout of its counters, else None.
        self.mig_layout: CounterLayout | None = None
        #: The partitioned GPUs (DynamicMIG on a server keeping shared counters), else None.
        self.dynamic_mig: DynamicMig | None = None
        self.reconciler: Reconciler | None = None
        #: Writes prepared claims' status.devices in the background (claim_status, status_publisher).
        self.claim_status: ClaimStatusPublisher | None = None
        self.health: HealthWatching | None = None
        self.cluster: ClusterFeatures = NONE_KEPT
        self._health: grpc.Server | None = None
        self._metrics_server: Any = None
        self.health_port = 0
        self.metrics_port = 0

    # --- lifecycle ---

    def start(self) -> None:
        cfg = self.config
        log.info(
            "starting",
            extra={
                "fields": {
                    "version": __version__,
                    "driver": cfg.driver_name,
                    "node": cfg.node_name,
                    "device_source": cfg.device_source,
                    "rolling_update_id": cfg.rolling_update_id,
                }
            },
        )
        try:
            self._start()
        except Exception as err:
            self.endpoints.fail(str(err) or type(err).__name__)  # calls waiting for the start answer now
            self.stop(grace=FAILED_START_GRACE)
            raise

    def _start(self) -> None:
        started = time.monotonic()
        self._serve_kubelet()
        self._open_api()
        self._know_the_cluster()
        self._discover_devices()
        self._add_mig_placements()
        self._create_directories()
        self._set_up_driver_user_space()
        self._build_takeover()
        self._load_prepared_claims()
        self._reconcile_claims()
        self._open_for_calls()
        self._publish_slices()
        self._serve_health_and_metrics()
        log.info(
            "serving",
            extra={
                "fields": {
                    "registration_socket": str(self.config.registration_socket),
                    "dra_socket": str(self.config.dra_socket),
                    "healthcheck_port": self.config.healthcheck_port,
                    "metrics_port": self.config.metrics_port,
                    "start_seconds": round(time.monotonic() - started, 3),
                }
            },
        )

    # --- start-up steps, in the order `_start` takes them ---

    def _open_api(self) -> None:
        """The Kubernetes API client (no request yet): claims, slices and MPS daemons go through it."""
        if self._api is None:
            self._api = KubeAPI.from_kubeconfig(self.config.kubeconfig)

    def _know_the_cluster(self) -> None:
        """Which optional ResourceSlice fields the API server keeps (`cluster_features`: /version and
        server-side dry-runs), logged once and exported as a metric; the slices and health read it, and
        DynamicMIG its shared counters' layout."""
        cfg = self.config
        assert self._api is not None
        self.cluster = cluster_features.detect(self._api, driver=cfg.driver_name, node_name=cfg.node_name)
        cluster_features.report(self.cluster, self.metrics)
        if not cfg.feature_gates.dynamic_mig:
            return
        # Dynamic MIG (the MIG lifecycle's NVML bindings) loads only with its gate on.
        from .partitions.setup import counter_layout  # noqa: PLC0415

        self.mig_layout = counter_layout(self.cluster)
        if self.mig_layout is None:
            log.warning(
                "feature gate DynamicMIG is on but the API server keeps no shared counters: GPUs are "
                "published as without the gate",
                extra={"fields": {"detected": self.cluster.detail}},
            )
        else:
            log.info("dynamic MIG: shared counters kept", extra={"fields": {"layout": self.mig_layout}})

    def _dynamic_mig_on(self) -> bool:
        return self.mig_layout is not None

    def _discover_devices(self) -> None:
        source = self._source = self._source or make_source(self.config, dynamic_mig=self._dynamic_mig_on())
        try:
            result = source.discover()
        except DiscoveryError as err:
            raise StartupError(f"device discovery failed: {err}") from err
        for problem in result.problems:
            log.warning("device left out", extra={"fields": {"problem": problem}})
        self.devices = list(result.devices)
        self.driver_version = result.driver_version
        self.metrics.devices_discovered.set(len(self.devices))
        log.info("discovered devices", extra={"fields": {"devices": [d.name for d in self.devices]}})

    def _add_mig_placements(self) -> None:
        """DynamicMIG: every MIG placement of the GPUs with MIG mode on becomes a device (`partitions`)."""
        cfg = self.config
        if not self._dynamic_mig_on():
            return
        from .partitions.setup import nvml_dynamic_mig_at, simulated_dynamic_mig  # noqa: PLC0415

        if cfg.device_source == "simulated":
            self.dynamic_mig = simulated_dynamic_mig(self.devices, cfg.plugin_data_dir)
        else:
            from .discovery.mig_lifecycle import MigLifecycleError  # noqa: PLC0415  (NVML only in nvml mode)

            try:
                self.dynamic_mig = nvml_dynamic_mig_at(cfg.driver_root_path, self.devices)
            except (MigLifecycleError, DiscoveryError) as err:
                raise StartupError(f"dynamic MIG: reading the GPUs' MIG profiles failed: {err}") from err
        self.devices = self.dynamic_mig.devices
        log.info(
            "dynamic MIG: GPUs partitioned",
            extra={"fields": {"gpus": [g.whole.name for g in self.dynamic_mig.manager.gpus]}},
        )

    def _create_directories(self) -> None:
        """The plugin data directory (checkpoint, node lock, MPS) and the CDI spec directory."""
        self.config.plugin_data_dir.mkdir(parents=True, exist_ok=True)
        self.config.cdi_root.mkdir(parents=True, exist_ok=True)

    def _set_up_driver_user_space(self) -> None:
        """What every claim's CDI spec gets from the driver root (libraries, binaries, the hook)."""
        cfg = self.config
        self.driver_edits = userspace.setup(
            userspace.UserSpaceSettings(
                simulated=cfg.device_source == "simulated",
                root=DriverRoot(cfg.driver_root_path, str(cfg.nvidia_driver_root)),
                version=self.driver_version,
                hook_path=cfg.nvidia_cdi_hook_path,
                plugin_data_dir=cfg.plugin_data_dir,
            ),
            self.metrics,
        )

    def _build_takeover(self) -> None:
        """Claims NVIDIA's plugin prepared on this node: adopted when the prepared claims load, NVIDIA's
        leftovers undone at their unprepare (see `takeover`)."""
        self.takeover = self._new_takeover()

    def _new_takeover(self) -> Takeover:
        """The takeover, its tools through the API opened first: NVIDIA's MPS daemons are deleted in
        `--nvidia-namespace`, its GPU settings reset through `nvidia-smi`."""
        cfg = self.config
        return Takeover(
            TakeoverTools(
                cdi_root=cfg.cdi_root,
                plugin_data_dir=cfg.plugin_data_dir,
                namespace=cfg.nvidia_namespace,
                api=self._api,
                smi=NvidiaSmi(cfg.driver_root_path),
                mounter=Mounter(),
                driver_name=cfg.driver_name,
            )
        )

    def _load_prepared_claims(self) -> None:
        """The device state: reads the checkpoint of claims prepared before a restart, restores what an
        interrupted run left and what a reboot reset when the node's boot id changed, and adopts
        NVIDIA's claims (see `state`)."""
        cfg = self.config
        try:
            boot_id = read_boot_id(cfg.boot_id_path)
        except BootIdError as err:
            raise StartupError(f"{err} (--boot-id-path, env BOOT_ID_PATH)") from None
        try:
            self.state = DeviceState(
                driver_name=cfg.driver_name,
                pool_name=cfg.node_name,
                devices=self.devices,
                cdi_root=cfg.cdi_root,
                plugin_data_dir=cfg.plugin_data_dir,
                driver_edits=self.driver_edits,
                gates=cfg.feature_gates,
                sharing_manager=self._sharing_manager(),
                takeover=self.takeover,
                boot_id=boot_id,
                partitions=self.dynamic_mig.manager if self.dynamic_mig else None,
            )
        except StateLockTimeout as err:
            raise StartupError(f"cannot read the prepared claims: {err}") from None
        if self.state.load_problem:
            log.warning("checkpoint problem", extra={"fields": {"problem": self.state.load_problem}})

    def _sharing_manager(self) -> SharingManager:
        """GPU sharing (time-slicing, MPS), through the API opened first. Built whatever the gates say:
        the gates decide what a new claim may ask, and a claim prepared while they were on is still
        undone after they went off."""
        cfg = self.config
        return SharingManager(
            gates=cfg.feature_gates,
            smi=NvidiaSmi(cfg.driver_root_path),
            plugin_data_dir=cfg.plugin_data_dir,
            node_name=cfg.node_name,
            namespace=cfg.namespace,
            image=cfg.image_name,
            host_driver_root=cfg.nvidia_driver_root,
            api=self._api,
        )

    def _reconcile_claims(self) -> None:
        """Checks the checkpoint's claims against the API server in the background: a round now, then
        every --claim-reconcile-interval; it also checks the holders of a prepare's devices. Claims a lost
        checkpoint dropped are recovered in the background too, and before a new claim is prepared
        (`recovery`)."""
        cfg = self.config
        assert self._api is not None and self.state is not None
        node_claims = NodeClaimLookup(
            driver_name=cfg.driver_name,
            node_name=cfg.node_name,
            pod_resources=PodResourcesClient(cfg.pod_resources_socket),
            nodes=self._api,
            pods=self._api,
        )
        self.reconciler = Reconciler(
            self.state,
            self._api,
            driver_name=cfg.driver_name,
            pool_name=cfg.node_name,
            metrics=self.metrics,
            interval=cfg.claim_reconcile_interval,
            lookup=node_claims,
        )
        self.state.holder_check = self.reconciler.check_holders
        recovery = LostClaimsRecovery(
            self.state, self._api, node_claims, driver_name=cfg.driver_name, pool_name=cfg.node_name
        )
        self.state.recover = recovery
        recovery.start()
        self.reconciler.start()

    def _serve_kubelet(self) -> None:
        """First of all (unless the entry point did it already): the DRA socket, then the registration
        socket (`kubelet.endpoints`). kubelet registers the plugin at once; its calls wait at the start
        gate, within their own deadline, until the claims are loaded (`_open_for_calls`)."""
        if not self.endpoints.started:
            self.endpoints.start()

    def _open_for_calls(self) -> None:
        """The claims are loaded: kubelet's calls go through (the gate opens), the health streams get the
        devices, and prepared claims' status is written in the background (claim_status)."""
        cfg = self.config
        assert self._api is not None and self.state is not None
        self.claim_status = ClaimStatusPublisher(
            self._api,
            driver_name=cfg.driver_name,
            pool_name=cfg.node_name,
            devices=self.devices,
            gates=cfg.feature_gates,
            metrics=self.metrics,
        )
        self.claim_status.start()
        self.endpoints.open(
            claims=self._api,
            state=StatusReporting(self.state, self.claim_status),
            metrics=self.metrics,
            devices=self.devices,
        )
        self.metrics.devices_unhealthy.set(self.health_board.unhealthy_count())
        log.info("serving kubelet's calls", extra={"fields": {"devices": len(self.devices)}})

    def _slice_entry(self) -> Callable[[Device], dict[str, Any]]:
        """How a device is published: with consumable shares when the gate is on and the server keeps
        `allowMultipleAllocations` and `requestPolicy`, else as always (logged)."""
        if not self.config.feature_gates.consumable_shares:
            return Device.slice_entry
        from vke_gpu_dra_core import consumable_shares  # noqa: PLC0415  (exact quantities: with the gate only)

        if self.cluster.multiple_allocations:
            log.info(
                "devices are published with consumable shares (allowMultipleAllocations, requestPolicy)",
                extra={"fields": {"mode": consumable_shares.DEFAULT_MODE, "detected": self.cluster.detail}},
            )
            return consumable_shares.shared_entry
        log.warning(
            "ConsumableShares is on, but the API server drops allowMultipleAllocations and requestPolicy "
            "(DRAConsumableCapacity off: Kubernetes before 1.36); devices are published for one claim each",
            extra={"fields": {"detected": self.cluster.detail}},
        )
        return Device.slice_entry

    def _publish_slices(self) -> None:
        """The ResourceSlices, and the GPU health watching that changes them (docs/health.md)."""
        cfg = self.config
        assert self._api is not None and self._source is not None
        self.health = HealthWatching.prepare(
            self.cluster,
            driver=cfg.driver_name,
            devices=self.devices,
            board=self.health_board,
            metrics=self.metrics,
            recovery_window=float(cfg.health_recovery_window),
            ignored_xids=DEFAULT_IGNORED_XIDS | cfg.additional_xids_to_ignore,
            entry=self._slice_entry(),
        )
        self.slices = SliceController(
            self._api,
            driver=cfg.driver_name,
            node_name=cfg.node_name,
            entries=self.health.monitor.desired_entries(),
            metrics=self.metrics,
            max_per_slice=self.health.slice_size,
            managed_annotations=self.health.managed_annotations,
            layout=self._slice_layout(self.health.slice_size),
        )
        self.slices.start()
        self.health.start(
            self._source,
            simulated=cfg.device_source == "simulated",
            plugin_data_dir=cfg.plugin_data_dir,
            publish=self.slices.set_entries,
        )

    def _slice_layout(self, max_per_slice: int) -> Layout | None:
        """DynamicMIG: the partitioned GPUs with their counter sets, in the server's layout."""
        if self.dynamic_mig is None or self.mig_layout is None or self.cluster.version is None:
            return None
        from .partitions.publish import slice_layout  # noqa: PLC0415

        return slice_layout(
            self.dynamic_mig.manager.gpus,
            self.mig_layout,
            kubernetes_minor=self.cluster.version[1],
            max_per_slice=max_per_slice,
        )

    def _serve_health_and_metrics(self) -> None:
        cfg = self.config
        if cfg.healthcheck_port:
            self._health = start_health_server(
                cfg.healthcheck_port,
                PluginHealthServicer(registration_socket=cfg.registration_socket, dra_socket=cfg.dra_socket),
            )
            self.health_port = cfg.healthcheck_port
        if cfg.metrics_port:
            self._metrics_server, _ = start_http_server(cfg.metrics_port, registry=self.metrics.registry)
            self.metrics_port = cfg.metrics_port

    def stop(self, grace: float | None = None) -> None:
        """Stop serving; idempotent. In-flight calls get `grace` seconds to finish."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        grace = self._stop_grace if grace is None else grace
        self.endpoints.stop(grace)
        if self.claim_status is not None:
            self.claim_status.stop()  # the queued status writes, then the worker
        if self.health is not None:
            self.health.stop()
        if self.slices is not None:
            self.slices.stop()
        if self.reconciler is not None:
            self.reconciler.stop()
        if self.state is not None:
            self.state.close()
        if self._health is not None:
            self._health.stop(0).wait()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        if self._api is not None and self._owns_api:
            self._api.close()
        log.info("stopped")

    def run(self, stop_signals: StopSignals | None = None) -> int:
        """Start, serve until SIGTERM or SIGINT, stop; the exit code. `stop_signals`: caught already by
        the caller (the entry point catches them before it serves kubelet's sockets)."""
        with contextlib.ExitStack() as stack:
            signals = stop_signals or stack.enter_context(StopSignals())
            try:
                self.start()
                # What imports and start-up created lives as long as the process: keep it out of the
                # garbage collector's full passes, which otherwise stall a kubelet call for milliseconds.
                gc.freeze()
                received = signals.wait()
                log.info("signal received, shutting down", extra={"fields": {"signal": received.name}})
            finally:
                self.stop()
        return 0

    # --- callbacks ---

    def _on_registration(self, snapshot: RegistrationSnapshot) -> None:
        self.metrics.registered.set(1 if snapshot.registered else 0)
        self.metrics.registration_notifications.labels(
            registered=str(bool(snapshot.registered)).lower()
        ).inc()

    @property
    def dra_socket(self) -> Path:
        return self.config.dra_socket

    @property
    def registration_socket(self) -> Path:
        return self.config.registration_socket
