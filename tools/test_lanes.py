"""The whole suite as lanes side by side: what `scripts/test` runs when it is given no pytest arguments.

    .venv/bin/python -m tools.test_lanes          every lane at once (run it from the repository's root);
                                                  the first lane's output as it comes, then each other
                                                  lane's; exit 0 when all pass
    .venv/bin/python -m tools.test_lanes --list   the lanes and their pytest arguments

The node tier (tests/node) spends most of its time waiting on kubelets, containerd and pods, so each of
its control planes' releases runs as a lane of its own, beside the engine tier's lane and the rest of the
suite (the unit tests and the control-plane tier): on a 2-core machine the suite takes about as long as
its longest lane instead of the sum of all five (docs/testing.md, "Lanes"). Each lane is one pytest process
with its own control planes and nodes; only the first keeps pytest's cache (`--lf`), so no two write it
at once.

The other lanes' output follows the first's, each under a line naming it. A lane that exits 5 (it
collected no tests) does not fail the run unless every lane did; the exit status is then 5, else the first
failing lane's, else 0. Ctrl-C or SIGTERM stops every lane the way Ctrl-C stops one pytest (SIGINT:
fixtures tear their processes and nodes down), then waits for them. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

#: pytest's exit status when it collected no tests.
NO_TESTS = 5


@dataclass(frozen=True)
class Lane:
    name: str
    args: tuple[str, ...]


#: The node tier's parametrised tests carry their control plane's release in their ids ([1.34],
#: [1.38-chart-mps]); the tier's other tests (the images, the bench's options, scripts/node, scripts/up
#: local) run on 1.37 or need no kubelet, and go with the 1.37 lane. The engine tier (the Pulumi CLI) has a
#: lane of its own.
LANES = (
    Lane("suite", ("--ignore=tests/node", "--ignore=tests/engine")),
    Lane("engine", ("tests/engine", "-p", "no:cacheprovider")),
    Lane("node 1.34", ("tests/node", "-k", "1.34", "-p", "no:cacheprovider")),
    Lane("node 1.37", ("tests/node", "-k", "not 1.34 and not 1.38", "-p", "no:cacheprovider")),
    Lane("node 1.38", ("tests/node", "-k", "1.38", "-p", "no:cacheprovider")),
)


@dataclass
class Running:
    lane: Lane
    process: subprocess.Popen[bytes]
    log: Path | None
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0
    status: int | None = None


def overall(statuses: Sequence[int]) -> int:
    """The run's exit status from its lanes' (in lane order)."""
    failing = [s for s in statuses if s not in (0, NO_TESTS)]
    if failing:
        return failing[0]
    if statuses and all(s == NO_TESTS for s in statuses):
        return NO_TESTS
    return 0


def command(lane: Lane, python: str = sys.executable) -> list[str]:
    return [python, "-m", "pytest", *lane.args]


def start(lanes: Sequence[Lane], logs: Path) -> list[Running]:
    """The first lane writes to this process's stdout; each other one to a log file of its own in `logs`."""
    running: list[Running] = []
    for index, lane in enumerate(lanes):
        log = None if index == 0 else logs / f"lane-{index}.log"
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if log else None
        try:
            # A session of its own: a terminal's Ctrl-C reaches the runner alone, which passes it on once.
            process = subprocess.Popen(
                command(lane), stdout=out, stderr=subprocess.STDOUT if log else None, start_new_session=True
            )
        finally:
            if out is not None:
                os.close(out)
        running.append(Running(lane, process, log))
    return running


def interrupt(running: Sequence[Running]) -> None:
    for item in running:
        if item.process.poll() is None:
            item.process.send_signal(signal.SIGINT)


def replay(item: Running, out: IO[bytes]) -> None:
    if item.log is None:
        return
    with item.log.open("rb") as log:
        while chunk := log.read(1 << 16):
            out.write(chunk)
    out.flush()


def banner(text: str) -> str:
    return f"\n{'=' * 20} {text} {'=' * 20}\n"


def run(lanes: Sequence[Lane] = LANES, out: IO[bytes] | None = None) -> int:
    stream = out or sys.stdout.buffer
    begin = time.monotonic()
    print(
        "test lanes: " + "; ".join(f"{lane.name}: pytest {shlex.join(lane.args)}" for lane in lanes),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="vke-gpu-dra-lanes-") as logs:
        return _run(lanes, stream, begin, start(lanes, Path(logs)))


def _run(lanes: Sequence[Lane], stream: IO[bytes], begin: float, running: list[Running]) -> int:

    def stop(signum: int, _frame: FrameType | None) -> None:
        interrupt(running)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        pending = list(running)
        while pending:
            for item in list(pending):
                status = item.process.poll()
                if status is None:
                    continue
                item.status, item.seconds = status, time.monotonic() - item.started
                pending.remove(item)
                if item is not running[0]:
                    ended = f"\ntest lanes: {item.lane.name} ended (exit {status}); its output follows\n"
                    stream.write(ended.encode())
                    stream.flush()
            time.sleep(0.2)
        for item in running[1:]:
            title = f"lane {item.lane.name}: exit {item.status} in {item.seconds:.0f} s"
            stream.write(banner(title).encode())
            replay(item, stream)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        interrupt(running)
        for item in running:
            item.process.wait()
    took = time.monotonic() - begin
    summary = ", ".join(f"{item.lane.name} exit {item.status} in {item.seconds:.0f} s" for item in running)
    stream.write(f"test lanes: {summary}; all in {took:.0f} s\n".encode())
    stream.flush()
    return overall([item.status if item.status is not None else 1 for item in running])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools.test_lanes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the lanes and their pytest arguments")
    args = parser.parse_args(argv)
    if args.list:
        for lane in LANES:
            print(f"{lane.name}: pytest {shlex.join(lane.args)}")
        return 0
    return run()


if __name__ == "__main__":
    sys.exit(main())
