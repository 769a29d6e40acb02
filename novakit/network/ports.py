"""Ports: a NIC's MAC (chosen once, never changed), its fixed IPs, its server and host.

A MAC is a locally administered unicast address under Neutron's default base
``fa:16:3e``, drawn at random and kept unique by the ``mac_address`` unique key:
an insert that loses (another port has it) draws again, in a savepoint.
A port made for a boot goes with its server (``preserve_on_delete`` False); one
the user made and handed to a boot is only unbound when the server goes.
"""

from __future__ import annotations

import re
import secrets
import uuid as uuidlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from pydantic import Field, field_validator
from sqlalchemy import Table, and_, bindparam, delete, exists, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.compute import schemas
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import IPAllocation, Network, Port, SecurityGroup, SecurityGroupPortBinding, Subnet
from novakit.host.messages import FixedIp
from novakit.network import ipam, networks, security_groups
from novakit.network import subnets as subnet_api

MAC_BASE = "fa:16:3e"  # Neutron's base_mac: the 0x02 bit of fa says "locally administered"
DEVICE_OWNER = "compute:nova"
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_MAC_ATTEMPTS = 16
_READ_CHUNK = 5000  # ports whose fixed IPs and groups one query reads


class FixedIpRequest(schemas._Request):
    """A fixed IP asked for: an address, a subnet to take one from (Neutron's ``subnet_id``), or both."""

    ip_address: str | None = None
    subnet: str | None = Field(default=None, min_length=1, max_length=255)


class PortCreate(schemas._Request):
    name: str | None = None
    network: str
    fixed_ips: list[FixedIpRequest] = Field(default_factory=list, max_length=1)
    mac_address: str | None = None
    # Neutron's port security: disabled, the port is not filtered and carries no group.
    port_security_enabled: bool = True
    # The groups it carries (names or ids, of the caller's project); None: ``default``.
    security_groups: list[str] | None = Field(default=None, max_length=16)

    _check_name = field_validator("name")(
        classmethod(lambda cls, v: schemas._check_name(v) if v is not None else v)
    )

    @field_validator("mac_address")
    @classmethod
    def _mac(cls, v: str | None) -> str | None:
        return check_mac(v) if v is not None else None


class PortUpdate(schemas._Request):
    name: str | None = None
    security_groups: list[str] | None = Field(default=None, max_length=16)

    _check_name = field_validator("name")(
        classmethod(lambda cls, v: schemas._check_name(v) if v is not None else v)
    )


def check_mac(value: str) -> str:
    mac = value.strip().lower().replace("-", ":")
    if not _MAC.match(mac):
        raise ValueError(f"{value!r} is not a MAC address (six hex pairs: fa:16:3e:00:00:01)")
    if int(mac[:2], 16) & 1:
        raise ValueError(f"{mac} is a multicast address; a NIC's MAC must be unicast")
    if mac == "00:00:00:00:00:00":
        raise ValueError("00:00:00:00:00:00 is not a usable MAC address")
    return mac


def random_mac() -> str:
    return MAC_BASE + "".join(f":{b:02x}" for b in secrets.token_bytes(3))


def get(session: Session, ctx: RequestContext, ref: str) -> Port:
    """A port by uuid or name, of the caller's project (an admin's: any)."""
    stmt = select(Port).where(or_(Port.uuid == ref, Port.name == ref))
    stmt = policy.scope(ctx, stmt, Port.project_id)
    row = session.execute(stmt.order_by(Port.id)).scalars().first()
    if row is None:
        raise exceptions.PortNotFound(port=ref)
    return row


def fixed_ips(session: Session, port_ids: list[int]) -> dict[int, list[tuple[IPAllocation, Subnet]]]:
    out: dict[int, list[tuple[IPAllocation, Subnet]]] = {p: [] for p in port_ids}
    if not port_ids:
        return out
    rows = session.execute(
        select(IPAllocation, Subnet)
        .join(Subnet, Subnet.id == IPAllocation.subnet_id)
        .where(IPAllocation.port_id.in_(port_ids))
        .order_by(IPAllocation.id)
    ).all()
    for alloc, subnet in rows:
        out[alloc.port_id].append((alloc, subnet))
    return out


def fixed_ip_specs(ips: list[tuple[IPAllocation, Subnet]]) -> list[FixedIp]:
    """What the guest needs to configure each address statically."""
    return [
        FixedIp(
            address=a.ip_address,
            cidr=s.cidr,
            gateway=s.gateway_ip,
            dns_nameservers=list(s.dns_nameservers or []),
        )
        for a, s in ips
    ]


def view(
    port: Port,
    network: Network,
    ips: list[tuple[IPAllocation, Subnet]],
    ctx: RequestContext,
    groups: list[str] | None = None,
    group_ids: list[str] | None = None,
) -> dict[str, Any]:
    """The port as ``ctx`` may see it. ``binding_host`` (Neutron's ``binding:host_id``) is in it
    only for a caller who may see hosts (``host:show``, the rule a server's view follows in
    ``novakit.compute.views``): absent for anyone else, not None, which would say "unbound" of
    a bound port. Every face shows a port through this view (the Network router's included)."""
    shown = {
        "id": port.uuid,
        "name": port.name,
        "network": network.name,
        "network_id": network.uuid,
        "mac_address": port.mac_address,
        "fixed_ips": [{"subnet": s.name, "subnet_id": s.uuid, "ip_address": a.ip_address} for a, s in ips],
        "device_id": port.device_id,
        "device_owner": port.device_owner,
        "status": port.status,
        "project_id": port.project_id,
        "security_groups": list(groups or []),  # names (``novakit.network.security_groups``)
        "security_group_ids": list(group_ids or []),
        "port_security_enabled": port.port_security_enabled,
    }
    if policy.allowed(ctx, "host:show"):
        shown["binding_host"] = port.binding_host
    return shown


def insert_port(
    session: Session,
    ctx: RequestContext,
    network: Network,
    *,
    name: str | None = None,
    mac: str | None = None,
    device_id: str | None = None,
    preserve_on_delete: bool = True,
    port_security_enabled: bool = True,
) -> Port:
    """Insert a port with its MAC (``mac``, or a random one drawn again while taken)."""
    for _ in range(_MAC_ATTEMPTS):
        port = Port(
            uuid=str(uuidlib.uuid4()),
            name=name,
            network_id=network.id,
            project_id=ctx.project_id,
            mac_address=mac or random_mac(),
            device_id=device_id,
            device_owner=DEVICE_OWNER if device_id else None,
            status="DOWN",
            preserve_on_delete=preserve_on_delete,
            port_security_enabled=port_security_enabled,
        )
        try:
            with session.begin_nested():
                session.add(port)
                session.flush()
        except IntegrityError:
            # The savepoint's rollback took the pending port out of the session.
            if mac is not None:
                raise exceptions.MacAddressInUse(mac=mac) from None
            continue
        return port
    raise exceptions.ConcurrentUpdateDetected(attempts=_MAC_ATTEMPTS, what="a free MAC address")


def create(
    db: Database, ctx: RequestContext, data: dict[str, Any], *, dry_run: bool = False
) -> dict[str, Any] | None:
    """Create a port on a network, with a fixed IP (the one asked for, or the first free one).
    ``dry_run``: every check, in a read, and nothing written (check mode)."""
    req = schemas.parse(PortCreate, data)

    def write(session: Session) -> dict[str, Any] | None:
        network = networks.get_visible(session, ctx, req.network)
        mac = req.mac_address
        if mac is not None and session.execute(select(Port.id).where(Port.mac_address == mac)).first():
            raise exceptions.MacAddressInUse(mac=req.mac_address)
        asked = req.fixed_ips[0] if req.fixed_ips else FixedIpRequest()
        requested = asked.ip_address
        subnet = _subnet_of_network(session, network, asked.subnet) if asked.subnet is not None else None
        if requested is not None:
            ipam.check_requested(session, network, requested, "fixed_ips[0].ip_address", subnet)
        elif ipam.has_subnets(session, network) and not ipam.free_count(session, network, subnet):
            raise exceptions.IpAddressGenerationFailure(network=network.name)
        secured = req.port_security_enabled
        # Neutron: a new port carries its project's default group, unless it has no port security.
        if req.security_groups is not None:
            groups = (
                security_groups.resolve_for_boot(session, ctx, req.security_groups)
                if req.security_groups
                else []
            )
        else:
            groups = [security_groups.DEFAULT] if secured else []
        if groups and not secured:
            raise security_groups.no_port_security(req.name or "(new)", "security_groups")
        if dry_run:
            return None
        port = insert_port(
            session, ctx, network, name=req.name, mac=req.mac_address, port_security_enabled=secured
        )
        ipam.allocate(session, port.id, network, requested, "fixed_ips[0].ip_address", subnet)
        security_groups.bind_port(session, ctx, port, groups)
        return _view_of(session, ctx, port, network)

    return db.run_or_dry_run(write, dry_run=dry_run)


def _subnet_of_network(session: Session, network: Network, ref: str) -> Subnet:
    """A fixed IP's named subnet: one of the port's network (else 400, naming the field)."""
    try:
        found = subnet_api.get(session, ref)
    except exceptions.SubnetNotFound:
        found = None
    if found is None or found.network_id != network.id:
        raise exceptions.ValidationError(
            "fixed_ips[0].subnet", f"subnet {ref} is not a subnet of network {network.name}"
        )
    return found


def _view_of(session: Session, ctx: RequestContext, port: Port, network: Network) -> dict[str, Any]:
    groups, ids = security_groups.carried_groups(session, [port.id])
    return view(port, network, fixed_ips(session, [port.id])[port.id], ctx, groups[port.id], ids[port.id])


#: Neutron's port filters, by name: the condition on a listed row (a port joined with its
#: network) that one of the values given matches. ``ip_address``, ``subnet_id``: a fixed IP of
#: the port has it (Neutron's ``fixed_ips=ip_address=...``); ``security_groups``: a group id the
#: port carries; ``binding_host``: the host it is bound to (those who may see hosts only).
FILTERS: dict[str, Callable[[list[str]], Any]] = {
    "id": lambda v: Port.uuid.in_(v),
    "name": lambda v: Port.name.in_(v),
    "network_id": lambda v: Network.uuid.in_(v),
    "device_id": lambda v: Port.device_id.in_(v),
    "device_owner": lambda v: Port.device_owner.in_(v),
    "mac_address": lambda v: Port.mac_address.in_(v),
    "status": lambda v: Port.status.in_(v),
    "project_id": lambda v: Port.project_id.in_(v),
    "tenant_id": lambda v: Port.project_id.in_(v),
    "ip_address": lambda v: exists().where(IPAllocation.port_id == Port.id, IPAllocation.ip_address.in_(v)),
    "subnet_id": lambda v: exists().where(
        IPAllocation.port_id == Port.id, IPAllocation.subnet_id == Subnet.id, Subnet.uuid.in_(v)
    ),
    "security_groups": lambda v: exists().where(
        SecurityGroupPortBinding.port_id == Port.id,
        SecurityGroupPortBinding.security_group_id == SecurityGroup.id,
        SecurityGroup.uuid.in_(v),
    ),
    "binding_host": lambda v: Port.binding_host.in_(v),
    "port_security_enabled": lambda v: Port.port_security_enabled.in_([_flag(f) for f in v]),
}


def _flag(value: str) -> bool:
    """A boolean filter's value, as Neutron reads one (true/false, 1/0)."""
    found = {"true": True, "1": True, "false": False, "0": False}.get(value.lower())
    if found is None:
        raise exceptions.ValidationError("port_security_enabled", "must be true or false")
    return found


#: The orders a listing may ask for (Neutron's sort keys of a port), by name. A column that may
#: be NULL is read as "" (as the view shows it), so that every port has a place in the order and
#: a page's marker a value to start after.
SORT_KEYS: dict[str, Any] = {
    "id": Port.uuid,
    "name": func.coalesce(Port.name, ""),
    "network_id": Network.uuid,
    "mac_address": Port.mac_address,
    "status": Port.status,
    "device_id": func.coalesce(Port.device_id, ""),
    "device_owner": func.coalesce(Port.device_owner, ""),
    "project_id": func.coalesce(Port.project_id, ""),
    "tenant_id": func.coalesce(Port.project_id, ""),
}


def list_ports(
    db: Database,
    ctx: RequestContext,
    *,
    network: str | None = None,
    device_id: str | None = None,
    filters: Mapping[str, Sequence[str]] | None = None,
    sort: Sequence[tuple[str, str]] = (),
    limit: int | None = None,
    marker: str | None = None,
    reverse: bool = False,
) -> list[dict[str, Any]]:
    """The ports the caller may see (``policy.scope``: a member its project's), filtered, ordered
    and paged in one query; the fixed IPs and groups are read for the listed ports only.

    ``network``: a network's name or id; ``filters``: ``FILTERS`` name -> values (any matches;
    no value: no filter); ``sort``: (``SORT_KEYS`` name, ``asc`` or ``desc``) pairs, the first
    deciding first; ties, and a listing with no ``sort``, go by creation (the row id).
    ``limit``: at most this many; ``marker``: the id of the port to start after in that order
    (any port the caller may see, as in Neutron; another is PortNotFound); ``reverse``: the
    ports before the marker instead (Neutron's ``page_reverse``), still in the asked order.
    """
    keys = _order(sort)
    if limit is not None and limit < 1:
        raise exceptions.ValidationError("limit", "must be a whole number of 1 or more (None: all)")
    asked = {name: list(values) for name, values in (filters or {}).items() if values}
    unknown = sorted(set(asked) - FILTERS.keys())
    if unknown:
        raise exceptions.ValidationError(unknown[0], f"is not a port filter (one of {', '.join(FILTERS)})")
    if "binding_host" in asked:
        policy.authorize(ctx, "host:show")
    if reverse:
        keys = [(column, not descending) for column, descending in keys]
    with db.reader() as session:
        stmt = policy.scope(
            ctx, select(Port, Network).join(Network, Network.id == Port.network_id), Port.project_id
        )
        if network is not None:
            stmt = stmt.where(Port.network_id == networks.get(session, network).id)
        if device_id is not None:
            stmt = stmt.where(Port.device_id == device_id)
        for name, values in asked.items():
            stmt = stmt.where(FILTERS[name](values))
        if marker is not None:
            stmt = stmt.where(_after(session, ctx, marker, keys))
        stmt = stmt.order_by(*(column.desc() if descending else column for column, descending in keys))
        if limit is not None:
            stmt = stmt.limit(limit)
        rows = list(session.execute(stmt).all())
        if reverse:
            rows.reverse()
        ips: dict[int, list[tuple[IPAllocation, Subnet]]] = {}
        groups: dict[int, list[str]] = {}
        ids: dict[int, list[str]] = {}
        # In chunks: a whole listing's ids would pass SQLite's limit of bound values (32,766).
        for start in range(0, len(rows), _READ_CHUNK):
            chunk = [p.id for p, _ in rows[start : start + _READ_CHUNK]]
            ips.update(fixed_ips(session, chunk))
            names, uuids = security_groups.carried_groups(session, chunk)
            groups.update(names)
            ids.update(uuids)
        return [view(p, n, ips[p.id], ctx, groups[p.id], ids[p.id]) for p, n in rows]


def _order(sort: Sequence[tuple[str, str]]) -> list[tuple[Any, bool]]:
    """(column, descending) pairs of the asked order, the row id last: the order is total, so a
    marker's place in it is one."""
    keys = []
    for name, direction in sort:
        if name not in SORT_KEYS:
            raise exceptions.ValidationError("sort_key", f"must be one of {', '.join(SORT_KEYS)}")
        if direction not in ("asc", "desc"):
            raise exceptions.ValidationError("sort_dir", "must be asc or desc")
        keys.append((SORT_KEYS[name], direction == "desc"))
    return [*keys, (Port.id, False)]


def _after(session: Session, ctx: RequestContext, marker: str, keys: list[tuple[Any, bool]]) -> Any:
    """The rows after the marker port in the order ``keys`` (keyset paging: its values read
    once, then compared, so no row before it is read)."""
    found = session.execute(
        policy.scope(
            ctx,
            select(*(column for column, _ in keys))
            .select_from(Port)
            .join(Network, Network.id == Port.network_id)
            .where(Port.uuid == marker),
            Port.project_id,
        )
    ).first()
    if found is None:
        raise exceptions.PortNotFound(port=marker)
    later = []
    for n, (column, descending) in enumerate(keys):
        same = [keys[i][0] == found[i] for i in range(n)]
        later.append(and_(*same, column < found[n] if descending else column > found[n]))
    return or_(*later)


def show(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any]:
    with db.reader() as session:
        port = get(session, ctx, ref)
        network = session.get(Network, port.network_id)
        assert network is not None
        return _view_of(session, ctx, port, network)


def update_port(
    db: Database,
    ctx: RequestContext,
    ref: str,
    data: dict[str, Any],
    *,
    on_change: security_groups.OnChange | None = None,
) -> dict[str, Any]:
    """Rename a port, or replace the groups it carries (Neutron's ``PUT /ports/{id}``: the list
    given is the whole list). ``on_change``: called, once committed, with the ports whose
    filters changed (this one, and those whose rules name a group it gained or lost)."""
    req = schemas.parse(PortUpdate, data)
    touched: list[str] = []

    def write(session: Session) -> dict[str, Any]:
        port = get(session, ctx, ref)
        network = session.get(Network, port.network_id)
        assert network is not None
        if req.name is not None:
            port.name = req.name
        if req.security_groups is not None:
            names = (
                security_groups.resolve_for_boot(session, ctx, req.security_groups)
                if req.security_groups
                else []
            )
            if names and not port.port_security_enabled:
                raise security_groups.no_port_security(port.name or port.uuid, "security_groups")
            before = security_groups.port_group_db_ids(session, port.id)
            session.execute(
                delete(SecurityGroupPortBinding).where(SecurityGroupPortBinding.port_id == port.id)
            )
            security_groups.bind_port(session, ctx, port, names)
            after = security_groups.port_group_db_ids(session, port.id)
            if before != after:
                changed = security_groups.referrers(session, sorted(set(before) ^ set(after)))
                touched[:] = security_groups.port_uuids(session, [port.id, *changed])
        session.flush()
        return _view_of(session, ctx, port, network)

    shown = db.run_in_transaction(write)
    if on_change is not None and touched:
        on_change(list(touched))
    return shown


def delete_port(
    db: Database,
    ctx: RequestContext,
    ref: str,
    *,
    dry_run: bool = False,
    on_change: security_groups.OnChange | None = None,
) -> None:
    """Delete a port and free its addresses; refused while a server uses it (delete the server).
    ``dry_run``: the checks, in a read, and nothing deleted (check mode). ``on_change``: called,
    once the delete committed, with the other ports whose filters lose its address (their rules
    name a group it carried as remote group; ``filter_sync.push_filters`` sends them)."""
    touched: list[str] = []

    def write(session: Session) -> None:
        port = get(session, ctx, ref)
        if port.device_id:
            raise exceptions.PortInUse(port=port.name or port.uuid, device_id=port.device_id)
        if dry_run:
            return
        # Asked before the delete: the groups it carries decide whose rules it was in.
        affected = security_groups.affected_ports(session, ports=[port.id])
        touched[:] = [p.port_id for p in affected if p.port_id != port.uuid]
        # Guarded: a boot that took the port meanwhile keeps it.
        gone = session.execute(delete(Port).where(Port.id == port.id, Port.device_id.is_(None)))
        if gone.rowcount != 1:  # type: ignore[attr-defined]
            raise exceptions.PortInUse(port=port.name or port.uuid, device_id="(another server)")

    db.run_or_dry_run(write, dry_run=dry_run)
    if on_change is not None and touched:
        on_change(list(touched))


def free_for_instance(session: Session, instance_uuid: str) -> None:
    """The server is gone (deleted, or its build failed for good): the ports made for it go with
    their addresses, the ports it was given are unbound and kept (Nova's deallocate_for_instance)."""
    owned = select(Port.id).where(Port.device_id == instance_uuid, Port.preserve_on_delete.is_(False))
    session.execute(delete(IPAllocation).where(IPAllocation.port_id.in_(owned)))
    session.execute(delete(Port).where(Port.device_id == instance_uuid, Port.preserve_on_delete.is_(False)))
    session.execute(
        update(Port)
        .where(Port.device_id == instance_uuid)
        .values(device_id=None, device_owner=None, binding_host=None, status="DOWN")
    )


def _ports_of_servers(*columns: str) -> Any:
    """An UPDATE of ``columns`` (and ``updated_at``) on the ports of the servers ``:uuids``, built
    once: Core, not the ORM's bulk update, as a boot runs it twice (its binding, its status)."""
    table = cast(Table, Port.__table__)
    return (
        update(table)
        .where(table.c.device_id.in_(bindparam("uuids", expanding=True)))
        .values({c: bindparam(c) for c in columns})
    )


_BIND_HOST = _ports_of_servers("binding_host")
_BIND_HOST_STATUS = _ports_of_servers("binding_host", "status")
_SET_STATUS = _ports_of_servers("status")


def bind_host(
    session: Session, instance_uuids: list[str], host: str | None, status: str | None = None
) -> None:
    """Bind the servers' ports to the host they were placed on (``binding:host_id``), and set their status."""
    if not instance_uuids:
        return
    if status is None:
        session.execute(_BIND_HOST, {"uuids": instance_uuids, "binding_host": host})
    else:
        session.execute(_BIND_HOST_STATUS, {"uuids": instance_uuids, "binding_host": host, "status": status})


def set_status(session: Session, instance_uuids: list[str], status: str) -> None:
    if instance_uuids:
        session.execute(_SET_STATUS, {"uuids": instance_uuids, "status": status})


# --- a port attached to a built server and detached again (``novakit.compute.interfaces``) -------


def device_owner(zone: str | None) -> str:
    """Neutron's ``device_owner`` of a server's port: ``compute:<its availability zone>``."""
    return f"compute:{zone or 'nova'}"


def bind_to_server(session: Session, port: Port, instance_uuid: str, zone: str | None, host: str) -> None:
    """Bind a free port to a server on ``host`` (``status`` BUILD until its host attached it).
    Guarded: a port another attach or boot took meanwhile is PortInUse, and nothing changes."""
    taken = session.execute(
        update(Port)
        .where(Port.id == port.id, Port.device_id.is_(None))
        .values(device_id=instance_uuid, device_owner=device_owner(zone), binding_host=host, status="BUILD")
    )
    if taken.rowcount != 1:  # type: ignore[attr-defined]
        raise exceptions.PortInUse(port=port.name or port.uuid, device_id="(another server)")


def set_port_status(session: Session, port_uuid: str, instance_uuid: str, status: str) -> bool:
    """The status of one port of a server (guarded by its binding); whether it was still bound."""
    done = session.execute(
        update(Port).where(Port.uuid == port_uuid, Port.device_id == instance_uuid).values(status=status)
    )
    return bool(done.rowcount == 1)  # type: ignore[attr-defined]


def release_from_server(session: Session, port_uuid: str, instance_uuid: str) -> bool:
    """One port leaves its server, as ``free_for_instance`` frees a server's ports: made for the
    server (``preserve_on_delete`` false: by its boot or an attach), deleted with its addresses;
    given to it, unbound and kept. Guarded by the binding: whether it was still the server's."""
    owned = select(Port.id).where(
        Port.uuid == port_uuid, Port.device_id == instance_uuid, Port.preserve_on_delete.is_(False)
    )
    session.execute(delete(IPAllocation).where(IPAllocation.port_id.in_(owned)))
    gone = session.execute(
        delete(Port).where(
            Port.uuid == port_uuid, Port.device_id == instance_uuid, Port.preserve_on_delete.is_(False)
        )
    )
    if gone.rowcount == 1:  # type: ignore[attr-defined]
        return True
    freed = session.execute(
        update(Port)
        .where(Port.uuid == port_uuid, Port.device_id == instance_uuid)
        .values(device_id=None, device_owner=None, binding_host=None, status="DOWN")
    )
    return bool(freed.rowcount == 1)  # type: ignore[attr-defined]
