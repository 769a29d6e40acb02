"""Ports on libvirt networks, for real: static addresses in the guest, DHCP host entries on the host.

Two tiny guests on an isolated network of the test's own (no <forward>, no host
<ip>: the host takes no address) get the fixed IPs the spec carries from their
config drive's network-config, print them in their ready marker, and ping each
other (``novakit.ping`` metadata). The DHCP host entries are checked on a network
with an <ip> and <dhcp> that is never started, so no address is used on the host.
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

from novakit import exceptions
from novakit.host.messages import FixedIp, InstanceSpec, NetworkSpec
from novakit.virt import guest_ready_line
from novakit.virt.libvirt.config import NetworkDhcpHost
from novakit.virt.libvirt.driver import LibvirtDriver

pytestmark = pytest.mark.libvirt
BOOT_DEADLINE = float(os.environ.get("NOVAKIT_BOOT_DEADLINE", "60"))
SUBNET = "198.51.100.0/24"


def _network(conn: Any, ip_xml: str = "", start: bool = False) -> Iterator[str]:
    name = f"nk-test-{uuidlib.uuid4().hex[:8]}"
    bridge = f"nkt{uuidlib.uuid4().hex[:8]}"
    net = conn.networkDefineXML(
        f"<network><name>{name}</name><bridge name='{bridge}' stp='off'/>{ip_xml}</network>"
    )
    try:
        if start:
            net.create()
        yield name
    finally:
        if net.isActive():
            net.destroy()
        net.undefine()


@pytest.fixture
def isolated_network(system_conn: Any) -> Iterator[str]:
    """Started, but with no <forward> and no <ip>: a bare bridge between the guests."""
    yield from _network(system_conn, start=True)


@pytest.fixture
def dhcp_network(system_conn: Any) -> Iterator[str]:
    """A network with DHCP on 192.0.2.0/24, never started (so the host never holds 192.0.2.1)."""
    yield from _network(
        system_conn,
        "<ip address='192.0.2.1' prefix='24'>"
        "<dhcp><range start='192.0.2.100' end='192.0.2.200'/></dhcp></ip>",
    )


@pytest.fixture
def driver(system_conn: Any, tiny_image: Path) -> Iterator[LibvirtDriver]:
    area = Path(tempfile.mkdtemp(prefix="novakit-net-", dir=os.environ.get("NOVAKIT_TEST_AREA", "/var/tmp")))
    area.chmod(0o755)
    drv = LibvirtDriver(
        "net-host",
        {
            "uri": "qemu:///system",
            "domain_type": "qemu",
            "instances_path": str(area / "instances"),
            "image_store": str(tiny_image),
        },
    )
    drv.init_host()
    yield drv
    for uuid in drv.list_instances():
        if (area / "instances" / uuid).exists():
            drv.destroy(InstanceSpec.model_construct(uuid=uuid))
    shutil.rmtree(area, ignore_errors=True)


def _port(
    network: str, mac: str, address: str, cidr: str = SUBNET, gateway: str | None = None
) -> NetworkSpec:
    return NetworkSpec(
        type="network",
        source=network,
        mac=mac,
        port_id=str(uuidlib.uuid4()),
        fixed_ips=[FixedIp(address=address, cidr=cidr, gateway=gateway)],
    )


def _wait_for(
    driver: LibvirtDriver, instances: list[InstanceSpec], lines: dict[str, list[str]]
) -> dict[str, str]:
    """Each guest's console once it shows all its expected lines (or at the deadline)."""
    deadline = time.monotonic() + BOOT_DEADLINE
    consoles: dict[str, str] = {}
    while time.monotonic() < deadline:
        consoles = {i.uuid: driver.get_console_output(i) for i in instances}
        if all(all(line in consoles[i.uuid] for line in lines[i.uuid]) for i in instances):
            break
        time.sleep(0.5)
    return consoles


def test_two_guests_get_their_fixed_ips_and_reach_each_other(
    driver: LibvirtDriver, isolated_network: str, make_tiny: Callable[..., InstanceSpec]
) -> None:
    a_ip, b_ip = "198.51.100.10", "198.51.100.11"
    a = make_tiny(
        hostname="net-a",
        networks=[_port(isolated_network, "fa:16:3e:10:00:0a", a_ip, gateway="198.51.100.1")],
        metadata={"novakit.ping": b_ip},
    )
    b = make_tiny(
        hostname="net-b",
        networks=[_port(isolated_network, "fa:16:3e:10:00:0b", b_ip, gateway="198.51.100.1")],
        metadata={"novakit.ping": a_ip},
    )
    # spawn returns once the domain runs: both guests boot at the same time.
    driver.spawn(a)
    driver.spawn(b)
    expected = {
        a.uuid: [guest_ready_line("net-a", a.uuid, [f"{a_ip}/24"]), f"NOVAKIT-PING {b_ip} ok"],
        b.uuid: [guest_ready_line("net-b", b.uuid, [f"{b_ip}/24"]), f"NOVAKIT-PING {a_ip} ok"],
    }
    consoles = _wait_for(driver, [a, b], expected)
    for inst in (a, b):
        for line in expected[inst.uuid]:
            assert line in consoles[inst.uuid], consoles[inst.uuid][-2000:]
    # What novakit reports is the port's address, known without asking the guest.
    assert (driver.get_interface_addresses(a), driver.get_interface_addresses(b)) == ([a_ip], [b_ip])
    # The NIC carries the port's MAC, as libvirt defined it.
    for inst, mac in ((a, "fa:16:3e:10:00:0a"), (b, "fa:16:3e:10:00:0b")):
        dom = driver._conn().lookupByUUIDString(inst.uuid)
        macs = [m.get("address") for m in ET.fromstring(dom.XMLDesc(0)).findall("devices/interface/mac")]
        assert macs == [mac]
    driver.destroy(a)
    driver.destroy(b)


def _dhcp_hosts(conn: Any, network: str) -> list[NetworkDhcpHost]:
    import libvirt

    xml = conn.networkLookupByName(network).XMLDesc(libvirt.VIR_NETWORK_XML_INACTIVE)
    return [NetworkDhcpHost.from_element(h) for h in ET.fromstring(xml).findall("ip/dhcp/host")]


def test_spawn_adds_the_dhcp_host_entry_and_a_failed_spawn_or_destroy_removes_it(
    driver: LibvirtDriver,
    dhcp_network: str,
    system_conn: Any,
    make_tiny: Callable[..., InstanceSpec],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mac = "fa:16:3e:20:00:01"
    inst = make_tiny(
        hostname="dhcp-1", networks=[_port(dhcp_network, mac, "192.0.2.10", cidr="192.0.2.0/24")]
    )
    # Leftovers of earlier ports (same IP, another MAC; and a name another MAC holds) are replaced.
    driver._host.add_dhcp_host(dhcp_network, NetworkDhcpHost("fa:16:3e:20:00:99", "192.0.2.10", "old"))
    driver._host.add_dhcp_host(dhcp_network, NetworkDhcpHost("fa:16:3e:20:00:98", "192.0.2.20", "other"))
    seen_at_start: list[list[NetworkDhcpHost]] = []
    define_and_start = driver._define_and_start

    def watching(config: Any) -> Any:
        seen_at_start.append(_dhcp_hosts(system_conn, dhcp_network))
        return define_and_start(config)

    monkeypatch.setattr(driver, "_define_and_start", watching)
    # The network is never started, so the guest cannot start: spawn fails after the entry was added.
    with pytest.raises(exceptions.RescheduledError, match="not active"):
        driver.spawn(inst)
    assert seen_at_start == [
        [
            NetworkDhcpHost("fa:16:3e:20:00:98", "192.0.2.20", "other"),
            NetworkDhcpHost(mac, "192.0.2.10", "dhcp-1"),
        ]
    ]
    # Nothing left behind: the entry, the domain, the files.
    assert _dhcp_hosts(system_conn, dhcp_network) == [
        NetworkDhcpHost("fa:16:3e:20:00:98", "192.0.2.20", "other")
    ]
    assert inst.uuid not in driver.list_instances()
    assert not (driver.instances_path / inst.uuid).exists()

    # A destroy removes the entry a crashed spawn left, and a second destroy finds nothing to do.
    driver._host.add_dhcp_host(dhcp_network, NetworkDhcpHost(mac, "192.0.2.10", "dhcp-1"))
    driver.destroy(inst)
    driver.destroy(inst)
    assert _dhcp_hosts(system_conn, dhcp_network) == [
        NetworkDhcpHost("fa:16:3e:20:00:98", "192.0.2.20", "other")
    ]


def test_the_host_reports_its_libvirt_networks(driver: LibvirtDriver, dhcp_network: str) -> None:
    assert dhcp_network in (driver.get_available_resource().networks or [])


def _add_entry(network: str, mac: str, ip: str) -> None:
    """In a process of its own, as a second compute process on the host would."""
    from novakit.virt.libvirt.host import Host

    Host("race-host", "qemu:///system").add_dhcp_host(network, NetworkDhcpHost(mac, ip, None))


def test_processes_adding_entries_at_once_lose_none_and_keep_one_per_mac(
    dhcp_network: str, system_conn: Any
) -> None:
    import multiprocessing

    jobs = [(dhcp_network, f"fa:16:3e:30:00:{i:02x}", f"192.0.2.{30 + i}") for i in range(6)]
    # Two ports' worth of the same MAC: whichever comes last wins, and only one entry is left.
    jobs += [
        (dhcp_network, "fa:16:3e:30:00:ff", "192.0.2.60"),
        (dhcp_network, "fa:16:3e:30:00:ff", "192.0.2.61"),
    ]
    with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
        pool.starmap(_add_entry, jobs)
    entries = _dhcp_hosts(system_conn, dhcp_network)
    assert sorted((e.mac, e.ip) for e in entries if e.mac != "fa:16:3e:30:00:ff") == [
        (m, ip) for _, m, ip in jobs[:6]
    ]
    assert [e.ip for e in entries if e.mac == "fa:16:3e:30:00:ff"] in (["192.0.2.60"], ["192.0.2.61"])
