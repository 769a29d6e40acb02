"""Networks, subnets and ports (``novakit.network``) and a boot's use of them, with the fake driver.

A server's MAC and fixed IPs are chosen before it is built, visible at once, kept for its
life (stop/start, reboot, rebuild) and freed when it goes or its build fails; every bad
input is refused naming the field and the rule, with nothing written.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from novakit import exceptions
from novakit.context import RequestContext
from novakit.host.messages import NetworkSpec
from novakit.network import networks, ports, subnets
from tests.functional.cloud import HOSTS, Cloud, boot
from tests.functional.test_cli import env, nk  # noqa: F401


def _net(cloud: Cloud, name: str = "net1", cidr: str = "10.0.0.0/24", **extra: Any) -> dict[str, Any]:
    net = networks.create(cloud.db, cloud.admin, {"name": name, **extra})
    subnets.create(cloud.db, cloud.admin, {"name": f"{name}-v4", "network": name, "cidr": cidr})
    return net


def _nic(server: dict[str, Any]) -> tuple[str, list[str]]:
    [nic] = server["nics"]
    return nic["mac"], nic["fixed_ips"]


def _ports(cloud: Cloud) -> list[dict[str, Any]]:
    return ports.list_ports(cloud.db, cloud.admin)


def test_network_subnet_and_port_as_neutron_makes_them(cloud: Cloud, ctx: RequestContext) -> None:
    net = networks.create(cloud.db, cloud.admin, {"name": "lan", "source": "default"})
    assert (net["provider"], net["source"], net["is_default"]) == ("network", "default", False)
    sub = subnets.create(
        cloud.db,
        cloud.admin,
        {"name": "lan-v4", "network": "lan", "cidr": "192.168.50.0/24", "dns_nameservers": ["192.168.50.1"]},
    )
    # Neutron's defaults: the first address is the gateway, the pool is the rest less the broadcast.
    assert sub["gateway_ip"] == "192.168.50.1"
    assert sub["allocation_pools"] == [{"start": "192.168.50.2", "end": "192.168.50.254"}]
    port = ports.create(cloud.db, ctx, {"name": "p1", "network": "lan"})
    assert port["fixed_ips"] == [{"subnet": "lan-v4", "subnet_id": sub["id"], "ip_address": "192.168.50.2"}]
    assert port["mac_address"].startswith("fa:16:3e:") and port["device_id"] is None
    assert networks.show(cloud.db, "lan")["subnets"] == ["lan-v4"]
    assert [p["id"] for p in ports.list_ports(cloud.db, ctx)] == [port["id"]]
    ports.delete_port(cloud.db, ctx, "p1")
    assert ports.list_ports(cloud.db, ctx) == []


def test_boot_with_a_nic_gets_its_address_before_the_build_and_keeps_it_for_life(
    cloud: Cloud, ctx: RequestContext
) -> None:
    _net(cloud)
    [recorded] = cloud.api.create(
        ctx,
        {"name": "web", "flavor": "m1.small", "image": "tiny", "networks": [{"net_id": "net1"}]},
        build=False,
    )
    # Known before any host was asked: what a DNS entry or an inventory needs.
    mac, ips = _nic(recorded)
    assert ips == ["10.0.0.2"] and recorded["addresses"] == ["10.0.0.2"] and mac.startswith("fa:16:3e:")
    cloud.api.conductor.build_instances(ctx, [recorded["id"]])
    server = cloud.api.get(cloud.admin, recorded["id"])
    assert server["status"] == "ACTIVE" and _nic(server) == (mac, ips)
    [port] = _ports(cloud)
    assert (port["device_id"], port["device_owner"], port["binding_host"], port["status"]) == (
        server["id"],
        "compute:nova",
        server["host"],
        "ACTIVE",
    )
    for action, options in [("stop", {}), ("start", {}), ("reboot", {}), ("rebuild", {"image": "tiny-2"})]:
        assert cloud.api.act(ctx, "web", action, options).server["status"] in ("ACTIVE", "SHUTOFF")
        assert _nic(cloud.api.get(ctx, "web")) == (mac, ips), action
    assert [(p["mac_address"], p["fixed_ips"][0]["ip_address"]) for p in _ports(cloud)] == [(mac, ips[0])]


def test_the_host_gets_the_port_unchanged(cloud: Cloud, ctx: RequestContext) -> None:
    from novakit.cells.registry import targeting
    from novakit.compute.rpc import instance_spec
    from novakit.db.models import Instance

    _net(cloud)
    server = boot(cloud, ctx, "web", networks=[{"net_id": "net1", "fixed_ip": "10.0.0.77"}])
    with targeting(cloud.db, server["id"]), cloud.db.reader() as session:
        inst = session.query(Instance).filter_by(uuid=server["id"]).one()
        [nic] = instance_spec(session, inst).networks
    assert isinstance(nic, NetworkSpec)
    assert (nic.type, nic.source, nic.mac, nic.port_id) == (
        "network",
        "net1",
        server["nics"][0]["mac"],
        server["nics"][0]["port_id"],
    )
    assert [(ip.address, ip.cidr, ip.gateway) for ip in nic.fixed_ips] == [
        ("10.0.0.77", "10.0.0.0/24", "10.0.0.1")
    ]


def test_no_nic_means_the_default_network_and_none_without_one(cloud: Cloud, ctx: RequestContext) -> None:
    plain = boot(cloud, ctx, "plain")
    assert plain["nics"] == [] and _ports(cloud) == []
    _net(cloud, "public", "10.9.0.0/24", is_default=True)
    server = boot(cloud, ctx, "web")
    assert _nic(server)[1] == ["10.9.0.2"]


def test_delete_frees_the_address_for_the_next_server_and_keeps_a_given_port(
    cloud: Cloud, ctx: RequestContext
) -> None:
    _net(cloud)
    first = boot(cloud, ctx, "a", networks=[{"net_id": "net1"}])
    given = ports.create(cloud.db, ctx, {"name": "mine", "network": "net1"})
    second = boot(cloud, ctx, "b", networks=[{"port_id": "mine"}])
    assert _nic(first)[1] == ["10.0.0.2"] and _nic(second) == (given["mac_address"], ["10.0.0.3"])
    cloud.api.delete(ctx, "a")
    cloud.api.delete(ctx, "b")
    # The port made for "a" went with it; the one the user gave is unbound and kept, with its address.
    [kept] = _ports(cloud)
    assert (kept["id"], kept["device_id"], kept["binding_host"], kept["status"]) == (
        given["id"],
        None,
        None,
        "DOWN",
    )
    assert kept["fixed_ips"][0]["ip_address"] == "10.0.0.3"
    assert _nic(boot(cloud, ctx, "c", networks=[{"net_id": "net1"}]))[1] == ["10.0.0.2"]


def test_a_failed_build_frees_its_address(cloud: Cloud, ctx: RequestContext) -> None:
    _net(cloud)
    for host in HOSTS:
        cloud.add_host(host, failure_mode="abort_spawn")
    [server] = cloud.api.create(
        ctx, {"name": "doomed", "flavor": "m1.small", "image": "tiny", "networks": [{"net_id": "net1"}]}
    )
    assert server["status"] == "ERROR" and server["nics"] == [] and server["addresses"] == []
    assert _ports(cloud) == []


def test_a_network_no_host_has_is_no_valid_host_with_the_filter_s_reason(
    cloud: Cloud, ctx: RequestContext
) -> None:
    _net(cloud, "data", "10.1.0.0/24", source="br-data")
    for host in HOSTS:
        cloud.add_host(host, networks=["default"])
    [server] = cloud.api.create(
        ctx, {"name": "w", "flavor": "m1.small", "image": "tiny", "networks": [{"net_id": "data"}]}
    )
    assert server["status"] == "ERROR"
    fault = cloud.api.get(cloud.admin, server["id"])["fault"]
    assert "NetworkFilter" in fault["details"] and "has no network br-data" in fault["details"], fault
    assert json.loads(fault["details"])
    assert _ports(cloud) == []
    # A host that has it takes the next one.
    cloud.add_host("compute-2", networks=["default", "br-data"])
    assert boot(cloud, ctx, "w2", networks=[{"net_id": "data"}])["host"] == "compute-2"


def _refused(cloud: Cloud, call: Any, error: type[Exception], *needles: str) -> Exception:
    before = cloud.snapshot()
    with pytest.raises(error) as err:
        call()
    for needle in needles:
        assert needle in str(err.value), str(err.value)
    assert cloud.snapshot() == before
    return err.value


def test_bad_network_input_is_refused_naming_field_and_rule_with_nothing_changed(
    cloud: Cloud, ctx: RequestContext
) -> None:
    db, admin = cloud.db, cloud.admin
    _net(cloud)
    taken = ports.create(
        db, ctx, {"name": "taken", "network": "net1", "fixed_ips": [{"ip_address": "10.0.0.9"}]}
    )
    sub = {"name": "s2", "network": "net1"}
    _refused(
        cloud,
        lambda: subnets.create(db, admin, {**sub, "cidr": "10.0.0.128/25"}),
        exceptions.SubnetOverlap,
        "subnet_range",
        "overlaps subnet net1-v4",
    )
    _refused(
        cloud,
        lambda: subnets.create(db, admin, {**sub, "cidr": "10.0.0.1/24"}),
        exceptions.ValidationError,
        "cidr",
        "host bits",
    )
    pool = {**sub, "cidr": "10.2.0.0/24"}
    _refused(
        cloud,
        lambda: subnets.create(
            db, admin, {**pool, "allocation_pools": [{"start": "10.2.0.2", "end": "10.3.0.9"}]}
        ),
        exceptions.ValidationError,
        "allocation_pools[0]",
        "inside 10.2.0.0/24",
    )
    _refused(
        cloud,
        lambda: subnets.create(
            db, admin, {**pool, "allocation_pools": [{"start": "10.2.0.1", "end": "10.2.0.9"}]}
        ),
        exceptions.ValidationError,
        "allocation_pools[0]",
        "gateway 10.2.0.1",
    )
    _refused(
        cloud,
        lambda: networks.create(db, admin, {"name": "n2", "provider": "vxlan"}),
        exceptions.ValidationError,
        "provider",
    )
    _refused(
        cloud,
        lambda: ports.create(db, ctx, {"network": "net1", "fixed_ips": [{"ip_address": "10.5.0.3"}]}),
        exceptions.ValidationError,
        "fixed_ips[0].ip_address",
        "not inside a subnet of network net1",
    )
    _refused(
        cloud,
        lambda: ports.create(db, ctx, {"network": "net1", "fixed_ips": [{"ip_address": "10.0.0.9"}]}),
        exceptions.IpAddressInUse,
        "10.0.0.9 is already allocated",
    )
    _refused(
        cloud,
        lambda: ports.create(db, ctx, {"network": "net1", "mac_address": taken["mac_address"]}),
        exceptions.MacAddressInUse,
        "mac_address",
        "already used",
    )
    _refused(
        cloud,
        lambda: ports.create(db, ctx, {"network": "net1", "mac_address": "01:00:5e:00:00:01"}),
        exceptions.ValidationError,
        "mac_address",
        "multicast",
    )
    _refused(cloud, lambda: networks.delete(db, admin, "net1"), exceptions.NetworkInUse, "1 port(s)")
    _refused(cloud, lambda: subnets.delete(db, admin, "net1-v4"), exceptions.SubnetInUse, "1 address(es)")
    _refused(cloud, lambda: networks.create(db, ctx, {"name": "mine"}), exceptions.PolicyNotAuthorized)
    networks.create(db, admin, {"name": "d1", "is_default": True})
    _refused(
        cloud,
        lambda: networks.create(db, admin, {"name": "d2", "is_default": True}),
        exceptions.DefaultNetworkExists,
        "is_default",
        "d1",
    )


BAD_NICS: list[tuple[dict[str, Any], type[Exception], tuple[str, ...]]] = [
    ({"net_id": "nowhere"}, exceptions.NetworkNotFound, ("nowhere",)),
    ({"port_id": "nope"}, exceptions.PortNotFound, ("nope",)),
    (
        {"net_id": "net1", "fixed_ip": "10.7.0.5"},
        exceptions.ValidationError,
        ("networks[0].fixed_ip", "not inside"),
    ),
    (
        {"net_id": "net1", "fixed_ip": "10.0.0.9"},
        exceptions.IpAddressInUse,
        ("networks[0].fixed_ip", "10.0.0.9"),
    ),
    ({"net_id": "net1", "fixed_ip": "10.0.0.1"}, exceptions.ValidationError, ("gateway",)),
    (
        {"net_id": "net1", "fixed_ip": "bogus"},
        exceptions.ValidationError,
        ("networks.0.fixed_ip", "IP address"),
    ),
    ({"fixed_ip": "10.0.0.5"}, exceptions.ValidationError, ("networks.0", "needs net_id")),
    ({"net_id": "net1", "type": "network"}, exceptions.ValidationError, ("networks.0", "not both")),
    ({"net_id": "net1", "port_id": "x"}, exceptions.ValidationError, ("networks.0", "not both")),
    ({"port_id": "taken"}, exceptions.PortInUse, ("port_id", "in use by server")),
]


@pytest.mark.parametrize("nic,error,needles", BAD_NICS, ids=[str(i) for i in range(len(BAD_NICS))])
def test_a_bad_nic_refuses_the_boot_and_its_dry_run_with_nothing_changed(
    cloud: Cloud, ctx: RequestContext, nic: dict[str, Any], error: type[Exception], needles: tuple[str, ...]
) -> None:
    _net(cloud)
    ports.create(
        cloud.db, ctx, {"name": "held", "network": "net1", "fixed_ips": [{"ip_address": "10.0.0.9"}]}
    )
    boot(cloud, ctx, "owner", networks=[{"port_id": "held"}])
    if nic.get("port_id") == "taken":
        nic = {"port_id": "held"}
    request = {"name": "web", "flavor": "m1.small", "image": "tiny", "networks": [nic]}
    # The dry run (check mode) refuses what the real create refuses, the same way.
    _refused(cloud, lambda: cloud.api.create(ctx, request, dry_run=True), error, *needles)
    _refused(cloud, lambda: cloud.api.create(ctx, request), error, *needles)


def test_a_full_pool_refuses_the_whole_request_and_its_dry_run(cloud: Cloud, ctx: RequestContext) -> None:
    networks.create(cloud.db, cloud.admin, {"name": "tiny"})
    subnets.create(
        cloud.db,
        cloud.admin,
        {
            "name": "tiny-v4",
            "network": "tiny",
            "cidr": "10.4.0.0/29",
            "allocation_pools": [{"start": "10.4.0.2", "end": "10.4.0.4"}],
        },
    )
    request = {"name": "web", "flavor": "m1.small", "image": "tiny", "networks": [{"net_id": "tiny"}]}
    boot(cloud, ctx, "one", **{k: v for k, v in request.items() if k == "networks"})
    for dry_run in (True, False):
        _refused(
            cloud,
            lambda dry_run=dry_run: cloud.api.create(ctx, {**request, "max_count": 3}, dry_run=dry_run),
            exceptions.IpAddressGenerationFailure,
            "No more IP addresses available on network tiny",
        )
    assert len(cloud.api.create(ctx, {**request, "max_count": 2})) == 2
    assert sorted(ip for p in _ports(cloud) for ip in [p["fixed_ips"][0]["ip_address"]]) == [
        "10.4.0.2",
        "10.4.0.3",
        "10.4.0.4",
    ]


def test_the_command_line_as_openstack_users_type_it(nk: Any) -> None:  # noqa: F811
    import json as _json

    nk("db", "upgrade")
    nk("host", "add", "compute-1", "--vcpus", "8", "--memory-mb", "16384", "--disk-gb", "200")
    nk("flavor", "create", "m1.small", "--vcpus", "1", "--ram", "1024", "--disk", "10")
    nk("image", "create", "tiny", "--location", "/var/lib/novakit/images/tiny.qcow2")
    nk("network", "create", "lan", "--source", "default", "--default")
    nk(
        "subnet",
        "create",
        "lan-v4",
        "--network",
        "lan",
        "--subnet-range",
        "10.8.0.0/24",
        "--dns-nameserver",
        "10.8.0.1",
        "--allocation-pool",
        "start=10.8.0.10,end=10.8.0.20",
    )
    [net] = _json.loads(nk("network", "list", "--output", "json").stdout)
    assert (net["name"], net["source"], net["is_default"], net["subnets"]) == (
        "lan",
        "default",
        True,
        ["lan-v4"],
    )
    sub = _json.loads(nk("subnet", "show", "lan-v4", "-f", "json").stdout)
    assert sub["allocation_pools"] == [{"start": "10.8.0.10", "end": "10.8.0.20"}]
    port = _json.loads(
        nk(
            "port", "create", "p1", "--network", "lan", "--fixed-ip", "ip-address=10.8.0.15", "-f", "json"
        ).stdout
    )
    nk(
        "server",
        "create",
        "a",
        "--flavor",
        "m1.small",
        "--image",
        "tiny",
        "--nic",
        "net-id=lan,v4-fixed-ip=10.8.0.12",
    )
    nk("server", "create", "b", "--flavor", "m1.small", "--image", "tiny", "--nic", "port-id=p1")
    nk("server", "create", "c", "--flavor", "m1.small", "--image", "tiny")  # the default network
    listed = {s["name"]: s for s in _json.loads(nk("server", "list", "-f", "json").stdout)}
    assert listed["a"]["addresses"] == ["10.8.0.12"] and listed["b"]["addresses"] == ["10.8.0.15"]
    assert listed["c"]["addresses"] == ["10.8.0.10"]
    ports_of = {p["device_id"]: p for p in _json.loads(nk("port", "list", "-f", "json").stdout)}
    assert len(ports_of) == 3 and port["mac_address"] in {p["mac_address"] for p in ports_of.values()}
    taken = nk(
        "server", "create", "d", "--flavor", "m1.small", "--image", "tiny", "--nic", "port-id=p1", code=1
    )
    assert "port p1 is in use by server" in taken.stderr
    bad = nk("server", "create", "d", "--flavor", "m1.small", "--image", "tiny", "--nic", "net=lan", code=1)
    assert "Invalid --nic" in bad.stderr
    assert "network lan cannot be deleted" in nk("network", "delete", "lan", code=1).stderr.lower()
    nk("server", "delete", "b")
    nk("port", "delete", "p1")
    assert len(_json.loads(nk("port", "list", "-f", "json").stdout)) == 2


def test_heal_frees_the_ports_of_a_server_that_vanished(cloud: Cloud, ctx: RequestContext) -> None:
    from sqlalchemy import text

    from novakit.heal.manager import heal

    _net(cloud)
    ports.create(cloud.db, ctx, {"name": "mine", "network": "net1"})
    server = boot(cloud, ctx, "web", networks=[{"net_id": "net1"}, {"port_id": "mine"}])
    kept = boot(cloud, ctx, "kept", networks=[{"net_id": "net1"}])
    with cloud.db.writer() as session:  # the server's records are gone behind novakit's back
        session.execute(text("DELETE FROM instance_actions_events"))
        session.execute(text("DELETE FROM instance_actions"))
        session.execute(text("DELETE FROM instances WHERE uuid = :u"), {"u": server["id"]})
        session.execute(text("DELETE FROM instance_mappings WHERE instance_uuid = :u"), {"u": server["id"]})
    report = heal(cloud.db, cloud.conf)
    assert [(c.kind, c.instance, c.applied) for c in report.corrections if c.kind == "orphan_port"] == [
        ("orphan_port", server["id"], True)
    ]
    left = _ports(cloud)
    [mine] = [p for p in left if p["name"] == "mine"]
    assert mine["device_id"] is None and mine["status"] == "DOWN"
    assert [p["device_id"] for p in left if p["name"] != "mine"] == [kept["id"]]
    assert not [c for c in heal(cloud.db, cloud.conf).corrections if c.kind == "orphan_port"]


def test_the_boot_playbook_s_networks_variable_and_a_second_run_keep_mac_and_address(
    cloud: Cloud, ctx: RequestContext
) -> None:
    from novakit import playflow
    from novakit.network.allocation import nic_requests
    from tests.functional.test_playflow_steps import build_on_hosts

    _net(cloud)
    ports.create(
        cloud.db, ctx, {"name": "mine", "network": "net1", "fixed_ips": [{"ip_address": "10.0.0.50"}]}
    )
    # openstack.cloud's nics and a survey's plain answer, as the request's networks.
    assert nic_requests([{"net-name": "net1", "fixed_ip": "10.0.0.7"}, "port-id=mine", "net1"]) == [
        {"net_id": "net1", "fixed_ip": "10.0.0.7"},
        {"port_id": "mine"},
        {"net_id": "net1"},
    ]
    server = {"name": "pb", "flavor": "m1.small", "image": "tiny", "networks": "net1"}
    scheduled = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": server})
    [request] = scheduled["requests"]
    [nic] = request["instances"][0]["networks"]
    assert nic["fixed_ips"][0]["address"] == "10.0.0.2" and nic["mac"].startswith("fa:16:3e:")
    # set_stats has the address before the host built anything.
    assert scheduled["published"][0]["addresses"] == ["10.0.0.2"]
    params = {
        "step": "record",
        "requests": scheduled["requests"],
        "results": build_on_hosts(cloud, [request]),
    }
    playflow.run_step(cloud.api, ctx, params)
    again = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": server})
    assert not again["changed"] and again["requests"] == []
    view = cloud.api.get(ctx, "pb")
    assert view["status"] == "ACTIVE" and _nic(view) == (nic["mac"], ["10.0.0.2"])
    assert len(_ports(cloud)) == 2
