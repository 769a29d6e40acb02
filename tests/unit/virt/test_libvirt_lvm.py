"""Volumes on an LVM volume group, without a daemon: the pool and volume XML, the block disk,
and which pool a host's options choose."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from novakit import exceptions
from novakit.host.messages import VolumeSpec
from novakit.virt.libvirt import config as vconfig
from novakit.virt.libvirt.lvm import (
    LogicalPoolConfig,
    LogicalStorage,
    LogicalVolumeConfig,
    check_volume_group_name,
    pool_source,
    volume_group_names,
)
from novakit.virt.libvirt.volumes import VolumePool

HOSTILE = "a</name><path>/etc</path><name>b"


def test_a_logical_pool_names_its_volume_group_as_source_and_dev_as_target() -> None:
    pool = ET.fromstring(LogicalPoolConfig("novakit-volumes", "vg-data").to_xml())
    assert pool.get("type") == "logical"
    assert pool.findtext("name") == "novakit-volumes"
    assert pool.findtext("source/name") == "vg-data"
    assert pool.find("source/format").get("type") == "lvm2"
    assert pool.findtext("target/path") == "/dev/vg-data"
    assert pool.find("source/device") is None  # nothing for libvirt to build a group from


def test_a_logical_volume_is_thick_with_no_format_and_no_permissions() -> None:
    vol = ET.fromstring(LogicalVolumeConfig("volume-1", 10 << 30).to_xml())
    assert vol.get("type") == "block"
    assert vol.findtext("name") == "volume-1"
    assert (vol.findtext("capacity"), vol.find("capacity").get("unit")) == (str(10 << 30), "bytes")
    assert vol.findtext("allocation") == str(10 << 30)  # less would make a sparse snapshot LV
    assert vol.find("target") is None


def test_pool_names_stay_text() -> None:
    xml = LogicalPoolConfig(HOSTILE, "vg0").to_xml()
    assert HOSTILE not in xml
    assert ET.fromstring(xml).findtext("name") == HOSTILE
    assert [e.text for e in ET.fromstring(LogicalVolumeConfig(HOSTILE, 1).to_xml()).iter("name")] == [HOSTILE]


@pytest.mark.parametrize("name", ["vg0", "ubuntu-vg", "data_1.fast+x"])
def test_volume_group_names_lvm_accepts(name: str) -> None:
    assert check_volume_group_name(name) == name


@pytest.mark.parametrize("name", ["", "../etc", "vg/x", "-vg", ".", "..", "vg 0", "x" * 128])
def test_other_volume_group_names_are_a_config_error_naming_the_option(name: str) -> None:
    with pytest.raises(exceptions.ConfigError) as err:
        check_volume_group_name(name)
    message = err.value.format_message()
    assert message.startswith(f"Configuration error in volume_group: {name!r} is not a volume group name")


def test_a_volume_on_a_block_device_is_a_block_disk() -> None:
    disk = vconfig.GuestDisk(
        "/dev/vg0/volume-1", "vdc", driver_type="raw", serial="volume-1", source_type="block"
    ).to_element()
    assert disk.get("type") == "block"
    assert disk.get("device") == "disk"
    assert disk.find("source").attrib == {"dev": "/dev/vg0/volume-1"}
    assert disk.find("driver").attrib == {"name": "qemu", "type": "raw"}
    file_disk = vconfig.GuestDisk("/v/volume-1", "vdc").to_element()
    assert (file_disk.get("type"), file_disk.find("source").attrib) == ("file", {"file": "/v/volume-1"})


def test_the_groups_libvirt_finds_and_a_pools_source_are_read_from_its_xml() -> None:
    sources = (
        "<sources><source><device path='/dev/sdb1'/><name>vg1</name><format type='lvm2'/></source>"
        "<source><device path='/dev/sdc1'/><name>vg0</name></source>"
        "<source><device path='/dev/sdd1'/><name>vg1</name></source></sources>"
    )
    assert volume_group_names(sources) == ["vg0", "vg1"]
    assert volume_group_names("<sources/>") == []
    assert pool_source(LogicalPoolConfig("p", "vg0").to_xml()) == ("logical", "vg0")
    assert pool_source("<pool type='dir'><name>p</name><target><path>/x</path></target></pool>") == (
        "dir",
        None,
    )


def _pool(tmp_path: Path, volume_group: str | None) -> VolumePool:
    # Nothing reaches libvirt until a volume is asked for: no module, no connection.
    return VolumePool(
        None, lambda: None, "novakit-volumes", tmp_path / "volumes", tmp_path, volume_group, host="h1"
    )


def test_without_a_volume_group_volumes_are_files_in_the_dir_pool_in_the_format_asked(tmp_path: Path) -> None:
    pool = _pool(tmp_path, None)
    assert not pool.logical
    assert not isinstance(pool.storage, LogicalStorage)
    assert pool.storage.pool_path == str(tmp_path / "volumes")
    assert pool.format_of(VolumeSpec(id="v", size_gb=1, format="qcow2")) == "qcow2"
    assert pool.format_of(VolumeSpec(id="v", size_gb=1, format="raw")) == "raw"


def test_with_a_volume_group_volumes_are_raw_lvs_in_its_logical_pool(tmp_path: Path) -> None:
    pool = _pool(tmp_path, "vg0")
    assert pool.logical
    assert isinstance(pool.storage, LogicalStorage)
    assert (pool.storage.volume_group, pool.storage.pool_path) == ("vg0", "/dev/vg0")
    assert pool.format_of(VolumeSpec(id="v", size_gb=1, format="qcow2")) == "raw"


def test_the_driver_option_chooses_the_pool(tmp_path: Path) -> None:
    pytest.importorskip("libvirt")
    from novakit.virt.driver import load_driver
    from novakit.virt.libvirt.driver import LibvirtDriver

    base = {"uri": "test:///default", "instances_path": str(tmp_path)}
    plain = load_driver("libvirt", "h1", base)
    lvm = load_driver("libvirt", "h1", {**base, "volume_group": "vg0"})
    assert isinstance(plain, LibvirtDriver) and isinstance(lvm, LibvirtDriver)
    assert (plain.volume_pool.logical, lvm.volume_pool.logical) == (False, True)
    with pytest.raises(exceptions.ConfigError, match="volume_group: '/dev/vg0' is not a volume group name"):
        load_driver("libvirt", "h1", {**base, "volume_group": "/dev/vg0"})


class _LibvirtError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message

    def get_error_code(self) -> int:
        return self.code

    def get_error_message(self) -> str:
        return self.message


class _Libvirt:
    """The few names of libvirt-python that LogicalStorage uses."""

    libvirtError = _LibvirtError
    VIR_ERR_NO_STORAGE_POOL = 49
    VIR_CONNECT_LIST_STORAGE_POOLS_LOGICAL = 1 << 9


class _Pool:
    """A pool that will not start (vgchange fails); it has no ``build`` and no ``delete``."""

    def __init__(self, conn: _Connection, xml: str) -> None:
        self.conn, self.xml = conn, xml

    def isActive(self) -> bool:  # noqa: N802 (libvirt's name)
        return False

    def create(self, flags: int) -> None:
        raise _LibvirtError(1, 'Volume group "vg0" not found\n')

    def undefine(self) -> None:
        self.conn.defined.remove(self)


class _Connection:
    def __init__(self) -> None:
        self.defined: list[_Pool] = []

    def storagePoolLookupByName(self, name: str) -> _Pool:  # noqa: N802
        raise _LibvirtError(_Libvirt.VIR_ERR_NO_STORAGE_POOL, f"no storage pool {name}")

    def listAllStoragePools(self, flags: int) -> list[_Pool]:  # noqa: N802
        return []

    def findStoragePoolSources(self, kind: str, spec: None, flags: int) -> str:  # noqa: N802
        return "<sources><source><name>vg0</name></source></sources>"

    def storagePoolDefineXML(self, xml: str, flags: int) -> _Pool:  # noqa: N802
        pool = _Pool(self, xml)
        self.defined.append(pool)
        return pool


def test_a_pool_that_will_not_start_is_undefined_again_and_said_so(tmp_path: Path) -> None:
    conn = _Connection()
    storage = LogicalStorage(_Libvirt, lambda: conn, "novakit-volumes", "vg0", "h1", tmp_path)
    with pytest.raises(exceptions.ConfigError) as err:
        storage.pool()
    assert err.value.format_message() == (
        "Configuration error in volume_group: volume group vg0 on host h1 cannot be used: libvirt could "
        'not start its pool novakit-volumes: Volume group "vg0" not found'
    )
    assert conn.defined == []  # the definition made for it is gone; nothing was built
