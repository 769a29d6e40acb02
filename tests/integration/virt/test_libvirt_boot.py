"""The tiny guest booted for real on qemu:///system with TCG (domain type qemu).

One guest goes through every power operation; a second spawn fails half way
on purpose. The waits below are deadlines for a guest to show something, not
measurements: a slow machine takes longer, and only a guest that never shows
the marker fails.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from novakit import exceptions
from novakit.compute.passwords import hash_admin_password
from novakit.compute.states import PowerState
from novakit.host.messages import InstanceSpec
from novakit.keypairs import keys
from novakit.virt import admin_password_line, guest_ready_line
from novakit.virt.libvirt.driver import LibvirtDriver

pytestmark = pytest.mark.libvirt
BOOT_DEADLINE = float(os.environ.get("NOVAKIT_BOOT_DEADLINE", "60"))


@pytest.fixture(scope="module")
def system_driver(system_conn: Any, tiny_image: Path) -> Iterator[LibvirtDriver]:
    area = Path(tempfile.mkdtemp(prefix="novakit-boot-", dir=os.environ.get("NOVAKIT_TEST_AREA", "/var/tmp")))
    area.chmod(0o755)
    drv = LibvirtDriver(
        "boot-host",
        {
            "uri": "qemu:///system",
            "domain_type": "qemu",
            "instances_path": str(area / "instances"),
            "image_store": str(tiny_image),
            "reboot_timeout": 30,
        },
    )
    drv.init_host()
    yield drv
    for uuid in drv.list_instances():
        if (area / "instances" / uuid).exists():
            drv.destroy(InstanceSpec.model_construct(uuid=uuid))
    shutil.rmtree(area, ignore_errors=True)


def wait_for_markers(driver: LibvirtDriver, instance: InstanceSpec, count: int) -> str:
    """The console once it shows the guest's marker ``count`` times (or at the deadline)."""
    line = guest_ready_line(instance.hostname, instance.uuid)
    deadline = time.monotonic() + BOOT_DEADLINE
    console = ""
    while time.monotonic() < deadline:
        console = driver.get_console_output(instance)
        if console.count(line) >= count:
            break
        time.sleep(0.5)
    return console


def test_tiny_guest_boots_and_survives_every_power_operation(
    system_driver: LibvirtDriver, make_tiny: Callable[..., InstanceSpec]
) -> None:
    inst = make_tiny(hostname="tiny-boot-1")
    drv = system_driver
    drv.spawn(inst)
    marker = guest_ready_line("tiny-boot-1", inst.uuid)
    assert marker in wait_for_markers(drv, inst, 1)
    assert drv.list_instances()[inst.uuid] is PowerState.RUNNING

    drv.pause(inst)
    assert drv.get_info(inst).state is PowerState.PAUSED
    drv.unpause(inst)
    assert drv.get_info(inst).state is PowerState.RUNNING

    drv.suspend(inst)
    assert drv.get_info(inst).state is PowerState.SUSPENDED
    drv.resume(inst)
    assert drv.get_info(inst).state is PowerState.RUNNING

    # The guest answers the ACPI power button, so this is a clean shutdown.
    drv.power_off(inst, timeout=30, retry_interval=5)
    assert drv.get_info(inst).state is PowerState.SHUTDOWN
    assert "reboot: Power down" in drv.get_console_output(inst)

    drv.power_on(inst)
    assert drv.get_info(inst).state is PowerState.RUNNING
    # The log keeps earlier boots: a new marker means a new boot.
    assert wait_for_markers(drv, inst, 2).count(marker) == 2

    drv.reboot(inst, "SOFT")
    assert drv.get_info(inst).state is PowerState.RUNNING
    assert wait_for_markers(drv, inst, 3).count(marker) == 3

    drv.reboot(inst, "HARD")
    assert drv.get_info(inst).state is PowerState.RUNNING

    inst_dir = drv.instances_path / inst.uuid
    drv.destroy(inst)
    assert inst.uuid not in drv.list_instances()
    assert not inst_dir.exists()
    with pytest.raises(exceptions.InstanceNotFound):
        drv.get_info(inst)


def test_a_spawn_failing_half_way_leaves_nothing(
    system_driver: LibvirtDriver, make_tiny: Callable[..., InstanceSpec], system_conn: Any
) -> None:
    """Disks and config drive are made, then QEMU cannot start: all of it goes again."""
    broken = LibvirtDriver(
        "boot-host",
        {**system_driver.options, "emulator": "/nonexistent/qemu-system-x86_64"},
    )
    inst = make_tiny()
    with pytest.raises(exceptions.RescheduledError, match="nonexistent"):
        broken.spawn(inst)
    assert inst.uuid not in broken.list_instances()
    assert not (broken.instances_path / inst.uuid).exists()
    assert f"novakit-{inst.uuid}" not in [d.name() for d in system_conn.listAllDomains()]


def test_the_guest_finds_its_admin_password_hash_and_its_key_on_the_config_drive(
    system_driver: LibvirtDriver, make_tiny: Callable[..., InstanceSpec]
) -> None:
    """The hash travels next to a user's script (a MIME archive) and the guest prints its sha256;
    the server's key pair (issue 26) is on the same drive, and the guest's marker ends with the
    fingerprint of the key it found, which is the one the key pair shows."""
    hashed = hash_admin_password("tiny-guest-secret")
    script = base64.b64encode(b"#!/bin/sh\necho the user's own script\n").decode()
    pair = keys.generate("ed25519", "tiny@novakit")
    inst = make_tiny(
        hostname="tiny-pw-1",
        admin_password_hash=SecretStr(hashed),
        user_data=SecretStr(script),
        key_name="tiny-key",
        key_data=pair.public_key,
    )
    drv = system_driver
    drv.spawn(inst)
    try:
        console = wait_for_markers(drv, inst, 1)
        ready = guest_ready_line("tiny-pw-1", inst.uuid, key_fingerprint=keys.fingerprint(pair.public_key))
        assert ready in console.splitlines()
        # Printed before the ready marker, so it is there once the marker is.
        assert admin_password_line(hashed) in console.splitlines()
        assert hashed not in console and "tiny-guest-secret" not in console
    finally:
        drv.destroy(inst)
