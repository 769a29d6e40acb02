"""Resource providers: one per compute node, named after its inventory host.

A provider's ``generation`` is the version every write to its inventories or
allocations compares and swaps; readers never need a lock to know whether what
they read is still current.
"""

from __future__ import annotations

import uuid as uuidlib

from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import utcnow


class ProviderView(BaseModel):
    """A provider as callers see it (never the ORM row, which outlives its session badly)."""

    id: int
    uuid: str
    name: str
    generation: int


_BY_NAME_OR_UUID = text(
    "SELECT id, uuid, name, generation FROM resource_providers WHERE name = :key OR uuid = :key"
)


def find_provider(session: Session, name_or_uuid: str) -> ProviderView | None:
    row = session.execute(_BY_NAME_OR_UUID, {"key": name_or_uuid}).first()
    return ProviderView(id=row[0], uuid=row[1], name=row[2], generation=row[3]) if row else None


def lookup_provider(session: Session, name_or_uuid: str) -> ProviderView:
    provider = find_provider(session, name_or_uuid)
    if provider is None:
        raise exceptions.ResourceProviderNotFound(name_or_uuid=name_or_uuid)
    return provider


def provider_by_uuid(session: Session, uuid: str) -> ProviderView:
    """The provider of ``uuid`` (never of a name: the Placement API finds providers by uuid only)."""
    provider = find_provider(session, uuid)
    if provider is None or provider.uuid != uuid:
        raise exceptions.ResourceProviderNotFound(name_or_uuid=uuid)
    return provider


def show_provider(db: Database, ctx: RequestContext, uuid: str) -> ProviderView:
    """The provider of ``uuid``, for a caller allowed ``placement:read``."""
    policy.authorize(ctx, "placement:read")
    with db.reader() as session:
        return provider_by_uuid(session, uuid)


def get_provider(db: Database, name_or_uuid: str) -> ProviderView:
    """The provider by name or uuid; ResourceProviderNotFound names what was asked for."""
    with db.reader() as session:
        return lookup_provider(session, name_or_uuid)


def ensure_provider(db: Database, name: str, uuid: str | None = None) -> ProviderView:
    """Create the provider for host ``name`` unless it exists; idempotent and safe to race.

    When ``uuid`` is given (the compute node's uuid, as Nova uses) and the
    provider already exists under another uuid, that is a conflict the caller
    must resolve (a host re-registered with a new identity), not something to
    paper over.
    """
    if not name or len(name) > 200:
        raise exceptions.ValidationError("provider name", "must be 1 to 200 characters")

    def _ensure(session: Session) -> ProviderView:
        existing = session.execute(
            text("SELECT id, uuid, name, generation FROM resource_providers WHERE name = :name"),
            {"name": name},
        ).first()
        if existing is not None:
            view = ProviderView(id=existing[0], uuid=existing[1], name=existing[2], generation=existing[3])
            if uuid is not None and view.uuid != uuid:
                raise exceptions.Conflict(
                    reason=f"provider {name} exists with uuid {view.uuid}, not {uuid}; "
                    "delete it first if the host was re-installed"
                )
            return view
        new_uuid = uuid or str(uuidlib.uuid4())
        session.execute(
            text(
                "INSERT INTO resource_providers (uuid, name, generation, created_at) "
                "VALUES (:uuid, :name, 0, :now)"
            ),
            {"uuid": new_uuid, "name": name, "now": utcnow()},
        )
        return lookup_provider(session, name)

    try:
        return db.run_in_transaction(_ensure)
    except IntegrityError:
        # Another process created it between our read and our insert (PostgreSQL).
        return db.run_in_transaction(_ensure)


def delete_provider(db: Database, name_or_uuid: str) -> bool:
    """Remove a provider that holds no allocations; True if one was removed.

    A provider with allocations is refused (Nova: ResourceProviderInUse) so that
    a decommissioned host cannot silently drop the claims of live instances.
    """
    return db.run_in_transaction(lambda session: delete_provider_in_session(session, name_or_uuid))


def delete_provider_in_session(session: Session, name_or_uuid: str) -> bool:
    """``delete_provider`` inside the caller's transaction.

    The provider's generation is swapped first, as every claim swaps it before it
    writes allocations: a claim that read the provider before us loses its swap
    (and finds the provider gone on its retry), and one that swapped first makes
    ours fail, so no allocation can land between the check below and the delete.
    """
    from novakit.placement.inventories import bump_generation

    provider = find_provider(session, name_or_uuid)
    if provider is None:
        return False
    if not bump_generation(session, provider.id, provider.generation):
        raise exceptions.Conflict(
            reason=f"resource provider {provider.name} changed while it was being deleted "
            "(a claim was written on it); look again and retry"
        )
    used = session.execute(
        text("SELECT COUNT(*) FROM allocations WHERE resource_provider_id = :id"), {"id": provider.id}
    ).scalar_one()
    if used:
        raise exceptions.Conflict(
            reason=f"provider {provider.name} still holds {used} allocation rows; delete its instances first"
        )
    for table in ("inventories", "resource_provider_traits", "resource_provider_aggregates"):
        session.execute(text(f"DELETE FROM {table} WHERE resource_provider_id = :id"), {"id": provider.id})
    session.execute(text("DELETE FROM resource_providers WHERE id = :id"), {"id": provider.id})
    return True
