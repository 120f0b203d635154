"""Entry point: `dra-gpu-kubelet-plugin` and `python -m vke_gpu_dra`."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from vke_gpu_dra_core import kubeconfig

from .config import PROG, Config, PluginConfigError, parse_config
from .logs import setup_logging

if TYPE_CHECKING:
    from .kubelet.endpoints import KubeletEndpoints
    from .shutdown import StopSignals

log = logging.getLogger("vke_gpu_dra")

EXIT_CONFIG = 2
EXIT_STARTUP = 1


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv)
    except PluginConfigError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    if config.kubeconfig is not None:
        try:
            kubeconfig.load(config.kubeconfig)
        except kubeconfig.KubeconfigError as err:
            print(f"{PROG}: error: --kubeconfig [env KUBECONFIG]: {err}", file=sys.stderr)
            return EXIT_CONFIG
    setup_logging(config.log_format, level=logging.getLevelNamesMapping()[config.log_level.upper()])
    # gRPC loads only once the command line is valid (fast, clear errors). kubelet's sockets are served
    # before the rest of the plugin loads: kubelet registers it within milliseconds of the start, and
    # its calls wait at the start gate until the claims are loaded (kubelet.endpoints).
    from .kubelet.endpoints import KubeletEndpoints  # noqa: PLC0415
    from .kubelet.sockets import SocketError  # noqa: PLC0415
    from .shutdown import StopSignals  # noqa: PLC0415

    endpoints = KubeletEndpoints.of(config)
    with StopSignals() as signals:  # from here on SIGTERM stops the plugin cleanly, sockets removed
        try:
            endpoints.start()
        except (SocketError, OSError) as err:
            endpoints.stop(grace=0)
            log.error("cannot start", extra={"fields": {"error": str(err)}})
            return EXIT_STARTUP
        endpoints.wait_for_info()
        return _run(config, endpoints, signals)


def _run(config: Config, endpoints: KubeletEndpoints, signals: StopSignals) -> int:
    """The rest of the plugin, loaded and started behind the served endpoints."""
    from .kubelet.endpoints import FAILED_START_GRACE  # noqa: PLC0415  (loaded with the endpoints)

    try:
        from vke_gpu_dra_core.discovery import DiscoveryError  # noqa: PLC0415

        from .kubelet.sockets import SocketError  # noqa: PLC0415
        from .plugin import Plugin, StartupError  # noqa: PLC0415

        plugin = Plugin(config, endpoints=endpoints)
    except BaseException as err:
        endpoints.fail(str(err) or type(err).__name__)
        endpoints.stop(grace=FAILED_START_GRACE)
        raise
    try:
        return plugin.run(signals)
    except (StartupError, DiscoveryError, kubeconfig.KubeconfigError, SocketError, OSError) as err:
        log.error("cannot start", extra={"fields": {"error": str(err)}})
        return EXIT_STARTUP


if __name__ == "__main__":
    sys.exit(main())
