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

    _check_name = field_validator("name")(classmethod(lambda cls, v: schemas._check_name(v)))


def view(net: Network, subnets: list[str] | None = None) -> dict[str, Any]:
    return {
        "id": net.uuid,
        "name": net.name,
        "provider": net.provider,
        "source": net.source,
        "is_default": bool(net.is_default),
        "mtu": net.mtu,
        "shared": bool(net.shared),
        "subnets": list(subnets or []),
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


def get_default(session: Session) -> Network | None:
    return session.execute(select(Network).where(Network.is_default.is_(True))).scalars().first()


def _subnet_names(session: Session, network_id: int) -> list[str]:
    return list(
        session.execute(
            select(Subnet.name).where(Subnet.network_id == network_id).order_by(Subnet.id)
        ).scalars()
    )


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
            shared=True,
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


def list_networks(db: Database) -> list[dict[str, Any]]:
    with db.reader() as session:
        nets = session.execute(select(Network).order_by(Network.name)).scalars().all()
        subnets: dict[int, list[str]] = {}
        for network_id, name in session.execute(select(Subnet.network_id, Subnet.name).order_by(Subnet.id)):
            subnets.setdefault(network_id, []).append(name)
        return [view(n, subnets.get(n.id)) for n in nets]


def show(db: Database, ref: str) -> dict[str, Any]:
    with db.reader() as session:
        net = get(session, ref)
        return view(net, _subnet_names(session, net.id))


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
