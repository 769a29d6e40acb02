"""LibvirtDriver against libvirt's test driver, through the daemon (test+unix:///default).

The test driver runs no QEMU, so these tests cover what novakit asks of libvirt
(definitions, states, ownership, cleanup) quickly; test_libvirt_boot.py boots for real.
"""

from __future__ import annotations

import hashlib
import ipaddress
import subprocess
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from novakit import exceptions
from novakit.compute.states import PowerState
from novakit.host.messages import FlavorSpec, ImageSpec, InstanceSpec
from novakit.virt.driver import load_driver
from novakit.virt.libvirt.config import NOVAKIT_NS, InstanceMetadata
from novakit.virt.libvirt.driver import LibvirtDriver

pytestmark = pytest.mark.libvirt
HOSTILE = "a</name><title>x</title><name>b"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def store(host_area: Path) -> Path:
    store = host_area / "images"
    store.mkdir()
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(store / "disk.qcow2"), "16M"], check=True)
    (store / "raw.img").write_bytes(b"\0" * 4096)
    return store


@pytest.fixture
def driver(test_conn: Any, host_area: Path, store: Path) -> Iterator[LibvirtDriver]:
    drv = load_driver(
        "libvirt",
        "test-host",
        {
            "uri": "test+unix:///default",
            "instances_path": str(host_area / "instances"),
            "image_store": str(store),
        },
    )
    assert isinstance(drv, LibvirtDriver)
    drv.init_host()
    spawned_before = set(drv.list_instances())
    yield drv
    # The test driver keeps its domains as long as libvirtd runs: leave none of ours.
    for uuid in set(drv.list_instances()) - spawned_before:
        drv.destroy(_stub(uuid))


def _stub(uuid: str) -> InstanceSpec:
    return InstanceSpec(
        uuid=uuid,
        name="x",
        hostname="x",
        project_id="p",
        user_id="u",
        flavor=FlavorSpec(name="f", vcpus=1, memory_mb=64, root_gb=1),
        image=ImageSpec(id="i"),
    )


def make(store: Path, **overrides: Any) -> InstanceSpec:
    data: dict[str, Any] = {
        "uuid": str(uuidlib.uuid4()),
        "name": "vm",
        "hostname": "vm-1",
        "project_id": "p-test",
        "user_id": "u-test",
        "flavor": FlavorSpec(name="m1.small", vcpus=2, memory_mb=128, root_gb=1, ephemeral_gb=1, swap=32),
        "image": ImageSpec(
            id="disk", disk_format="qcow2", location="disk.qcow2", checksum=sha256(store / "disk.qcow2")
        ),
    }
    data.update(overrides)
    return InstanceSpec(**data)


def test_spawn_power_cycle_and_destroy(driver: LibvirtDriver, store: Path, test_conn: Any) -> None:
    inst = make(store)
    driver.spawn(inst)
    inst_dir = driver.instances_path / inst.uuid
    assert sorted(p.name for p in inst_dir.iterdir()) == ["disk", "disk.config", "disk.eph0", "disk.swap"]
    assert driver.get_info(inst).state is PowerState.RUNNING
    assert driver.list_instances()[inst.uuid] is PowerState.RUNNING
    # libvirt's own "test" domain is not novakit's and is not listed.
    assert "test" in [d.name() for d in test_conn.listAllDomains()]
    assert all(len(uuid) == 36 for uuid in driver.list_instances())
    steps = [
        (driver.pause, PowerState.PAUSED),
        (driver.unpause, PowerState.RUNNING),
        (driver.suspend, PowerState.SUSPENDED),
        (driver.resume, PowerState.RUNNING),
        (lambda i: driver.power_off(i, timeout=5, retry_interval=1), PowerState.SHUTDOWN),
        (driver.power_on, PowerState.RUNNING),
        (lambda i: driver.reboot(i, "SOFT"), PowerState.RUNNING),
        (lambda i: driver.reboot(i, "HARD"), PowerState.RUNNING),
        (driver.suspend, PowerState.SUSPENDED),
        (lambda i: driver.power_off(i, timeout=0), PowerState.SHUTDOWN),
    ]
    for op, expected in steps:
        op(inst)
        assert driver.get_info(inst).state is expected
    driver.destroy(inst)
    driver.destroy(inst)
    assert inst.uuid not in driver.list_instances()
    assert not inst_dir.exists()
    with pytest.raises(exceptions.InstanceNotFound):
        driver.get_info(inst)


def test_a_hostile_name_is_stored_as_text(driver: LibvirtDriver, store: Path, test_conn: Any) -> None:
    inst = make(store, name=HOSTILE)
    driver.spawn(inst)
    dom = test_conn.lookupByUUIDString(inst.uuid)
    desc = ET.fromstring(dom.XMLDesc(0))
    assert [e.text for e in desc.findall("name")] == [f"novakit-{inst.uuid}"]
    assert desc.findtext("title") == HOSTILE
    meta = InstanceMetadata.from_xml(dom.metadata(2, NOVAKIT_NS))  # 2 = VIR_DOMAIN_METADATA_ELEMENT
    assert (meta.name, meta.uuid, meta.project_id, meta.flavor_name, meta.vcpus) == (
        HOSTILE,
        inst.uuid,
        "p-test",
        "m1.small",
        2,
    )


def test_power_operations_refuse_wrong_states(driver: LibvirtDriver, store: Path) -> None:
    inst = make(store)
    driver.spawn(inst)
    driver.power_off(inst, timeout=0)
    with pytest.raises(exceptions.InstanceNotRunning):
        driver.pause(inst)
    with pytest.raises(exceptions.ComputeError, match="cannot resume .* SHUTDOWN, not SUSPENDED"):
        driver.resume(inst)
    with pytest.raises(exceptions.ComputeError, match="cannot unpause .* SHUTDOWN, not PAUSED"):
        driver.unpause(inst)


def test_a_second_spawn_of_one_uuid_is_refused(driver: LibvirtDriver, store: Path) -> None:
    inst = make(store)
    driver.spawn(inst)
    driver.pause(inst)
    with pytest.raises(exceptions.BuildAbortError, match="already exists"):
        driver.spawn(inst)
    assert driver.get_info(inst).state is PowerState.PAUSED
    assert (driver.instances_path / inst.uuid / "disk").exists()


def test_missing_instances_are_not_found_and_destroy_is_idempotent(
    driver: LibvirtDriver, store: Path
) -> None:
    inst = make(store)
    for op in (driver.get_info, driver.power_on, driver.pause, driver.get_console_output):
        with pytest.raises(exceptions.InstanceNotFound):
            op(inst)
    driver.destroy(inst)


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (dict(checksum="0" * 64), "checksum mismatch"),
        (dict(location="missing.qcow2"), "does not exist"),
        (dict(location="/etc/hostname", checksum=None), "outside the image store"),
        (dict(location="raw.img", checksum=None), "declared disk_format 'qcow2' but the file is raw"),
    ],
)
def test_bad_images_abort_the_build_and_leave_nothing(
    driver: LibvirtDriver, store: Path, test_conn: Any, image: dict[str, Any], message: str
) -> None:
    base = {
        "id": "bad",
        "disk_format": "qcow2",
        "location": "disk.qcow2",
        "checksum": sha256(store / "disk.qcow2"),
    }
    inst = make(store, image=ImageSpec(**{**base, **image}))
    with pytest.raises(exceptions.BuildAbortError, match=message):
        driver.spawn(inst)
    assert inst.uuid not in driver.list_instances()
    assert not (driver.instances_path / inst.uuid).exists()
    assert "bad" not in driver.get_available_resource().cached_images


def test_flavor_smaller_than_image_aborts(driver: LibvirtDriver, store: Path) -> None:
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(store / "big.qcow2"), "2G"], check=True)
    image = ImageSpec(
        id="big", disk_format="qcow2", location="big.qcow2", checksum=sha256(store / "big.qcow2")
    )
    inst = make(store, image=image)
    with pytest.raises(exceptions.BuildAbortError, match="smaller than image big"):
        driver.spawn(inst)
    assert not (driver.instances_path / inst.uuid).exists()


def test_resources_and_addresses(driver: LibvirtDriver, store: Path) -> None:
    inst = make(store)
    driver.spawn(inst)
    res = driver.get_available_resource()
    assert res.hypervisor_type == "QEMU"
    assert res.vcpus > 0 and res.memory_mb > 0 and res.local_gb > 0
    assert res.vcpus_used >= 2 and res.memory_mb_used >= 128
    assert "disk" in res.cached_images
    # The test driver invents one lease per NIC; what matters is that they come back as addresses.
    addresses = driver.get_interface_addresses(inst)
    assert [ipaddress.ip_address(a).version for a in addresses] == [4]
