"""Entry point: `dra-gpu-kubelet-plugin` and `python -m vke_gpu_dra`."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from vke_gpu_dra_core import kubeconfig

from .config import PROG, PluginConfigError, parse_config
from .logs import setup_logging

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
    # The Kubernetes client and gRPC load only once the command line is valid (fast, clear errors).
    from vke_gpu_dra_core.discovery import DiscoveryError  # noqa: PLC0415

    from .kubelet.sockets import SocketError  # noqa: PLC0415
    from .plugin import Plugin, StartupError  # noqa: PLC0415

    try:
        return Plugin(config).run()
    except (StartupError, DiscoveryError, kubeconfig.KubeconfigError, SocketError, OSError) as err:
        log.error("cannot start", extra={"fields": {"error": str(err)}})
        return EXIT_STARTUP


if __name__ == "__main__":
    sys.exit(main())
