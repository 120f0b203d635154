"""Command line and environment of the kubelet plugin, parsed into one validated `Config`.

Every flag can also be given through the environment variable named in its help (the Helm chart
sets those); a flag on the command line wins over the environment. Any invalid value is reported
as one `PluginConfigError` naming the flag, its environment variable, the value and what is allowed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, NoReturn

from vke_gpu_dra_core import facts, featuregates, profiles
from vke_gpu_dra_core import simulated_gpus as simulated
from vke_gpu_dra_core.object_names import is_dns_subdomain
from vke_gpu_dra_core.simulated_gpus import MAX_SIMULATED_GPUS

from . import __version__
from .bootid import DEFAULT_BOOT_ID_PATH
from .kubelet.socket_names import MAX_SOCKET_PATH_BYTES, dra_socket_name, registration_socket
from .kubelet.socket_names import POD_RESOURCES_SOCKET as DEFAULT_POD_RESOURCES_SOCKET
from .reconcile_interval import DEFAULT_INTERVAL_SECONDS, MAX_INTERVAL_SECONDS, MIN_INTERVAL_SECONDS

if TYPE_CHECKING:
    import argparse

PROG = "dra-gpu-kubelet-plugin"
LOG_FORMATS = ("json", "text")
LOG_LEVELS = ("debug", "info", "warning", "error")
_ROLLING_UPDATE_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,62}[a-z0-9])?$")


class PluginConfigError(Exception):
    """An invalid command line or environment; the message is one line for the operator."""


@dataclass(frozen=True)
class Config:
    node_name: str
    driver_name: str
    kubeconfig: Path | None
    plugin_data_dir: Path
    registrar_dir: Path
    cdi_root: Path
    device_source: facts.DeviceSource
    simulated_gpus: int
    simulated_product: str
    nvidia_driver_root: Path
    healthcheck_port: int
    metrics_port: int
    log_format: Literal["json", "text"]
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: The pod UID in a seamless-upgrade deployment, in this instance's socket names; None: the fixed names.
    rolling_update_id: str | None = None
    #: Where this process sees the driver root (the chart mounts it at /driver-root); None: the host path.
    container_driver_root: Path | None = None
    #: Host path of nvidia-cdi-hook for the CDI hooks; None: the host's copied into the plugin data dir.
    nvidia_cdi_hook_path: Path | None = None
    #: Seconds between two checks of the prepared claims against the API server (`reconcile`).
    claim_reconcile_interval: int = DEFAULT_INTERVAL_SECONDS
    #: NUMA nodes of the simulated GPUs (`simulated.numa_layout`); empty: no numaNode attribute.
    simulated_numa_nodes: tuple[int | None, ...] = ()

    @property
    def driver_root_path(self) -> Path:
        """The driver root as this process reads it."""
        return self.container_driver_root or self.nvidia_driver_root

    # --- GPU sharing (NVIDIA's --feature-gates, --namespace, --image-name) ---
    feature_gates: featuregates.FeatureGates = field(default_factory=featuregates.FeatureGates)
    namespace: str = "default"
    image_name: str | None = None
    # --- taking a node over from NVIDIA's plugin ---
    nvidia_namespace: str = "nvidia-dra-driver-gpu"
    #: kubelet's PodResources socket: the claims the pods of this node use (adopted claims' names).
    pod_resources_socket: Path = DEFAULT_POD_RESOURCES_SOCKET
    #: The file of the node's boot id (a reboot is told by a new one); tests point it elsewhere.
    boot_id_path: Path = DEFAULT_BOOT_ID_PATH

    # --- GPU health (docs/health.md) ---
    #: XIDs ignored on top of NVIDIA's application-error list (NVIDIA's --additional-xids-to-ignore).
    additional_xids_to_ignore: frozenset[int] = frozenset()
    #: Seconds a GPU must answer NVML without a fatal event before it is healthy again.
    health_recovery_window: int = 300

    @property
    def dra_socket(self) -> Path:
        return self.plugin_data_dir / dra_socket_name(self.rolling_update_id)

    @property
    def registration_socket(self) -> Path:
        return registration_socket(self.registrar_dir, self.driver_name, self.rolling_update_id)


# --- value parsers: return the typed value or raise ValueError(what is allowed) ---


def _dns_subdomain(limit: int) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if not is_dns_subdomain(value, limit):
            raise ValueError(f"must be a lowercase DNS subdomain of at most {limit} characters")
        return value

    return parse


def _abs_path(value: str) -> Path:
    if not value.startswith("/"):
        raise ValueError("must be an absolute path")
    return Path(value)


def _path(value: str) -> Path:
    if not value:
        raise ValueError("must not be empty")
    return Path(value)


def _nonempty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value.strip()


def _int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value.strip(), 10)
        except ValueError:
            raise ValueError(f"must be an integer from {low} to {high}") from None
        if not low <= number <= high:
            raise ValueError(f"must be an integer from {low} to {high}")
        return number

    return parse


def _choice(choices: Sequence[str]) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in choices:
            raise ValueError(f"must be one of: {', '.join(choices)}")
        return value

    return parse


def _rolling_update_id(value: str) -> str:
    if not _ROLLING_UPDATE_ID.match(value):
        raise ValueError(
            "must be 1 to 64 lowercase letters, digits and '-' (the pod UID), starting and ending "
            "with a letter or digit"
        )
    return value


def _feature_gates(value: str) -> featuregates.FeatureGates:
    try:
        gates = featuregates.parse(value)
    except featuregates.FeatureGateError as err:
        raise ValueError(str(err)) from None
    conflict = featuregates.conflicts(gates.values)
    if conflict is not None:
        raise ValueError(conflict)
    return gates


def _xid_list(value: str) -> frozenset[int]:
    if not value.replace(",", "").strip():
        return frozenset()  # no XID (the default): the health policy loads later, not on the start path
    from .health.policy import parse_xid_list  # noqa: PLC0415  (keeps the parser's import light)

    return parse_xid_list(value)


def _product(value: str) -> str:
    known = profiles.known_products()
    if value not in known:
        raise ValueError(f"must be one of the known products: {', '.join(known)}")
    return value


class _Option(NamedTuple):
    """One flag and its environment variable. (A named tuple, not a dataclass: building a dataclass costs
    half a millisecond of the start, before kubelet can register the plugin.)"""

    dest: str
    env: str
    parse: Callable[[str], Any]
    default: str | None
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")


_PORT = _int_range(0, 65535)
OPTIONS: tuple[_Option, ...] = (
    _Option("node_name", "NODE_NAME", _dns_subdomain(253), None, "name of this node (required)"),
    _Option("driver_name", "DRIVER_NAME", _dns_subdomain(63), facts.DRIVER_NAME, "DRA driver name"),
    _Option(
        "kubeconfig",
        "KUBECONFIG",
        _path,
        None,
        "kubeconfig file (default: in-cluster service account, else ~/.kube/config)",
    ),
    _Option(
        "plugin_data_dir",
        "PLUGIN_DATA_DIR",
        _abs_path,
        None,
        "directory of dra.sock and the plugin's state (default /var/lib/kubelet/plugins/<driver>)",
    ),
    _Option(
        "registrar_dir",
        "REGISTRAR_DIR",
        _abs_path,
        "/var/lib/kubelet/plugins_registry",
        "kubelet's plugin registration directory",
    ),
    _Option("cdi_root", "CDI_ROOT", _abs_path, "/var/run/cdi", "directory for generated CDI specs"),
    _Option(
        "device_source", "DEVICE_SOURCE", _choice(facts.DEVICE_SOURCES), "nvml", "where devices come from"
    ),
    _Option(
        "simulated_gpus",
        "SIMULATED_GPUS",
        _int_range(0, MAX_SIMULATED_GPUS),
        "8",
        "number of GPUs in simulated mode",
    ),
    _Option(
        "simulated_product",
        "SIMULATED_PRODUCT",
        _product,
        profiles.DEFAULT_PRODUCT,
        "GPU product in simulated mode",
    ),
    _Option(
        "simulated_numa_nodes",
        "SIMULATED_NUMA_NODES",
        simulated.parse_numa_nodes,
        "",
        "NUMA nodes of the simulated GPUs (resource.kubernetes.io/numaNode): " + simulated.NUMA_NODES_FORMAT,
    ),
    _Option(
        "nvidia_driver_root",
        "NVIDIA_DRIVER_ROOT",
        _abs_path,
        "/",
        "host path of the NVIDIA driver installation's root (its libraries and binaries go into containers)",
    ),
    _Option(
        "container_driver_root",
        "DRIVER_ROOT_CTR_PATH",
        _abs_path,
        None,
        "where this process sees the driver root (default: the --nvidia-driver-root path itself)",
    ),
    _Option(
        "nvidia_cdi_hook_path",
        "NVIDIA_CDI_HOOK_PATH",
        _abs_path,
        None,
        "host path of nvidia-cdi-hook used in CDI hooks (default: the driver root's nvidia-cdi-hook, "
        "copied into the plugin data dir; none found: no hooks)",
    ),
    _Option("healthcheck_port", "HEALTHCHECK_PORT", _PORT, "51516", "gRPC health port (0 disables)"),
    _Option("metrics_port", "METRICS_PORT", _PORT, "8080", "Prometheus metrics port (0 disables)"),
    _Option(
        "claim_reconcile_interval",
        "CLAIM_RECONCILE_INTERVAL",
        _int_range(MIN_INTERVAL_SECONDS, MAX_INTERVAL_SECONDS),
        str(DEFAULT_INTERVAL_SECONDS),
        "seconds between two checks of the prepared claims against the API server (one GET per claim; "
        "claims deleted without an unprepare are cleaned); also checked at start",
    ),
    _Option("log_format", "LOG_FORMAT", _choice(LOG_FORMATS), "json", "log format"),
    _Option("log_level", "LOG_LEVEL", _choice(LOG_LEVELS), "info", "least severe level logged"),
    _Option(
        "rolling_update_id",
        "ROLLING_UPDATE_ID",
        _rolling_update_id,
        None,
        "seamless upgrades: a per-pod id (the pod UID) in the socket names, so two plugin pods can run on "
        "one node (kubelet 1.33+); unset keeps the fixed socket names",
    ),
    # --- GPU sharing ---
    _Option(
        "feature_gates",
        "FEATURE_GATES",
        _feature_gates,
        "",
        "feature gates Name=true,... (" + ", ".join(sorted(featuregates.DEFAULTS)) + ")",
    ),
    _Option("namespace", "NAMESPACE", _dns_subdomain(63), "default", "namespace of the MPS control daemons"),
    _Option("image_name", "IMAGE_NAME", _nonempty, None, "image of the MPS daemons (the plugin's own)"),
    # --- taking a node over from NVIDIA's plugin ---
    _Option(
        "nvidia_namespace",
        "NVIDIA_NAMESPACE",
        _dns_subdomain(63),
        "nvidia-dra-driver-gpu",
        "namespace of NVIDIA's plugin, where its MPS control daemons of adopted claims are deleted",
    ),
    _Option(
        "pod_resources_socket",
        "POD_RESOURCES_SOCKET",
        _abs_path,
        str(DEFAULT_POD_RESOURCES_SOCKET),
        "kubelet's PodResources socket, where the claims adopted from NVIDIA's plugin without a "
        "namespace/name are looked for",
    ),
    # --- the node ---
    _Option(
        "boot_id_path",
        "BOOT_ID_PATH",
        _abs_path,
        str(DEFAULT_BOOT_ID_PATH),
        "file of the node's boot id; a new id at start means a reboot, and prepared claims get back "
        "their GPU settings before registration",
    ),
    # --- GPU health ---
    _Option(
        "additional_xids_to_ignore",
        "ADDITIONAL_XIDS_TO_IGNORE",
        _xid_list,
        "",
        "comma-separated XIDs treated as application errors on top of NVIDIA's list (13,31,43,45,68,109)",
    ),
    _Option(
        "health_recovery_window",
        "HEALTH_RECOVERY_WINDOW",
        _int_range(0, 86400),
        "300",
        "seconds an unhealthy GPU must answer NVML without a fatal event before it is healthy again",
    ),
)


#: `--flag` -> its option's dest, for `_plain_flags`.
_DEST_BY_FLAG: Final = {opt.flag: opt.dest for opt in OPTIONS}


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: `--help`, `--version`, and the errors of a malformed command line."""
    import argparse  # noqa: PLC0415  (a plain command line is read without it: `_plain_flags`)

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            raise PluginConfigError(message)

    parser = _Parser(
        prog=PROG,
        description="DRA kubelet plugin for NVIDIA GPUs (drop-in for gpu.nvidia.com).",
        allow_abbrev=False,
    )
    for opt in OPTIONS:
        default = f" (default: {opt.default})" if opt.default is not None else ""
        parser.add_argument(
            opt.flag, dest=opt.dest, metavar=opt.env, help=f"{opt.help} [env {opt.env}]{default}"
        )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _plain_flags(argv: Sequence[str]) -> dict[str, str | None] | None:
    """The flags of a command line made only of known flags, each as `--flag value` or `--flag=value` (the
    plugin's usual start), read as argparse reads them: the last of a repeated flag wins, None for a flag
    not given. None for any other command line (`--help`, `--version`, an unknown flag or argument, a flag
    without its value, a value that starts with `-`): argparse reads those, and answers or refuses them
    itself. Loading and building argparse takes milliseconds of the start, before kubelet can register
    the plugin."""
    flags: dict[str, str | None] = dict.fromkeys(_DEST_BY_FLAG.values())
    i = 0
    while i < len(argv):
        flag, equals, value = argv[i].partition("=")
        dest = _DEST_BY_FLAG.get(flag)
        if dest is None:
            return None
        if not equals:
            i += 1
            if i == len(argv) or argv[i].startswith("-"):
                return None
            value = argv[i]
        flags[dest] = value
        i += 1
    return flags


def parse_config(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Config:
    """Parse flags (winning) and environment into a `Config`; raise PluginConfigError on the first problem."""
    env = os.environ if environ is None else environ
    args = _plain_flags(argv)
    if args is None:
        args = vars(build_parser().parse_args(list(argv)))
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        raw, source = args[opt.dest], opt.flag
        if raw is None and env.get(opt.env, "") != "":
            raw, source = env[opt.env], f"env {opt.env}"
        if raw is None:
            if opt.default is None:
                values[opt.dest] = None
                continue
            raw, source = opt.default, "default"
        try:
            values[opt.dest] = opt.parse(raw)
        except ValueError as err:
            where = f"from env {opt.env}" if source.startswith("env") else f"[env {opt.env}]"
            raise PluginConfigError(f"invalid value {raw!r} for {opt.flag} {where}: {err}") from None
    if values["node_name"] is None:
        raise PluginConfigError(
            "--node-name (env NODE_NAME) is required: the name of the node this plugin runs on"
        )
    if values["plugin_data_dir"] is None:
        values["plugin_data_dir"] = Path("/var/lib/kubelet/plugins") / values["driver_name"]
    config = Config(**values)
    _check_combination(config)
    return config


def _check_combination(config: Config) -> None:
    try:
        if config.device_source == "simulated":
            simulated.numa_layout(config.simulated_gpus, config.simulated_numa_nodes)
    except ValueError as err:
        raise PluginConfigError(
            f"--simulated-numa-nodes (env SIMULATED_NUMA_NODES) does not fit --simulated-gpus "
            f"(env SIMULATED_GPUS): {err}"
        ) from None
    if config.feature_gates.mps and config.image_name is None:
        raise PluginConfigError(
            "--image-name (env IMAGE_NAME) is required when feature gate MPSSupport is enabled: "
            "the image the MPS control daemons run (the plugin's own)"
        )
    if config.healthcheck_port and config.healthcheck_port == config.metrics_port:
        raise PluginConfigError(
            f"--healthcheck-port (env HEALTHCHECK_PORT) and --metrics-port (env METRICS_PORT) "
            f"must differ, both are {config.metrics_port}"
        )
    for flag, env, path in (
        ("--plugin-data-dir", "PLUGIN_DATA_DIR", config.dra_socket),
        ("--registrar-dir", "REGISTRAR_DIR", config.registration_socket),
    ):
        if len(os.fsencode(str(path))) > MAX_SOCKET_PATH_BYTES:
            raise PluginConfigError(
                f"{flag} (env {env}) is too long: socket path {path} exceeds {MAX_SOCKET_PATH_BYTES} bytes"
            )
