"""A volume in a real libvirt storage pool, hot-plugged into running tiny guests (qemu:///system, TCG).

The host writes a marker into the volume, the first guest sees the disk appear and appends its own
marker, the volume is detached from it live and attached to a second guest on the same host, which
prints both markers: the data survived the move. The waits are deadlines, not measurements.
"""

from __future__ import annotations

import contextlib
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

from novakit import exceptions
from novakit.host.messages import InstanceSpec, VolumeSpec
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
    from novakit.host.manager import ComputeManager
    from novakit.host.messages import ComputeRequest

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


# --- an LVM volume group (``volume_group``) --------------------------------------------------
#
# No machine that runs these tests has device-mapper, so no LV can really be made: a volume group
# that does not exist is asked of the real daemon (qemu:///system), and the logical pool's calls
# are made against libvirt's test driver in the daemon, which has two volume groups (testvg1,
# testvg2) and keeps LVs in memory, but can neither upload into a volume nor wipe one.


def test_a_volume_group_that_is_not_on_the_host_is_refused_and_nothing_is_left(
    system_conn: Any, host_area: Path, make_tiny: Callable[..., InstanceSpec], tiny_image: Path
) -> None:
    vg = f"novakit-no-such-vg-{uuidlib.uuid4().hex[:8]}"
    pool = f"novakit-volumes-test-{uuidlib.uuid4().hex[:8]}"
    drv = LibvirtDriver(
        "volume-host",
        {
            "uri": "qemu:///system",
            "instances_path": str(host_area / "instances"),
            "image_store": str(tiny_image),
            "volume_pool": pool,
            "volume_group": vg,
        },
    )
    with pytest.raises(exceptions.ConfigError) as err:
        drv.init_host()
    message = err.value.format_message()
    assert message.startswith(
        f"Configuration error in volume_group: volume group {vg} not found on host volume-host"
    )
    image = make_tiny().image
    for volume in (
        VolumeSpec(id=str(uuidlib.uuid4()), size_gb=1, format="raw"),
        VolumeSpec(id=str(uuidlib.uuid4()), size_gb=1, image=image),
    ):
        with pytest.raises(exceptions.ConfigError, match=f"volume group {vg} not found on host volume-host"):
            drv.create_volume(volume)
    # Nothing was defined on the daemon, nothing was written here (not even the image cache).
    with pytest.raises(drv.libvirt.libvirtError):
        system_conn.storagePoolLookupByName(pool)
    logical = system_conn.listAllStoragePools(drv.libvirt.VIR_CONNECT_LIST_STORAGE_POOLS_LOGICAL)
    assert all(ET.fromstring(p.XMLDesc(0)).findtext("source/name") != vg for p in logical)
    assert list(host_area.iterdir()) == []


@pytest.fixture
def lvm_driver(test_conn: Any, host_area: Path, tiny_image: Path) -> Iterator[LibvirtDriver]:
    """A driver whose volumes are LVs of testvg1 in the test driver, in a pool of its own name."""
    pool = f"novakit-lvm-test-{uuidlib.uuid4().hex[:8]}"
    drv = LibvirtDriver(
        "lvm-host",
        {
            "uri": "test+unix:///default",
            "instances_path": str(host_area / "instances"),
            "image_store": str(tiny_image),
            "volume_pool": pool,
            "volume_group": "testvg1",
        },
    )
    yield drv
    # The test driver keeps its pools while any connection is open: leave none of ours.
    with contextlib.suppress(drv.libvirt.libvirtError):
        defined = test_conn.storagePoolLookupByName(pool)
        if defined.isActive():
            defined.destroy()
        defined.undefine()


def _pool_xml(conn: Any, name: str) -> ET.Element:
    return ET.fromstring(conn.storagePoolLookupByName(name).XMLDesc(0))


def test_a_volume_group_gets_a_logical_pool_and_volumes_are_raw_lvs_on_block_disks(
    lvm_driver: LibvirtDriver, test_conn: Any
) -> None:
    drv = lvm_driver
    pool_name = drv.volume_pool.storage.pool_name
    drv.init_host()
    drv.init_host()  # the pool is there: used as it is
    pool = _pool_xml(test_conn, pool_name)
    assert (pool.get("type"), pool.findtext("source/name"), pool.findtext("target/path")) == (
        "logical",
        "testvg1",
        "/dev/testvg1",
    )
    assert test_conn.storagePoolLookupByName(pool_name).isActive()
    assert test_conn.storagePoolLookupByName(pool_name).autostart()
    before = drv.get_available_resource()

    # qcow2 is what the API records by default; in an LV the volume is raw all the same.
    vol = VolumeSpec(id=str(uuidlib.uuid4()), size_gb=1, format="qcow2", device_name="vdc")
    drv.create_volume(vol)
    drv.create_volume(vol)  # idempotent
    lv = drv.volume_pool.storage.lookup(volume_name(vol))
    assert lv.path() == f"/dev/testvg1/volume-{vol.id}"
    assert [int(x) for x in lv.info()[1:]] == [1 << 30, 1 << 30]  # thick: allocated in full
    bigger = vol.model_copy(update={"size_gb": 2})
    with pytest.raises(exceptions.VolumeBackendError, match="exists with another size"):
        drv.create_volume(bigger)

    disk = drv.volume_pool.disk(vol).to_element()
    assert disk.get("type") == "block"
    assert disk.find("source").attrib == {"dev": f"/dev/testvg1/volume-{vol.id}"}
    assert disk.find("driver").get("type") == "raw"
    assert disk.find("target").get("dev") == "vdc"

    # DISK_GB: the volume group's free space and novakit's LVs, beside the instances' filesystem.
    after = drv.get_available_resource()
    assert after.local_gb == before.local_gb
    assert drv.volume_pool.space() == (1 << 30, 99 << 30)  # the test driver's group: 100 GiB

    # Deleting overwrites the LV first; where that cannot be done it is kept, and said so.
    with pytest.raises(exceptions.VolumeBackendError, match="clearing its data before it is removed"):
        drv.delete_volume(vol)
    assert drv.volume_pool.storage.lookup(volume_name(vol)) is not None


def test_a_volume_from_an_image_that_cannot_be_written_into_its_lv_leaves_no_lv(
    lvm_driver: LibvirtDriver, make_tiny: Callable[..., InstanceSpec]
) -> None:
    drv = lvm_driver
    drv.init_host()
    vol = VolumeSpec(id=str(uuidlib.uuid4()), size_gb=1, image=make_tiny().image)
    # The test driver has no virStorageVolUpload: the write fails after the LV was made.
    with pytest.raises(exceptions.VolumeBackendError, match=f"creating volume-{vol.id} in pool"):
        drv.create_volume(vol)
    assert drv.volume_pool.storage.lookup(volume_name(vol)) is None


def test_a_volume_group_the_host_lacks_is_named_with_the_ones_it_has(lvm_driver: LibvirtDriver) -> None:
    drv = LibvirtDriver("lvm-host", {**lvm_driver.options, "volume_group": "testvg9"})
    with pytest.raises(exceptions.ConfigError) as err:
        drv.init_host()
    assert err.value.format_message() == (
        "Configuration error in volume_group: volume group testvg9 not found on host lvm-host "
        "(it has testvg1, testvg2); novakit uses an existing volume group and never creates one"
    )
    with pytest.raises(drv.libvirt.libvirtError):
        drv._host.get_connection().storagePoolLookupByName(drv.volume_pool.storage.pool_name)


def test_a_pool_of_that_name_that_is_not_the_groups_is_refused_and_left_alone(
    lvm_driver: LibvirtDriver, test_conn: Any, host_area: Path
) -> None:
    name = lvm_driver.volume_pool.storage.pool_name
    test_conn.storagePoolDefineXML(
        f"<pool type='dir'><name>{name}</name><target><path>{host_area}</path></target></pool>", 0
    )
    with pytest.raises(exceptions.ConfigError) as err:
        lvm_driver.init_host()
    assert err.value.format_message() == (
        f"Configuration error in volume_group: storage pool {name} on host lvm-host is a dir pool, "
        "not the logical pool of volume group testvg1; name another pool with volume_pool"
    )
    assert _pool_xml(test_conn, name).get("type") == "dir"


def test_the_logical_pool_the_host_already_has_on_the_group_is_used(
    lvm_driver: LibvirtDriver, test_conn: Any
) -> None:
    theirs = f"operators-vg2-{uuidlib.uuid4().hex[:8]}"
    test_conn.storagePoolDefineXML(
        f"<pool type='logical'><name>{theirs}</name><source><name>testvg2</name></source>"
        "<target><path>/dev/testvg2</path></target></pool>",
        0,
    )
    try:
        drv = LibvirtDriver("lvm-host", {**lvm_driver.options, "volume_group": "testvg2"})
        drv.init_host()
        assert drv.volume_pool.storage.pool_name == theirs
        with pytest.raises(drv.libvirt.libvirtError):
            test_conn.storagePoolLookupByName(lvm_driver.options["volume_pool"])  # no second pool
        vol = VolumeSpec(id=str(uuidlib.uuid4()), size_gb=1, format="raw")
        drv.create_volume(vol)
        assert drv.volume_pool.storage.lookup(volume_name(vol)).path() == f"/dev/testvg2/volume-{vol.id}"
    finally:
        pool = test_conn.storagePoolLookupByName(theirs)
        if pool.isActive():
            pool.destroy()
        pool.undefine()
