"""A node in a box for a person (`scripts/node`): the node tier's node (`node.py`), optionally with the
kubelet of a release registered with a control plane of that release, until Ctrl-C; stopping it leaves
nothing behind.

    scripts/node                    containerd 2.1 (CDI on) and runc in a node of its own
    scripts/node --kubelet 1.34     and the kubelet 1.34.4 on a 1.34 control plane (or 1.37)
    scripts/node --once             start, print, stop (a check that it works here)
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence

from tests.integration.controlplane import missing_assets, wait_until
from tools import toolchain

from .kube import NodePlane
from .node import ADDRESS, Node, missing

#: How often the main thread looks whether Ctrl-C (or SIGTERM) asked it to stop.
STOP_POLL_SECONDS = 0.1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/node", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kubelet", choices=sorted(toolchain.KUBERNETES), help="run the kubelet of this release"
    )
    parser.add_argument("--once", action="store_true", help="stop as soon as it is up")
    args = parser.parse_args(argv)
    reason = missing()
    if reason:
        print(f"scripts/node: {reason}", file=sys.stderr)
        return 1
    kubelet = None
    if args.kubelet:
        folder, assets = (
            toolchain.locate(toolchain.KUBERNETES[args.kubelet]),
            toolchain.kube_assets(args.kubelet),
        )
        reason = missing_assets(args.kubelet, assets)
        if folder is None or not (folder / "kubelet").exists() or reason:
            print(
                f"scripts/node: {reason or 'no kubelet'}: "
                f"scripts/toolchain --only etcd,{toolchain.KUBERNETES[args.kubelet]}",
                file=sys.stderr,
            )
            return 1
        kubelet = folder / "kubelet"
    # The handler only sets a flag: one that took a lock (Event.set) could meet the same lock held by the
    # main thread it interrupts (inside Event.wait) and never return.
    stopping: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))
    node, plane = Node(), None
    try:
        node.start()
        print(
            f"node {node.name}: address {ADDRESS}, folder {node.base}, "
            f"containerd up in {node.started_in:.2f} s"
        )
        print(f"  enter it:  nsenter -t {node.pid1} -m -n -p -u -i")
        print(f"  ctr:       {node.tools.containerd / 'ctr'} --address {node.base / 'containerd.sock'}")
        print(f"  crictl:    {node.tools.crictl / 'crictl'} --config {node.base / 'crictl.yaml'} (inside it)")
        print(f"  CDI specs: {node.cdi_dir}")
        if kubelet is not None and assets is not None:
            plane = NodePlane(assets, args.kubelet)
            plane.start()
            node.start_kubelet(kubelet, plane.server, plane.ca_file, plane.node_token(node.name))
            path = f"/api/v1/nodes/{node.name}"
            registered = wait_until(lambda: plane is not None and plane.admin().exists(path), timeout=90)
            print(f"  kubelet:   {'registered' if registered else 'NOT registered'} with {plane.server}")
            print(f"  kubectl:   KUBECONFIG={plane.kubeconfig} kubectl get nodes")
        if not args.once:
            print("Ctrl-C stops it", flush=True)
            while not stopping:
                time.sleep(STOP_POLL_SECONDS)
    finally:
        node.stop()
        if plane is not None:
            plane.stop()
        left = node.leftovers()
        print(f"node {node.name}: stopped, " + (f"left behind: {left}" if left else "nothing left behind"))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
