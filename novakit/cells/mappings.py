"""Instance and host mappings: written with what they map, read to find a cell.

An instance's mapping is inserted with its records (the same transaction: the API
database holds both while it is not scheduled), carries its name and project (names
are unique per project across every cell, on the mapping's unique key), is renamed and
soft-deleted with it, and says which cell holds it once it is scheduled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, bindparam, insert, or_, select, update
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.context import RequestContext
from novakit.db.models import HostMapping, InstanceMapping, utcnow

_MAPPINGS = cast(Table, InstanceMapping.__table__)
#: every boot runs these: built once, Core (not the ORM's bulk statements)
_ADD_INSTANCES = insert(_MAPPINGS)


def add_instances(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Map new instances (not scheduled yet: no cell). A name taken in any cell fails the insert."""
    now = utcnow()
    session.execute(
        _ADD_INSTANCES,
        [
            {
                "instance_uuid": r["uuid"],
                "cell_id": r.get("cell_id"),
                "project_id": r["project_id"],
                "user_id": r.get("user_id"),
                "display_name": r["display_name"],
                "created_at": now,
                "deleted": 0,
            }
            for r in rows
        ],
    )


#: likewise (a boot placing a server in the API database's own cell)
_SET_CELL = (
    update(_MAPPINGS)
    .where(_MAPPINGS.c.instance_uuid.in_(bindparam("uuids", expanding=True)))
    .values(cell_id=bindparam("cell_id"), updated_at=bindparam("now"))
)


def set_cell(session: Session, uuids: Sequence[str], cell_id: int | None) -> None:
    """Point the mappings of ``uuids`` at the cell ``cell_id``."""
    session.execute(_SET_CELL, {"uuids": list(uuids), "cell_id": cell_id, "now": utcnow()})


def soft_delete(session: Session, uuid: str) -> None:
    session.execute(
        update(InstanceMapping)
        .where(InstanceMapping.instance_uuid == uuid, InstanceMapping.deleted == 0)
        .values(deleted=InstanceMapping.id, deleted_at=utcnow())
        .execution_options(synchronize_session=False)
    )


def rename(session: Session, uuid: str, name: str) -> None:
    """Take ``name`` for the instance; a live server of that name in the project fails the update."""
    session.execute(
        update(InstanceMapping)
        .where(InstanceMapping.instance_uuid == uuid, InstanceMapping.deleted == 0)
        .values(display_name=name, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )


def find(
    session: Session, ctx: RequestContext, ref: str, *, deleted: bool = False, include_deleted: bool = False
) -> list[InstanceMapping]:
    """The mappings ``ref`` (a uuid, or a name) may mean to ``ctx``, most recent first."""
    stmt = select(InstanceMapping).where(
        or_(InstanceMapping.instance_uuid == ref, InstanceMapping.display_name == ref)
    )
    if deleted:
        stmt = stmt.where(InstanceMapping.deleted != 0)
    elif not include_deleted:
        stmt = stmt.where(InstanceMapping.deleted == 0)
    stmt = policy.scope(ctx, stmt, InstanceMapping.project_id)
    rows = list(session.execute(stmt.order_by(InstanceMapping.id.desc())).scalars())
    by_uuid = [r for r in rows if r.instance_uuid == ref]
    if by_uuid:
        return by_uuid
    # A deleted server by name: only live ones, unless deleted ones were asked for.
    return [r for r in rows if deleted or r.deleted == 0]


def map_host(session: Session, host: str, cell_id: int, cell_name: str) -> bool:
    """Map ``host`` to the cell; True if newly mapped. A host mapped to another cell is refused."""
    current = session.execute(select(HostMapping).where(HostMapping.host == host)).scalar_one_or_none()
    if current is None:
        session.execute(insert(HostMapping).values(host=host, cell_id=cell_id, created_at=utcnow()))
        return True
    if current.cell_id != cell_id:
        from novakit.db.models import CellMapping

        mapped = session.get(CellMapping, current.cell_id)
        raise exceptions.HostMappedElsewhere(
            host=host, mapped=mapped.name if mapped else current.cell_id, cell=cell_name
        )
    return False
