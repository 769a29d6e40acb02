"""Attaching and detaching a port on a built server (Nova's os-interface), with the fake driver on
SQLite and PostgreSQL: by port and by network, the guest and the listings, the state table's
checks, every bad request refused unchanged, a failed host rolled back, and heal's rule for an
attach cut off."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from novakit import exceptions
from novakit.compute import interfaces
from novakit.context import RequestContext, generate_request_id
from novakit.db.models import utcnow
from novakit.heal.base import bare_spec
from novakit.heal.manager import heal
from novakit.host.messages import NetworkSpec
from novakit.network import networks, ports, security_groups, subnets
from novakit.virt.fake import failure_env_var
from tests.functional.cloud import Cloud, boot
from tests.functional.test_cli import env, nk  # noqa: F401


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext("demo", "alice", ["member"])


@pytest.fixture
def lan(cloud: Cloud) -> None:
    for name, cidr in (("net1", "10.0.0.0/24"), ("net2", "10.0.1.0/24")):
        networks.create(cloud.db, cloud.admin, {"name": name})
        subnets.create(cloud.db, cloud.admin, {"name": f"{name}-v4", "network": name, "cidr": cidr})


def _new(ctx: RequestContext) -> RequestContext:
    """The caller in a request of its own, as every HTTP or CLI call is (the host keeps a
    server's operations in the order their requests' actions started)."""
    return ctx.with_request_id(generate_request_id())


def _server(cloud: Cloud, ctx: RequestContext, name: str = "web") -> dict[str, Any]:
    return boot(cloud, ctx, name, networks=[{"net_id": "net1"}])


def _ports_of(cloud: Cloud, ctx: RequestContext, server: dict[str, Any]) -> list[dict[str, Any]]:
    return ports.list_ports(cloud.db, ctx, device_id=server["id"])


def _events(cloud: Cloud, server: str) -> tuple[str, list[tuple[str, str]]]:
    last = cloud.api.list_actions(cloud.admin, server)[-1]
    return last["action"], [(e["event"], e["result"]) for e in last["events"]]


def _guest_ports(cloud: Cloud, server: dict[str, Any]) -> list[str | None]:
    return list(cloud.fake(server["host"]).interfaces(server["id"]))


def test_a_port_is_attached_listed_on_the_guest_and_detached_kept(
    cloud: Cloud, ctx: RequestContext, lan: None
) -> None:
    server = _server(cloud, ctx)
    boot_port = _ports_of(cloud, ctx, server)[0]["id"]
    mine = ports.create(cloud.db, ctx, {"name": "mine", "network": "net2"})
    assert mine is not None

    shown = interfaces.attach(cloud.api, _new(ctx), "web", port="mine")
    assert shown["id"] == mine["id"] and shown["device_id"] == server["id"]
    assert shown["device_owner"] == f"compute:{server['availability_zone'] or 'nova'}"
    assert shown["status"] == "ACTIVE"
    # The host a port is bound to is the operator's (Neutron's binding:host_id is admin-only): the
    # member who attached it does not see it, an admin does.
    assert "binding_host" not in shown
    assert (
        ports.show(cloud.db, cloud.admin, "mine")["binding_host"] == cloud.api.get(cloud.admin, "web")["host"]
    )
    assert [p["id"] for p in _ports_of(cloud, ctx, server)] == [boot_port, mine["id"]]
    assert _guest_ports(cloud, server) == [boot_port, mine["id"]]
    assert _events(cloud, "web") == ("attach_interface", [("compute_attach_interface", "Success")])
    # The server's NICs now hold it: a hard reboot (or a move) defines the guest with it.
    with cloud.db.target_cell(cloud.db.cells.listed()[-1]), cloud.db.reader() as session:
        from novakit.db.api import instance_get

        nics = instance_get(session, cloud.admin, server["id"]).networks
    assert [n["port_id"] for n in nics] == [boot_port, mine["id"]]
    assert cloud.api.get(ctx, "web")["status"] == "ACTIVE"

    interfaces.detach(cloud.api, _new(ctx), "web", "mine")
    assert [p["id"] for p in _ports_of(cloud, ctx, server)] == [boot_port]
    assert _guest_ports(cloud, server) == [boot_port]
    # A port the user gave is kept, unbound, for another server.
    kept = ports.show(cloud.db, cloud.admin, "mine")
    assert kept["device_id"] is None and kept["status"] == "DOWN" and kept["binding_host"] is None
    assert _events(cloud, "web") == ("detach_interface", [("compute_detach_interface", "Success")])


def test_a_network_gets_a_new_port_with_the_servers_groups_and_detach_deletes_it(
    cloud: Cloud, ctx: RequestContext, lan: None
) -> None:
    security_groups.create_group(cloud.db, cloud.conf, ctx, {"name": "web-sg"})
    server = boot(cloud, ctx, "web", networks=[{"net_id": "net1"}], security_groups=["web-sg"])
    made = interfaces.attach(cloud.api, _new(ctx), "web", network="net2", fixed_ip="10.0.1.50")
    assert made["network"] == "net2" and [ip["ip_address"] for ip in made["fixed_ips"]] == ["10.0.1.50"]
    assert made["security_groups"] == ["web-sg"] and made["project_id"] == "demo"
    assert made["id"] in _guest_ports(cloud, server)
    assert "10.0.1.50" in cloud.api.get(ctx, "web")["addresses"]
    interfaces.detach(cloud.api, _new(ctx), "web", made["id"])
    assert "10.0.1.50" not in cloud.api.get(ctx, "web")["addresses"]
    # Made by the attach: it goes with its address, which is free again.
    with pytest.raises(exceptions.PortNotFound):
        ports.show(cloud.db, ctx, made["id"])
    again = interfaces.attach(cloud.api, _new(ctx), "web", network="net2", fixed_ip="10.0.1.50")
    assert again["fixed_ips"][0]["ip_address"] == "10.0.1.50"


def test_a_stopped_or_paused_server_takes_a_port_a_suspended_one_refuses(
    cloud: Cloud, ctx: RequestContext, lan: None
) -> None:
    server = _server(cloud, ctx)
    cloud.api.stop(ctx, "web")
    made = interfaces.attach(cloud.api, _new(ctx), "web", network="net2")
    assert made["id"] in _guest_ports(cloud, server)
    cloud.api.start(ctx, "web")
    cloud.api.pause(ctx, "web")
    interfaces.detach(cloud.api, _new(ctx), "web", made["id"])
    cloud.api.unpause(ctx, "web")
    cloud.api.suspend(ctx, "web")
    before = cloud.snapshot()
    with pytest.raises(exceptions.InstanceInvalidState):
        interfaces.attach(cloud.api, _new(ctx), "web", network="net2")
    assert cloud.snapshot() == before


def test_refusals_change_nothing(cloud: Cloud, ctx: RequestContext, lan: None) -> None:
    server = _server(cloud, ctx)
    other = RequestContext("other", "bob", ["member"])
    theirs = ports.create(cloud.db, other, {"name": "theirs", "network": "net2"})
    assert theirs is not None
    bound = _ports_of(cloud, ctx, server)[0]["id"]
    _server(cloud, ctx, "db")
    db_port = _ports_of(cloud, ctx, cloud.api.get(ctx, "db"))[0]["id"]
    ports.create(cloud.db, ctx, {"name": "free", "network": "net2"})
    before = cloud.snapshot()
    cases: list[tuple[dict[str, Any], type[exceptions.NovakitError], str | None]] = [
        ({"port": theirs["id"]}, exceptions.PortNotFound, None),
        ({"port": db_port}, exceptions.PortInUse, None),
        ({"port": bound}, exceptions.PortInUse, None),
        ({"network": "nowhere"}, exceptions.NetworkNotFound, None),
        ({}, exceptions.ValidationError, "port_id"),
        ({"port": "free", "network": "net2"}, exceptions.ValidationError, "port_id"),
        ({"port": "free", "fixed_ip": "10.0.1.9"}, exceptions.ValidationError, "fixed_ips[0].ip_address"),
        ({"network": "net2", "fixed_ip": "192.168.9.9"}, exceptions.NovakitError, None),
        ({"port": ""}, exceptions.ValidationError, "port_id"),
    ]
    for kwargs, error, field in cases:
        with pytest.raises(error) as caught:
            interfaces.attach(cloud.api, _new(ctx), "web", **kwargs)
        if field is not None:
            assert getattr(caught.value, "field", None) == field, (kwargs, caught.value)
    # Another project's server is not found; a port not attached to it cannot be detached.
    with pytest.raises(exceptions.InstanceNotFound):
        interfaces.attach(cloud.api, _new(other), "web", port="theirs")
    with pytest.raises(exceptions.PortNotFound):
        interfaces.detach(cloud.api, _new(ctx), "web", "free")
    with pytest.raises(exceptions.PortNotFound):
        interfaces.detach(cloud.api, _new(ctx), "web", db_port)
    # Locked: refused to its members, an admin may.
    assert cloud.snapshot() == before
    cloud.api.lock(ctx, "web")
    locked = cloud.snapshot()
    with pytest.raises(exceptions.InstanceIsLocked):
        interfaces.attach(cloud.api, _new(ctx), "web", port="free")
    with pytest.raises(exceptions.InstanceIsLocked):
        interfaces.detach(cloud.api, _new(ctx), "web", bound)
    assert cloud.snapshot() == locked
    assert interfaces.attach(cloud.api, _new(cloud.admin), server["id"], port="free")["status"] == "ACTIVE"


def test_a_dry_run_checks_and_writes_nothing(cloud: Cloud, ctx: RequestContext, lan: None) -> None:
    _server(cloud, ctx)
    before = cloud.snapshot()
    planned = interfaces.attach(
        cloud.api, _new(ctx), "web", network="net2", fixed_ip="10.0.1.7", dry_run=True
    )
    assert planned["id"] is None and planned["network"] == "net2"
    with pytest.raises(exceptions.NetworkNotFound):
        interfaces.attach(cloud.api, _new(ctx), "web", network="nowhere", dry_run=True)
    assert cloud.snapshot() == before


@pytest.mark.parametrize("by", ["port", "network"])
def test_a_failed_host_attach_is_rolled_back_with_its_fault(
    cloud: Cloud, ctx: RequestContext, lan: None, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    server = _server(cloud, ctx)
    given = ports.create(cloud.db, ctx, {"name": "mine", "network": "net2"})
    assert given is not None
    monkeypatch.setenv(failure_env_var(server["host"]), "fail_interface_attach")
    kwargs = {"port": "mine"} if by == "port" else {"network": "net2", "fixed_ip": "10.0.1.20"}
    with pytest.raises(exceptions.ComputeError, match="interface attaches on host"):
        interfaces.attach(cloud.api, _new(ctx), "web", **kwargs)
    assert len(_ports_of(cloud, ctx, server)) == 1
    assert len(_guest_ports(cloud, server)) == 1
    # The given port is free again; a port the attach made is gone with its address.
    assert ports.show(cloud.db, ctx, "mine")["device_id"] is None
    assert [p["name"] for p in ports.list_ports(cloud.db, ctx, network="net2")] == ["mine"]
    assert _events(cloud, "web") == ("attach_interface", [("compute_attach_interface", "Error")])
    assert cloud.api.get(ctx, "web")["status"] == "ACTIVE"
    monkeypatch.delenv(failure_env_var(server["host"]))
    assert interfaces.attach(cloud.api, _new(ctx), "web", **kwargs)["status"] == "ACTIVE"


def test_heal_releases_the_port_of_an_attach_cut_off(cloud: Cloud, ctx: RequestContext, lan: None) -> None:
    server = _server(cloud, ctx)
    mine = ports.create(cloud.db, ctx, {"name": "mine", "network": "net2"})
    assert mine is not None
    # An attach killed after its binding: the port bound (BUILD), the server's NICs without it,
    # and (the worst case) the host's guest with it.
    with cloud.db.reader() as session:
        row = ports.get(session, ctx, "mine")
    cloud.db.run_in_transaction(lambda s: ports.bind_to_server(s, row, server["id"], None, server["host"]))
    nic = NetworkSpec(type="network", source="net2", mac=mine["mac_address"], port_id=mine["id"])
    cloud.fake(server["host"]).attach_interface(bare_spec(server["id"]), nic)
    # Under way as far as heal can tell: left alone.
    report = heal(cloud.db, cloud.conf)
    assert not [c for c in report.corrections if c.kind == "interface_recovered"]
    later = utcnow() + dt.timedelta(seconds=cloud.conf.compute.build_timeout + 60)
    report = heal(cloud.db, cloud.conf, clock=lambda: later)
    found = [c for c in report.corrections if c.kind == "interface_recovered"]
    assert len(found) == 1 and found[0].applied, report.corrections
    assert ports.show(cloud.db, ctx, "mine")["device_id"] is None
    assert mine["id"] not in _guest_ports(cloud, server)
    # The server's own port is no attach cut off.
    assert len(_ports_of(cloud, ctx, server)) == 1
    again = heal(cloud.db, cloud.conf, clock=lambda: later)
    assert not [c for c in again.corrections if c.kind == "interface_recovered"]


def test_the_command_line_adds_and_removes_ports(nk: Any) -> None:  # noqa: F811
    nk("db", "upgrade")
    nk("host", "add", "compute-1", "--vcpus", "8", "--memory-mb", "16384", "--disk-gb", "200")
    nk("flavor", "create", "m1.small", "--vcpus", "1", "--ram", "1024", "--disk", "10")
    nk("image", "create", "tiny", "--location", "/var/lib/novakit/images/tiny.qcow2")
    for name, cidr in (("lan", "10.8.0.0/24"), ("lan2", "10.9.0.0/24")):
        nk("network", "create", name, "--source", name)
        nk("subnet", "create", f"{name}-v4", "--network", name, "--subnet-range", cidr)
    nk("port", "create", "p1", "--network", "lan2")
    nk("server", "create", "a", "--flavor", "m1.small", "--image", "tiny", "--nic", "net-id=lan")
    assert "port p1 attached to server a" in nk("server", "add", "port", "a", "p1").stdout
    added = nk("server", "add", "network", "a", "lan2", "--fixed-ip", "10.9.0.30").stdout
    assert "10.9.0.30" in added
    listed = json.loads(nk("port", "list", "-f", "json").stdout)
    assert len([p for p in listed if p["device_id"]]) == 3
    assert "port p1 detached from server a" in nk("server", "remove", "port", "a", "p1").stdout
    refused = nk("server", "remove", "port", "a", "p1", code=1)
    assert "p1" in refused.stderr
    listed = json.loads(nk("port", "list", "-f", "json").stdout)
    assert len([p for p in listed if p["device_id"]]) == 2 and len(listed) == 3
