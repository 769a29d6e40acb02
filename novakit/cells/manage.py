"""Managing cells, as ``nova-manage cell_v2`` does: create, list, delete, discover hosts.

A cell's database is checked before it is mapped: it must answer, be a cell's (not an API
database, not some other schema) and be migrated to the cell tree's head. ``migrate``
(``novakit cell create --migrate``) migrates an empty one first. Nothing is written when a
check fails: no mapping, and no SQLite file made for a database that did not exist.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.cells import mappings
from novakit.cells.registry import Cell, cell0_problem, default_cell, kind_of, new_cell_uuid
from novakit.context import RequestContext
from novakit.db.models import CellMapping, ComputeNode, HostMapping, InstanceMapping, utcnow

if TYPE_CHECKING:
    from novakit.db.engine import Database

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _shown(url: str) -> str:
    from sqlalchemy import make_url

    return make_url(url).render_as_string(hide_password=True)


def check_cell_database(name: str, url: str, *, migrate: bool = False) -> str:
    """Refuse a database that cannot be a cell (``InvalidCell``, naming the cell and what is
    wrong); with ``migrate``, bring an empty or older one to the cell schema. Its URL as shown."""
    from sqlalchemy import make_url

    from novakit.db.engine import Database, is_unreachable

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise exceptions.InvalidCell(cell=name, reason=f"the database URL is not valid ({exc})") from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise exceptions.InvalidCell(
            cell=name, reason=f"{parsed.get_backend_name()} is not a supported database (sqlite, postgresql)"
        )
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite_file(name, parsed.database or "", migrate)
    shown = _shown(url)
    try:
        db = Database(url, kind="cell", auto_upgrade=False)
    except exceptions.ConfigError as exc:
        raise exceptions.InvalidCell(cell=name, reason=str(exc.kwargs.get("reason", exc))) from None
    try:
        try:
            kind = kind_of(db)
        except DBAPIError as exc:
            if not is_unreachable(exc) and "does not exist" not in str(exc.orig):
                raise
            raise exceptions.InvalidCell(
                cell=name, reason=f"its database {shown} cannot be reached ({str(exc.orig).strip()})"
            ) from None
        if _needs_migration(name, shown, kind, migrate):
            db.upgrade()
    finally:
        db.dispose()
    return shown


def _check_sqlite_file(name: str, path: str, migrate: bool) -> None:
    """A cell's SQLite database is a file, in a directory that exists; one that does not exist
    yet only to be migrated."""
    if not path or path == ":memory:":
        raise exceptions.InvalidCell(cell=name, reason="a cell's SQLite database must be a file")
    if not os.path.exists(path) and not migrate:
        raise exceptions.InvalidCell(
            cell=name,
            reason=f"its database file {path} does not exist: it is not migrated "
            "(add --migrate to create it with the cell schema)",
        )
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise exceptions.InvalidCell(cell=name, reason=f"the directory of {path} does not exist")


def _needs_migration(name: str, shown: str, kind: str, migrate: bool) -> bool:
    """Whether a database of this ``kind`` is to be brought to the cell schema; one that cannot
    be a cell, or one not migrated without ``migrate``, is refused."""
    if kind == "api":
        raise exceptions.InvalidCell(
            cell=name, reason=f"{shown} is an API database (it maps cells), not a cell's database"
        )
    if kind == "other":
        raise exceptions.InvalidCell(
            cell=name,
            reason=f"{shown} holds tables that are not a novakit cell's; give an empty database",
        )
    if kind not in ("empty", "cell-old"):
        return False
    if not migrate:
        what = "is empty" if kind == "empty" else "is at an older cell schema"
        raise exceptions.InvalidCell(
            cell=name,
            reason=f"{shown} {what}: it is not migrated (add --migrate, or run novakit db upgrade)",
        )
    return True


def create_cell(
    db: Database, ctx: RequestContext, name: str, url: str, *, migrate: bool = False, disabled: bool = False
) -> dict[str, Any]:
    """Map a new cell to its database (checked first, ``check_cell_database``)."""
    policy.authorize(ctx, "cell:create")
    if not NAME.match(name or ""):
        raise exceptions.ValidationError(
            "name", "1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    known = db.cells.all()
    if any(c.name == name for c in known):
        raise exceptions.ValidationError("name", f"a cell named {name} exists already")
    for cell in known:
        if db.cells.url_of(cell) == url:
            raise exceptions.InvalidCell(cell=name, reason=f"its database is cell {cell.name}'s already")
    if url == db.url:
        raise exceptions.InvalidCell(cell=name, reason="its database is the API database")
    check_cell_database(name, url, migrate=migrate)
    uuid = new_cell_uuid()

    def write(session: Session) -> None:
        session.add(CellMapping(uuid=uuid, name=name, database_url=url, disabled=disabled))

    db.run_in_transaction(write)
    return show_cell(db, ctx, name)


def _counts(db: Database) -> tuple[dict[int, int], dict[int, int]]:
    with db.reader() as session:
        hosts = dict(
            session.execute(select(HostMapping.cell_id, func.count()).group_by(HostMapping.cell_id)).all()
        )
        servers = dict(
            session.execute(
                select(InstanceMapping.cell_id, func.count())
                .where(InstanceMapping.deleted == 0, InstanceMapping.cell_id.isnot(None))
                .group_by(InstanceMapping.cell_id)
            ).all()
        )
    return hosts, servers  # type: ignore[return-value]


def cell_view(db: Database, cell: Cell, hosts: dict[int, int], servers: dict[int, int]) -> dict[str, Any]:
    return {
        "name": cell.name,
        "uuid": cell.uuid,
        "database": _shown(db.cells.url_of(cell)),
        "database_is_api": db.cells.url_of(cell) == db.url,
        "disabled": cell.disabled,
        "hosts": hosts.get(cell.id or -1, 0),
        "servers": servers.get(cell.id or -1, 0),
        "status": _status(db, cell),
    }


def _status(db: Database, cell: Cell) -> str:
    down = db.cells.probe(cell)
    return f"down: {down}" if down else "up"


def list_cells(db: Database, ctx: RequestContext) -> list[dict[str, Any]]:
    policy.authorize(ctx, "cell:list")
    hosts, servers = _counts(db)
    return [cell_view(db, c, hosts, servers) for c in db.cells.all()]


def show_cell(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any]:
    policy.authorize(ctx, "cell:list")
    hosts, servers = _counts(db)
    return cell_view(db, db.cells.get(ref), hosts, servers)


def delete_cell(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any]:
    """Unmap an empty cell. Refused for cell0 and while hosts or live servers are mapped to it;
    the deleted servers it held lose their cell (their records stay in its database)."""
    policy.authorize(ctx, "cell:delete")
    cell = db.cells.get(ref)
    if cell.is_cell0:
        raise exceptions.CellInUse(
            cell=cell.name, reason="cell0 holds the servers that could not be scheduled"
        )

    def write(session: Session) -> None:
        hosts = session.execute(select(func.count()).where(HostMapping.cell_id == cell.id)).scalar_one()
        servers = session.execute(
            select(func.count()).where(InstanceMapping.cell_id == cell.id, InstanceMapping.deleted == 0)
        ).scalar_one()
        if hosts or servers:
            raise exceptions.CellInUse(
                cell=cell.name,
                reason=f"{hosts} host(s) and {servers} server(s) are mapped to it; "
                "delete the servers and hosts first "
                "(novakit server list --all-projects, novakit host delete)",
            )
        session.execute(
            update(InstanceMapping)
            .where(InstanceMapping.cell_id == cell.id)
            .values(cell_id=None, updated_at=utcnow())
        )
        session.execute(delete(CellMapping).where(CellMapping.id == cell.id))

    db.run_in_transaction(write)
    return {"name": cell.name, "uuid": cell.uuid, "deleted": True}


def discover_hosts(db: Database, ctx: RequestContext, ref: str | None = None) -> list[str]:
    """Map every registered host that is in no cell to ``ref`` (default: the default cell, as
    a new host goes); the hosts newly mapped. Nova's ``cell_v2 discover_hosts``."""
    policy.authorize(ctx, "host:register")
    cell = db.cells.get(ref) if ref is not None else default_cell(db.cells)
    if cell.is_cell0:
        raise exceptions.ValidationError(
            "cell", "cell0 holds servers that could not be scheduled, never hosts"
        )
    assert cell.id is not None

    def write(session: Session) -> list[str]:
        mapped = set(session.execute(select(HostMapping.host)).scalars())
        found = sorted(
            set(session.execute(select(ComputeNode.host).where(ComputeNode.deleted == 0)).scalars())
        )
        new = [h for h in found if h not in mapped]
        for host in new:
            mappings.map_host(session, host, cell.id, cell.name)  # type: ignore[arg-type]
        return new

    return db.run_in_transaction(write)


def set_disabled(db: Database, ctx: RequestContext, ref: str, disabled: bool) -> dict[str, Any]:
    """A disabled cell takes no new servers (its hosts are left out of scheduling)."""
    policy.authorize(ctx, "cell:create")
    cell = db.cells.get(ref)
    db.run_in_transaction(
        lambda s: s.execute(update(CellMapping).where(CellMapping.id == cell.id).values(disabled=disabled))
    )
    return show_cell(db, ctx, ref)


def upgrade_all(db: Database) -> dict[str, str]:
    """``novakit db upgrade``: the API database (both trees), then every cell's database;
    cell name -> its revision afterwards, or why it could not be upgraded (a down cell is
    named, the others are upgraded all the same).

    cell0 is needed by every create (a server that fits no host goes there): when its database
    cannot be made (a PostgreSQL user without CREATEDB) or opened, the upgrade fails
    (``InvalidCell`` saying what the database user needs), before anything is changed when that
    can be told up front (``registry.cell0_problem``).
    """
    problem = cell0_problem(db)
    if problem:
        raise exceptions.InvalidCell(cell="cell0", reason=problem)
    db.upgrade_if_needed()
    out: dict[str, str] = {"(api)": db.current_revision() or "none"}
    cell0_failed = ""
    for cell in db.cells.all():
        try:
            cell_db = db.cells.database(cell)
            if cell_db is not db:
                cell_db.upgrade_if_needed()
            out[cell.name] = (
                cell_db.current_revision() or "none" if cell_db is not db else "(the API database)"
            )
        except (DBAPIError, exceptions.NovakitError) as exc:
            said = exc.kwargs.get("reason", exc) if isinstance(exc, exceptions.NovakitError) else exc.orig
            out[cell.name] = f"not upgraded: {said}"
            if cell.is_cell0:
                cell0_failed = str(said)
    if cell0_failed:
        raise exceptions.InvalidCell(cell="cell0", reason=cell0_failed)
    return out
