"""The simulated health file: read once, a file that cannot be read changes nothing and is logged; watched,
it is asleep at rest and looked at when the file changes (inotify), on a timer only while a recovery window
runs or where inotify cannot be had."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
from vke_gpu_dra.health import file_events
from vke_gpu_dra.health.monitor import HealthMonitor
from vke_gpu_dra.health.policy import Change
from vke_gpu_dra.health.simulated import FILE_NAME, SimulatedHealthFile


class Recorder:
    def __init__(self) -> None:
        self.changes: list[Change] = []

    def apply(self, changes: list[Change]) -> None:
        self.changes += changes


def test_a_file_that_is_not_utf8_is_one_warning_and_keeps_the_last_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "simulated-health"
    monitor = Recorder()
    watcher = SimulatedHealthFile(
        path,
        ["gpu-0"],
        cast(HealthMonitor, monitor),
        recovery_window=0,
        ignored_xids=frozenset(),
        clock=lambda: 100.0,
    )
    path.write_text("gpu-0 xid 79\n")
    watcher.poll()
    before = list(monitor.changes)
    assert before
    path.write_bytes(b"gpu-0 lost\n\xff\xfe\n")
    with caplog.at_level(logging.WARNING, logger="vke_gpu_dra.health.simulated"):
        watcher.poll()  # raised UnicodeDecodeError before, ending the watching thread
    assert monitor.changes == before
    [record] = caplog.records
    assert record.getMessage() == "cannot read the simulated health file"
    fields = record.__dict__["fields"]
    assert fields["path"] == str(path)
    assert "can't decode byte 0xff in position 11" in fields["error"]


@pytest.mark.parametrize("window", [0, 1])
def test_an_xid_held_in_the_file_stays_one_problem_with_a_short_window(tmp_path: Path, window: int) -> None:
    path = tmp_path / "simulated-health"
    monitor = Recorder()
    now = [100.0]
    watcher = SimulatedHealthFile(
        path,
        ["gpu-0", "gpu-1"],
        cast(HealthMonitor, monitor),
        recovery_window=window,
        ignored_xids=frozenset({13}),
        clock=lambda: now[0],
    )
    path.write_text("gpu-0 xid 79\n")
    for _ in range(4):  # read every second: it was recovered and raised again at each read
        watcher.poll()
        now[0] += 1
    [change] = monitor.changes
    assert (change.after.name, change.after.problems[0].reason) == ("gpu-0", "xid 79")
    path.write_text("gpu-0 xid 13\n")  # an ignored XID: the held one ends after the window
    now[0] += window
    watcher.poll()
    assert [(c.after.name, c.after.problems) for c in monitor.changes[1:]] == [("gpu-0", ())]


def test_the_file_is_read_only_when_it_changed_or_a_device_is_recovering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At rest (no file, or the same file, every device healthy) a poll reads nothing; a changed file is
    read, and so is an unchanged one while a recovery window runs."""
    path = tmp_path / "simulated-health"
    reads: list[Path] = []
    read_text = Path.read_text

    def counted(self: Path, *args: object, **kwargs: object) -> str:
        reads.append(self)
        return read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", counted)
    monitor = Recorder()
    now = [100.0]
    watcher = SimulatedHealthFile(
        path, ["gpu-0"], cast(HealthMonitor, monitor), recovery_window=30, ignored_xids=frozenset(),
        clock=lambda: now[0],
    )  # fmt: skip
    for _ in range(3):
        watcher.poll()
    assert len(reads) == 1  # the first poll looks; no file since, nothing to do
    path.write_text("gpu-0 xid 79\n")
    watcher.poll()
    assert len(reads) == 2 and watcher.tracker.health("gpu-0").status == "unhealthy"
    path.unlink()
    watcher.poll()
    watcher.poll()  # the window runs: read each time
    assert len(reads) == 4 and watcher.tracker.health("gpu-0").status == "unhealthy"
    now[0] += 31
    watcher.poll()
    assert watcher.tracker.health("gpu-0").status == "healthy"
    settled = len(reads)
    watcher.poll()
    watcher.poll()
    assert len(reads) == settled
    path.write_text("gpu-0 lost\n")
    watcher.poll()
    assert len(reads) == settled + 1 and watcher.tracker.health("gpu-0").status == "unhealthy"


class Counting(SimulatedHealthFile):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.polls = 0

    def poll(self) -> None:
        self.polls += 1
        super().poll()


def counting(tmp_path: Path) -> Counting:
    return Counting(
        tmp_path / FILE_NAME,
        ["gpu-0"],
        cast(HealthMonitor, Recorder()),
        recovery_window=0.2,
        ignored_xids=frozenset(),
        interval=0.01,
    )


def wait_until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_simulated_health_file_sleeps_at_rest_and_wakes_when_written(tmp_path: Path) -> None:
    watcher = counting(tmp_path)
    watcher.start()
    try:
        wait_until(lambda: watcher.polls >= 1)
        time.sleep(0.3)  # thirty intervals: a timer would have looked about thirty times
        assert watcher.polls == 1
        (tmp_path / FILE_NAME).write_text("gpu-0 lost\n")
        wait_until(lambda: watcher.tracker.health("gpu-0").problems)
        # While a device is unhealthy its recovery window runs: it is looked at on the timer again.
        before = watcher.polls
        wait_until(lambda: watcher.polls >= before + 5)
        (tmp_path / FILE_NAME).write_text("")
        wait_until(lambda: not watcher.tracker.health("gpu-0").problems)
        time.sleep(0.05)
        at_rest = watcher.polls
        time.sleep(0.3)
        assert watcher.polls == at_rest, "healthy again: asleep until the file changes"
    finally:
        watcher.stop()


def test_without_inotify_the_file_is_looked_at_on_the_timer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_events, "_libc", lambda: None)
    watcher = counting(tmp_path)
    watcher.start()
    try:
        wait_until(lambda: watcher.polls >= 5)
        (tmp_path / FILE_NAME).write_text("gpu-0 xid 79\n")
        wait_until(lambda: watcher.tracker.health("gpu-0").problems)
    finally:
        watcher.stop()
