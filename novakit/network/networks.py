"""Networks: what a server's NIC is plugged into on its host.

A network names a libvirt network (``provider`` "network") or a host bridge
("bridge") by its name on the hosts (``source``); which hosts have it is the
scheduler's ``NetworkFilter``'s business. At most one network is the default,
the one a server gets when its request names none (a partial unique index
keeps it so against two concurrent creates).
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any, Literal

from pydantic import Field, field_validator
from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.compute import schemas
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Network, Port, Subnet

# A libvirt network's or a bridge's name: what ``virsh net-list`` or ``ip link`` shows.
_SOURCE = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,254}$"


class NetworkCreate(schemas._Request):
    name: str
    provider: Literal["network", "bridge"] = "network"
    source: str | None = Field(default=None, pattern=_SOURCE)
    is_default: bool = False
    mtu: int | None = Field(default=None, ge=68, le=65535)
    # Neutron's shared network: every project may see it and put ports on it. The operator's
    # networks are the fleet's (shared); the HTTP service takes Neutron's default, unshared.
    shared: bool = True

    _check_name = field_validator("name")(classmethod(lambda cls, v: schemas._check_name(v)))


class NetworkUpdate(schemas._Request):
    name: str | None = None
    shared: bool | None = None

    _check_name = field_validator("name")(
        classmethod(lambda cls, v: schemas._check_name(v) if v is not None else v)
    )


def view(
    net: Network, subnets: list[str] | None = None, subnet_ids: list[str] | None = None
) -> dict[str, Any]:
    return {
        "id": net.uuid,
        "name": net.name,
        "provider": net.provider,
        "source": net.source,
        "is_default": bool(net.is_default),
        "mtu": net.mtu,
        "shared": bool(net.shared),
        "subnets": list(subnets or []),
        "subnet_ids": list(subnet_ids or []),
        "project_id": net.project_id,
    }


def get(session: Session, ref: str) -> Network:
    """A network by uuid or name."""
    row = (
        session.execute(select(Network).where(or_(Network.uuid == ref, Network.name == ref)))
        .scalars()
        .first()
    )
    if row is None:
        raise exceptions.NetworkNotFound(network=ref)
    return row


def get_visible(session: Session, ctx: RequestContext, ref: str) -> Network:
    """A network by uuid or name that ``ctx`` may see: its project's or a shared one (an admin's:
    any); another project's unshared network is one that does not exist."""
    stmt = select(Network).where(or_(Network.uuid == ref, Network.name == ref))
    row = (
        session.execute(policy.scope_shared(ctx, stmt, Network.project_id, Network.shared)).scalars().first()
    )
    if row is None:
        raise exceptions.NetworkNotFound(network=ref)
    return row


def get_default(session: Session) -> Network | None:
    return session.execute(select(Network).where(Network.is_default.is_(True))).scalars().first()


def _subnets_of(session: Session, network_id: int) -> tuple[list[str], list[str]]:
    """The network's subnets' names and ids."""
    rows = session.execute(
        select(Subnet.name, Subnet.uuid).where(Subnet.network_id == network_id).order_by(Subnet.id)
    ).all()
    return [r.name for r in rows], [r.uuid for r in rows]


def _name_taken(name: str) -> exceptions.Conflict:
    # Said by the check before the insert and by the unique key that catches a create racing it.
    return exceptions.Conflict(reason=f"a network named {name!r} exists; network names are unique")


def create(
    db: Database, ctx: RequestContext, data: dict[str, Any], *, dry_run: bool = False
) -> dict[str, Any] | None:
    """Create a network; ``source`` defaults to its name (the libvirt network of that name).
    ``dry_run``: every check, in a read, and nothing written (check mode)."""
    policy.authorize(ctx, "network:create")
    req = schemas.parse(NetworkCreate, data)

    def write(session: Session) -> dict[str, Any] | None:
        if session.execute(select(Network.id).where(Network.name == req.name)).first() is not None:
            raise _name_taken(req.name)
        if req.is_default:
            current = get_default(session)
            if current is not None:
                raise exceptions.DefaultNetworkExists(network=current.name)
        if dry_run:
            return None
        row = Network(
            uuid=str(uuidlib.uuid4()),
            name=req.name,
            provider=req.provider,
            source=req.source or req.name,
            is_default=req.is_default,
            mtu=req.mtu,
            shared=req.shared,
            project_id=ctx.project_id,
        )
        session.add(row)
        session.flush()
        return view(row)

    try:
        return db.run_or_dry_run(write, dry_run=dry_run)
    except IntegrityError:
        # Another create took the name or the default between the check and the insert.
        with db.reader() as session:
            current = get_default(session)
        if req.is_default and current is not None and current.name != req.name:
            raise exceptions.DefaultNetworkExists(network=current.name) from None
        raise _name_taken(req.name) from None


def list_networks(db: Database, ctx: RequestContext | None = None) -> list[dict[str, Any]]:
    """Every network, or (``ctx`` given) those ``ctx`` may see (``get_visible``)."""
    with db.reader() as session:
        stmt = select(Network).order_by(Network.name)
        if ctx is not None:
            stmt = policy.scope_shared(ctx, stmt, Network.project_id, Network.shared)
        nets = session.execute(stmt).scalars().all()
        subnets: dict[int, list[str]] = {}
        ids: dict[int, list[str]] = {}
        rows = session.execute(select(Subnet.network_id, Subnet.name, Subnet.uuid).order_by(Subnet.id))
        for network_id, name, uuid in rows:
            subnets.setdefault(network_id, []).append(name)
            ids.setdefault(network_id, []).append(uuid)
        return [view(n, subnets.get(n.id), ids.get(n.id)) for n in nets]


def show(db: Database, ref: str, ctx: RequestContext | None = None) -> dict[str, Any]:
    """A network, of those ``ctx`` may see when given."""
    with db.reader() as session:
        net = get(session, ref) if ctx is None else get_visible(session, ctx, ref)
        return view(net, *_subnets_of(session, net.id))


def update(db: Database, ctx: RequestContext, ref: str, data: dict[str, Any]) -> dict[str, Any]:
    """Rename a network, or share or unshare it (Neutron's ``PUT /networks/{id}``). Unsharing
    is refused while another project has a port on it (Neutron's InvalidSharedSetting)."""
    policy.authorize(ctx, "network:update")
    req = schemas.parse(NetworkUpdate, data)

    def write(session: Session) -> dict[str, Any]:
        net = get_visible(session, ctx, ref)
        if req.name is not None and req.name != net.name:
            if session.execute(select(Network.id).where(Network.name == req.name)).first() is not None:
                raise _name_taken(req.name)
            net.name = req.name
        if req.shared is False and net.shared:
            others = session.execute(
                select(func.count(Port.id)).where(
                    Port.network_id == net.id, Port.project_id != net.project_id
                )
            ).scalar_one()
            if others:
                raise exceptions.Conflict(
                    reason=f"network {net.name} cannot be unshared: "
                    f"{others} port(s) of other projects are on it"
                )
        if req.shared is not None:
            net.shared = req.shared
        session.flush()
        return view(net, *_subnets_of(session, net.id))

    try:
        return db.run_in_transaction(write)
    except IntegrityError:
        raise _name_taken(req.name or ref) from None


def delete(db: Database, ctx: RequestContext, ref: str, *, dry_run: bool = False) -> None:
    """Delete a network and its subnets; refused while any port is on it (Neutron's NetworkInUse).
    ``dry_run``: the checks, in a read, and nothing deleted (check mode)."""
    policy.authorize(ctx, "network:delete")

    def write(session: Session) -> None:
        net = get(session, ref)
        ports = session.execute(select(func.count(Port.id)).where(Port.network_id == net.id)).scalar_one()
        if ports:
            raise exceptions.NetworkInUse(
                network=net.name, reason=f"{ports} port(s) are on it; delete them (or their servers) first"
            )
        if dry_run:
            return
        for subnet in session.execute(select(Subnet).where(Subnet.network_id == net.id)).scalars():
            session.delete(subnet)
        session.delete(net)

    db.run_or_dry_run(write, dry_run=dry_run)
