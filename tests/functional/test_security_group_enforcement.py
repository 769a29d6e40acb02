"""Security groups enforced on the hosts, with the fake driver (which records each port's filter).

A server's ports reach their host with their effective rules (the filter is there from the
spawn); a rule change reaches the host through ``push_filters``; a host whose driver cannot
filter gets no server that asks for groups, the scheduler saying why, unless its operator
marked it ``security_groups: none``; heal applies a filter again when the host's differs from
the records, and removes the filter of a port that is gone.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from novakit import exceptions, playflow
from novakit.compute.rpc import ComputeRPC
from novakit.context import RequestContext
from novakit.fleet import hosts
from novakit.heal.manager import heal
from novakit.network import filter_sync, networks, ports, subnets
from novakit.network import security_groups as sg
from novakit.network.filter_rules import FilterRule, canonical
from novakit.virt.libvirt import nwfilter
from tests.functional.cloud import HOSTS, Cloud, boot
from tests.functional.test_playflow_steps import build_on_hosts


def _net(cloud: Cloud) -> None:
    networks.create(cloud.db, cloud.admin, {"name": "lan"})
    subnets.create(cloud.db, cloud.admin, {"name": "lan-v4", "network": "lan", "cidr": "10.0.0.0/24"})


def _port(server: dict[str, Any]) -> str:
    [nic] = server["nics"]
    return str(nic["port_id"])


def _on_host(cloud: Cloud, server: dict[str, Any]) -> set[FilterRule] | None:
    """The rules the port's filter holds on the server's host (None: no filter there)."""
    rules = cloud.fake(server["host"]).port_filter(_port(server))
    return None if rules is None else set(rules)


def _records(cloud: Cloud, server: dict[str, Any]) -> set[FilterRule]:
    return set(canonical(sg.effective_rules(cloud.db, _port(server))))


def _push(cloud: Cloud) -> sg.OnChange:
    rpc = ComputeRPC(cloud.db, cloud.conf)
    return lambda ports: filter_sync.push_filters(rpc, "req-sg-test", ports) and None


def test_a_port_is_filtered_from_its_spawn_and_a_rule_change_reaches_its_host(
    cloud: Cloud, ctx: RequestContext
) -> None:
    _net(cloud)
    sg.create_group(cloud.db, cloud.conf, ctx, {"name": "web"})
    nic = {"networks": [{"net_id": "lan"}]}
    web = boot(cloud, ctx, "web1", security_groups=["web"], **nic)
    other = boot(cloud, ctx, "other", security_groups=["web"], **nic)
    # From the spawn: the new group's rules (egress anywhere), nothing in.
    assert (
        _on_host(cloud, web)
        == _records(cloud, web)
        == {
            FilterRule("egress", "IPv4"),
            FilterRule("egress", "IPv6"),
        }
    )
    rule = sg.create_rule(
        cloud.db,
        cloud.conf,
        ctx,
        {"security_group": "web", "protocol": "icmp", "remote_ip_prefix": "10.0.0.0/24"},
        on_change=_push(cloud),
    )
    assert rule is not None
    icmp = FilterRule("ingress", "IPv4", "icmp", remote_ip_prefix="10.0.0.0/24")
    for server in (web, other):  # every port of the group, on its own host
        assert icmp in (_on_host(cloud, server) or set())
        assert _on_host(cloud, server) == _records(cloud, server)
    sg.delete_rule(cloud.db, ctx, rule["id"], on_change=_push(cloud))
    assert icmp not in (_on_host(cloud, web) or set())
    assert _on_host(cloud, web) == _records(cloud, web)


def test_the_members_of_a_group_learn_a_new_members_address(cloud: Cloud, ctx: RequestContext) -> None:
    """No push by hand, no heal: a build tells the old members, a delete makes them forget."""
    _net(cloud)
    nic = {"networks": [{"net_id": "lan"}]}
    first = boot(cloud, ctx, "first", **nic)  # default: ingress from its members only
    second = boot(cloud, ctx, "second", **nic)
    from_second = FilterRule("ingress", "IPv4", remote_ip_prefix=f"{second['addresses'][0]}/32")
    assert from_second in _records(cloud, first)
    assert _on_host(cloud, second) == _records(cloud, second)  # built with its rules
    assert from_second in (_on_host(cloud, first) or set())  # learnt when second's build was recorded
    assert _on_host(cloud, first) == _records(cloud, first)
    # A member that goes: the others no longer let its address in.
    cloud.api.delete(ctx, second["id"])
    assert from_second not in (_on_host(cloud, first) or set())
    assert _on_host(cloud, first) == _records(cloud, first)


def test_the_boot_playbooks_record_step_tells_the_old_members(cloud: Cloud, ctx: RequestContext) -> None:
    """The playbook's face: the hosts build, the record step records; the old member's filter
    lets the new ones in from that record, with no heal."""
    _net(cloud)
    first = boot(cloud, ctx, "first", networks=[{"net_id": "lan"}])
    server = {"name": "more", "flavor": "m1.small", "image": "tiny", "count": 2, "nics": [{"net-id": "lan"}]}
    scheduled = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": server})
    assert scheduled["changed"] and len(scheduled["instances"]) == 2
    before = _on_host(cloud, first) or set()
    results = build_on_hosts(cloud, scheduled["requests"])
    playflow.run_step(
        cloud.api, ctx, {"step": "record", "requests": scheduled["requests"], "results": results}
    )
    new = [cloud.api.get(cloud.admin, uuid) for uuid in scheduled["instances"]]
    assert [s["status"] for s in new] == ["ACTIVE", "ACTIVE"]
    let_in = {FilterRule("ingress", "IPv4", remote_ip_prefix=f"{s['addresses'][0]}/32") for s in new}
    assert not let_in & before
    assert let_in <= (_on_host(cloud, first) or set())
    assert _on_host(cloud, first) == _records(cloud, first)


def test_a_deleted_ports_address_leaves_the_other_members_filters(cloud: Cloud, ctx: RequestContext) -> None:
    """A port the user made outlives its server, still a member; its delete is what the others
    learn (no heal)."""
    _net(cloud)
    first = boot(cloud, ctx, "first", networks=[{"net_id": "lan"}])
    port = ports.create(cloud.db, ctx, {"name": "kept", "network": "lan"})
    assert port is not None
    given = boot(cloud, ctx, "given", networks=[{"port_id": "kept"}])
    from_port = FilterRule("ingress", "IPv4", remote_ip_prefix=f"{port['fixed_ips'][0]['ip_address']}/32")
    assert from_port in (_on_host(cloud, first) or set())
    cloud.api.delete(ctx, given["id"])
    assert from_port in (_on_host(cloud, first) or set())  # unbound, still a member of default
    ports.delete_port(cloud.db, ctx, "kept", on_change=_push(cloud))
    assert from_port not in (_on_host(cloud, first) or set())
    assert _on_host(cloud, first) == _records(cloud, first)


def test_port_security_decides_whether_a_port_without_groups_is_filtered(
    cloud: Cloud, ctx: RequestContext
) -> None:
    """Neutron's port security: enabled and no group, everything is dropped (an empty allow
    list); disabled, the port is not filtered and takes no group."""
    _net(cloud)
    server = boot(cloud, ctx, "closed", networks=[{"net_id": "lan"}])
    sg.remove_from_server(cloud.db, ctx, server["id"], "default", on_change=_push(cloud))
    assert _on_host(cloud, server) == set() == _records(cloud, server)  # a filter that allows nothing

    port = ports.create(cloud.db, ctx, {"name": "open", "network": "lan", "port_security_enabled": False})
    assert port is not None
    assert (port["port_security_enabled"], port["security_groups"]) == (False, [])
    opened = boot(cloud, ctx, "opened", networks=[{"port_id": "open"}])
    assert _on_host(cloud, opened) is None  # not filtered
    assert cloud.api.get(ctx, opened["id"])["security_groups"] == []
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError, match="port open has port security disabled"):
        sg.add_to_server(cloud.db, ctx, opened["id"], "default")
    assert cloud.snapshot() == before
    # heal leaves both as they are: each is what the records say.
    assert not [c for c in heal(cloud.db, cloud.conf).corrections if c.kind == "port_filter"]


def test_a_host_that_cannot_filter_gets_no_server_with_groups_unless_marked_none(
    cloud: Cloud, ctx: RequestContext
) -> None:
    _net(cloud)
    for host in HOSTS:
        cloud.add_host(host, supports_port_filter="false")
    nic = {"networks": [{"net_id": "lan"}]}
    [refused] = cloud.api.create(
        ctx, {"name": "guarded", "flavor": "m1.small", "image": "tiny", "security_groups": ["default"], **nic}
    )
    assert refused["status"] == "ERROR"
    fault = cloud.api.get(cloud.admin, refused["id"])["fault"]
    assert fault["message"].startswith("No valid host was found.")
    assert "cannot filter ports" in json.dumps(json.loads(fault["details"])), fault["details"]
    assert "SecurityGroupFilter" in fault["details"]

    # The operator runs compute-2 without filters, knowingly: it takes the server, unfiltered.
    cloud.add_host("compute-2", supports_port_filter="false", security_groups="none")
    served = boot(cloud, ctx, "open", security_groups=["default"], **nic)
    assert served["host"] == "compute-2"
    assert _on_host(cloud, served) is None
    # What the operator sees of each host.
    said = {h["host"]: h["security_groups"] for h in hosts.list_hosts(cloud.db, cloud.conf)}
    assert said == {"compute-1": "unsupported", "compute-2": "none", "compute-3": "unsupported"}


def test_heal_applies_a_filter_that_differs_again_and_removes_one_of_a_gone_port(
    cloud: Cloud, ctx: RequestContext
) -> None:
    _net(cloud)
    server = boot(cloud, ctx, "s1", security_groups=["default"], networks=[{"net_id": "lan"}])
    host, port = server["host"], _port(server)
    fake = cloud.fake(host)
    wanted = _records(cloud, server)
    assert _on_host(cloud, server) == wanted
    # A hand edit on the host, and a filter left behind by a port that no longer exists.
    fake.edit_port_filter(port, [FilterRule("ingress", "IPv4")])
    fake.edit_port_filter("00000000-dead-4000-8000-000000000000", [FilterRule("egress", "IPv4")])

    dry = heal(cloud.db, cloud.conf, dry_run=True)
    found = sorted((c.kind, c.host, c.before, c.after) for c in dry.corrections if c.kind == "port_filter")
    assert found == [
        ("port_filter", host, "1 rule(s)", "none"),
        ("port_filter", host, "differs: 1 rule(s)", f"{len(wanted)} rule(s)"),
    ]
    assert _on_host(cloud, server) == {FilterRule("ingress", "IPv4")}  # a dry run changes nothing

    report = heal(cloud.db, cloud.conf)
    assert [c.applied for c in report.corrections if c.kind == "port_filter"] == [True, True]
    assert _on_host(cloud, server) == wanted
    assert fake.port_filter("00000000-dead-4000-8000-000000000000") is None

    # The host lost every filter (rebuilt): heal puts the port's back; a second heal finds nothing.
    fake.edit_port_filter(port, None)
    again = heal(cloud.db, cloud.conf)
    assert [(c.instance, c.before) for c in again.corrections if c.kind == "port_filter"] == [
        (server["id"], "missing")
    ]
    assert _on_host(cloud, server) == wanted
    assert not [c for c in heal(cloud.db, cloud.conf).corrections if c.kind == "port_filter"]


def test_a_libvirt_filter_holds_the_rules_it_was_built_from() -> None:
    """What heal compares on a libvirt host: the rules read back from the filter's XML equal
    the records' in their canonical form (protocol numbers, single ports, ICMP type/code)."""
    rules = [
        FilterRule("egress", "IPv4"),
        FilterRule("egress", "IPv6"),
        FilterRule("ingress", "IPv4", "6", 22, None, "10.1.2.3"),
        FilterRule("ingress", "IPv4", "udp", 5000, 5100, "10.0.0.0/8"),
        FilterRule("ingress", "IPv4", "icmp", 8, 0, "10.0.0.0/24"),
        FilterRule("ingress", "IPv6", "icmp", 128, None, "fd00::/8"),
        FilterRule("ingress", "IPv4", "47"),
    ]
    xml = nwfilter.build("p1", rules)
    assert '<filterref filter="no-ip-spoofing" />' in xml
    assert canonical(nwfilter.parse(xml)) == canonical(rules)
    assert FilterRule("ingress", "IPv4", "tcp", 22, 22, "10.1.2.3/32") in canonical(rules)
