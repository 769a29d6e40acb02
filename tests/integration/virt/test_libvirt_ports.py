"""A boot on a novakit network, end to end on a real libvirtd: the addresses novakit chose, in the guests.

Two servers are booted through the Python API onto a host of the system libvirtd, on a
novakit network backed by an isolated libvirt network of the test's own (no <forward>,
no host <ip>: the host takes no address). Each server's port and fixed IP are known as
soon as the API answers; each guest applies that address from its config drive and
prints it in its ready marker; the second guest reaches the first (busybox ping, asked
for by the ``novakit.ping`` metadata). Deleting the servers frees the addresses.
"""

from __future__ import annotations

import contextlib
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from novakit.catalog import flavors
from novakit.compute.api import API
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.fleet import hosts
from novakit.network import networks, ports, subnets
from novakit.virt import guest_ready_line
from novakit.virt.driver import load_driver
from tests.e2e.testbed import catalog

pytestmark = pytest.mark.libvirt
DEADLINE = 90.0


@pytest.fixture
def libvirt_network(system_conn: Any) -> Iterator[str]:
    """A bare bridge between the guests: started, with no <forward> and no <ip>."""
    suffix = uuidlib.uuid4().hex[:8]
    name = f"nk-ports-{suffix}"
    net = system_conn.networkDefineXML(
        f"<network><name>{name}</name><bridge name='nkp{suffix}' stp='off'/></network>"
    )
    net.create()
    try:
        yield name
    finally:
        if net.isActive():
            net.destroy()
        net.undefine()


def _console(host_area: Path, server: dict[str, Any], wanted: str) -> str:
    path = host_area / "i" / server["id"] / "console.log"
    deadline = time.monotonic() + DEADLINE
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if wanted in text:
            break
        time.sleep(0.5)
    return text


def test_two_servers_get_the_fixed_ips_novakit_chose_and_one_reaches_the_other(
    system_conn: Any,
    host_area: Path,
    sqlite_db: Database,
    tmp_path: Path,
    tiny_image: Path,
    libvirt_network: str,
) -> None:
    conf = load_config(db_url=sqlite_db.url, state_dir=tmp_path / "state", quota={"instances": -1})
    admin = RequestContext.admin()
    host = f"ports-host-{uuidlib.uuid4().hex[:6]}"
    info = {
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
    resources = driver.get_available_resource()
    assert resources.networks is not None and libvirt_network in resources.networks
    hosts.register_host(sqlite_db, conf, host, resources, info)
    catalog.register(sqlite_db, tiny_image)
    assert flavors.list_flavors(sqlite_db)
    networks.create(sqlite_db, admin, {"name": "lan", "source": libvirt_network})
    subnets.create(sqlite_db, admin, {"name": "lan-v4", "network": "lan", "cidr": "198.51.100.0/24"})

    api = API(sqlite_db, conf)
    servers: list[dict[str, Any]] = []
    try:
        [first] = api.create(
            admin, {"name": "nk-a", "flavor": "tb.small", "image": "tiny", "networks": [{"net_id": "lan"}]}
        )
        servers.append(first)
        assert first["status"] == "ACTIVE", first.get("fault")
        [(mac_a, ip_a)] = [(n["mac"], n["fixed_ips"][0]) for n in first["nics"]]
        [second] = api.create(
            admin,
            {
                "name": "nk-b",
                "flavor": "tb.small",
                "image": "tiny",
                "networks": [{"net_id": "lan", "fixed_ip": "198.51.100.77"}],
                "metadata": {"novakit.ping": ip_a},
            },
        )
        servers.append(second)
        assert (first["status"], second["status"]) == ("ACTIVE", "ACTIVE")
        assert ip_a == "198.51.100.2"  # the first address of the pool (the gateway is .1)
        assert [n["fixed_ips"] for n in second["nics"]] == [["198.51.100.77"]]

        # The guests configured what novakit chose, on the NIC with the port's MAC.
        ready_a = guest_ready_line(first["hostname"], first["id"], [f"{ip_a}/24"])
        ready_b = guest_ready_line(second["hostname"], second["id"], ["198.51.100.77/24"])
        assert ready_a in _console(host_area, first, ready_a)
        console_b = _console(host_area, second, f"NOVAKIT-PING {ip_a} ")
        assert ready_b in console_b
        assert f"NOVAKIT-PING {ip_a} ok" in console_b, console_b[-2000:]
        dom = system_conn.lookupByUUIDString(first["id"])
        assert mac_a in dom.XMLDesc() and libvirt_network in dom.XMLDesc()

        for server in servers:
            api.delete(admin, server["id"])
        servers.clear()
        assert ports.list_ports(sqlite_db, admin) == []
    finally:
        for server in servers:
            with contextlib.suppress(Exception):  # clean-up after a failure already reported
                api.delete(admin, server["id"])
