"""Brownfield import on a real libvirtd: a domain defined with libvirt directly becomes a server.

The domain is defined the way an operator's ``virt-install`` would leave it (its own
name, a qcow2 disk of its own, shut off), imported through novakit with its claims,
started, and deleted through novakit: the domain is gone, its disk file stays
(novakit did not make it). Cheap on purpose: no kernel, the guest only sits in its
firmware for the second it runs.
"""

from __future__ import annotations

import subprocess
import uuid as uuidlib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from novakit.catalog import flavors
from novakit.compute.api import API
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.fleet import hosts
from novakit.fleet.importer import import_guests
from novakit.heal.manager import heal
from novakit.placement import api as placement
from novakit.virt.driver import load_driver

pytestmark = pytest.mark.libvirt


def _domain_xml(name: str, uuid: str, disk: Path) -> str:
    dom = ET.Element("domain", type="qemu")
    ET.SubElement(dom, "name").text = name
    ET.SubElement(dom, "uuid").text = uuid
    ET.SubElement(dom, "memory", unit="MiB").text = "64"
    ET.SubElement(dom, "vcpu").text = "1"
    os_elem = ET.SubElement(dom, "os")
    ET.SubElement(os_elem, "type", arch="x86_64").text = "hvm"
    devices = ET.SubElement(dom, "devices")
    d = ET.SubElement(devices, "disk", type="file", device="disk")
    ET.SubElement(d, "driver", name="qemu", type="qcow2")
    ET.SubElement(d, "source", file=str(disk))
    ET.SubElement(d, "target", dev="vda", bus="virtio")
    return ET.tostring(dom, encoding="unicode")


def test_a_domain_defined_outside_novakit_is_imported_started_and_deleted(
    system_conn: Any, host_area: Path, sqlite_db: Database, tmp_path: Path
) -> None:
    import libvirt

    conf = load_config(db_url=sqlite_db.url, state_dir=tmp_path / "state", quota={"instances": -1})
    admin = RequestContext.admin()
    host = f"import-host-{uuidlib.uuid4().hex[:6]}"
    info = {
        "driver": "libvirt",
        "options": {"uri": "qemu:///system", "domain_type": "qemu", "instances_path": str(host_area / "i")},
        "transport": "local",
    }
    driver = load_driver("libvirt", host, info["options"])
    driver.init_host()
    hosts.register_host(sqlite_db, conf, host, driver.get_available_resource(), info)
    flavors.create(sqlite_db, admin, {"name": "m1.nano", "vcpus": 1, "memory_mb": 192, "root_gb": 1})

    disk = host_area / "legacy.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), "1G"], check=True)
    disk.chmod(0o644)
    name, uuid = f"nk-legacy-{uuidlib.uuid4().hex[:8]}", str(uuidlib.uuid4())
    dom = system_conn.defineXML(_domain_xml(name, uuid, disk))
    try:
        # Only our domain: the daemon is shared, and every other domain on it is someone else's.
        dry = import_guests(sqlite_db, conf, host, ctx=admin, guests=[name], dry_run=True)
        assert [
            (g.name, g.vcpus, g.memory_mb, g.root_gb, g.outcome, g.flavor, g.fits) for g in dry.guests
        ] == [(name, 1, 64, 1, "would_import", "imported-1c-64m-1g", True)]
        assert not sqlite_db.engine.connect().exec_driver_sql("SELECT * FROM instances").all()

        [g] = import_guests(sqlite_db, conf, host, ctx=admin, guests=[uuid]).guests
        assert (g.outcome, g.vm_state, g.flavor_created) == ("imported", "stopped", True), g.reason
        api = API(sqlite_db, conf)
        server = api.get(admin, uuid)
        assert (server["name"], server["status"], server["host"]) == (name, "SHUTOFF", host)
        provider = placement.get_provider(sqlite_db, host).uuid
        assert placement.get_allocations_for_consumer(sqlite_db, uuid) == {
            provider: {"VCPU": 1, "MEMORY_MB": 64, "DISK_GB": 1}
        }
        assert uuid in driver.list_instances()  # novakit's now, under its own name
        assert all(u.uuid != uuid for u in driver.list_unmanaged())
        assert [c for c in heal(sqlite_db, conf, hosts=[host]).corrections if c.instance == uuid] == []

        assert api.start(admin, uuid)["status"] == "ACTIVE"
        assert dom.isActive()
        api.delete(admin, uuid)
        with pytest.raises(libvirt.libvirtError):
            system_conn.lookupByUUIDString(uuid)
        assert disk.exists()  # not novakit's file
        assert placement.get_allocations_for_consumer(sqlite_db, uuid) == {}
    finally:
        try:
            left = system_conn.lookupByUUIDString(uuid)
        except libvirt.libvirtError:
            left = None
        if left is not None:
            if left.isActive():
                left.destroy()
            left.undefine()
