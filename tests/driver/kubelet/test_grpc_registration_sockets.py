"""Registration socket names with a rolling-update id: the Go helper's choice, within the unix path limit.

Expected hashes were computed with Go's crypto/sha256 and encoding/base64.RawURLEncoding, as
k8s.io/dynamic-resource-allocation 0.37 `kubeletplugin.RollingUpdateRegistrarSocketFile` encodes them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from vke_gpu_dra.config import PluginConfigError, parse_config
from vke_gpu_dra.kubelet.registration import (
    registration_socket,
    registration_socket_name,
    rolling_update_registration_names,
)
from vke_gpu_dra.kubelet.sockets import MAX_SOCKET_PATH_BYTES
from vke_gpu_dra_core import facts

UID = "ad4af911-5bcd-47c5-a554-f35cea869472"
FULL = f"{facts.DRIVER_NAME}-{UID}-reg.sock"
HASHED = f"{facts.DRIVER_NAME}-Jk8-oymVURI-reg.sock"  # base64url(SHA-256(UID)[:8])
SHORTEST = "dra-PvYz6r8mPH5zZzKEUftoAg-reg.sock"  # base64url(SHA-256(driver NUL UID)[:16])
KUBELET_REGISTRY = Path("/var/lib/kubelet/plugins_registry")


def registrar_dir(length: int) -> Path:
    """An absolute directory path of exactly `length` bytes."""
    path = Path("/var/lib/kubelet/" + "r" * (length - len("/var/lib/kubelet/")))
    assert len(os.fsencode(path)) == length
    return path


def test_the_three_names_in_order_of_preference() -> None:
    assert rolling_update_registration_names(facts.DRIVER_NAME, UID) == (FULL, HASHED, SHORTEST)


def test_without_an_id_the_name_is_fixed() -> None:
    assert (
        registration_socket(KUBELET_REGISTRY, facts.DRIVER_NAME)
        == KUBELET_REGISTRY / "gpu.nvidia.com-reg.sock"
    )
    assert registration_socket_name(facts.DRIVER_NAME) == "gpu.nvidia.com-reg.sock"


def test_kubelets_registry_keeps_the_pod_uid_in_the_name() -> None:
    assert registration_socket(KUBELET_REGISTRY, facts.DRIVER_NAME, UID) == KUBELET_REGISTRY / FULL


@pytest.mark.parametrize(
    ("full_path_bytes", "expected"),
    [
        (MAX_SOCKET_PATH_BYTES, FULL),  # the longest path a unix socket binds
        (MAX_SOCKET_PATH_BYTES + 1, HASHED),  # 108 bytes leave no room for the NUL
        (MAX_SOCKET_PATH_BYTES + len(FULL) - len(HASHED), HASHED),  # the hashed name just fits
    ],
)
def test_a_long_registrar_dir_hashes_the_uid(full_path_bytes: int, expected: str) -> None:
    directory = registrar_dir(full_path_bytes - len(FULL) - 1)
    path = registration_socket(directory, facts.DRIVER_NAME, UID)
    assert path == directory / expected
    assert len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES


def test_a_long_driver_name_leaves_only_the_hash_of_driver_and_uid() -> None:
    driver = "gpu." + "a" * 50 + ".example.com"
    names = rolling_update_registration_names(driver, UID)
    path = registration_socket(KUBELET_REGISTRY, driver, UID)
    assert path.name == names[2] and path.name.startswith("dra-") and path.name.endswith("-reg.sock")
    assert driver not in path.name and UID not in path.name
    assert len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES


def test_when_nothing_fits_the_shortest_name_is_kept_for_the_config_check_to_refuse() -> None:
    directory = registrar_dir(MAX_SOCKET_PATH_BYTES - len(SHORTEST))  # one byte too many for the shortest
    assert registration_socket(directory, facts.DRIVER_NAME, UID) == directory / SHORTEST


def test_names_differ_by_driver_and_by_uid() -> None:
    one = rolling_update_registration_names("driver.one", UID)
    two = rolling_update_registration_names("driver.two", UID)
    other_uid = rolling_update_registration_names("driver.one", "ffffffff-ffff-ffff-ffff-ffffffffffff")
    for i in range(3):
        assert len({one[i], two[i], other_uid[i]}) == 3
    assert rolling_update_registration_names("driver.one", UID) == one  # the same pod, the same names


def test_config_names_the_socket_the_plugin_binds() -> None:
    directory = registrar_dir(60)
    config = parse_config(
        ["--node-name", "n", "--registrar-dir", str(directory), "--rolling-update-id", UID], environ={}
    )
    assert config.registration_socket == directory / HASHED
    assert config.dra_socket == Path(f"/var/lib/kubelet/plugins/{facts.DRIVER_NAME}/dra-{UID}.sock")


def test_config_refuses_a_registrar_dir_too_long_for_any_name() -> None:
    directory = registrar_dir(MAX_SOCKET_PATH_BYTES - len(SHORTEST))
    with pytest.raises(PluginConfigError, match=r"^--registrar-dir \(env REGISTRAR_DIR\) is too long"):
        parse_config(
            ["--node-name", "n", "--registrar-dir", str(directory), "--rolling-update-id", UID], environ={}
        )
