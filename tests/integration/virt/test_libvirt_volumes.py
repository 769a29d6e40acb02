"""A volume in a real libvirt storage pool, hot-plugged into running tiny guests (qemu:///system, TCG).

The host writes a marker into the volume, the first guest sees the disk appear and appends its own
marker, the volume is detached from it live and attached to a second guest on the same host, which
prints both markers: the data survived the move. The waits are deadlines, not measurements.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from novakit.compute.messages import InstanceSpec, VolumeSpec
from novakit.virt import guest_ready_line
from novakit.virt.libvirt.driver import LibvirtDriver
from novakit.virt.libvirt.volumes import volume_name

pytestmark = pytest.mark.libvirt
DEADLINE = float(os.environ.get("NOVAKIT_BOOT_DEADLINE", "60"))


@pytest.fixture
def volume_driver(system_conn: Any, tiny_image: Path) -> Iterator[LibvirtDriver]:
    area = Path(tempfile.mkdtemp(prefix="novakit-vol-", dir=os.environ.get("NOVAKIT_TEST_AREA", "/var/tmp")))
    area.chmod(0o755)
    pool = f"novakit-volumes-test-{uuidlib.uuid4().hex[:8]}"  # never the host's own pool
    drv = LibvirtDriver(
        "volume-host",
        {
            "uri": "qemu:///system",
            "domain_type": "qemu",
            "instances_path": str(area / "instances"),
            "image_store": str(tiny_image),
            "volume_pool": pool,
            "volume_pool_path": str(area / "volumes"),
        },
    )
    drv.init_host()
    yield drv
    for uuid in drv.list_instances():
        if (area / "instances" / uuid).exists():
            drv.destroy(InstanceSpec.model_construct(uuid=uuid))
    with_pool = system_conn.storagePoolLookupByName(pool)
    if with_pool.isActive():
        with_pool.destroy()
    with_pool.undefine()
    shutil.rmtree(area, ignore_errors=True)


def wait_for(drv: LibvirtDriver, inst: InstanceSpec, text: str) -> str:
    deadline = time.monotonic() + DEADLINE
    console = ""
    while time.monotonic() < deadline:
        console = drv.get_console_output(inst)
        if text in console:
            return console
        time.sleep(0.5)
    raise AssertionError(
        f"{text!r} not on the console of {inst.hostname} in {DEADLINE} s:\n{console[-3000:]}"
    )


def _disks(drv: LibvirtDriver, inst: InstanceSpec, flags: int) -> list[str]:
    xml = drv._guest(inst).domain.XMLDesc(flags)
    return [t.get("dev", "") for t in ET.fromstring(xml).iter("target") if t.get("dev", "").startswith("vd")]


def test_a_volume_is_hot_plugged_keeps_its_data_and_moves_to_another_guest(
    volume_driver: LibvirtDriver, make_tiny: Callable[..., InstanceSpec]
) -> None:
    drv = volume_driver
    vol = VolumeSpec(id=str(uuidlib.uuid4()), name="data", size_gb=1, format="raw", device_name="vdc")
    drv.create_volume(vol)
    drv.create_volume(vol)  # idempotent
    storage = drv.volume_pool.storage
    storage.write_bytes(storage.lookup(volume_name(vol)), b"host-marker\n")

    def tiny(hostname: str, mark: str | None = None) -> InstanceSpec:
        inst = make_tiny(hostname=hostname)
        if mark:
            props = dict(inst.image.properties)
            props["os_command_line"] += f" novakit.diskmark={mark}"
            inst.image = inst.image.model_copy(update={"properties": props})
        return inst

    first = tiny("vol-1", mark="guest-one")
    drv.spawn(first)
    wait_for(drv, first, guest_ready_line("vol-1", first.uuid))
    drv.attach_volume(first, vol)
    console = wait_for(drv, first, "NOVAKIT-DISK-MARKED vdc guest-one")
    assert "NOVAKIT-DISK vdc 2097152" in console  # 1 GiB in 512-byte sectors
    assert "NOVAKIT-DISK-DATA vdc host-marker" in console
    assert "vdc" in _disks(drv, first, drv.libvirt.VIR_DOMAIN_XML_INACTIVE)  # kept in the definition

    drv.detach_volume(first, vol)
    drv.detach_volume(first, vol)  # idempotent
    assert "vdc" not in _disks(drv, first, 0)
    assert "vdc" not in _disks(drv, first, drv.libvirt.VIR_DOMAIN_XML_INACTIVE)

    second = tiny("vol-2")
    drv.spawn(second)
    wait_for(drv, second, guest_ready_line("vol-2", second.uuid))
    drv.attach_volume(second, vol)
    wait_for(drv, second, "NOVAKIT-DISK-DATA vdc host-marker,guest-one")

    drv.destroy(second)
    drv.delete_volume(vol)
    drv.delete_volume(vol)  # idempotent
    assert storage.lookup(volume_name(vol)) is None


def test_a_guest_boots_from_a_new_volume_made_by_the_manager_and_the_volume_outlives_it(
    volume_driver: LibvirtDriver, make_tiny: Callable[..., InstanceSpec]
) -> None:
    """Boot from volume on the host side: the compute manager makes the root volume from the image
    in the pool, the guest boots from it (no image overlay), and destroying the server (its
    delete with delete_on_termination false) leaves the volume in the pool."""
    from novakit.compute.manager import ComputeManager
    from novakit.compute.messages import ComputeRequest

    drv = volume_driver
    inst = make_tiny(hostname="bfv-1")
    root = VolumeSpec(
        id=str(uuidlib.uuid4()), name="root", size_gb=1, image=inst.image, device_name="vda", boot_index=0
    )
    inst.volumes = [root]
    manager = ComputeManager("volume-host", drv)
    built = manager.handle(
        ComputeRequest(request_id="req-bfv", host="volume-host", operation="build", instances=[inst])
    )
    assert built.results[0].ok, built.results[0].fault
    wait_for(drv, inst, guest_ready_line("bfv-1", inst.uuid))
    storage = drv.volume_pool.storage
    assert storage.lookup(volume_name(root)) is not None
    sources = [
        s.get("file") or s.get("name") or ""
        for s in ET.fromstring(drv._guest(inst).domain.XMLDesc(0)).iter("source")
    ]
    assert any(volume_name(root) in s for s in sources), sources  # its root disk is the volume

    gone = manager.handle(
        ComputeRequest(request_id="req-bfv-del", host="volume-host", operation="destroy", instances=[inst])
    )
    assert gone.results[0].ok
    assert inst.uuid not in drv.list_instances()
    assert storage.lookup(volume_name(root)) is not None  # kept, with its data, for another server
    drv.delete_volume(root)
