"""Migration records: a server's move between hosts, as Nova's ``migrations`` table keeps it.

Statuses (Nova's): a resize or cold migration goes ``pre-migrating`` (recorded, the
source's claim handed to the migration) -> ``migrating`` (the destination claimed, the
source handing the guest over) -> ``post-migrating`` (the source is done) -> ``finished``
(the guest runs on the destination: VERIFY_RESIZE) -> ``confirming`` -> ``confirmed``, or
-> ``reverting`` -> ``reverted``; ``error`` when it failed and was rolled back. A live
migration goes ``queued`` -> ``preparing`` -> ``running`` -> ``completed``; an evacuation
``accepted`` -> ``pre-migrating`` -> ``done`` (rebuilt elsewhere; the down source still
holds the old guest and the migration its claim) -> ``completed`` once heal has removed
the old guest from its host, back up. Every
change is a compare-and-swap on the status, so two callers (a confirm and a revert, an
owner and heal) cannot both act on one migration.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Migration, utcnow

#: the statuses of a move that is under way or waits for its confirm (it holds a claim)
IN_PROGRESS = (
    "accepted",
    "queued",
    "preparing",
    "running",
    "pre-migrating",
    "migrating",
    "post-migrating",
    "finished",
    "confirming",
    "reverting",
    "done",
)
#: what each migration type is called in ``migration list``
TYPES = ("resize", "migration", "live-migration", "evacuation")


def create(
    session: Session,
    ctx: RequestContext,
    instance: Any,
    migration_type: str,
    new_flavor: dict[str, Any],
    dest: str | None = None,
    status: str = "pre-migrating",
) -> Migration:
    """Record a move of ``instance`` (from its host) in ``status``."""
    row = Migration(
        uuid=str(uuidlib.uuid4()),
        instance_uuid=instance.uuid,
        project_id=instance.project_id,
        user_id=instance.user_id,
        request_id=ctx.request_id,
        migration_type=migration_type,
        status=status,
        source_compute=instance.host,
        dest_compute=dest,
        old_flavor=dict(instance.flavor or {}),
        new_flavor=dict(new_flavor),
        old_vm_state=instance.vm_state,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row


def set_status(
    session: Session, migration_uuid: str, expected: str | Iterable[str], status: str, **values: Any
) -> None:
    """Move a migration from ``expected`` to ``status`` (and write ``values``), or raise Conflict."""
    wanted = [expected] if isinstance(expected, str) else list(expected)
    done = session.execute(
        update(Migration)
        .where(Migration.uuid == migration_uuid, Migration.status.in_(wanted))
        .values(status=status, updated_at=utcnow(), **values)
    )
    if done.rowcount != 1:  # type: ignore[attr-defined]
        now = session.scalar(select(Migration.status).where(Migration.uuid == migration_uuid))
        raise exceptions.Conflict(
            reason=f"migration {migration_uuid} is {now or 'gone'}, not {' or '.join(wanted)}"
        )


def in_progress(session: Session, instance_uuid: str) -> Migration | None:
    """The instance's move that is under way or waits for its confirm, if any."""
    return session.execute(
        select(Migration)
        .where(Migration.instance_uuid == instance_uuid, Migration.status.in_(IN_PROGRESS))
        .order_by(Migration.id.desc())
        .limit(1)
    ).scalar_one_or_none()


def get(session: Session, migration_uuid: str) -> Migration:
    row = session.execute(select(Migration).where(Migration.uuid == migration_uuid)).scalar_one_or_none()
    if row is None:
        raise exceptions.NotFound(f"migration {migration_uuid} not found")
    return row


def view(m: Migration) -> dict[str, Any]:
    return {
        "id": m.uuid,
        "server": m.instance_uuid,
        "type": m.migration_type,
        "status": m.status,
        "source_compute": m.source_compute,
        "dest_compute": m.dest_compute,
        "old_flavor": (m.old_flavor or {}).get("name"),
        "new_flavor": (m.new_flavor or {}).get("name"),
        "project_id": m.project_id,
        "created_at": m.created_at,
        "updated_at": m.updated_at,
    }


def list_migrations(
    db: Database,
    ctx: RequestContext,
    *,
    server: str | None = None,
    host: str | None = None,
    status: str | None = None,
) -> list[dict[str, Any]]:
    """Migrations, newest first (admin only, as Nova's ``os-migrations``); ``host`` matches
    either end of a move."""
    policy.authorize(ctx, "migration:list")
    stmt = select(Migration).order_by(Migration.id.desc())
    if server:
        stmt = stmt.where(Migration.instance_uuid == server)
    if host:
        stmt = stmt.where((Migration.source_compute == host) | (Migration.dest_compute == host))
    if status:
        stmt = stmt.where(Migration.status == status)
    with db.reader() as session:
        return [view(m) for m in session.execute(stmt).scalars()]


def hosts_outside_cell(db: Database, cell_id: int | None) -> list[str]:
    """The hosts of other cells than ``cell_id``: a move keeps a server's records in its cell, so
    it only ever goes to a host of that cell (Nova's default: no cross-cell moves)."""
    from novakit.db.models import HostMapping

    with db.reader() as session:
        mapped = session.execute(select(HostMapping.host, HostMapping.cell_id)).all()
    return sorted(h for h, c in mapped if cell_id is not None and c != cell_id)
