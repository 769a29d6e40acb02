"""Subnets: a network's IPv4 range, its gateway, DNS servers and allocation pools.

Neutron's defaults and rules: the gateway is the range's first address unless
given; the pools default to the whole range less the network, broadcast and
gateway addresses; a pool lies inside the range and holds no gateway; two
subnets of one network never overlap (the network's row is locked while a
subnet is added, so two concurrent creates cannot both pass the check).
"""

from __future__ import annotations

import ipaddress
import uuid as uuidlib
from typing import Any

from pydantic import Field, field_validator
from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.compute import schemas
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import IPAllocation, Network, Subnet
from novakit.network import networks


class AllocationPool(schemas._Request):
    start: str
    end: str


class SubnetCreate(schemas._Request):
    name: str
    network: str
    cidr: str
    gateway_ip: str | None = None
    dns_nameservers: list[str] = Field(default_factory=list, max_length=5)
    allocation_pools: list[AllocationPool] = Field(default_factory=list)
    enable_dhcp: bool = True

    _check_name = field_validator("name")(classmethod(lambda cls, v: schemas._check_name(v)))

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            net = ipaddress.ip_network(v, strict=True)
        except ValueError as exc:
            raise ValueError(
                f"{v!r} is not an IPv4 network in CIDR notation with no host bits set ({exc})"
            ) from None
        if net.version != 4:
            raise ValueError("only IPv4 subnets are supported")
        if net.prefixlen > 30:
            raise ValueError(f"{v} is too small: a subnet needs a prefix of /30 or shorter")
        return str(net)

    @field_validator("gateway_ip")
    @classmethod
    def _gateway(cls, v: str | None) -> str | None:
        return schemas.ipv4_address(v) if v is not None else None

    @field_validator("dns_nameservers")
    @classmethod
    def _dns(cls, v: list[str]) -> list[str]:
        return [schemas.ipv4_address(x) for x in v]


class SubnetUpdate(schemas._Request):
    name: str | None = None
    dns_nameservers: list[str] | None = Field(default=None, max_length=5)

    _check_name = field_validator("name")(
        classmethod(lambda cls, v: schemas._check_name(v) if v is not None else v)
    )

    @field_validator("dns_nameservers")
    @classmethod
    def _dns(cls, v: list[str] | None) -> list[str] | None:
        return [schemas.ipv4_address(x) for x in v] if v is not None else None


def default_pools(cidr: ipaddress.IPv4Network, gateway: ipaddress.IPv4Address | None) -> list[dict[str, str]]:
    """The range less its network, broadcast and gateway addresses, as Neutron makes it."""
    first, last = cidr.network_address + 1, cidr.broadcast_address - 1
    if gateway is None or not first <= gateway <= last:
        return [{"start": str(first), "end": str(last)}]
    pools = []
    if gateway > first:
        pools.append({"start": str(first), "end": str(gateway - 1)})
    if gateway < last:
        pools.append({"start": str(gateway + 1), "end": str(last)})
    return pools


def _checked_pools(
    req: SubnetCreate, cidr: ipaddress.IPv4Network, gateway: ipaddress.IPv4Address | None
) -> list[dict[str, str]]:
    if not req.allocation_pools:
        return default_pools(cidr, gateway)
    ranges: list[tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]] = []
    for i, pool in enumerate(req.allocation_pools):
        field = f"allocation_pools[{i}]"
        try:
            start, end = ipaddress.IPv4Address(pool.start), ipaddress.IPv4Address(pool.end)
        except ValueError:
            raise exceptions.ValidationError(
                field, f"start and end must be IPv4 addresses, got {pool.start!r}, {pool.end!r}"
            ) from None
        if start > end:
            raise exceptions.ValidationError(field, f"start {start} is after end {end}")
        usable = (cidr.network_address + 1, cidr.broadcast_address - 1)
        if start < usable[0] or end > usable[1]:
            raise exceptions.ValidationError(
                field, f"{start}-{end} must lie inside {cidr} (less its network and broadcast addresses)"
            )
        if gateway is not None and start <= gateway <= end:
            raise exceptions.ValidationError(field, f"{start}-{end} must not contain the gateway {gateway}")
        for other_start, other_end in ranges:
            if start <= other_end and other_start <= end:
                raise exceptions.ValidationError(
                    field, f"{start}-{end} overlaps pool {other_start}-{other_end}"
                )
        ranges.append((start, end))
    return [{"start": str(s), "end": str(e)} for s, e in sorted(ranges)]


def view(subnet: Subnet, network_name: str) -> dict[str, Any]:
    return {
        "id": subnet.uuid,
        "name": subnet.name,
        "network": network_name,
        "network_id": None,
        "ip_version": subnet.ip_version,
        "cidr": subnet.cidr,
        "gateway_ip": subnet.gateway_ip,
        "dns_nameservers": list(subnet.dns_nameservers or []),
        "allocation_pools": list(subnet.allocation_pools or []),
        "enable_dhcp": bool(subnet.enable_dhcp),
        "project_id": subnet.project_id,
    }


def get(session: Session, ref: str, ctx: RequestContext | None = None) -> Subnet:
    """A subnet by uuid or name; ``ctx`` given, of a network it may see (``networks.get_visible``)."""
    stmt = select(Subnet).where(or_(Subnet.uuid == ref, Subnet.name == ref))
    if ctx is not None:
        stmt = stmt.join(Network, Network.id == Subnet.network_id)
        stmt = policy.scope_shared(ctx, stmt, Network.project_id, Network.shared)
    row = session.execute(stmt).scalars().first()
    if row is None:
        raise exceptions.SubnetNotFound(subnet=ref)
    return row


def of_network(session: Session, network_id: int) -> list[Subnet]:
    return list(
        session.execute(select(Subnet).where(Subnet.network_id == network_id).order_by(Subnet.id)).scalars()
    )


def _full_view(session: Session, subnet: Subnet) -> dict[str, Any]:
    net = session.get(Network, subnet.network_id)
    out = view(subnet, net.name if net else "?")
    out["network_id"] = net.uuid if net else None
    return out


def _name_taken(name: str) -> exceptions.Conflict:
    # Said by the check before the insert and by the unique key that catches a create racing it.
    return exceptions.Conflict(reason=f"a subnet named {name!r} exists; subnet names are unique")


def create(
    db: Database, ctx: RequestContext, data: dict[str, Any], *, dry_run: bool = False
) -> dict[str, Any] | None:
    """Create a subnet; ``dry_run``: every check, in a read, and nothing written (check mode)."""
    policy.authorize(ctx, "network:create")
    req = schemas.parse(SubnetCreate, data)
    cidr = ipaddress.IPv4Network(req.cidr)
    if req.gateway_ip is not None:
        gateway: ipaddress.IPv4Address | None = ipaddress.IPv4Address(req.gateway_ip)
        if gateway not in cidr or gateway in (cidr.network_address, cidr.broadcast_address):
            raise exceptions.ValidationError("gateway_ip", f"{gateway} must be a host address inside {cidr}")
    else:
        gateway = cidr.network_address + 1
    pools = _checked_pools(req, cidr, gateway)

    def write(session: Session) -> dict[str, Any] | None:
        # The network's row, locked: two subnets added at once are checked one after the other.
        net = networks.get(session, req.network)
        if not dry_run:
            session.execute(select(Network.id).where(Network.id == net.id).with_for_update())
        if session.execute(select(Subnet.id).where(Subnet.name == req.name)).first() is not None:
            raise _name_taken(req.name)
        for other in of_network(session, net.id):
            if ipaddress.IPv4Network(other.cidr).overlaps(cidr):
                raise exceptions.SubnetOverlap(
                    cidr=str(cidr), other=other.name, other_cidr=other.cidr, network=net.name
                )
        if dry_run:
            return None
        row = Subnet(
            uuid=str(uuidlib.uuid4()),
            name=req.name,
            network_id=net.id,
            project_id=ctx.project_id,
            ip_version=4,
            cidr=str(cidr),
            gateway_ip=str(gateway) if gateway is not None else None,
            dns_nameservers=list(req.dns_nameservers),
            allocation_pools=pools,
            enable_dhcp=req.enable_dhcp,
        )
        session.add(row)
        session.flush()
        return _full_view(session, row)

    try:
        return db.run_or_dry_run(write, dry_run=dry_run)
    except IntegrityError:
        raise _name_taken(req.name) from None


def list_subnets(
    db: Database, network: str | None = None, ctx: RequestContext | None = None
) -> list[dict[str, Any]]:
    """Every subnet (of ``network``), or (``ctx`` given) those of the networks ``ctx`` may see."""
    with db.reader() as session:
        stmt = select(Subnet, Network).join(Network, Network.id == Subnet.network_id).order_by(Subnet.name)
        if ctx is not None:
            stmt = policy.scope_shared(ctx, stmt, Network.project_id, Network.shared)
        if network is not None:
            net = (
                networks.get(session, network) if ctx is None else networks.get_visible(session, ctx, network)
            )
            stmt = stmt.where(Subnet.network_id == net.id)
        out = []
        for subnet, net in session.execute(stmt).all():
            v = view(subnet, net.name)
            v["network_id"] = net.uuid
            out.append(v)
        return out


def show(db: Database, ref: str, ctx: RequestContext | None = None) -> dict[str, Any]:
    with db.reader() as session:
        return _full_view(session, get(session, ref, ctx))


def update(db: Database, ctx: RequestContext, ref: str, data: dict[str, Any]) -> dict[str, Any]:
    """Rename a subnet or set its DNS servers (Neutron's ``PUT /subnets/{id}``); its range,
    gateway and pools stay as made (the addresses given out depend on them)."""
    policy.authorize(ctx, "network:update")
    req = schemas.parse(SubnetUpdate, data)

    def write(session: Session) -> dict[str, Any]:
        subnet = get(session, ref, ctx)
        if req.name is not None and req.name != subnet.name:
            if session.execute(select(Subnet.id).where(Subnet.name == req.name)).first() is not None:
                raise _name_taken(req.name)
            subnet.name = req.name
        if req.dns_nameservers is not None:
            subnet.dns_nameservers = list(req.dns_nameservers)
        session.flush()
        return _full_view(session, subnet)

    try:
        return db.run_in_transaction(write)
    except IntegrityError:
        raise _name_taken(req.name or ref) from None


def delete(db: Database, ctx: RequestContext, ref: str, *, dry_run: bool = False) -> None:
    """Delete a subnet; refused while any of its addresses is allocated (Neutron's SubnetInUse).
    ``dry_run``: the checks, in a read, and nothing deleted (check mode)."""
    policy.authorize(ctx, "network:delete")

    def write(session: Session) -> None:
        subnet = get(session, ref)
        used = session.execute(
            select(func.count(IPAllocation.id)).where(IPAllocation.subnet_id == subnet.id)
        ).scalar_one()
        if used:
            raise exceptions.SubnetInUse(
                subnet=subnet.name,
                reason=f"{used} address(es) of it are allocated to ports; delete those ports first",
            )
        if not dry_run:
            session.delete(subnet)

    db.run_or_dry_run(write, dry_run=dry_run)
