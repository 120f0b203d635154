"""Waiting for one file's changes through inotify (health/file_events.py): the file's own events end a
wait, other files' do not, `wake` ends it from another thread, and a gone folder ends the watch."""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import pytest
from vke_gpu_dra.health import file_events
from vke_gpu_dra.health.file_events import FileEvents, parse_events


def event(mask: int, name: bytes = b"") -> bytes:
    padded = name + b"\0" * (16 - len(name) % 16) if name else b""
    return struct.pack("iIII", 1, mask, 0, len(padded)) + padded


def test_events_of_the_file_and_of_the_folder_are_told_apart() -> None:
    name = b"simulated-health"
    assert parse_events(event(file_events.IN_CLOSE_WRITE, name), name) == (True, False)
    assert parse_events(event(file_events.IN_MOVED_TO, name) + event(file_events.IN_MODIFY, b"x"), name) == (
        True,
        False,
    )
    assert parse_events(event(file_events.IN_MODIFY, b"vke-gpu-dra-checkpoint.journal"), name) == (
        False,
        False,
    )
    assert parse_events(event(file_events.IN_DELETE_SELF), name) == (False, True)
    assert parse_events(event(file_events.IN_Q_OVERFLOW), name) == (False, True)
    assert parse_events(b"", name) == (False, False)


@pytest.fixture
def events(tmp_path: Path) -> FileEvents:
    watch = FileEvents.open(tmp_path, "watched")
    assert watch is not None, "inotify is available on Linux"
    return watch


def test_a_change_of_the_file_ends_the_wait_and_other_files_do_not(
    tmp_path: Path, events: FileEvents
) -> None:
    try:
        (tmp_path / "other").write_text("x")
        assert events.wait(0.2) is False
        (tmp_path / "watched").write_text("gpu-0 lost\n")
        assert events.wait(10) is True
        (tmp_path / "watched").unlink()
        assert events.wait(10) is True
    finally:
        events.close()


def test_wake_ends_a_wait_without_a_change(events: FileEvents) -> None:
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(events.wait(None)))
    waiter.start()
    time.sleep(0.05)
    events.wake()
    waiter.join(10)
    events.close()
    assert woken == [False]


def test_a_gone_folder_ends_the_watch(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    watch = FileEvents.open(folder, "watched")
    assert watch is not None
    try:
        folder.rmdir()
        assert watch.wait(10) is True and watch.ended
        assert watch.wait(None) is True, "an ended watch makes the caller look (and fall back to its timer)"
    finally:
        watch.close()


def test_without_inotify_there_is_no_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_events, "_libc", lambda: None)
    assert FileEvents.open(tmp_path, "watched") is None
    monkeypatch.undo()
    assert FileEvents.open(tmp_path / "missing", "watched") is None, "a missing folder cannot be watched"
