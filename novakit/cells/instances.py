"""Reading instances wherever they live: by uuid through their mappings, by name through the
mappings' names, and listings merged across cells (Nova's multi-cell list)."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.cells.registry import Cell, grouped
from novakit.cells.scatter import scatter
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import Instance, InstanceMapping

if TYPE_CHECKING:
    from novakit.db.engine import Database


def get_many(
    db: Database, ctx: RequestContext, uuids: Sequence[str], *, include_deleted: bool = False
) -> list[Instance]:
    """The instances ``uuids`` that ``ctx`` may see, in the order given."""
    found: dict[str, Instance] = {}
    for _cell, group in grouped(db, uuids):
        with db.reader() as session:
            for inst in db_api.instance_get_all(session, ctx, uuids=group, include_deleted=include_deleted):
                found[inst.uuid] = inst
    return [found[u] for u in uuids if u in found]


def names_of_project(
    db: Database, project_id: str, *, names: Sequence[str] | None = None, family: str | None = None
) -> dict[str, str]:
    """Live servers of the project by name -> uuid: those of ``names``, or named ``family`` or
    ``family-<anything>``, in every cell."""
    stmt = select(InstanceMapping.display_name, InstanceMapping.instance_uuid).where(
        InstanceMapping.project_id == project_id, InstanceMapping.deleted == 0
    )
    if names is not None:
        stmt = stmt.where(db_api.one_of(InstanceMapping.display_name, list(names)))
    if family is not None:
        stmt = stmt.where(
            (InstanceMapping.display_name == family)
            | InstanceMapping.display_name.startswith(family + "-", autoescape=True)
        )
    with db.reader() as session:
        return dict(session.execute(stmt).all())  # type: ignore[arg-type]


def name_taken(session: Session, project_id: str, name: str, but: str) -> bool:
    """Whether a live server other than ``but`` is named ``name`` in the project, in any cell."""
    return (
        session.execute(
            select(InstanceMapping.id).where(
                InstanceMapping.project_id == project_id,
                InstanceMapping.display_name == name,
                InstanceMapping.deleted == 0,
                InstanceMapping.instance_uuid != but,
            )
        ).first()
        is not None
    )


def _order(cell: Cell) -> int:
    return cell.id if cell.id is not None else -1


def list_all(
    db: Database, ctx: RequestContext, filters: dict[str, Any], *, unknown_for_down: bool = True
) -> tuple[list[Instance | dict[str, Any]], dict[Cell, str]]:
    """``db_api.instance_get_all`` over every cell, merge-sorted into one order.

    The order across cells is (sort value, cell, row id): within a cell the same as one
    database's, and total, so a marker (the uuid of the last server of a page) says exactly
    where the next page starts in every cell. Each cell returns at most ``limit`` rows after
    that position; the merge keeps the first ``limit``.

    A cell that does not answer is named in the second value; with ``unknown_for_down``, a
    first page (no marker) also carries the minimal records of its servers, from the API
    database (``unknown_record``), after the live cells'.
    """
    filters = dict(filters)
    marker = filters.pop("marker", None)
    limit = filters.get("limit")
    sort_key = filters.get("sort_key", "created_at")
    descending = filters.get("sort_dir", "asc") == "desc"
    cells = db.cells.listed()
    position: tuple[Any, int, int] | None = None
    if marker is not None:
        marker_cell = _cell_of_marker(db, marker, cells)
        with db.target_cell(marker_cell), db.reader() as session:
            value, row_id = db_api.marker_position(session, ctx, marker, filters)
        position = (value, _order(marker_cell), row_id)

    def read(cell: Cell, session: Session) -> list[Instance]:
        after: tuple[Any, int | None] | None = None
        if position is not None:
            value, cell_order, row_id = position
            mine = _order(cell)
            if mine == cell_order:
                after = (value, row_id)
            else:
                # A cell ordered before the marker's has only rows past its value to give;
                # one ordered after it, rows at its value too.
                before = mine < cell_order if not descending else mine > cell_order
                after = (value, None if before else -1)
        return db_api.instance_get_all(session, ctx, after=after, listed=True, **filters)

    gathered = scatter(db, read, cells)
    down = gathered.down
    column = db_api.SORT_KEYS[sort_key].key

    def key(item: tuple[int, Instance]) -> tuple[Any, int, int]:
        order, inst = item
        return (getattr(inst, column), order, inst.id)

    results = _without_stray_copies(db, gathered.results)
    streams = [[(_order(c), i) for i in rows] for c, rows in results.items()]
    merged = [i for _, i in heapq.merge(*streams, key=key, reverse=descending)]
    out: list[Instance | dict[str, Any]] = list(merged[:limit] if limit is not None else merged)
    if down and unknown_for_down and marker is None:
        out.extend(unknown_records(db, ctx, list(down), filters))
    return out, down


def _without_stray_copies(db: Database, results: dict[Cell, list[Instance]]) -> dict[Cell, list[Instance]]:
    """Each server once: a move interrupted between its copy and its swap leaves the server in
    two databases (``novakit.cells.moves``) until heal removes the copy; the mapping says which
    one is the server."""
    seen: dict[str, int] = {}
    for rows in results.values():
        for inst in rows:
            seen[inst.uuid] = seen.get(inst.uuid, 0) + 1
    twice = [u for u, n in seen.items() if n > 1]
    if not twice:
        return results
    home = {u: db.cells.database(c) for c, us in db.cells.of_instances(twice).items() for u in us}
    return {
        cell: [i for i in rows if i.uuid not in home or home[i.uuid] is db.cells.database(cell)]
        for cell, rows in results.items()
    }


def _cell_of_marker(db: Database, marker: str, cells: list[Cell]) -> Cell:
    found = db.cells.of_instances([marker])
    if not found:
        raise exceptions.MarkerNotFound(marker=marker)
    cell = next(iter(found))
    if cell not in cells:
        # Not scheduled yet, in the API database that is a cell itself: read as that cell's.
        home = [c for c in cells if db.cells.database(c) is db.cells.database(cell)]
        if not home:
            raise exceptions.MarkerNotFound(marker=marker)
        cell = home[0]
    return cell


def unknown_records(
    db: Database, ctx: RequestContext, cells: list[Cell], filters: dict[str, Any]
) -> list[dict[str, Any]]:
    """The servers of down ``cells`` as the API database knows them (Nova's minimal records,
    microversion 2.69): uuid, name, project, status UNKNOWN."""
    ids = [c.id for c in cells if c.id is not None]
    stmt = select(InstanceMapping).where(InstanceMapping.cell_id.in_(ids))
    if filters.get("only_deleted"):
        stmt = stmt.where(InstanceMapping.deleted != 0)
    elif not filters.get("include_deleted"):
        stmt = stmt.where(InstanceMapping.deleted == 0)
    stmt = policy.scope(ctx, stmt, InstanceMapping.project_id, filters.get("project_id") or None)
    if filters.get("uuids") is not None:
        stmt = stmt.where(InstanceMapping.instance_uuid.in_(list(filters["uuids"])))
    names: dict[int | None, str] = {c.id: c.name for c in cells}
    with db.reader() as session:
        return [
            unknown_record(m, names.get(m.cell_id, "?"))
            for m in session.execute(stmt.order_by(InstanceMapping.id)).scalars()
        ]


def unknown_record(mapping: InstanceMapping, cell_name: str) -> dict[str, Any]:
    """A server whose cell is down, as much as the API database knows of it."""
    unknown: dict[str, Any] = dict.fromkeys(
        ("hostname", "vm_state", "task_state", "power_state", "host", "node", "availability_zone", "image")
        + (
            "image_name",
            "locked",
            "locked_reason",
            "reservation_id",
            "updated",
            "launched_at",
            "terminated_at",
        )
    )
    return {
        **unknown,
        "id": mapping.instance_uuid,
        "name": mapping.display_name,
        "status": "UNKNOWN",
        "power_state_name": "",
        "host_id": "",
        "flavor": {},
        "addresses": [],
        "metadata": {},
        "project_id": mapping.project_id,
        "user_id": mapping.user_id,
        "created": mapping.created_at,
        "cell": cell_name,
        "cell_down": True,
    }


# --- what the scheduler asks of the cells when they are not the API database -------------


def hosts_of(db: Database, uuids: Sequence[str]) -> dict[str, str | None]:
    """``{uuid: host}`` of the live instances ``uuids``, wherever they live."""
    out: dict[str, str | None] = {}
    for _cell, group in grouped(db, uuids):
        with db.reader() as session:
            rows = session.execute(
                select(Instance.uuid, Instance.host).where(Instance.deleted == 0, Instance.uuid.in_(group))
            ).all()
        out.update(dict(rows))  # type: ignore[arg-type]
    return out


def load_on_hosts(db: Database, hosts: Sequence[str]) -> dict[str, tuple[int, int]]:
    """``{host: (live servers, servers with a task running)}``, asked of each host's cell whose
    database is not the API database's: what the API database holds the scheduler counts in its
    own candidate query (``scheduler.host_state``), without a transaction of its own."""
    from sqlalchemy import func

    by_cell: dict[Cell, list[str]] = {}
    for host, cell in db.cells.host_cells(hosts).items():
        if not db.cells.is_api(cell):
            by_cell.setdefault(cell, []).append(host)
    out: dict[str, tuple[int, int]] = {}
    for cell, group in by_cell.items():
        with db.target_cell(cell), db.reader() as session:
            rows = session.execute(
                select(Instance.host, func.count(), func.count(Instance.task_state))
                .where(Instance.deleted == 0, Instance.host.in_(group))
                .group_by(Instance.host)
            ).all()
        out.update({str(host): (int(n), int(io)) for host, n, io in rows})
    return out
