"""A node in a box for a person (`scripts/node`): the node tier's node (`node.py`), optionally with the
kubelet of a release registered with a control plane of that release, until Ctrl-C; stopping it leaves
nothing behind.

    scripts/node                    containerd 2.1 (CDI on) and runc in a node of its own
    scripts/node --kubelet 1.34     and the kubelet 1.34.4 on a 1.34 control plane (or 1.37)
    scripts/node --kubelet 1.37 --control-plane 1.38
                                    the kubelet on a newer control plane, as while a cluster's control
                                    plane is upgraded before its nodes (up to three minors newer)
    scripts/node --once             start, print, stop (a check that it works here)
    scripts/node --serve DIR        a one-node cluster (kubelet 1.37 unless --kubelet says) until SIGTERM:
                                    DIR/state.json says where it is, DIR/kubeconfig reaches it (what
                                    `scripts/up local` runs where there is no Docker)
    scripts/node --serve DIR --import-image ARCHIVE
                                    import an OCI archive into that running node's containerd (k8s.io),
                                    named by its digest too
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.integration.controlplane import ADMIN_TOKEN, missing_assets, wait_until
from tools import toolchain
from tools.oci_image import ImageError, read_image

from . import images
from .kube import BUSYBOX, RELEASES, SERVICE_ADDRESS, SERVICE_PORT, NodePlane, ready
from .node import ADDRESS, Node, NodeError, missing

#: The kubelet a served cluster runs unless --kubelet says otherwise.
SERVE_DEFAULT = "1.37"
STATE = "state.json"

#: How often the main thread looks whether Ctrl-C (or SIGTERM) asked it to stop.
STOP_POLL_SECONDS = 0.1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/node", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubelet", choices=sorted(RELEASES), help="run the kubelet of this release")
    parser.add_argument(
        "--control-plane",
        choices=sorted(toolchain.KUBERNETES),
        help="on a control plane of this release (default: the kubelet's; up to three minors newer)",
    )
    parser.add_argument("--once", action="store_true", help="stop as soon as it is up")
    parser.add_argument(
        "--serve", metavar="DIR", type=Path, help="serve a one-node cluster, its state in DIR"
    )
    parser.add_argument("--import-image", metavar="ARCHIVE", type=Path, help="into the node served from DIR")
    args = parser.parse_args(argv)
    if args.import_image is not None:
        return import_image(args.serve, args.import_image)
    if args.serve is not None and args.kubelet is None:
        args.kubelet = SERVE_DEFAULT
    skew = _skew(args.kubelet, args.control_plane)
    if skew:
        parser.error(skew)
    args.control_plane = args.control_plane or args.kubelet
    reason = missing()
    if reason:
        print(f"scripts/node: {reason}", file=sys.stderr)
        return 1
    found = _binaries(args.kubelet, args.control_plane) if args.kubelet else None
    if isinstance(found, str):
        print(f"scripts/node: {found}", file=sys.stderr)
        return 1
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
        if found is not None:
            plane = _cluster(node, args.control_plane, args.kubelet, *found, serve=args.serve)
        if not args.once:
            print("Ctrl-C stops it", flush=True)
            while not stopping:
                time.sleep(STOP_POLL_SECONDS)
    finally:
        if args.serve is not None:
            (args.serve / STATE).unlink(missing_ok=True)
        node.stop()
        if plane is not None:
            plane.stop()
        left = node.leftovers()
        print(f"node {node.name}: stopped, " + (f"left behind: {left}" if left else "nothing left behind"))
    return 1 if left else 0


def _skew(kubelet: str | None, control_plane: str | None) -> str:
    """Why a kubelet cannot join a control plane of that release ("" when it can): Kubernetes' version skew
    policy lets a kubelet be up to three minors older than its API server, never newer."""
    if control_plane is None:
        return ""
    if kubelet is None:
        return f"--control-plane {control_plane} needs --kubelet (or --serve): the node's kubelet joins it"
    older = int(control_plane.split(".")[1]) - int(kubelet.split(".")[1])
    if 0 <= older <= 3:
        return ""
    return (
        f"--control-plane {control_plane} with --kubelet {kubelet}: a kubelet may be up to three minors "
        "older than its control plane, never newer"
    )


def _binaries(kubelet: str, control_plane: str) -> tuple[Path, Path] | str:
    """The toolchain's kubelet of `kubelet` and the control-plane binaries of `control_plane`, or why not."""
    folder, assets = toolchain.locate(toolchain.KUBERNETES[kubelet]), toolchain.kube_assets(control_plane)
    reason = missing_assets(control_plane, assets)
    if folder is None or not (folder / "kubelet").exists() or reason or assets is None:
        names = sorted({toolchain.KUBERNETES[kubelet], toolchain.KUBERNETES[control_plane]})
        return f"{reason or 'no kubelet'}: scripts/toolchain --only etcd,{','.join(names)}"
    return folder / "kubelet", assets


def _cluster(
    node: Node, minor: str, kubelet_minor: str, kubelet: Path, assets: Path, *, serve: Path | None
) -> NodePlane:
    """A control plane of `minor`, and the node's kubelet (of `kubelet_minor`) registered with it (pods
    reach the API server at the `kubernetes` Service's address); served: the state written once the node
    is Ready."""
    plane = NodePlane(assets, minor)
    plane.start()
    try:
        token = plane.node_token(node.name)
        node.start_kubelet(
            kubelet, plane.server, plane.ca_file, token, service=(SERVICE_ADDRESS, SERVICE_PORT),
            client_ca=plane.kubelet_client_ca,
        )  # fmt: skip
        path = f"/api/v1/nodes/{node.name}"
        registered = wait_until(lambda: plane.admin().exists(path), timeout=90)
        print(f"  kubelet:   {'registered' if registered else 'NOT registered'} with {plane.server}")
        print(f"  kubectl:   KUBECONFIG={plane.kubeconfig} kubectl get nodes")
        if serve is not None:
            if not wait_until(lambda: ready(plane.admin().get(path)), timeout=90):
                raise NodeError(f"node {node.name} did not become Ready:\n{node.logs()}")
            busybox = images.build(node.base / "images" / "busybox.tar", BUSYBOX, images.busybox_entries())
            node.import_image(busybox)
            write_state(serve, node, plane, kubelet_minor)
            print(f"  served:    {serve / STATE}, kubeconfig {serve / 'kubeconfig'}", flush=True)
    except BaseException:
        plane.stop()
        raise
    return plane


def write_state(folder: Path, node: Node, plane: NodePlane, kubelet: str) -> None:
    """DIR/kubeconfig (the cluster's administrator, context `vke-gpu-dra-node`) and DIR/state.json, the
    latter last and atomically: once it is there, the cluster is up and its node Ready."""
    folder.mkdir(parents=True, exist_ok=True)
    kubeconfig = plane.write_kubeconfig(folder / "kubeconfig", ADMIN_TOKEN)
    text = kubeconfig.read_text().replace('"envtest"', f'"{CONTEXT}"')
    kubeconfig.write_text(text)
    state = {
        "pid": os.getpid(), "node": node.name, "folder": str(node.base), "pid1": node.pid1,
        "kubelet": kubelet, "controlPlane": plane.version, "server": plane.server,
        "kubeconfig": str(kubeconfig), "context": CONTEXT, "sample_image": BUSYBOX,
    }  # fmt: skip
    partial = folder / f".{STATE}.partial"
    partial.write_text(json.dumps(state, indent=2) + "\n")
    partial.replace(folder / STATE)


#: The kubeconfig context of a served cluster.
CONTEXT = "vke-gpu-dra-node"


def import_image(folder: Path | None, archive: Path) -> int:
    """Import `archive` into the node served from `folder` (its state.json)."""
    if folder is None:
        print("scripts/node: --import-image needs --serve DIR of the running node", file=sys.stderr)
        return 2
    try:
        state = json.loads((folder / STATE).read_text())
        image = read_image(archive)
        node = Node(running=(state["node"], Path(state["folder"]), int(state["pid1"])))
        node.import_image(image)
    except (OSError, ValueError, KeyError, ImageError, NodeError) as exc:
        print(
            f"scripts/node: cannot import {archive} into the node served from {folder}: {exc}",
            file=sys.stderr,
        )
        return 1
    print(json.dumps({"name": image.name, "digest": image.digest, "reference": image.by_digest}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
