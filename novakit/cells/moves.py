"""Moving a server from where it waited to be scheduled into its cell.

Nova's super conductor creates the instance in the chosen host's cell once the scheduler
has picked the host, and in cell0 when nothing could be picked. Here the server's records
(instance, actions, events, faults) wait in the API database's instance tables and move:

1. copied into the cell's database (one transaction there);
2. in one transaction of the API database: the waiting row is deleted only if it is still
   as it was copied (state, task, owner, last update), and the mapping points at the cell.

If the row changed between 1 and 2 (a delete, heal), step 2 deletes nothing and the copy is
removed again: the server stays where it was, as the other writer left it. A crash between
1 and 2 leaves a copy the mapping does not point at; the mapping is the truth (every read
goes through it) and heal removes such copies. Where the cell is the API database itself
(cell1 of the embedded default), only the mapping changes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, delete, insert, select

from novakit import exceptions
from novakit.cells import mappings
from novakit.cells.registry import UNSCHEDULED, Cell
from novakit.db.models import Instance, InstanceAction, InstanceActionEvent, InstanceFault

if TYPE_CHECKING:
    from novakit.db.engine import Database

log = logging.getLogger(__name__)

_GUARD = ("vm_state", "task_state", "task_owner", "updated_at", "deleted")


def _row(obj: Any) -> dict[str, Any]:
    return {c.key: getattr(obj, c.key) for c in obj.__mapper__.column_attrs}


def move_to_cell(db: Database, uuids: Sequence[str], cell: Cell) -> list[str]:
    """Move the waiting servers ``uuids`` into ``cell``; the uuids that moved.

    cell0 that cannot be made or written (``CellDown``: a PostgreSQL user without CREATEDB, a
    file that cannot be opened) moves nothing: the servers that could not be scheduled stay in
    the API database, where their ERROR and fault are already recorded, and are listed and
    deleted from there. The failure the user sees stays the scheduler's (NoValidHost).
    """
    if not uuids:
        return []
    if cell.is_cell0:
        try:
            return _move(db, uuids, cell)
        except exceptions.CellDown as exc:
            log.warning(
                "cell0 cannot be written (%s): %d server(s) stay in the API database", exc, len(uuids)
            )
            return []
    return _move(db, uuids, cell)


def _move(db: Database, uuids: Sequence[str], cell: Cell) -> list[str]:
    if db.cells.database(cell) is db:
        db.run_in_transaction(lambda s: mappings.set_cell(s, uuids, cell.id))
        return list(uuids)
    with db.target_cell(UNSCHEDULED), db.reader() as session:
        # Live rows only: a server deleted while it waited stays where it was deleted.
        instances = list(
            session.execute(
                select(Instance).where(Instance.uuid.in_(list(uuids)), Instance.deleted == 0)
            ).scalars()
        )
        inst_rows = [_row(i) for i in instances]
        action_rows = [
            _row(a)
            for a in session.execute(
                select(InstanceAction).where(InstanceAction.instance_uuid.in_(list(uuids)))
            ).scalars()
        ]
        event_rows = [
            _row(e)
            for e in session.execute(
                select(InstanceActionEvent).where(
                    InstanceActionEvent.action_id.in_([a["id"] for a in action_rows] or [-1])
                )
            ).scalars()
        ]
        fault_rows = [
            _row(f)
            for f in session.execute(
                select(InstanceFault).where(InstanceFault.instance_uuid.in_(list(uuids)))
            ).scalars()
        ]
    if not inst_rows:
        return []

    def copy(session: Any) -> None:
        strip = [{k: v for k, v in r.items() if k != "id"} for r in inst_rows]
        session.execute(insert(Instance), strip)
        new_ids: dict[int, int] = {}
        for a in action_rows:
            new = session.execute(
                insert(InstanceAction)
                .values({k: v for k, v in a.items() if k != "id"})
                .returning(InstanceAction.id)
            ).scalar_one()
            new_ids[a["id"]] = new
        if event_rows:
            session.execute(
                insert(InstanceActionEvent),
                [
                    {**{k: v for k, v in e.items() if k != "id"}, "action_id": new_ids[e["action_id"]]}
                    for e in event_rows
                ],
            )
        if fault_rows:
            session.execute(
                insert(InstanceFault), [{k: v for k, v in f.items() if k != "id"} for f in fault_rows]
            )

    with db.target_cell(cell):
        db.run_in_transaction(copy)

    def swap(session: Any) -> list[str]:
        moved = []
        for r in inst_rows:
            guard = and_(
                Instance.uuid == r["uuid"],
                *[getattr(Instance, k) == r[k] for k in _GUARD if r[k] is not None],
            )
            nulls = [getattr(Instance, k).is_(None) for k in _GUARD if r[k] is None]
            if session.execute(delete(Instance).where(guard, *nulls)).rowcount == 1:  # type: ignore[attr-defined]
                moved.append(r["uuid"])
        if moved:
            gone_actions = [a["id"] for a in action_rows if a["instance_uuid"] in moved]
            if gone_actions:
                session.execute(
                    delete(InstanceActionEvent).where(InstanceActionEvent.action_id.in_(gone_actions))
                )
                session.execute(delete(InstanceAction).where(InstanceAction.id.in_(gone_actions)))
            session.execute(delete(InstanceFault).where(InstanceFault.instance_uuid.in_(moved)))
            mappings.set_cell(session, moved, cell.id)
        return moved

    with db.target_cell(UNSCHEDULED):
        moved = db.run_in_transaction(swap)
    stayed = [r["uuid"] for r in inst_rows if r["uuid"] not in moved]
    if stayed:
        remove_copies(db, cell, stayed)
    return moved


def remove_copies(db: Database, cell: Cell, uuids: Sequence[str]) -> None:
    """Delete the records of ``uuids`` from ``cell`` (copies whose move did not complete)."""

    def drop(session: Any) -> None:
        actions = select(InstanceAction.id).where(InstanceAction.instance_uuid.in_(list(uuids)))
        session.execute(delete(InstanceActionEvent).where(InstanceActionEvent.action_id.in_(actions)))
        session.execute(delete(InstanceAction).where(InstanceAction.instance_uuid.in_(list(uuids))))
        session.execute(delete(InstanceFault).where(InstanceFault.instance_uuid.in_(list(uuids))))
        session.execute(delete(Instance).where(Instance.uuid.in_(list(uuids))))

    with db.target_cell(cell):
        db.run_in_transaction(drop)
