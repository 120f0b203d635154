"""The health decisions (pure): fatal and ignored XIDs, lost and unmonitored GPUs, the recovery
window, flapping, and what the published slice says on servers with and without device taints."""

import pytest
from vke_gpu_dra.health.policy import (
    DEFAULT_IGNORED_XIDS,
    NO_TAINTS,
    DeviceHealth,
    HealthTracker,
    Problem,
    TaintSupport,
    parse_xid_list,
    published_entries,
    rfc3339,
    taints_for,
)

DRIVER = "gpu.nvidia.com"
WINDOW = 300.0
T0 = 1_800_000_000.0
TAINTS_136 = TaintSupport(taints=True, none_effect=True, max_taints=16, max_devices_with_taints=64)
TAINTS_134_GATE = TaintSupport(taints=True, none_effect=False, max_taints=4)


def tracker(**kwargs):
    gpus = {"GPU-a": ["gpu-0"], "GPU-b": ["gpu-1-mig-a", "gpu-1-mig-b"]}
    return HealthTracker(gpus, now=T0, recovery_window=WINDOW, **kwargs)


def names(changes):
    return sorted(c.after.name for c in changes)


def test_fatal_xid_makes_the_device_unhealthy_and_records_since() -> None:
    t = tracker()
    [change] = t.xid("gpu-0", 79, T0 + 1)
    assert change.before == DeviceHealth("gpu-0")
    assert change.after.status == "unhealthy" and not change.after.allocatable
    assert change.after.problems == (Problem("xid", T0 + 1, 79),)
    assert change.after.reason == "xid 79"
    assert t.health("gpu-1-mig-a").status == "healthy"  # another GPU is untouched


@pytest.mark.parametrize("xid", sorted(DEFAULT_IGNORED_XIDS))
def test_application_error_xids_are_ignored_by_default(xid: int) -> None:
    t = tracker()
    assert t.xid("gpu-0", xid, T0 + 1) == []
    assert t.health("gpu-0").status == "healthy"


def test_nvidias_ignored_list() -> None:
    assert {13, 31, 43, 45, 68, 109} == DEFAULT_IGNORED_XIDS


def test_an_added_ignored_xid_is_ignored_too() -> None:
    t = tracker(ignored_xids=DEFAULT_IGNORED_XIDS | parse_xid_list("74, 94"))
    assert t.xid("gpu-0", 74, T0) == [] and t.xid("gpu-0", 13, T0) == []
    assert names(t.xid("gpu-0", 79, T0)) == ["gpu-0"]


def test_parse_xid_list() -> None:
    assert parse_xid_list("") == frozenset()
    assert parse_xid_list(" 74,79,,74 ") == {74, 79}
    with pytest.raises(ValueError, match=r"comma-separated list of XID numbers.*'x7'"):
        parse_xid_list("74,x7")
    with pytest.raises(ValueError, match="'-1'"):
        parse_xid_list("-1")


def test_a_lost_gpu_makes_all_its_devices_unhealthy() -> None:
    t = tracker()
    changes = t.lost("GPU-b", T0 + 2)
    assert names(changes) == ["gpu-1-mig-a", "gpu-1-mig-b"]
    assert all(c.after.problems == (Problem("gpu-lost", T0 + 2),) for c in changes)
    assert t.lost("GPU-b", T0 + 3) == []  # still lost: no change, `since` kept
    assert t.health("gpu-1-mig-a").problems[0].since == T0 + 2


def test_an_unmonitored_gpu_stays_allocatable_with_unknown_health() -> None:
    t = tracker()
    [change] = t.unmonitored("GPU-a", T0)
    assert change.after.status == "unknown" and change.after.allocatable
    assert change.after.reason == "unmonitored"


def test_xid_recovers_after_the_window_without_fatal_events() -> None:
    t = tracker()
    t.xid("gpu-0", 79, T0)
    assert t.tick(T0 + WINDOW - 1) == []
    [change] = t.tick(T0 + WINDOW)
    assert change.after == DeviceHealth("gpu-0") and change.after.status == "healthy"


def test_a_new_fatal_event_restarts_the_window_and_keeps_since() -> None:
    t = tracker()
    t.xid("gpu-0", 79, T0)
    t.xid("gpu-0", 48, T0 + 200)
    assert t.health("gpu-0").problems == (Problem("xid", T0, 48),)
    assert t.tick(T0 + WINDOW) == []
    assert names(t.tick(T0 + 200 + WINDOW)) == ["gpu-0"]


def test_a_lost_gpu_recovers_after_answering_for_the_whole_window() -> None:
    t = tracker()
    t.lost("GPU-a", T0)
    assert t.tick(T0 + 10 * WINDOW) == []  # still lost: no probe answered
    assert t.answered("GPU-a", T0 + 10) == []
    assert t.answered("GPU-a", T0 + 10 + WINDOW - 1) == []
    assert names(t.answered("GPU-a", T0 + 10 + WINDOW)) == ["gpu-0"]


def test_a_flapping_gpu_is_held_back_by_the_window() -> None:
    t = tracker()
    t.lost("GPU-a", T0)
    now = T0
    for _ in range(5):  # answers for a while, then is lost again: never long enough
        now += 100
        assert t.answered("GPU-a", now) == []
        now += 100
        assert t.lost("GPU-a", now) == []
        assert t.health("gpu-0").status == "unhealthy"
    assert t.answered("GPU-a", now + 1) == []
    assert names(t.tick(now + 1 + WINDOW)) == ["gpu-0"]


def test_an_xid_on_a_lost_gpu_recovers_only_once_the_gpu_answers() -> None:
    t = tracker()
    t.xid("gpu-0", 79, T0)
    t.lost("GPU-a", T0)
    assert t.tick(T0 + 2 * WINDOW) == []
    t.answered("GPU-a", T0 + 2 * WINDOW)
    assert t.health("gpu-0").status == "unhealthy"
    assert names(t.tick(T0 + 3 * WINDOW)) == ["gpu-0"]


# --- what the slice says ---

ENTRIES = [{"name": "gpu-0", "attributes": {}}, {"name": "gpu-1", "attributes": {}}]


def test_taints_use_nvidias_keys_and_never_no_execute() -> None:
    xid = DeviceHealth("gpu-0", (Problem("xid", T0, 79),))
    lost = DeviceHealth("gpu-0", (Problem("gpu-lost", T0),))
    unmonitored = DeviceHealth("gpu-0", (Problem("unmonitored", T0),))
    stamp = rfc3339(T0)
    assert taints_for(xid, driver=DRIVER, support=TAINTS_136) == [
        {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule", "timeAdded": stamp}
    ]
    assert taints_for(lost, driver=DRIVER, support=TAINTS_136) == [
        {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule", "timeAdded": stamp}
    ]
    assert taints_for(unmonitored, driver=DRIVER, support=TAINTS_136) == [
        {"key": "gpu.nvidia.com/unmonitored", "effect": "None", "timeAdded": stamp}
    ]
    # 1.34 with the gate on: no `None` effect, so the informational taint is not published.
    assert taints_for(unmonitored, driver=DRIVER, support=TAINTS_134_GATE) == []


def test_taints_are_capped_at_the_servers_limit() -> None:
    many = DeviceHealth(
        "gpu-0", (Problem("xid", T0, 79), Problem("gpu-lost", T0), Problem("unmonitored", T0))
    )
    assert len(taints_for(many, driver=DRIVER, support=TaintSupport(True, True, max_taints=2))) == 2


def test_with_taints_an_unhealthy_device_stays_published_with_its_taint() -> None:
    health = {"gpu-0": DeviceHealth("gpu-0", (Problem("xid", T0, 79),))}
    out = published_entries(ENTRIES, health, driver=DRIVER, support=TAINTS_136)
    assert [e["name"] for e in out] == ["gpu-0", "gpu-1"]
    assert out[0]["taints"][0]["value"] == "79" and "taints" not in out[1]
    assert "taints" not in ENTRIES[0]  # the input is not changed


def test_without_taints_an_unhealthy_device_is_left_out_and_an_unmonitored_one_kept() -> None:
    health = {
        "gpu-0": DeviceHealth("gpu-0", (Problem("gpu-lost", T0),)),
        "gpu-1": DeviceHealth("gpu-1", (Problem("unmonitored", T0),)),
    }
    assert published_entries(ENTRIES, health, driver=DRIVER, support=NO_TAINTS) == [ENTRIES[1]]
    assert published_entries(ENTRIES, {}, driver=DRIVER, support=NO_TAINTS) == ENTRIES


def test_monitored_again_ends_unmonitored() -> None:
    t = tracker()
    t.unmonitored("GPU-a", T0)
    [change] = t.monitored("GPU-a")
    assert change.after.status == "healthy"
    assert t.monitored("GPU-a") == []
