"""Which address a port gets: Neutron's IPAM, small.

An address is allocated by inserting its row: the unique key
``(network_id, ip_address)`` lets one transaction have it, however many
processes try at once, on SQLite and PostgreSQL alike. Each insert runs in a
savepoint, so a lost race costs the attempt, not the caller's transaction: an
automatic allocation moves on to the next free address, a requested one is
refused (``IpAddressInUse``).

Nothing here walks a pool: a /8 holds 16.7 million addresses. As Neutron's
availability ranges do, the pools are kept as ranges: the free count is the
ranges' sizes less the allocated rows that fall inside them, and the next free
address is found by stepping through the allocated rows (read sorted) to the
first gap. Both cost what the allocated rows cost, whatever the pool's size.
The addresses are stored as text, which SQL cannot order as numbers on both
back ends, so the rows are read by SQL and ordered here.
"""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Iterator

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.db.models import IPAllocation, Network, Subnet
from novakit.network import subnets as subnet_api


def pool_ranges(subnet: Subnet) -> list[tuple[int, int]]:
    """The subnet's allocation pools as sorted, inclusive ranges of integer addresses."""
    return sorted(
        (int(ipaddress.IPv4Address(p["start"])), int(ipaddress.IPv4Address(p["end"])))
        for p in subnet.allocation_pools or []
    )


def allocated(session: Session, network_id: int) -> list[int]:
    """The network's allocated addresses as sorted integers (one query over its allocation rows)."""
    rows = session.execute(
        select(IPAllocation.ip_address).where(IPAllocation.network_id == network_id)
    ).scalars()
    return sorted(int(ipaddress.IPv4Address(a)) for a in rows)


def _inside(ranges: list[tuple[int, int]], taken: list[int]) -> int:
    """How many of the sorted addresses ``taken`` fall inside ``ranges``."""
    return sum(bisect.bisect_right(taken, end) - bisect.bisect_left(taken, start) for start, end in ranges)


def _free_in(ranges: list[tuple[int, int]], taken: list[int]) -> Iterator[int]:
    """The addresses of ``ranges`` not in the sorted ``taken``, in order: each step passes either
    a taken address or yields a free one, so finding the first costs the taken ones before it."""
    for start, end in ranges:
        n = start
        i = bisect.bisect_left(taken, start)
        while n <= end:
            if i < len(taken) and taken[i] == n:
                n += 1
                i += 1
                continue
            yield n
            n += 1


def has_subnets(session: Session, network: Network) -> bool:
    return bool(subnet_api.of_network(session, network.id))


def free_count(session: Session, network: Network, subnet: Subnet | None = None) -> int:
    """How many addresses of the network's pools (of ``subnet``'s only, when given) nobody holds
    (as this transaction sees it)."""
    taken = allocated(session, network.id)
    total = 0
    counted = [subnet] if subnet is not None else subnet_api.of_network(session, network.id)
    for each in counted:
        ranges = pool_ranges(each)
        total += sum(end - start + 1 for start, end in ranges) - _inside(ranges, taken)
    return total


def subnet_of(session: Session, network: Network, address: str, field: str) -> Subnet:
    """The subnet of ``network`` that may hold ``address`` as a fixed IP; else a ValidationError
    naming ``field``."""
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        raise exceptions.ValidationError(field, f"{address!r} is not an IPv4 address") from None
    subnets = subnet_api.of_network(session, network.id)
    for subnet in subnets:
        cidr = ipaddress.IPv4Network(subnet.cidr)
        if ip not in cidr:
            continue
        if ip in (cidr.network_address, cidr.broadcast_address):
            raise exceptions.ValidationError(field, f"{ip} is the network or broadcast address of {cidr}")
        if subnet.gateway_ip and ip == ipaddress.IPv4Address(subnet.gateway_ip):
            raise exceptions.ValidationError(field, f"{ip} is the gateway of subnet {subnet.name}")
        return subnet
    ranges = ", ".join(s.cidr for s in subnets) or "none"
    raise exceptions.ValidationError(
        field, f"{ip} is not inside a subnet of network {network.name} (its subnets: {ranges})"
    )


def check_requested(
    session: Session, network: Network, address: str, field: str, subnet: Subnet | None = None
) -> Subnet:
    """A requested fixed IP: inside a subnet of the network (``subnet``, when given) and held by
    no port; its subnet."""
    subnet = in_subnet(session, network, address, field, subnet)
    address = str(ipaddress.IPv4Address(address))
    held = session.execute(
        select(IPAllocation.id).where(
            IPAllocation.network_id == network.id, IPAllocation.ip_address == address
        )
    ).first()
    if held is not None:
        raise exceptions.IpAddressInUse(field=field, ip_address=address, network=network.name)
    return subnet


def _insert(session: Session, port_id: int, subnet: Subnet, address: str) -> bool:
    """Insert one allocation in a savepoint; False when the address was taken (the unique key)."""
    try:
        with session.begin_nested():
            session.execute(
                insert(IPAllocation).values(
                    port_id=port_id, subnet_id=subnet.id, network_id=subnet.network_id, ip_address=address
                )
            )
    except IntegrityError:
        return False
    return True


def in_subnet(session: Session, network: Network, address: str, field: str, subnet: Subnet | None) -> Subnet:
    """``subnet_of``, and (``subnet`` given, Neutron's fixed IP of a named subnet) that subnet."""
    found = subnet_of(session, network, address, field)
    if subnet is not None and found.id != subnet.id:
        raise exceptions.ValidationError(
            field, f"{address} is not inside subnet {subnet.name} ({subnet.cidr})"
        )
    return found


def allocate(
    session: Session,
    port_id: int,
    network: Network,
    requested: str | None = None,
    field: str = "fixed_ip",
    subnet: Subnet | None = None,
) -> tuple[Subnet, str] | None:
    """Give port ``port_id`` an address of ``network``: ``requested``, or the first free one of the
    pools (of ``subnet`` only, when given). None when the network has no subnet (a port with no
    fixed IP, as Neutron makes one)."""
    if requested is not None:
        subnet = in_subnet(session, network, requested, field, subnet)
        address = str(ipaddress.IPv4Address(requested))
        if not _insert(session, port_id, subnet, address):
            raise exceptions.IpAddressInUse(field=field, ip_address=address, network=network.name)
        return subnet, address
    subnets = [subnet] if subnet is not None else subnet_api.of_network(session, network.id)
    if not subnets:
        return None
    taken = allocated(session, network.id)
    for subnet in subnets:
        # A lost insert means another transaction took that address meanwhile: the next free one.
        for n in _free_in(pool_ranges(subnet), taken):
            address = str(ipaddress.IPv4Address(n))
            if _insert(session, port_id, subnet, address):
                return subnet, address
    raise exceptions.IpAddressGenerationFailure(network=network.name)
