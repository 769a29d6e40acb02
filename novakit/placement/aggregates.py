"""Aggregates: named groups of providers. An availability zone is an aggregate with ``availability_zone`` set.

Requests narrow candidates with ``member_of`` (any of a list of aggregates) and
with an availability zone; both become EXISTS clauses of the candidate query.
As in Nova, a host belongs to at most one availability zone; hosts in no zone
are in the default zone (``SchedulerConfig.default_availability_zone``).

These two tables are the only store of host aggregates: Nova keeps its own
aggregates in the API database and mirrors them into Placement, here the
operator's aggregates (``novakit.fleet.aggregates``) are written straight into
``placement_aggregates`` and ``resource_provider_aggregates`` in one transaction,
so ``member_of``, the zones and the aggregates an operator sees cannot disagree.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from typing import Any

from pydantic import BaseModel
from sqlalchemy import bindparam, insert, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import PlacementAggregate
from novakit.placement.providers import ProviderView, lookup_provider, provider_by_uuid


class AggregateView(BaseModel):
    id: int
    uuid: str
    name: str
    availability_zone: str | None
    metadata: dict[str, Any]


_SELECT = "SELECT id, uuid, name, availability_zone, metadata FROM placement_aggregates "


def _view(row: Any) -> AggregateView:
    metadata = row[4]
    if isinstance(metadata, str):  # a raw JSON column read through text() on SQLite
        metadata = json.loads(metadata)
    return AggregateView(
        id=row[0], uuid=row[1], name=row[2], availability_zone=row[3], metadata=metadata or {}
    )


def find_aggregate(session: Session, name_or_uuid: str) -> AggregateView | None:
    row = session.execute(text(_SELECT + "WHERE name = :k OR uuid = :k"), {"k": name_or_uuid}).first()
    return _view(row) if row else None


def aggregate_by_id(session: Session, aggregate_id: int) -> AggregateView | None:
    row = session.execute(text(_SELECT + "WHERE id = :i"), {"i": aggregate_id}).first()
    return _view(row) if row else None


def all_aggregates(session: Session) -> list[AggregateView]:
    return [_view(r) for r in session.execute(text(_SELECT + "ORDER BY id"))]


def ensure_aggregate(
    db: Database,
    name: str,
    *,
    uuid: str | None = None,
    availability_zone: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> AggregateView:
    """Create or update the aggregate called ``name``; idempotent."""

    def _write(session: Session) -> AggregateView:
        existing = find_aggregate(session, name)
        if existing is None:
            session.execute(
                insert(PlacementAggregate).values(
                    uuid=uuid or str(uuidlib.uuid4()),
                    name=name,
                    availability_zone=availability_zone,
                    aggregate_metadata=metadata or {},
                )
            )
        else:
            session.execute(
                update(PlacementAggregate)
                .where(PlacementAggregate.id == existing.id)
                .values(
                    availability_zone=availability_zone,
                    aggregate_metadata=metadata if metadata is not None else existing.metadata,
                )
            )
        found = find_aggregate(session, name)
        assert found is not None
        return found

    try:
        return db.run_in_transaction(_write)
    except IntegrityError:
        return db.run_in_transaction(_write)


def add_provider_to_aggregate(db: Database, provider_name: str, aggregate_name: str) -> None:
    """Idempotent. Refuses a second availability zone for one host, as Nova does."""

    def _write(session: Session) -> None:
        provider = lookup_provider(session, provider_name)
        aggregate = find_aggregate(session, aggregate_name)
        if aggregate is None:
            raise exceptions.NotFound(f"Aggregate {aggregate_name} could not be found.")
        if aggregate.availability_zone:
            zones = set(
                session.execute(
                    text(
                        "SELECT pa.availability_zone FROM placement_aggregates pa "
                        "JOIN resource_provider_aggregates "
                        "rpa ON rpa.aggregate_id = pa.id WHERE rpa.resource_provider_id = :p "
                        "AND pa.availability_zone IS NOT NULL"
                    ),
                    {"p": provider.id},
                ).scalars()
            ) - {aggregate.availability_zone}
            if zones:
                raise exceptions.Conflict(
                    reason=f"host {provider_name} is already in availability zone {sorted(zones)[0]}; "
                    f"it cannot also be in {aggregate.availability_zone}"
                )
        present = session.execute(
            text(
                "SELECT 1 FROM resource_provider_aggregates "
                "WHERE resource_provider_id = :p AND aggregate_id = :a"
            ),
            {"p": provider.id, "a": aggregate.id},
        ).first()
        if not present:
            session.execute(
                text(
                    "INSERT INTO resource_provider_aggregates (resource_provider_id, aggregate_id) "
                    "VALUES (:p, :a)"
                ),
                {"p": provider.id, "a": aggregate.id},
            )

    db.run_in_transaction(_write)


def remove_provider_from_aggregate(db: Database, provider_name: str, aggregate_name: str) -> None:
    def _write(session: Session) -> None:
        provider = lookup_provider(session, provider_name)
        aggregate = find_aggregate(session, aggregate_name)
        if aggregate is not None:
            session.execute(
                text(
                    "DELETE FROM resource_provider_aggregates "
                    "WHERE resource_provider_id = :p AND aggregate_id = :a"
                ),
                {"p": provider.id, "a": aggregate.id},
            )

    db.run_in_transaction(_write)


def get_provider_aggregates(db: Database, provider_name: str) -> list[AggregateView]:
    with db.reader() as session:
        provider = lookup_provider(session, provider_name)
        rows = session.execute(
            text(
                "SELECT pa.id, pa.uuid, pa.name, pa.availability_zone, pa.metadata "
                "FROM placement_aggregates pa "
                "JOIN resource_provider_aggregates rpa ON rpa.aggregate_id = pa.id "
                "WHERE rpa.resource_provider_id = :p ORDER BY pa.name"
            ),
            {"p": provider.id},
        )
        return [_view(r) for r in rows]


def provider_aggregate_uuids(db: Database, ctx: RequestContext, uuid: str) -> tuple[ProviderView, list[str]]:
    """The provider of ``uuid`` and the uuids of its aggregates (Placement knows an aggregate by
    its uuid only: GET /resource_providers/{uuid}/aggregates)."""
    policy.authorize(ctx, "placement:read")
    with db.reader() as session:
        provider = provider_by_uuid(session, uuid)
        rows = session.execute(
            text(
                "SELECT pa.uuid FROM placement_aggregates pa "
                "JOIN resource_provider_aggregates rpa ON rpa.aggregate_id = pa.id "
                "WHERE rpa.resource_provider_id = :p ORDER BY pa.uuid"
            ),
            {"p": provider.id},
        )
        return provider, list(rows.scalars())


def aggregate_ids(session: Session, uuids: list[str]) -> list[int]:
    """The ids of the aggregates of ``uuids`` that exist (an unknown uuid is no aggregate's)."""
    if not uuids:
        return []
    statement = text("SELECT id FROM placement_aggregates WHERE uuid IN :u").bindparams(
        bindparam("u", expanding=True)
    )
    return list(session.execute(statement, {"u": uuids}).scalars())


def availability_zones(session: Session) -> dict[str, list[int]]:
    """``{zone: [aggregate ids]}``."""
    zones: dict[str, list[int]] = {}
    for agg_id, zone in session.execute(
        text("SELECT id, availability_zone FROM placement_aggregates WHERE availability_zone IS NOT NULL")
    ):
        zones.setdefault(zone, []).append(agg_id)
    return zones


class ZoneRequest(BaseModel):
    """Where a server that asked for a zone may go: on a provider of one of ``member_of``'s
    aggregates (a zone aggregate's), or, for the default zone, of none of ``not_member_of``."""

    zone: str
    member_of: list[int] = []
    not_member_of: list[int] = []


def resolve_zone(session: Session, zone: str, default_zone: str) -> ZoneRequest:
    """The one answer to "which hosts are in availability zone ``zone``", for create's check and
    for the scheduler alike: a zone aggregate's hosts, or, for the configured default zone
    (``scheduler.default_availability_zone``), the hosts in no zone aggregate. Any other name
    is a ValidationError naming ``availability_zone`` and the known zones."""
    zones = availability_zones(session)
    if zone in zones:
        return ZoneRequest(zone=zone, member_of=zones[zone])
    if zone == default_zone:
        return ZoneRequest(zone=zone, not_member_of=[i for ids in zones.values() for i in ids])
    known = sorted({*zones, default_zone})
    raise exceptions.ValidationError(
        "availability_zone", f"unknown zone {zone!r}; known zones: {', '.join(known)}"
    )


_ZONE_FIELD = "availability_zone"


def check_zone_name(zone: Any, field: str = _ZONE_FIELD) -> str:
    """An availability zone's name: 1 to 255 printable characters, no ``:`` (create's
    ``zone:host:node`` form uses it), as Nova's API schema says."""
    if not isinstance(zone, str) or not zone.strip():
        raise exceptions.ValidationError(field, "must be a non-empty zone name")
    if len(zone) > 255:
        raise exceptions.ValidationError(field, f"must be at most 255 characters, got {len(zone)}")
    if not zone.isprintable():
        raise exceptions.ValidationError(field, f"must not contain control characters, got {zone!r}")
    if ":" in zone:
        raise exceptions.ValidationError(
            field, f"must not contain ':' (create's zone:host form), got {zone!r}"
        )
    return zone


class RequestedZone(BaseModel):
    """What a create's ``availability_zone`` asks: a zone (or none) and, for an admin, a host."""

    zone: str | None = None
    host: str | None = None


def parse_requested_zone(value: str | None, default_schedule_zone: str | None) -> RequestedZone:
    """Nova's forms: ``zone``, ``zone:host``, ``zone::node`` and ``zone:host:node`` (a node is
    its host here: one node per host). An empty zone part, or none asked, is
    ``default_schedule_zone`` (which may be None: anywhere)."""
    zone: str | None = value
    host: str | None = None
    if value is not None and ":" in value:
        parts = value.split(":")
        if len(parts) > 3:
            raise exceptions.ValidationError(
                _ZONE_FIELD, f"must be zone, zone:host, zone::node or zone:host:node, got {value!r}"
            )
        zone, host = parts[0], (parts[1] or (parts[2] if len(parts) == 3 else "")) or None
        if len(parts) == 3 and parts[1] and parts[2] and parts[1] != parts[2]:
            raise exceptions.ValidationError(
                _ZONE_FIELD, f"node {parts[2]!r} is not host {parts[1]!r}'s (one node per host)"
            )
        if host is None:
            raise exceptions.ValidationError(_ZONE_FIELD, f"names no host after ':', got {value!r}")
    if not zone:
        zone = default_schedule_zone
    if zone is not None:
        check_zone_name(zone)
    return RequestedZone(zone=zone, host=host)


def zone_of_provider(session: Session, provider_name: str, default_zone: str) -> str:
    """The availability zone host ``provider_name`` is in now: its zone aggregate's, else the
    default zone (what a server placed there records, Nova's ``OS-EXT-AZ:availability_zone``)."""
    row = session.execute(
        text(
            "SELECT pa.availability_zone FROM placement_aggregates pa "
            "JOIN resource_provider_aggregates rpa ON rpa.aggregate_id = pa.id "
            "JOIN resource_providers rp ON rp.id = rpa.resource_provider_id "
            "WHERE rp.name = :h AND pa.availability_zone IS NOT NULL ORDER BY pa.id"
        ),
        {"h": provider_name},
    ).first()
    return str(row[0]) if row else default_zone


def list_availability_zones(db: Database) -> list[str]:
    with db.reader() as session:
        return sorted(availability_zones(session))
