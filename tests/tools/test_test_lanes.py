"""scripts/test's lanes (tools/test_lanes.py): lanes run side by side as pytest processes, the exit status
comes from all of them, each lane's output reaches the run's, a signal stops every lane through its
teardown, and the default lanes run each test of the suite exactly once."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import test_lanes
from tools.test_lanes import NO_TESTS, Lane

ROOT = Path(__file__).resolve().parents[2]


def suite(folder: Path, name: str, body: str) -> Path:
    """A folder holding one test file, with a pytest.ini of its own (not the repository's settings)."""
    where = folder / name
    where.mkdir()
    (where / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (where / f"test_{name}.py").write_text(body, encoding="utf-8")
    return where


def lane(name: str, where: Path) -> Lane:
    return Lane(name, (str(where), "-p", "no:cacheprovider", "-q"))


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([0, 0, 0], 0),
        ([0, NO_TESTS, 0], 0),
        ([NO_TESTS, NO_TESTS], NO_TESTS),
        ([0, 1, 2], 1),
        ([NO_TESTS, 2, 1], 2),
        ([], 0),
    ],
)
def test_the_runs_status_comes_from_every_lane(statuses: list[int], expected: int) -> None:
    assert test_lanes.overall(statuses) == expected


def test_lanes_run_side_by_side_and_the_run_fails_with_a_failing_lane(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # The first lane waits for a file only the second lane's test writes: one after the other, it would
    # time out and fail.
    handshake = tmp_path / "second-lane-ran"
    first = suite(
        tmp_path,
        "first",
        "import time\nfrom pathlib import Path\n\n"
        "def test_waits_for_the_second_lane():\n"
        "    deadline = time.monotonic() + 60\n"
        f"    while not Path({str(handshake)!r}).exists():\n"
        "        assert time.monotonic() < deadline, 'the second lane never ran beside this one'\n"
        "        time.sleep(0.05)\n",
    )
    second = suite(
        tmp_path,
        "second",
        f"from pathlib import Path\n\ndef test_writes():\n    Path({str(handshake)!r}).touch()\n",
    )
    third = suite(tmp_path, "third", "def test_fails():\n    assert 1 == 2, 'third lane failing'\n")
    out = io.BytesIO()

    status = test_lanes.run([lane("one", first), lane("two", second), lane("three", third)], out=out)

    assert status == 1
    first_output = capfd.readouterr().out  # the first lane writes to the run's own stdout
    assert "1 passed" in first_output
    text = out.getvalue().decode()
    two, three = text.index("lane two: exit 0"), text.index("lane three: exit 1")
    assert two < three, "the other lanes' output comes in lane order"
    assert "1 passed" in text[two:three]
    assert "third lane failing" in text[three:]
    assert text.rstrip().splitlines()[-1].startswith("test lanes: one exit 0 in ")
    assert "three exit 1 in " in text.rstrip().splitlines()[-1]


def test_every_lane_collecting_nothing_is_status_5(tmp_path: Path) -> None:
    empty = [suite(tmp_path, name, "") for name in ("a", "b")]
    assert test_lanes.run([lane("a", empty[0]), lane("b", empty[1])], out=io.BytesIO()) == NO_TESTS


def test_sigterm_stops_every_lane_through_its_teardown(tmp_path: Path) -> None:
    lanes = []
    for name in ("a", "b"):
        started, torn_down = tmp_path / f"{name}.started", tmp_path / f"{name}.torn-down"
        body = (
            "import time\nfrom pathlib import Path\nimport pytest\n\n"
            "@pytest.fixture\n"
            "def resource():\n"
            "    yield\n"
            f"    Path({str(torn_down)!r}).touch()\n\n"
            "def test_runs_long(resource):\n"
            f"    Path({str(started)!r}).touch()\n"
            "    time.sleep(120)\n"
        )
        lanes.append(lane(name, suite(tmp_path, name, body)))
    script = f"import sys\nfrom tools import test_lanes\nsys.exit(test_lanes.run({lanes!r}))\n"
    runner = subprocess.Popen(
        [sys.executable, "-c", f"from tools.test_lanes import Lane\n{script}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"{n}.started").exists() for n in ("a", "b")):
            assert runner.poll() is None, runner.communicate()[0].decode()
            assert time.monotonic() < deadline, "the lanes' tests never started"
            time.sleep(0.05)
        runner.send_signal(signal.SIGTERM)
        output, _ = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert runner.returncode not in (0, NO_TESTS), output.decode()
    assert (tmp_path / "a.torn-down").exists() and (tmp_path / "b.torn-down").exists()
    assert b"KeyboardInterrupt" in output


def node_tests(*args: str) -> set[str]:
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return {line for line in listed.stdout.splitlines() if "::" in line}


def test_the_default_lanes_run_each_test_once() -> None:
    suite_lane, engine_lane, *node_lanes = test_lanes.LANES
    tier_folders = {lane.args[0] for lane in test_lanes.LANES[1:]}
    assert tier_folders == {"tests/engine", "tests/node"}
    assert {a.removeprefix("--ignore=") for a in suite_lane.args if a.startswith("--ignore=")} == tier_folders
    assert "-k" not in engine_lane.args, "the engine lane runs its whole folder"
    assert all(lane.args[0] == "tests/node" for lane in node_lanes)
    every = node_tests("tests/node")
    chosen = [node_tests(*lane.args) for lane in node_lanes]
    assert all(chosen), "a node lane selects no test"
    assert set.union(*chosen) == every
    assert sum(len(c) for c in chosen) == len(every), "a node test would run in two lanes"
    lanes = dict(zip((lane.name for lane in node_lanes), chosen, strict=True))
    for release in ("1.34", "1.38"):
        assert {t for t in every if f"[{release}" in t} == lanes[f"node {release}"], f"the {release} lane"
    assert not {t for t in lanes["node 1.37"] if "[1.34" in t or "[1.38" in t}
