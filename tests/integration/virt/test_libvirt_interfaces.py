"""A port attached to a running guest and detached again, end to end on a real libvirtd.

A server is booted through the Python API onto a host of the system libvirtd, on a novakit
network backed by an isolated libvirt network of the test's own; a second port is attached on
the same network (``novakit.compute.interfaces``): its NIC is in the running domain and in its
definition, with the port's MAC (and its network filter where the host filters ports). Detached,
it leaves both and the port it was made with is gone. A stopped server gets a port in its
definition only, and has it running once started.
"""

from __future__ import annotations

import contextlib
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from novakit import exceptions
from novakit.compute import interfaces
from novakit.compute.api import API
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.fleet import hosts
from novakit.network import networks, ports, subnets
from novakit.virt import GUEST_READY_MARKER
from novakit.virt.driver import load_driver
from novakit.virt.libvirt import nwfilter
from tests.e2e.testbed import catalog

pytestmark = pytest.mark.libvirt
DEADLINE = 90.0
INACTIVE = 2  # libvirt.VIR_DOMAIN_XML_INACTIVE


@pytest.fixture
def libvirt_network(system_conn: Any) -> Iterator[str]:
    suffix = uuidlib.uuid4().hex[:8]
    name = f"nk-if-{suffix}"
    net = system_conn.networkDefineXML(
        f"<network><name>{name}</name><bridge name='nki{suffix}' stp='off'/></network>"
    )
    net.create()
    try:
        yield name
    finally:
        if net.isActive():
            net.destroy()
        net.undefine()


def _eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"not {what} after {DEADLINE:.0f} s")


def _fresh() -> RequestContext:
    return RequestContext.admin()


def test_a_port_is_hot_plugged_into_a_running_guest_and_out_again(
    system_conn: Any,
    host_area: Path,
    sqlite_db: Database,
    tmp_path: Path,
    tiny_image: Path,
    libvirt_network: str,
) -> None:
    conf = load_config(db_url=sqlite_db.url, state_dir=tmp_path / "state", quota={"instances": -1})
    admin = RequestContext.admin()
    host = f"if-host-{uuidlib.uuid4().hex[:6]}"
    info: dict[str, Any] = {
        "driver": "libvirt",
        "options": {
            "uri": "qemu:///system",
            "domain_type": "qemu",
            "instances_path": str(host_area / "i"),
            "image_store": str(tiny_image),
        },
        "transport": "local",
    }
    driver = load_driver("libvirt", host, info["options"])
    driver.init_host()
    hosts.register_host(sqlite_db, conf, host, driver.get_available_resource(), info)
    catalog.register(sqlite_db, tiny_image)
    networks.create(sqlite_db, admin, {"name": "lan", "source": libvirt_network})
    subnets.create(sqlite_db, admin, {"name": "lan-v4", "network": "lan", "cidr": "198.51.100.0/24"})
    api = API(sqlite_db, conf)
    server: dict[str, Any] | None = None
    try:
        [server] = api.create(
            admin, {"name": "nk-if", "flavor": "tb.small", "image": "tiny", "networks": [{"net_id": "lan"}]}
        )
        assert server["status"] == "ACTIVE", server.get("fault")
        dom = system_conn.lookupByUUIDString(server["id"])
        # Hot-plugging asks the guest's kernel (ACPI): it must have booted to answer.
        console = host_area / "i" / server["id"] / "console.log"
        _eventually(
            lambda: console.exists() and GUEST_READY_MARKER in console.read_text(errors="replace"),
            "the guest booted",
        )

        added = interfaces.attach(api, _fresh(), server["id"], network="lan", fixed_ip="198.51.100.60")
        mac = added["mac_address"]
        assert added["status"] == "ACTIVE"
        assert mac in dom.XMLDesc(0) and mac in dom.XMLDesc(INACTIVE)
        if driver.port_filter_mode() == "enforced":
            assert nwfilter.filter_name(added["id"]) in dom.XMLDesc(0)
        assert "198.51.100.60" in api.get(admin, server["id"])["addresses"]

        interfaces.detach(api, _fresh(), server["id"], added["id"])
        _eventually(lambda: mac not in dom.XMLDesc(0), "the NIC gone from the running guest")
        assert mac not in dom.XMLDesc(INACTIVE)
        with pytest.raises(exceptions.PortNotFound):
            ports.show(sqlite_db, admin, added["id"])

        # A stopped server: in its definition only, and there once it runs.
        api.stop(admin, server["id"])
        cold = interfaces.attach(api, _fresh(), server["id"], network="lan")
        assert cold["mac_address"] in dom.XMLDesc(INACTIVE) and not dom.isActive()
        api.start(admin, server["id"])
        assert cold["mac_address"] in dom.XMLDesc(0)
    finally:
        if server is not None:
            with contextlib.suppress(Exception):  # clean-up after a failure already reported
                api.delete(admin, server["id"])
