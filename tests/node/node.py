"""A node in a box: containerd 2.1 with CDI and runc, from the toolchain, in namespaces of its own.

The node is one process tree in new PID, mount, network, UTS and IPC namespaces (`unshare`): its first
process (PID 1 inside) mounts a private /run (containerd's shims keep their sockets under
/run/containerd whatever the configuration says), gives the network namespace its loopback and one
address on a veth pair whose both ends live inside it (the node's IP; nothing is added to the host's
interfaces), then sleeps. containerd, ctr and crictl run inside through `nsenter`, so every mount they make
(overlay rootfs, the private /run) lives in the node's mount namespace only.

Everything else is a folder of its own (`/tmp/vkenode-*`, short for unix socket paths): containerd's root
and state, the CDI spec folder, the kubelet's folder, the CNI configuration, the logs. Inside the node
they are also at a real node's standard paths, so a DaemonSet's hostPath volumes with the usual
defaults land in them: /var/lib/kubelet (the kubelet's --root-dir) is the node's `kubelet/` and
/var/run/cdi (= /run/cdi; the CRI's `cdi_spec_dirs`, which ctr reads too) its `cdi/`, on private
/run, /var/lib and /var/log. No global /etc/cdi, /var/lib/kubelet or /run/containerd is touched;
containers' cgroups are created under `/<node name>` in each cgroup hierarchy. The node's mounts are
shared among themselves (as systemd makes a host's), so a HostToContainer volume works, and are cut
off from the host's.

Stopping it leaves nothing behind: containers are killed and deleted through containerd, containerd gets
SIGTERM, then PID 1 gets SIGKILL, which ends every process left in the namespace; the namespaces go with
their last process (and with them every mount and interface), the node's cgroups are removed and the
folder deleted. `leftovers()` names anything still there.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import toolchain

from . import images
from .images import Image

#: Tools of the toolchain a node needs (scripts/toolchain --only ...).
TOOLS = ("containerd", "runc", "cni-plugins", "crictl")
HOW_TO_GET = f"build them with scripts/toolchain --only {','.join(TOOLS)} (docs/testing.md)"
#: Host commands the node is made with (util-linux and iproute2).
COMMANDS = ("unshare", "nsenter", "ip", "mount")
#: The node's address (TEST-NET-1, RFC 5737: never routed anywhere) on the veth end inside its namespace.
ADDRESS = "192.0.2.10"
#: The kubelet's standard folder and the standard CDI spec folder, inside the node (its own folders).
KUBELET_ROOT = "/var/lib/kubelet"
CDI_ROOT = "/var/run/cdi"
PREFIX = 24
#: containerd's namespace for the CRI (kubelet's pods) and images it runs.
CRI_NAMESPACE = "k8s.io"
STARTUP_TIMEOUT = 30.0
#: The CRI's sandbox (pause) image, built here and imported at start.
PAUSE_IMAGE = "vke-gpu-dra.local/node/pause:1"
#: The pods' network on the node's CNI bridge (RFC 2544's benchmark range: routed nowhere).
POD_SUBNET = "198.18.0.0/24"
#: The GPU pool's labels (what the program's node pool and the chart's affinity use).
GPU_POOL_LABELS = {"vke.node.gpu.schedule": "nvidia-dra", "nvidia.com/gpu.present": "true"}
CLONE_NEWNET = 0x40000000
#: Host-wide kernel settings the kubelet sets at start (its container manager's "kernel flags"): inside
#: the node each is a file of the node's own bound over /proc/sys, so the machine's values stay as they are.
KERNEL_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
#: Numbers the nodes of this process: `<name>-<pid>-<n>` (a control plane can know the names in advance).
_COUNTER = itertools.count(1)
#: Figures the tier's tests measure, printed under its summary line.
FIGURES: list[str] = []
#: The nodes of this process whose kubelet runs, by name (where the API server's egress proxy connects).
KUBELET_NODES: dict[str, Node] = {}
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Where each node's folder is made (short, for unix socket paths), and its name's start.
NODES_DIR, NODE_PREFIX = "/tmp", "vkenode-"


class NodeError(RuntimeError):
    """The node did not start, or a command inside it failed (with its output and the node's logs)."""


@dataclass(frozen=True)
class Tools:
    """The folders of the toolchain's node binaries."""

    containerd: Path
    runc: Path
    cni: Path
    crictl: Path

    @classmethod
    def locate(cls) -> Tools | None:
        found = [toolchain.locate(name) for name in TOOLS]
        if any(path is None for path in found):
            return None
        containerd, runc, cni, crictl = (p for p in found if p is not None)
        return cls(containerd, runc, cni, crictl)

    @property
    def path(self) -> str:
        """PATH inside the node: the tools first (containerd finds its shim, the shim runc, there)."""
        return ":".join([str(self.containerd), str(self.runc), str(self.crictl), os.environ.get("PATH", "")])


def missing() -> str | None:
    """Why a node cannot run here (one line), or None."""
    if os.geteuid() != 0:
        return "the node tier needs root (namespaces, mounts, device nodes; CI runs as root)"
    absent = [c for c in COMMANDS if shutil.which(c) is None]
    if absent:
        return f"{', '.join(absent)} not on PATH: apt-get install util-linux iproute2"
    if Tools.locate() is None:
        built = [n for n in TOOLS if toolchain.locate(n) is not None]
        have = ", ".join(built) or "none"
        return f"the toolchain's node binaries are not built ({have} of {len(TOOLS)} there): {HOW_TO_GET}"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount", "--net", "--propagation", "private", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"new namespaces are not permitted here: {probe.stderr.strip()}"
    return None


def _setup_script(base: Path, name: str) -> str:
    cdi = base / "cdi"
    return f"""set -e
for private in /run /var/lib /var/log; do mount -t tmpfs -o mode=755 tmpfs $private; done
mkdir -p /run/cdi /run/containerd {KUBELET_ROOT}
mount --bind {cdi} /run/cdi
mount --bind {base / "kubelet"} {KUBELET_ROOT}
test "$(stat -c %i {CDI_ROOT}/)" = "$(stat -c %i {cdi}/)"
for tunable in {" ".join(KERNEL_TUNABLES)}; do
  mkdir -p {base}/sysctl/$(dirname $tunable)
  cat /proc/sys/$tunable > {base}/sysctl/$tunable
  mount --bind {base}/sysctl/$tunable /proc/sys/$tunable
done
hostname {name}
ip link set lo up
ip link add node0 type veth peer name node0-peer
ip addr add {ADDRESS}/{PREFIX} dev node0
ip link set node0-peer up
ip link set node0 up
ip route add default dev node0
mount --make-rshared /
echo ready > {base / "ready"}
exec sleep infinity
"""


def cni_config(base: Path) -> str:
    """The pods' network: a bridge inside the node's namespace, the pods' default route through it (to the
    node's own addresses; nothing is forwarded further), addresses from host-local (its state under the
    node's folder), no masquerading (nothing leaves the node); portmap for hostPort."""
    ipam = {"type": "host-local", "dataDir": str(base / "cni" / "ipam"), "ranges": [[{"subnet": POD_SUBNET}]]}
    plugins = [
        {"type": "bridge", "bridge": "cni0", "isDefaultGateway": True, "ipMasq": False, "ipam": ipam},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ]
    return json.dumps({"cniVersion": "1.0.0", "name": "vke-node", "plugins": plugins}, indent=2)


def pause_image(archive: Path) -> Image:
    """The CRI's sandbox image: busybox sleeping (containerd stops a sandbox with SIGKILL)."""
    return images.build(archive, PAUSE_IMAGE, images.busybox_entries(), cmd=("/bin/sleep", "2147483647"))


def kubelet_config(base: Path, name: str, client_ca: Path | None = None) -> str:
    """The kubelet's configuration for a node without systemd on cgroup v1: no QoS cgroups, nothing
    enforced, cgroupfs; its API on the node's address, its health on the node's loopback; every
    folder under `base`. `client_ca`: its API accepts the clients whose certificates that CA signed (the
    API server's, for logs and exec); without it, no client."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{name}",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{base / 'containerd.sock'}",
        "address": ADDRESS,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(base / "pod-logs"),
        "makeIPTablesUtilChains": False,
        "resolvConf": "",
        "staticPodPath": "",
        "nodeStatusUpdateFrequency": "2s",
        "imageGCHighThresholdPercent": 100,
        "evictionHard": {"memory.available": "1Mi"},
    }
    if client_ca is not None:
        config["authentication"] = {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(client_ca)},
        }
    return json.dumps(config, indent=2)


class Forwarder:
    """`address`:<port> (127.0.0.1 and a free port by default) inside the node's network namespace, each
    connection carried to 127.0.0.1:<target> of the test's own namespace (the control plane's API
    server): the node reaches nothing else."""

    def __init__(self, pid1: int, target: int, address: str = "127.0.0.1", port: int = 0) -> None:
        self.target = target
        self.address = address
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        made: list[socket.socket | BaseException] = []
        maker = threading.Thread(target=lambda: made.append(_listen_in(pid1, address, port)))
        maker.start()
        maker.join()
        if not isinstance(made[0], socket.socket):
            raise NodeError(f"no listener in the node's network namespace: {made[0]}")
        self.listener = made[0]
        self.port = int(self.listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                inside, _ = self.listener.accept()
                outside = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            except OSError:
                continue
            outside.settimeout(None)
            self._sockets += [inside, outside]
            for source, sink in ((inside, outside), (outside, inside)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        for sock in [self.listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _listen_in(pid1: int, address: str, port: int) -> socket.socket | BaseException:
    """A listening socket made inside the network namespace of `pid1`."""

    def listen() -> socket.socket:
        listener = socket.socket()
        listener.bind((address, port))
        listener.listen(64)
        return listener

    return _made_in(pid1, listen)


def _made_in(pid1: int, make: Callable[[], socket.socket]) -> socket.socket | BaseException:
    """The socket `make` makes inside the network namespace of `pid1` (this thread enters it, makes the
    socket, and comes back; a socket stays in the namespace it was made in), or the error."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    node = os.open(f"/proc/{pid1}/ns/net", os.O_RDONLY)
    try:
        if libc.setns(node, CLONE_NEWNET) != 0:
            return OSError(ctypes.get_errno(), "setns into the node's network namespace")
        try:
            return make()
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")  # the thread ends here anyway
    except OSError as exc:
        return exc
    finally:
        os.close(own)
        os.close(node)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def containerd_config(base: Path, tools: Tools, *, sandbox_image: str = "") -> str:
    """containerd's configuration (version 3): every path under `base`; the CRI with CDI on
    and `restrict_oom_score_adj` (runc may not lower a
    container's oom_score_adj below the node's own, as in a user namespace or a container); runc
    from the toolchain; CNI from the toolchain's plugins and the node's own configuration folder.
    `cdi_spec_dirs` is the standard /var/run/cdi, which inside the node is its own `cdi/` folder."""
    pinned = f'\n  [plugins."io.containerd.cri.v1.images".pinned_images]\n    sandbox = "{sandbox_image}"\n'
    return f"""version = 3
root = "{base}/containerd/root"
state = "{base}/containerd/state"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp",
                    "io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]

[grpc]
  address = "{base}/containerd.sock"

[debug]
  level = "info"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{base}/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"{pinned if sandbox_image else ""}
  [plugins."io.containerd.cri.v1.runtime"]
    enable_cdi = true
    cdi_spec_dirs = ["{CDI_ROOT}"]
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = "{tools.runc}/runc"
          SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["{tools.cni}"]
      conf_dir = "{base}/cni/net.d"
"""


class Node:
    """One node: `start()`, then `ctr(...)`, `crictl(...)`, `spawn(...)`; `stop()` always."""

    def __init__(
        self,
        name: str = "vke-node",
        tools: Tools | None = None,
        *,
        running: tuple[str, Path, int] | None = None,
    ) -> None:
        """A new node (`start()` starts it), or with `running` (its name, folder and PID 1) one another
        process started and owns (`scripts/node --serve`), for commands inside it; never stopped here."""
        located = tools or Tools.locate()
        if located is None:
            raise NodeError(f"the toolchain's node binaries are not built: {HOW_TO_GET}")
        self.tools = located
        if running is None:
            self.name = f"{name}-{os.getpid()}-{next(_COUNTER)}"
            self.base = Path(tempfile.mkdtemp(prefix=NODE_PREFIX, dir=NODES_DIR))
        else:
            self.name, self.base = running[0], running[1]
        self.cdi_dir = self.base / "cdi"
        self.logs_dir = self.base / "logs"
        #: The node's boot id as a file (the kernel's is the machine's): a new one at each reboot().
        self.boot_id_file = self.base / "boot_id"
        self._init: subprocess.Popen[bytes] | None = None
        self._pid1 = 0 if running is None else running[2]
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._forwarders: list[Forwarder] = []
        self._kubelet_argv: list[str] = []
        #: The node's PID namespace, held open from its start to the leftover check after its stop: a freed
        #: namespace's inode number is soon another's (another lane's node or pod), so only a namespace held
        #: open identifies the node's own processes.
        self._pid_namespace = -1
        self.started_in = 0.0

    # --- life cycle ------------------------------------------------------------------------------

    def start(self) -> Node:
        begin = time.monotonic()
        for sub in ("cdi", "logs", "cni/net.d", "containerd", "kubelet"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        self.config = self.base / "containerd.toml"
        self.config.write_text(containerd_config(self.base, self.tools, sandbox_image=PAUSE_IMAGE))
        (self.base / "cni" / "net.d" / "10-bridge.conflist").write_text(cni_config(self.base))
        self.boot_id_file.write_text(f"{uuid.uuid4()}\n")
        endpoint = f"unix://{self.base / 'containerd.sock'}"
        (self.base / "crictl.yaml").write_text(
            f"runtime-endpoint: {endpoint}\nimage-endpoint: {endpoint}\ntimeout: 30\n"
        )
        try:
            self._start_init()
            self._procs["containerd"] = self.spawn(
                "containerd", [str(self.tools.containerd / "containerd"), "--config", str(self.config)]
            )
            self._wait_for(lambda: self.ctr("version", check=False).returncode == 0, "containerd to answer")
            self.import_image(pause_image(self.base / "images" / "pause.tar"))
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - begin
        return self

    def _start_init(self) -> None:
        log = (self.logs_dir / "init.log").open("wb")
        self._init = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "--mount", "--net", "--uts", "--ipc",
             "--propagation", "private", "sh", "-c", _setup_script(self.base, self.name)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        self._wait_for((self.base / "ready").exists, "the node's namespaces")
        children = Path(f"/proc/{self._init.pid}/task/{self._init.pid}/children").read_text().split()
        if len(children) != 1:
            raise NodeError(f"unshare {self._init.pid} has children {children}, expected the node's PID 1")
        self._pid1 = int(children[0])
        self._let_go_of_namespace()
        self._pid_namespace = os.open(f"/proc/{self._pid1}/ns/pid", os.O_RDONLY)

    def _let_go_of_namespace(self) -> None:
        if self._pid_namespace >= 0:
            os.close(self._pid_namespace)
            self._pid_namespace = -1

    def _wait_for(self, predicate: Callable[[], object], what: str, timeout: float = STARTUP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            for name, proc in [("init", self._init), *self._procs.items()]:
                if proc is not None and proc.poll() is not None:
                    raise NodeError(f"{name} exited ({proc.returncode}) waiting for {what}:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise NodeError(f"no {what} within {timeout:.0f} s:\n{self.logs()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop everything (also after a failed start); idempotent."""
        KUBELET_NODES.pop(self.name, None)
        for name in [n for n in self._procs if n != "containerd"]:
            _terminate(self._procs.pop(name), 10.0)
        if self._pid1 and "containerd" in self._procs and self._procs["containerd"].poll() is None:
            self._delete_containers()
        if "containerd" in self._procs:
            _terminate(self._procs.pop("containerd"), 10.0)
        for forwarder in self._forwarders:
            forwarder.close()
        self._forwarders.clear()
        if self._pid1:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid1, signal.SIGKILL)  # the kernel ends every process of the namespace
            self._pid1 = 0
        if self._init is not None:
            _terminate(self._init, 10.0)
            self._init = None
        self._remove_cgroups()
        if not os.environ.get("NODE_KEEP"):
            shutil.rmtree(self.base, ignore_errors=True)

    def _delete_containers(self) -> None:
        """Remove the CRI's pods (their networks too), then kill and delete every container left in
        every containerd namespace, so runc removes their cgroups."""
        self.crictl("rmp", "--all", "--force", check=False)
        namespaces = self.ctr("namespaces", "list", "-q", check=False).stdout.split()
        for namespace in namespaces:
            ids = self.ctr("-n", namespace, "containers", "list", "-q", check=False).stdout.split()
            for cid in ids:
                self.ctr("-n", namespace, "tasks", "kill", "-s", "SIGKILL", cid, check=False)
                self.ctr("-n", namespace, "tasks", "delete", "-f", cid, check=False)
                self.ctr("-n", namespace, "containers", "delete", cid, check=False)

    @property
    def pid1(self) -> int:
        """The node's first process (host PID): `nsenter -t PID1 -m -n -p -u -i` enters the node."""
        return self._pid1

    def cgroup_dirs(self) -> list[Path]:
        """The node's cgroup folders: its own in each hierarchy, and the CRI's `/k8s.io` (with cgroupsPerQOS
        off the kubelet names no cgroup parent for its pods, and containerd puts them under its
        namespace's name; nodes running side by side share it: each removes it once it is empty)."""
        own = [p / self.name for p in CGROUP_ROOT.iterdir() if (p / self.name).is_dir()]
        cri = [p / CRI_NAMESPACE for p in CGROUP_ROOT.iterdir() if (p / CRI_NAMESPACE).is_dir()]
        return sorted([*own, *cri])

    def _others_running(self) -> bool:
        """Another node runs beside this one (its folder is there): the shared /k8s.io is left to it."""
        return any(folder != self.base for folder in running_nodes())

    def _remove_cgroups(self) -> None:
        others = self._others_running()
        for top in self.cgroup_dirs():
            if top.name == CRI_NAMESPACE and others:
                continue  # another node's containerd may be making its next pod's cgroup in it
            deadline = time.monotonic() + 10.0
            # its own folder whole; the shared /k8s.io alone, when empty (runc removed its pods' cgroups)
            inner = [] if top.name == CRI_NAMESPACE else sorted(top.rglob("*"), key=lambda p: -len(p.parts))
            for directory in [*inner, top]:
                if not directory.is_dir():
                    continue
                while True:
                    try:
                        directory.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:  # EBUSY while its last tasks are still exiting
                        if time.monotonic() > deadline or top.name == CRI_NAMESPACE:
                            break
                        time.sleep(0.05)

    def leftovers(self) -> list[str]:
        """What the node left on the host: processes, mounts, cgroups, its folder (empty when stopped)."""
        found: list[str] = []
        base = str(self.base)
        held = os.fstat(self._pid_namespace) if self._pid_namespace >= 0 else None
        own = (held.st_dev, held.st_ino) if held else None
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                namespace = os.stat(proc / "ns" / "pid")
            except OSError:
                continue
            # its own: a process of its PID namespace, or one naming its folder (another node's are not)
            if base in cmdline or (namespace.st_dev, namespace.st_ino) == own:
                found.append(f"process {proc.name}: {cmdline.strip()}")
        if not self._pid1:  # stopped: the check after the stop is the last that needs the namespace
            self._let_go_of_namespace()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        found += [f"mount: {line}" for line in mounts if base in line]
        # The CRI's /k8s.io is shared by the nodes running side by side (scripts/test's lanes), and another
        # lane's containerd makes it again, empty, whenever it starts: the empty folder is the run's to remove
        # (`remove_shared_cgroups`) and .ci/run checks it once every lane has ended. What is a node's leftover
        # is a pod's cgroup still in it once no other node runs (whose pods it could be).
        # (pods listed before asking, so a node starting after the question cannot have made them)
        cgroups = self.cgroup_dirs()
        found += [f"cgroup: {c}" for c in cgroups if c.name != CRI_NAMESPACE]
        pods = [pod for c in cgroups if c.name == CRI_NAMESPACE for pod in _subfolders(c)]
        if not self._others_running():
            found += [f"cgroup: {pod}" for pod in pods]
        if self.base.exists():
            found.append(f"folder: {self.base}")
        return found

    # --- inside the node -------------------------------------------------------------------------

    def _enter(self, argv: Sequence[str]) -> list[str]:
        if not self._pid1:
            raise NodeError("the node is not running")
        return ["nsenter", "-t", str(self._pid1), "-m", "-n", "-p", "-u", "-i", "--", *argv]

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {"PATH": self.tools.path, "HOME": str(self.base), **(extra or {})}

    def spawn(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """A long-running process inside the node, its output in logs/<name>.log."""
        with (self.logs_dir / f"{name}.log").open("ab") as log:
            return subprocess.Popen(
                self._enter(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.env(), cwd=self.base, start_new_session=True,
            )  # fmt: skip

    def run(
        self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        """A command inside the node; NodeError with its output when it fails and `check`."""
        done = subprocess.run(
            self._enter(argv), input=stdin.decode() if stdin is not None else None, capture_output=True,
            text=True, env=self.env(), cwd=self.base, timeout=timeout, check=False,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise NodeError(
                f"`{' '.join(argv)}` in the node exited {done.returncode}:\n{done.stdout}{done.stderr}"
            )
        return done

    def ctr(self, *args: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        argv = [str(self.tools.containerd / "ctr"), "--address", str(self.base / "containerd.sock"), *args]
        return self.run(argv, check=check, timeout=timeout)

    def crictl(
        self, *args: str, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        config = self.base / "crictl.yaml"
        argv = [str(self.tools.crictl / "crictl"), "--config", str(config), *args]
        return self.run(argv, check=check, timeout=timeout)

    def import_image(self, image: Image, namespace: str = CRI_NAMESPACE) -> None:
        """`ctr images import` of the image's archive (no registry), unpacked for overlayfs, and named by
        its digest too (`repository@sha256:...`, as a pull by digest names it): the CRI finds an image
        referenced by digest only under such a name, and pulls otherwise."""
        self.ctr("-n", namespace, "images", "import", str(image.archive), timeout=300)
        self.ctr("-n", namespace, "images", "tag", "--force", image.name, image.by_digest)

    def start_kubelet(
        self,
        kubelet: Path,
        server: str,
        ca_file: Path,
        token: str,
        labels: Mapping[str, str] | None = None,
        *,
        service: tuple[str, int] | None = None,
        client_ca: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """The kubelet at `kubelet`, registering this node (its name, its address, the GPU pool's labels
        and `labels`) with the API server at `server` (https://127.0.0.1:<port> of the test's namespace,
        reached through a Forwarder) with the bearer `token`. `service`: the `kubernetes` Service's
        address and port, where the node's pods reach the API server as in-cluster clients (an address
        of the node's own and a Forwarder, what kube-proxy's rules do on a real node). `client_ca`: the
        CA of the API server's client certificate for kubelets (logs, exec through the API server, which
        reaches the node through `connect`)."""
        port = int(server.rsplit(":", 1)[1])
        forwarder = Forwarder(self._pid1, port)
        self._forwarders.append(forwarder)
        if service is not None:
            self.run(["ip", "addr", "add", f"{service[0]}/32", "dev", "lo"])
            self._forwarders.append(Forwarder(self._pid1, port, *service))
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "node",
                    "cluster": {
                        "server": f"https://127.0.0.1:{forwarder.port}",
                        "certificate-authority": str(ca_file),
                    },
                }
            ],
            "users": [{"name": "node", "user": {"token": token}}],
            "contexts": [{"name": "node", "context": {"cluster": "node", "user": "node"}}],
            "current-context": "node",
        }
        (self.base / "kubelet.kubeconfig").write_text(json.dumps(kubeconfig))
        (self.base / "kubelet.yaml").write_text(kubelet_config(self.base, self.name, client_ca))
        all_labels = {**GPU_POOL_LABELS, **(labels or {})}
        self._kubelet_argv = [
            str(kubelet), f"--config={self.base / 'kubelet.yaml'}",
            f"--kubeconfig={self.base / 'kubelet.kubeconfig'}",
            f"--root-dir={KUBELET_ROOT}", f"--cert-dir={self.base / 'kubelet' / 'pki'}",
            f"--hostname-override={self.name}", f"--node-ip={ADDRESS}",
            f"--node-labels={','.join(f'{k}={v}' for k, v in sorted(all_labels.items()))}", "--v=2",
        ]  # fmt: skip
        proc = self.spawn("kubelet", self._kubelet_argv)
        self._procs["kubelet"] = proc
        KUBELET_NODES[self.name] = self
        return proc

    def connect(self, port: int) -> socket.socket:
        """A connection to the node's address and `port`, made from inside its network namespace."""
        made: list[socket.socket | BaseException] = []
        maker = threading.Thread(
            target=lambda: made.append(
                _made_in(self._pid1, lambda: socket.create_connection((ADDRESS, port), 10))
            )
        )
        maker.start()
        maker.join()
        if not isinstance(made[0], socket.socket):
            raise NodeError(f"no connection to {ADDRESS}:{port} in node {self.name}: {made[0]}")
        made[0].settimeout(None)
        return made[0]

    def run_pod(
        self,
        name: str,
        image: str,
        command: Sequence[str],
        *,
        cdi_devices: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        mounts: Mapping[str, Path] | None = None,
        timeout: float = 60.0,
    ) -> tuple[dict[str, Any], str]:
        """A pod through the CRI, as the kubelet makes one: its sandbox (the pause image, the CNI bridge
        network, its cgroup under the node's), one container running `command` with the CDI devices
        the kubelet would pass (`cdi_devices`, fully qualified names), `env` and read-only bind `mounts`
        (container path -> host path). Returns the sandbox's status and the container's output once it
        exits; the pod is removed."""
        pod_config = {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "attempt": 0},
            "log_directory": str(self.base / "pod-logs" / name),
            "linux": {"cgroup_parent": self.cgroup(name)},
        }
        container = {
            "metadata": {"name": name},
            "image": {"image": image},
            "command": list(command),
            "envs": [{"key": k, "value": v} for k, v in (env or {}).items()],
            "mounts": [
                {"container_path": inside, "host_path": str(host), "readonly": True}
                for inside, host in (mounts or {}).items()
            ],
            "CDI_devices": [{"name": device} for device in cdi_devices],
            "log_path": f"{name}.log",
        }
        pod_file, container_file = self.base / f"pod-{name}.json", self.base / f"container-{name}.json"
        pod_file.write_text(json.dumps(pod_config))
        container_file.write_text(json.dumps(container))
        sandbox = self.crictl("runp", str(pod_file), timeout=timeout).stdout.strip()
        try:
            status = json.loads(self.crictl("inspectp", sandbox).stdout)
            cid = self.crictl(
                "create", sandbox, str(container_file), str(pod_file), timeout=timeout
            ).stdout.strip()
            self.crictl("start", cid, timeout=timeout)
            deadline = time.monotonic() + timeout
            while json.loads(self.crictl("inspect", cid).stdout)["status"]["state"] != "CONTAINER_EXITED":
                if time.monotonic() > deadline:
                    raise NodeError(f"pod {name}: its container did not exit within {timeout:.0f} s")
                time.sleep(0.1)
            logs = self.crictl("logs", cid)
            return status, logs.stdout + logs.stderr
        finally:
            self.crictl("stopp", sandbox, check=False)
            self.crictl("rmp", "--force", sandbox, check=False)

    def restart_kubelet(self) -> subprocess.Popen[bytes]:
        """Stop the kubelet (SIGTERM, as systemd would) and start it again with the same command line;
        containerd, the containers and the node's folders stay."""
        if "kubelet" not in self._procs:
            raise NodeError("no kubelet was started on this node")
        _terminate(self._procs.pop("kubelet"), 10.0)
        proc = self.spawn("kubelet", self._kubelet_argv)
        self._procs["kubelet"] = proc
        return proc

    def restart_containerd(self) -> None:
        """Stop containerd (SIGTERM; its shims, in process groups of their own, and so the containers go
        on) and start it again with the same configuration, then wait until it answers."""
        _terminate(self._procs.pop("containerd"), 10.0)
        self._procs["containerd"] = self.spawn(
            "containerd", [str(self.tools.containerd / "containerd"), "--config", str(self.config)]
        )
        self._wait_for(lambda: self.ctr("version", check=False).returncode == 0, "containerd to answer")

    def reboot(self) -> str:
        """Power off and on; returns the new boot id. Every process of the node ends at once (SIGKILL to
        its PID 1: no clean stop), with its namespaces, mounts and interfaces, and the containers'
        cgroups go as they go with a kernel; what lives on tmpfs is emptied (containerd's runtime state,
        the CDI folder /var/run/cdi), and the boot id changes (`boot_id_file`, what a plugin on this node
        is given as --boot-id-path). What is on disk stays: /var/lib/kubelet (pods' folders, the kubelet's
        checkpoints, the plugins' data), containerd's images, the logs. Then the node boots: its
        namespaces, containerd, and the kubelet with its command line (its API server forwarders on the
        same ports, so its kubeconfig holds). Processes the test started outside the node (a plugin)
        are the test's to stop and start."""
        containers = [
            line.split()[0]
            for namespace in self.ctr("namespaces", "list", "-q", check=False).stdout.split()
            for line in self.ctr("-n", namespace, "containers", "list", "-q", check=False).stdout.splitlines()
            if line.strip()
        ]
        forwarders = [(f.target, f.address, f.port) for f in self._forwarders]
        for forwarder in self._forwarders:
            forwarder.close()
        self._forwarders.clear()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid1, signal.SIGKILL)
        for proc in [*self._procs.values(), *([self._init] if self._init else [])]:
            _terminate(proc, 10.0)
        had_kubelet = "kubelet" in self._procs
        self._procs.clear()
        self._pid1 = 0
        for top in CGROUP_ROOT.iterdir():
            for cid in containers:
                _rmdir_when_empty(top / CRI_NAMESPACE / cid)
        for volatile in (self.cdi_dir, self.base / "containerd" / "state"):
            shutil.rmtree(volatile, ignore_errors=True)
            volatile.mkdir(parents=True)
        (self.base / "ready").unlink(missing_ok=True)
        boot_id = str(uuid.uuid4())
        self.boot_id_file.write_text(boot_id + "\n")
        self._start_init()
        self._procs["containerd"] = self.spawn(
            "containerd", [str(self.tools.containerd / "containerd"), "--config", str(self.config)]
        )
        self._wait_for(lambda: self.ctr("version", check=False).returncode == 0, "containerd to answer")
        for target, address, port in forwarders:
            if address != "127.0.0.1":
                self.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"])
            self._forwarders.append(Forwarder(self._pid1, target, address, port))
        if had_kubelet:
            self._procs["kubelet"] = self.spawn("kubelet", self._kubelet_argv)
        return boot_id

    def cgroup(self, container_id: str) -> str:
        """A container's cgroup path under the node's own folder of each hierarchy."""
        return f"/{self.name}/{container_id}"

    def logs(self, lines: int = 40) -> str:
        parts = []
        for log in sorted(self.logs_dir.glob("*.log")) if self.logs_dir.is_dir() else []:
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(parts)

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def running_nodes() -> list[Path]:
    """The folders of the nodes running on this host (a node's folder goes when it stops)."""
    return [folder for folder in Path(NODES_DIR).glob(f"{NODE_PREFIX}*") if folder.is_dir()]


def remove_shared_cgroups(wait: float = 60.0) -> None:
    """At the end of a run: the CRI's shared /k8s.io cgroups, once no node runs (nodes of other lanes are
    waited for up to `wait` seconds, then left to remove them) and no pod's cgroup is in them."""
    deadline = time.monotonic() + wait
    while running_nodes():
        if time.monotonic() > deadline:
            return
        time.sleep(0.5)
    for hierarchy in CGROUP_ROOT.iterdir():
        shared = hierarchy / CRI_NAMESPACE
        if shared.is_dir() and not _subfolders(shared):
            with contextlib.suppress(OSError):
                shared.rmdir()


def _rmdir_when_empty(directory: Path, timeout: float = 10.0) -> None:
    """Remove a cgroup folder once its last task has exited (EBUSY until then)."""
    deadline = time.monotonic() + timeout
    while directory.is_dir():
        try:
            directory.rmdir()
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise NodeError(f"cgroup {directory} still busy after {timeout:.0f} s") from None
            time.sleep(0.05)


def _subfolders(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir()]
    except OSError:
        return []


def _terminate(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process's group, SIGKILL after `grace` seconds."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        proc.wait(timeout=10)
