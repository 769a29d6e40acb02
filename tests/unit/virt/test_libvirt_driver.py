"""The libvirt driver without a daemon: its import guard and its reading of libvirt states."""

from __future__ import annotations

import sys

import pytest

from novakit import exceptions
from novakit.compute.states import PowerState
from novakit.virt.driver import load_driver
from novakit.virt.libvirt import guest


def test_missing_libvirt_python_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "libvirt", None)
    with pytest.raises(exceptions.MissingDependency) as err:
        load_driver("libvirt", "compute-1", {"uri": "test:///default"})
    message = err.value.format_message()
    assert "libvirt-python" in message
    assert "pip install 'novakit[libvirt]'" in message
    assert "libvirt-dev and pkg-config" in message


@pytest.mark.parametrize(
    ("libvirt_state", "saved", "expected"),
    [
        (guest.VIR_DOMAIN_NOSTATE, False, PowerState.NOSTATE),
        (guest.VIR_DOMAIN_RUNNING, False, PowerState.RUNNING),
        (guest.VIR_DOMAIN_BLOCKED, False, PowerState.RUNNING),
        (guest.VIR_DOMAIN_PAUSED, False, PowerState.PAUSED),
        (guest.VIR_DOMAIN_SHUTDOWN, False, PowerState.SHUTDOWN),
        (guest.VIR_DOMAIN_SHUTOFF, False, PowerState.SHUTDOWN),
        (guest.VIR_DOMAIN_SHUTOFF, True, PowerState.SUSPENDED),
        (guest.VIR_DOMAIN_CRASHED, False, PowerState.CRASHED),
        (guest.VIR_DOMAIN_PMSUSPENDED, False, PowerState.SUSPENDED),
        (99, False, PowerState.NOSTATE),
    ],
)
def test_libvirt_states_map_to_nova_power_states(
    libvirt_state: int, saved: bool, expected: PowerState
) -> None:
    assert guest.power_state(libvirt_state, saved) is expected


def test_libvirt_state_numbers_match_libvirt_python() -> None:
    libvirt = pytest.importorskip("libvirt")
    assert (libvirt.VIR_DOMAIN_BLOCKED, libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_PMSUSPENDED) == (
        guest.VIR_DOMAIN_BLOCKED,
        guest.VIR_DOMAIN_SHUTOFF,
        guest.VIR_DOMAIN_PMSUSPENDED,
    )


def test_unreachable_daemon_is_hypervisor_unavailable(tmp_path: pytest.TempPathFactory) -> None:
    pytest.importorskip("libvirt")
    drv = load_driver("libvirt", "compute-1", {"uri": f"qemu+unix:///system?socket={tmp_path}/nope.sock"})
    with pytest.raises(exceptions.HypervisorUnavailable, match="compute-1.*cannot connect"):
        drv.init_host()


def test_a_local_daemon_s_host_has_this_machine_s_boot_id_a_remote_one_none(
    tmp_path: pytest.TempPathFactory,
) -> None:
    pytest.importorskip("libvirt")
    with open("/proc/sys/kernel/random/boot_id") as f:
        mine = f.read().strip()
    local = load_driver("libvirt", "compute-1", {"uri": f"qemu+unix:///system?socket={tmp_path}/nope.sock"})
    assert local.host_boot_id() == mine
    remote = load_driver("libvirt", "compute-2", {"uri": "qemu+ssh://root@127.0.0.1/system"})
    assert remote.host_boot_id() is None
