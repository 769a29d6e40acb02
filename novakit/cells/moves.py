"""Servers into their cells: a new one straight from where it waited, others by copy and swap.

Nova's super conductor creates the instance in the chosen host's cell once the scheduler
has picked the host, and in cell0 when nothing could be picked. Here a new server's records
(instance, action) wait in the API database's instance tables until then.

**Placed** (``take_waiting``, ``take_records``, ``write_records``), all inside the claims'
transaction of the API database: the waiting rows are deleted there (the instance's delete is
guarded: still building and scheduling, not deleted) and returned by the same statements, the
mapping points at the cell, and, before that transaction commits, the rows are written in the
cell's database (a transaction of its own there, committed first). A process killed after the
cell's commit and before the claims' leaves a copy the mapping does not point at, carrying the
build's lease: heal removes it once the lease ran out (its ``stray_copy`` rule), and the server
is still waiting, unclaimed, as before the claim. The caller holds the cell's writers' gate
before it begins the claims' transaction (``CellRegistry.placement_gates``), so the gates are
taken in their one order, the cell's before the API database's.

**Moved** (``move_to_cell``: into cell0, an imported guest into its host's cell), in two steps:

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, delete, insert, select

from novakit import exceptions
from novakit.cells import mappings
from novakit.cells.registry import UNSCHEDULED, Cell
from novakit.db.models import Instance, InstanceAction, InstanceActionEvent, InstanceFault, utcnow

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


@dataclass
class Records:
    """A waiting server's rows as read from the API database: itself, its actions, their
    events, its faults."""

    instances: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    events: list[dict[str, Any]]
    faults: list[dict[str, Any]]


def _move(db: Database, uuids: Sequence[str], cell: Cell) -> list[str]:
    """Copy the servers' records into the cell, then delete the originals of the ones that did
    not change meanwhile (guarded by ``_GUARD``); the copies of the others go again."""
    if db.cells.database(cell) is db:
        db.run_in_transaction(lambda s: mappings.set_cell(s, uuids, cell.id))
        db.cells.remember(uuids, cell)
        return list(uuids)
    with db.target_cell(UNSCHEDULED), db.reader() as session:
        records = read_records(session, uuids)
    if not records.instances:
        return []
    with db.target_cell(cell):
        db.run_in_transaction(lambda session: _copy_records(session, records))
    with db.target_cell(UNSCHEDULED):
        moved = db.run_in_transaction(lambda session: _drop_moved(session, records, cell))
    db.cells.remember(moved, cell)
    stayed = [r["uuid"] for r in records.instances if r["uuid"] not in moved]
    if stayed:
        remove_copies(db, cell, stayed)
    return moved


def take_waiting(session: Any, uuid: str, values: dict[str, Any]) -> dict[str, Any] | None:
    """In the claims' transaction: the waiting server ``uuid`` deleted from the API database's
    instance tables if it is still building and scheduling (not deleted), and returned as its
    row with ``values`` written on it (``updated_at`` now unless given); None when it was
    deleted or changed meanwhile, and nothing was taken."""
    from novakit.compute.states import TaskState, VmState

    row = session.execute(
        _TAKE_WAITING,
        {"uuid": uuid, "task_state": TaskState.SCHEDULING.value, "vm_state": VmState.BUILDING.value},
    ).first()
    if row is None:
        return None
    return {**dict(zip(_INSTANCE_KEYS, row, strict=True)), "updated_at": utcnow(), **values}


def take_records(session: Any, instances: list[dict[str, Any]]) -> Records:
    """In the claims' transaction, after ``take_waiting``: the taken servers' actions, events
    and faults deleted from the API database's instance tables, and returned with them."""
    uuids = [r["uuid"] for r in instances]
    of_servers = InstanceAction.instance_uuid.in_(uuids)
    events = _taken(
        session,
        InstanceActionEvent,
        InstanceActionEvent.action_id.in_(select(InstanceAction.id).where(of_servers)),
    )
    actions = _taken(session, InstanceAction, of_servers)
    faults = _taken(session, InstanceFault, InstanceFault.instance_uuid.in_(uuids))
    return Records(instances, actions, events, faults)


def write_records(db: Database, cell: Cell, records: Records) -> None:
    """The taken servers' rows written in ``cell``'s database, in a transaction of its own there
    (the caller holds the cell's gate: module docstring)."""
    with db.target_cell(cell):
        db.run_in_transaction(lambda session: _copy_records(session, records))


def _taken(session: Any, model: Any, where: Any) -> list[dict[str, Any]]:
    """The rows of ``model`` a ``DELETE ... WHERE where`` took, by column attribute (as ``_row``
    gives them)."""
    keys = [c.key for c in model.__mapper__.column_attrs]
    rows = session.execute(delete(model).where(where).returning(*[getattr(model, k) for k in keys])).all()
    return [dict(zip(keys, r, strict=True)) for r in rows]


def read_records(session: Any, uuids: Sequence[str]) -> Records:
    """The waiting servers' rows in the API database (``session``), as ``move_to_cell`` copies them."""
    # Live rows only: a server deleted while it waited stays where it was deleted.
    instances = _rows(session, select(Instance).where(Instance.uuid.in_(list(uuids)), Instance.deleted == 0))
    actions = _rows(session, select(InstanceAction).where(InstanceAction.instance_uuid.in_(list(uuids))))
    events = _rows(
        session,
        select(InstanceActionEvent).where(
            InstanceActionEvent.action_id.in_([a["id"] for a in actions] or [-1])
        ),
    )
    faults = _rows(session, select(InstanceFault).where(InstanceFault.instance_uuid.in_(list(uuids))))
    return Records(instances, actions, events, faults)


_INSTANCE_KEYS = [c.key for c in Instance.__mapper__.column_attrs]
_TAKE_WAITING = (
    delete(Instance)
    .where(
        Instance.uuid == bindparam("uuid"),
        Instance.deleted == 0,
        Instance.task_state == bindparam("task_state"),
        Instance.vm_state == bindparam("vm_state"),
    )
    .returning(*[getattr(Instance, k) for k in _INSTANCE_KEYS])
)


def _rows(session: Any, stmt: Any) -> list[dict[str, Any]]:
    return [_row(obj) for obj in session.execute(stmt).scalars()]


def _without_id(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "id"}


def _copy_records(session: Any, records: Records) -> None:
    """The rows written in the cell, each with a new id (the events follow their actions')."""
    session.execute(insert(Instance), [_without_id(r) for r in records.instances])
    new_ids: dict[int, int] = {}
    for a in records.actions:
        new_ids[a["id"]] = session.execute(
            insert(InstanceAction).values(_without_id(a)).returning(InstanceAction.id)
        ).scalar_one()
    if records.events:
        session.execute(
            insert(InstanceActionEvent),
            [{**_without_id(e), "action_id": new_ids[e["action_id"]]} for e in records.events],
        )
    if records.faults:
        session.execute(insert(InstanceFault), [_without_id(f) for f in records.faults])


def _drop_moved(session: Any, records: Records, cell: Cell) -> list[str]:
    """The originals deleted where they are as they were read (a guarded delete each), their
    mappings pointed at the cell; returns the uuids that moved."""
    moved = []
    for r in records.instances:
        guard = and_(
            Instance.uuid == r["uuid"],
            *[getattr(Instance, k) == r[k] for k in _GUARD if r[k] is not None],
        )
        nulls = [getattr(Instance, k).is_(None) for k in _GUARD if r[k] is None]
        if session.execute(delete(Instance).where(guard, *nulls)).rowcount == 1:
            moved.append(r["uuid"])
    if moved:
        gone_actions = [a["id"] for a in records.actions if a["instance_uuid"] in moved]
        if gone_actions:
            session.execute(
                delete(InstanceActionEvent).where(InstanceActionEvent.action_id.in_(gone_actions))
            )
            session.execute(delete(InstanceAction).where(InstanceAction.id.in_(gone_actions)))
        session.execute(delete(InstanceFault).where(InstanceFault.instance_uuid.in_(moved)))
        mappings.set_cell(session, moved, cell.id)
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
