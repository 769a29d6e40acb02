"""Attaching a port to a built server and detaching it: the front door's side (Nova's
``os-interface``; ``server add port``, ``server add network``, ``server remove port``).

The server's checks and its instance action are every action's (``API.act``: a dry run first,
then the deferred action of the state table's ``attach_interface`` / ``detach_interface`` rows:
active, paused or stopped, no task running, not locked to a non-admin); the host's part goes
through the conductor's one round trip (``volume_attach.run_on_host``). An attach:

1. the request (a port, or a network with an optional fixed IP: one of them) and the server's
   checks (a dry run of ``act``);
2. in one transaction: the port is visible to the caller, of the server's project and unbound,
   or a new port is made on a network the caller may use (its address, the security groups the
   server's ports carry, else ``default``, as a boot's ports; ``preserve_on_delete`` false: it
   goes when detached or with the server); its network is one the server's host has; it is
   bound to the server (device_id, device_owner ``compute:<zone>``, its host, status BUILD) by a
   guarded UPDATE, so that a racing attach or boot loses (PortInUse); and the NIC its host gets
   is read (network, MAC, fixed IPs, filter rules);
3. the action, ``act(..., defer=True)``: its instance action is recorded; a server that changed
   meanwhile refuses it, and the port is released again (as in 5);
4. the host's ``attach_interface``, its events and fault recorded as every action's;
5. done: the NIC joins the server's ``networks`` (what a reboot, a rebuild or a move defines
   its guest with) and the port is ACTIVE, in one transaction; the ports whose rules name its
   groups learn its address (``filter_sync.push_members``). Failed: the port is released (one
   this attach made is deleted with its address, a given one unbound) and ComputeError says why.

A detach: the port is one of the server's NICs (else PortNotFound), the action, the host's
detach, and then, in one transaction, the NIC leaves ``networks`` and the port is released
(deleted when its boot or an attach made it, as Nova deletes the ports it made; a port the user
gave is unbound and kept). A failed host detach changes no record.

Recovery. The server's ``networks`` are written only once its host attached the NIC, so an
attach cut off after step 2 leaves a port bound to a server that does not list it: heal
(``novakit.heal.interfaces``) finds such ports unchanged for ``compute.build_timeout``, asks
the host to detach the NIC (idempotent: the attach may or may not have reached the guest) and
releases the port as step 5's rollback does. A detach cut off after its host's part leaves the
port attached in the records; detaching it again finishes it (the host's detach is idempotent).

``dry_run`` (check mode): steps 1 and 2's checks in a read, nothing written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.cells.registry import targeting
from novakit.compute.volume_attach import run_on_host
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import Instance, Network, Port
from novakit.fleet import hosts
from novakit.host.messages import NetworkSpec
from novakit.network import effective_rules, filter_sync, ipam, networks, ports, security_groups

if TYPE_CHECKING:
    from novakit.compute.api import API

#: the field a fixed IP of an attach is named by in errors (Nova's body: ``fixed_ips``)
FIXED_IP_FIELD = "fixed_ips[0].ip_address"


@dataclass(frozen=True)
class _Server:
    """What an attach or a detach needs of its server, read once its checks passed."""

    uuid: str
    name: str
    host: str
    zone: str | None
    project_id: str
    nics: tuple[NetworkSpec, ...]

    def nic_of(self, port_uuid: str) -> NetworkSpec | None:
        return next((n for n in self.nics if n.port_id == port_uuid), None)


def attach(
    api: API,
    ctx: RequestContext,
    server_ref: str,
    *,
    port: str | None = None,
    network: str | None = None,
    fixed_ip: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Attach a port (``port``), or a new port on ``network`` (with ``fixed_ip`` if given), to a
    server; returns the port as ``ports.show`` does (a dry run: the port given as it is, or the
    network and address a new one would have, with ``id`` None)."""
    _check_request(port, network, fixed_ip)
    server = _server(api, ctx, server_ref, "attach_interface", port or "(new)")
    if dry_run:
        with api.db.reader() as session:
            given, net = _plan(session, ctx, server, port, network, fixed_ip)
        if given is not None:
            return ports.show(api.db, ctx, given.uuid)
        return {"id": None, "network": net.name, "network_id": net.uuid, "fixed_ips": _asked(fixed_ip)}

    def bind(session: Session) -> tuple[str, NetworkSpec]:
        given, net = _plan(session, ctx, server, port, network, fixed_ip)
        row = given if given is not None else _new_port(session, ctx, server, net, fixed_ip)
        ports.bind_to_server(session, row, server.uuid, server.zone, server.host)
        ips = ports.fixed_ips(session, [row.id])[row.id]
        nic = NetworkSpec(
            type=net.provider,  # type: ignore[arg-type]
            source=net.source,
            mac=row.mac_address,
            port_id=row.uuid,
            fixed_ips=ports.fixed_ip_specs(ips),
        )
        return row.uuid, filter_sync.with_filters(session, [nic])[0]

    port_uuid, nic = api.db.run_in_transaction(bind)
    options = {"port_id": port_uuid, "nic": nic.model_dump(mode="json")}
    try:
        outcome = api.act(ctx, server.uuid, "attach_interface", options, defer=True)
    except Exception:
        _release(api, server.uuid, port_uuid)
        raise
    ok, fault = run_on_host(api, ctx, outcome.request)
    if not ok:
        _release(api, server.uuid, port_uuid)
        raise exceptions.ComputeError(
            reason=f"attaching port {port_uuid} to server {server.name} failed: {fault}"
        )
    with targeting(api.db, server.uuid):
        api.db.run_in_transaction(lambda s: _attached(s, server.uuid, port_uuid, nic))
    filter_sync.push_members(api.conductor.rpc, ctx.request_id, [server.uuid])
    return ports.show(api.db, ctx, port_uuid)


def detach(
    api: API, ctx: RequestContext, server_ref: str, port_ref: str, *, dry_run: bool = False
) -> dict[str, Any]:
    """Detach a port from a server; returns the port as it was before (its ``id``)."""
    if not port_ref or not port_ref.strip():
        raise exceptions.ValidationError("port_id", "is required: the port to detach")
    server = _server(api, ctx, server_ref, "detach_interface", port_ref)
    with api.db.reader() as session:
        row = ports.get(session, ctx, port_ref)
        nic = server.nic_of(row.uuid)
        if row.device_id != server.uuid or nic is None:
            raise exceptions.PortNotFound(port=port_ref)
        port_uuid = row.uuid
        # Asked before it goes: the other ports whose rules name a group it carries.
        touched = [
            p.port_id
            for p in effective_rules.affected_ports(session, ports=[port_uuid])
            if p.port_id != port_uuid
        ]
    shown = ports.show(api.db, ctx, port_uuid)
    if dry_run:
        return shown
    options = {"port_id": port_uuid, "nic": nic.model_dump(mode="json")}
    outcome = api.act(ctx, server.uuid, "detach_interface", options, defer=True)
    ok, fault = run_on_host(api, ctx, outcome.request)
    if not ok:
        raise exceptions.ComputeError(
            reason=f"detaching port {port_uuid} from server {server.name} failed: {fault}"
        )
    with targeting(api.db, server.uuid):
        api.db.run_in_transaction(lambda s: _detached(s, server.uuid, port_uuid))
    if touched:
        filter_sync.push_filters(api.conductor.rpc, ctx.request_id, touched)
    return shown


# ---------------------------------------------------------------- checks


def _check_request(port: str | None, network: str | None, fixed_ip: str | None) -> None:
    """One of a port and a network; an address only with a network. Refused naming the field."""
    if port is not None and not port.strip():
        raise exceptions.ValidationError("port_id", "must be a port's id or name, not empty")
    if network is not None and not network.strip():
        raise exceptions.ValidationError("net_id", "must be a network's id or name, not empty")
    if port is not None and network is not None:
        raise exceptions.ValidationError(
            "port_id", "and net_id are exclusive: attach a port, or a new port on a network"
        )
    if port is None and network is None:
        raise exceptions.ValidationError(
            "port_id", "is required, or net_id: the port to attach, or the network to make one on"
        )
    if fixed_ip is not None and network is None:
        raise exceptions.ValidationError(
            FIXED_IP_FIELD, "is asked for with net_id only: a port attached keeps its own addresses"
        )


def _server(api: API, ctx: RequestContext, ref: str, action: str, port_ref: str) -> _Server:
    """The server's checks of ``action`` (a dry run of ``act``: in the caller's project, its
    lock, the state table's row, a host), and what the attach or detach needs of it."""
    from novakit.cells import instances as cell_instances

    outcome = api.act(ctx, ref, action, {"port_id": port_ref, "nic": {}}, dry_run=True)
    assert outcome.server is not None
    uuid = outcome.server["id"]
    found = cell_instances.get_many(api.db, RequestContext.admin(ctx.request_id), [uuid])
    if not found:
        raise exceptions.InstanceNotFound(instance_id=ref)
    inst = found[0]
    return _Server(
        uuid=inst.uuid,
        name=inst.display_name,
        host=str(inst.host),
        zone=inst.availability_zone,
        project_id=inst.project_id,
        nics=tuple(NetworkSpec.model_validate(n) for n in inst.networks or []),
    )


def _plan(
    session: Session,
    ctx: RequestContext,
    server: _Server,
    port_ref: str | None,
    network_ref: str | None,
    fixed_ip: str | None,
) -> tuple[Port | None, Network]:
    """The port given (checked: the caller's, the server's project's, unbound) or None, and the
    network its NIC is on (checked: the caller may use it, it has the address, the server's
    host has it)."""
    if port_ref is not None:
        given = ports.get(session, ctx, port_ref)
        if given.project_id != server.project_id:
            raise exceptions.ValidationError(
                "port_id",
                f"port {port_ref} is of project {given.project_id}, server {server.name} of project "
                f"{server.project_id}: a server takes ports of its own project",
            )
        if given.device_id:
            raise exceptions.PortInUse(port=given.name or given.uuid, device_id=given.device_id)
        net = session.get(Network, given.network_id)
        assert net is not None
        field = "port_id"
    else:
        assert network_ref is not None
        given = None
        net = networks.get_visible(session, ctx, network_ref)
        if fixed_ip is not None:
            ipam.check_requested(session, net, fixed_ip, FIXED_IP_FIELD)
        elif ipam.has_subnets(session, net) and not ipam.free_count(session, net):
            raise exceptions.IpAddressGenerationFailure(network=net.name)
        field = "net_id"
    node = hosts.node_in(session, server.host)
    if node.networks is not None and net.source not in node.networks:
        raise exceptions.ValidationError(
            field,
            f"network {net.name} is not on the host of server {server.name}: a server's NICs are on "
            "networks its host has",
        )
    return given, net


def _asked(fixed_ip: str | None) -> list[dict[str, Any]]:
    return [{"ip_address": fixed_ip}] if fixed_ip is not None else []


# ---------------------------------------------------------------- writes


def _new_port(
    session: Session, ctx: RequestContext, server: _Server, net: Network, fixed_ip: str | None
) -> Port:
    """A port made for the attach, in the server's project: its address, and the groups the
    server's ports carry (``default`` when they carry none, as a boot's new ports)."""
    owner = RequestContext(server.project_id, ctx.user_id, list(ctx.roles), ctx.request_id)
    row = ports.insert_port(session, owner, net, preserve_on_delete=False)
    ipam.allocate(session, row.id, net, fixed_ip, FIXED_IP_FIELD)
    own = list(session.execute(select(Port.id).where(Port.device_id == server.uuid)).scalars())
    carried = security_groups.port_groups(session, own)
    names = sorted({name for names in carried.values() for name in names})
    security_groups.bind_port(
        session, owner, row, names or security_groups.resolve_for_boot(session, owner, None)
    )
    return row


def _locked(session: Session, uuid: str) -> Instance | None:
    """The live server's row, locked until the transaction ends (its ``networks`` are read,
    changed and written back: two attaches of one server write them one after the other)."""
    stmt = (
        select(Instance)
        .where(Instance.uuid == uuid, Instance.deleted == 0)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return session.execute(stmt).scalar_one_or_none()


def _write_networks(session: Session, inst: Instance, nics: list[dict[str, Any]]) -> None:
    db_api.instance_update(
        session,
        inst.uuid,
        {"networks": nics},
        expected_task_state=inst.task_state,
        expected_vm_state=inst.vm_state,
        fetch=False,
    )


def _attached(session: Session, uuid: str, port_uuid: str, nic: NetworkSpec) -> None:
    """The host attached it: the NIC joins the server's ``networks``, the port is ACTIVE. A
    server deleted meanwhile freed its ports with it: nothing left to write."""
    inst = _locked(session, uuid)
    if inst is None or not ports.set_port_status(session, port_uuid, uuid, "ACTIVE"):
        return
    nics = list(inst.networks or [])
    if not any(n.get("port_id") == port_uuid for n in nics):
        nics.append(nic.model_copy(update={"filter_rules": None}).model_dump())
        _write_networks(session, inst, nics)


def _detached(session: Session, uuid: str, port_uuid: str) -> None:
    """The host detached it: the NIC leaves the server's ``networks`` and the port is released."""
    inst = _locked(session, uuid)
    if inst is not None:
        nics = [n for n in inst.networks or [] if n.get("port_id") != port_uuid]
        if len(nics) != len(inst.networks or []):
            _write_networks(session, inst, nics)
    ports.release_from_server(session, port_uuid, uuid)


def _release(api: API, uuid: str, port_uuid: str) -> None:
    """An attach that did not happen: its port released (one it made deleted, a given one unbound)."""
    api.db.run_in_transaction(lambda s: ports.release_from_server(s, port_uuid, uuid))
