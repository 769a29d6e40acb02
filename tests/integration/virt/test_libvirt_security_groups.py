"""Security groups enforced by libvirt's network filters, for real (system libvirtd, TCG guests).

Three servers are booted through the Python API onto one novakit network backed by a bare
bridge of the test's own (``test_libvirt_ports.libvirt_network``), each with a fixed IP:
``a`` and ``b`` in the project's ``default`` group (Neutron's: ingress only from its members),
``c`` in a group of its own. Each guest pings one address after its ready marker, trying for a
few minutes (``novakit.ping``): ``a`` and ``b`` reach each other; ``c`` cannot reach ``a`` until
an ICMP ingress rule from a prefix holding ``c``'s address is added to ``default``, and then
does, without a reboot. A probe on the bridge (a network namespace with an address in the same
prefix: it can ask again, the guest's ping cannot) sees the same: refused, let in by the rule,
refused again once the rule is deleted. ``a`` learns its new member ``b`` from ``b``'s build alone
(no push by hand, no heal). A port that leaves its last group keeps port security: its filter
drops everything (Neutron). No domain is restarted meanwhile. Once ``a`` is deleted, ``b``'s
filter no longer lets ``a``'s address in; once the servers are deleted, heal removes their ports'
filters.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from novakit.compute.api import API
from novakit.compute.rpc import ComputeRPC
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.fleet import hosts
from novakit.heal.manager import heal
from novakit.network import filter_sync, networks, subnets
from novakit.network import security_groups as sg
from novakit.network.filter_rules import canonical
from novakit.virt import GUEST_READY_MARKER
from novakit.virt.driver import load_driver
from novakit.virt.libvirt import nwfilter
from tests.e2e.testbed import catalog
from tests.integration.virt.test_libvirt_ports import _console, libvirt_network  # noqa: F401

pytestmark = pytest.mark.libvirt
A, B, C = "198.51.100.10", "198.51.100.11", "198.51.100.77"
C_PREFIX = "198.51.100.64/26"  # holds c's address and the probe's
PROBE = "198.51.100.100"
REFUSED_FOR = 8.0  # seconds c keeps trying in vain before the rule is added


@contextlib.contextmanager
def _probe(bridge: str, address: str) -> Iterator[Callable[[str], bool]]:
    """A network namespace on the bridge with ``address``: ``reaches(ip)`` pings once."""
    tag = uuidlib.uuid4().hex[:6]
    ns, outer, inner = f"nk-sg-{tag}", f"nksgh{tag}", f"nksgn{tag}"

    def run(*args: str) -> None:
        subprocess.run(args, check=True, capture_output=True)

    run("ip", "netns", "add", ns)
    try:
        run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        run("ip", "link", "set", inner, "netns", ns)
        run("ip", "link", "set", outer, "master", bridge, "up")
        run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", inner)
        run("ip", "-n", ns, "link", "set", inner, "up")

        # The host may have no ping of its own (a minimal Debian): busybox's then.
        ping_cmd = ["ping"] if shutil.which("ping") else ["busybox", "ping"]

        def reaches(target: str) -> bool:
            ping = ["ip", "netns", "exec", ns, *ping_cmd, "-c", "1", "-W", "1", target]
            return subprocess.run(ping, capture_output=True).returncode == 0

        yield reaches
    finally:
        subprocess.run(["ip", "link", "del", outer], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _eventually(check: Callable[[], bool], seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return False


def test_groups_decide_who_reaches_whom_and_a_rule_change_applies_live(
    system_conn: Any,
    host_area: Path,
    sqlite_db: Database,
    tmp_path: Path,
    tiny_image: Path,
    libvirt_network: str,  # noqa: F811
) -> None:
    conf = load_config(db_url=sqlite_db.url, state_dir=tmp_path / "state", quota={"instances": -1})
    admin = RequestContext.admin()
    host = f"sg-host-{uuidlib.uuid4().hex[:6]}"
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
    assert resources.security_groups == "enforced"
    hosts.register_host(sqlite_db, conf, host, resources, info)
    catalog.register(sqlite_db, tiny_image)
    networks.create(sqlite_db, admin, {"name": "lan", "source": libvirt_network})
    subnets.create(sqlite_db, admin, {"name": "lan-v4", "network": "lan", "cidr": "198.51.100.0/24"})
    sg.create_group(sqlite_db, conf, admin, {"name": "others"})
    rpc = ComputeRPC(sqlite_db, conf)

    def push(ports: list[str]) -> None:
        assert filter_sync.push_filters(rpc, admin.request_id, ports) == {}

    api = API(sqlite_db, conf)
    servers: dict[str, dict[str, Any]] = {}

    def create(name: str, ip: str, group: str, ping: str) -> dict[str, Any]:
        [server] = api.create(
            admin,
            {
                "name": f"nk-sg-{name}",
                "flavor": "tb.small",
                "image": "tiny",
                "networks": [{"net_id": "lan", "fixed_ip": ip}],
                "security_groups": [group],
                "metadata": {"novakit.ping": ping},
            },
        )
        servers[name] = server
        assert server["status"] == "ACTIVE", server.get("fault")
        return server

    bridge = system_conn.networkLookupByName(libvirt_network).bridgeName()
    port_ids: list[str] = []
    try:
        a = create("a", A, "default", ping=B)
        b = create("b", B, "default", ping=A)
        port_ids += [n["port_id"] for s in (a, b) for n in s["nics"]]
        # b joined default after a was built: a's filter learnt its new member from b's build.
        assert f"NOVAKIT-PING {B} ok" in _console(host_area, a, f"NOVAKIT-PING {B} ")
        assert f"NOVAKIT-PING {A} ok" in _console(host_area, b, f"NOVAKIT-PING {A} ")
        a_xml = system_conn.lookupByUUIDString(a["id"]).XMLDesc()
        assert f"filter='{nwfilter.filter_name(port_ids[0])}'" in a_xml

        c = create("c", C, "others", ping=A)
        port_ids += [n["port_id"] for n in c["nics"]]
        domain_ids = {n: system_conn.lookupByUUIDString(s["id"]).ID() for n, s in servers.items()}
        with _probe(bridge, PROBE) as reaches:
            assert GUEST_READY_MARKER in _console(host_area, c, GUEST_READY_MARKER)
            time.sleep(REFUSED_FOR)
            assert f"NOVAKIT-PING {A} ok" not in _console(host_area, c, GUEST_READY_MARKER)
            assert not reaches(A)

            rule = sg.create_rule(
                sqlite_db,
                conf,
                admin,
                {"security_group": "default", "protocol": "icmp", "remote_ip_prefix": C_PREFIX},
                on_change=push,
            )
            assert rule is not None
            console_c = _console(host_area, c, f"NOVAKIT-PING {A} ok")
            assert f"NOVAKIT-PING {A} ok" in console_c, console_c[-2000:]
            assert _eventually(lambda: reaches(A))

            sg.delete_rule(sqlite_db, admin, rule["id"], on_change=push)
            assert _eventually(lambda: not reaches(A))
            time.sleep(2)
            assert not reaches(A)
            # c leaves its only group: its port keeps port security, so its filter allows
            # nothing any more (Neutron): no rule, only the drop of everything else.
            sg.remove_from_server(sqlite_db, admin, c["id"], "others", on_change=push)
            assert driver.list_port_filters()[port_ids[2]] == []
        # Nothing was restarted: every domain kept its id.
        assert {n: system_conn.lookupByUUIDString(s["id"]).ID() for n, s in servers.items()} == domain_ids

        # a goes: b's filter stops letting a's address in, from the delete alone.
        api.delete(admin, servers.pop("a")["id"])
        held_b = canonical(driver.list_port_filters()[port_ids[1]])
        assert not [r for r in held_b if r.remote_ip_prefix == f"{A}/32"], held_b
        assert [r for r in held_b if r.remote_ip_prefix == f"{B}/32"], held_b
        for server in list(servers.values()):
            api.delete(admin, server["id"])
        servers.clear()
        held = set(load_driver("libvirt", host, info["options"]).list_port_filters())
        assert set(port_ids) <= held  # a deleted port's filter stays until heal
        report = heal(sqlite_db, conf, hosts=[host])
        removed = {c.instance for c in report.corrections if c.kind == "port_filter" and c.applied}
        assert set(port_ids) <= removed
        assert not set(port_ids) & set(load_driver("libvirt", host, info["options"]).list_port_filters())
    finally:
        for server in servers.values():
            with contextlib.suppress(Exception):  # clean-up after a failure already reported
                api.delete(admin, server["id"])
        for port in port_ids:
            with contextlib.suppress(Exception):
                system_conn.nwfilterLookupByName(nwfilter.filter_name(port)).undefine()
