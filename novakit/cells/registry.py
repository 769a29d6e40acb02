"""The cells of an API database, their databases, and where an instance or a host lives.

What a boot asks of the mappings (which cells there are, which cell a host is in, which cell
holds an instance) is kept per process (per ``CellRegistry``) instead of read each time:

* Writes made in this process are seen at once. Every write statement on ``cell_mappings`` or
  ``host_mappings`` (and every delete of ``instance_mappings``) made through any engine of
  this process bumps the API database's epoch (``mappings_written``, called by
  ``novakit.db.engine``), which drops what every registry of that database had kept.
* Writes made by other processes are seen within ``MAPPINGS_SECONDS``: the cells and the
  host mappings kept are read again after that long (every host mapping in one statement).
  Something that is not known at all is read at once: a cell id or name not seen yet, a
  host with no mapping kept (a host mapped just now by another process is found the first
  time a boot asks for it).
* An instance's cell, once it is a cell (not "not scheduled yet"), is kept for good: a
  server never leaves its cell (a move into a cell is from the API database's waiting
  tables, and only a deleted server's mapping loses its cell, when its cell is deleted).
  "Not scheduled" is never kept: another process may be placing that server right now.

Where a stale answer could send a write to the wrong place, and why it cannot or what bounds it:

* a host deleted (it must hold no server and no claim) and mapped again to another cell by
  another process: for at most ``MAPPINGS_SECONDS`` this process may still take it for the
  old cell, and a server built there in that window would be recorded in the old cell. Both
  steps are an operator's, seconds apart at the least; the window is the price of reading no
  mapping per boot (Nova's scheduler keeps its cells until it is restarted);
* a cell disabled by another process may still be offered new servers for that long; a cell
  deleted must hold no host and no server, so nothing is placed in it; a cell's database URL
  is never changed in place (a cell is deleted and created again, under a new id);
* a new cell or host is never missed: an id, a name or a host that is not kept is read.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import time
import uuid as uuidlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import inspect as sa_inspect
from sqlalchemy import make_url, select, text
from sqlalchemy.exc import DBAPIError

from novakit import exceptions
from novakit.db.models import CellMapping, HostMapping, InstanceMapping

if TYPE_CHECKING:
    from novakit.db.engine import Database

#: How long a cell found up or down is taken to stay so before it is asked again.
PROBE_SECONDS = 2.0

#: How long the cells and host mappings kept by a process are trusted for other processes'
#: writes (this process's own writes are seen at once).
MAPPINGS_SECONDS = 2.0

_ALL_HOSTS = text("SELECT host, cell_id FROM host_mappings")

#: At most this many instances' cells are kept per registry (all forgotten past it).
INSTANCES_KEPT = 50_000

# Per API database URL: [the epoch of cells and hosts, the epoch of instance mappings].
_epochs: dict[str, list[int]] = {}


def mappings_written(api_url: str, *, instances_only: bool = False) -> None:
    """The mappings of the API database ``api_url`` were written in this process: what every
    registry of that database keeps is read again (``instances_only``: only instances' cells)."""
    epoch = _epochs.setdefault(api_url, [0, 0])
    if not instances_only:
        epoch[0] += 1
    epoch[1] += 1


def _epoch(api_url: str) -> list[int]:
    return _epochs.setdefault(api_url, [0, 0])


# The probe's question, made once.
_ANSWER = text("SELECT 1")

#: Nova's fixed uuid of cell0, where servers that could not be scheduled live.
CELL0_UUID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class Cell:
    """A cell as mapped. ``id`` None is no cell: the API database's own instance tables, where
    a server waits until it is scheduled (``UNSCHEDULED``)."""

    id: int | None
    uuid: str
    name: str
    database_url: str | None = None
    disabled: bool = False

    @property
    def is_cell0(self) -> bool:
        return self.uuid == CELL0_UUID

    @classmethod
    def of(cls, row: CellMapping) -> Cell:
        return cls(row.id, row.uuid, row.name, row.database_url, bool(row.disabled))


UNSCHEDULED = Cell(None, "", "(not scheduled)")


def derived_url(api_url: str, suffix: str) -> str:
    """The URL of a database named after the API database's: the SQLite file beside it
    (``novakit.db`` -> ``novakit-cell0.db``), the PostgreSQL database ``<name>_cell0``."""
    url = make_url(api_url)
    name = url.database or ""
    if url.get_backend_name() == "sqlite":
        stem, dot, ext = name.rpartition(".")
        new = f"{stem}-{suffix}.{ext}" if dot and "/" not in ext else f"{name}-{suffix}"
        return url.set(database=new).render_as_string(hide_password=False)
    return url.set(database=f"{name}_{suffix}").render_as_string(hide_password=False)


class CellRegistry:
    """Cells read from ``cell_mappings``; one ``Database`` per cell database, kept open."""

    def __init__(self, api: Database) -> None:
        self.api = api
        self._dbs: dict[str, Database] = {}
        self._by_id: dict[int, Cell] = {}
        self._lock = threading.Lock()
        self._probed: dict[str, tuple[float, str]] = {}
        self._epoch = _epoch(api.url)
        # What is kept (module docstring): the cells, when read and at which epoch; hosts' cell
        # ids likewise; instances' cell ids at an instance epoch.
        self._cells: list[Cell] | None = None
        self._cells_read = (0.0, -1)
        self._hosts: dict[str, int] = {}
        self._hosts_read = (0.0, -1)
        self._instances: dict[str, int] = {}
        self._instances_read = -1

    def _still_good(self, read: tuple[float, int]) -> bool:
        return read[1] == self._epoch[0] and time.monotonic() - read[0] < MAPPINGS_SECONDS

    # --- the cells -------------------------------------------------------------------

    def all(self) -> list[Cell]:
        """Every cell, cell0 first, then by name (kept: module docstring)."""
        cells = self._cells
        if cells is None or not self._still_good(self._cells_read):
            cells = self._read_cells()
        return list(cells)

    def _read_cells(self) -> list[Cell]:
        read = (time.monotonic(), self._epoch[0])
        with self.api.reader() as session:
            rows = session.execute(select(CellMapping).order_by(CellMapping.id)).scalars().all()
        cells = sorted((Cell.of(r) for r in rows), key=lambda c: (not c.is_cell0, c.name))
        with self._lock:
            self._by_id.update({c.id: c for c in cells if c.id is not None})
            self._cells, self._cells_read = cells, read
        return cells

    def get(self, ref: str) -> Cell:
        """A cell by name or uuid (one not kept is read again: a cell created just now)."""
        for cells in (self.all, self._read_cells):
            for cell in cells():
                if ref in (cell.name, cell.uuid):
                    return cell
        raise exceptions.CellNotFound(cell=ref)

    def by_id(self, cell_id: int | None) -> Cell:
        if cell_id is None:
            return UNSCHEDULED
        cell = self._by_id.get(cell_id) if self._still_good(self._cells_read) else None
        if cell is None:
            self._read_cells()
            cell = self._by_id.get(cell_id)
            if cell is None:
                raise exceptions.CellNotFound(cell=str(cell_id))
        return cell

    def cell0(self) -> Cell:
        for cells in (self.all, self._read_cells):
            for cell in cells():
                if cell.is_cell0:
                    return cell
        raise exceptions.CellNotFound(cell="cell0")

    def listed(self) -> list[Cell]:
        """What a listing reads: every cell, and the servers not scheduled yet unless the API
        database is a cell itself (then they are among that cell's rows)."""
        cells = self.all()
        if not any(self.is_api(c) for c in cells):
            cells.append(UNSCHEDULED)
        return cells

    def single_database(self) -> bool:
        """Whether every cell that holds hosts' servers is the API database (cell0 holds none):
        then one query of the API database sees every server on a host, as before cells."""
        return all(self.is_api(c) for c in self.all() if not c.is_cell0)

    def unusable_hosts(self) -> dict[str, str]:
        """Hosts no new server may go to because of their cell: disabled, or its database down
        (asked at most every ``PROBE_SECONDS`` per cell), host -> why."""
        out: dict[str, str] = {}
        cells = [c for c in self.all() if not c.is_cell0]
        why: dict[int, str] = {}
        for cell in cells:
            if cell.disabled:
                why[cell.id] = f"its cell {cell.name} is disabled"  # type: ignore[index]
            elif not self.is_api(cell):
                down = self.probe(cell)
                if down:
                    why[cell.id] = f"its cell {cell.name} is down ({down})"  # type: ignore[index]
        if why:
            for host, cell in self.host_cells().items():
                if cell.id in why:
                    out[host] = why[cell.id]  # type: ignore[index]
        return out

    def probe(self, cell: Cell) -> str:
        """ "" if the cell's database answers, else why not; remembered for ``PROBE_SECONDS``."""
        import time

        from novakit.db.engine import is_unreachable

        now = time.monotonic()
        known = self._probed.get(cell.uuid)
        if known is not None and now - known[0] < PROBE_SECONDS:
            return known[1]
        reason = ""
        try:
            with self.database(cell).engine.connect() as conn:
                conn.execute(_ANSWER)
        except Exception as exc:  # any failure to answer is a down cell
            from sqlalchemy.exc import DBAPIError

            if isinstance(exc, DBAPIError) and not is_unreachable(exc):
                raise
            reason = (
                str(getattr(exc, "orig", exc)).strip().splitlines()[0] if str(exc) else type(exc).__name__
            )
        self._probed[cell.uuid] = (now, reason)
        return reason

    # --- their databases ------------------------------------------------------------------

    def url_of(self, cell: Cell) -> str:
        if cell.database_url:
            return cell.database_url
        if cell.is_cell0:
            return derived_url(self.api.url, "cell0")
        return self.api.url

    def is_api(self, cell: Cell) -> bool:
        """Whether ``cell``'s database is the API database itself (told without opening it)."""
        return cell.id is None or self.url_of(cell) == self.api.url

    def database(self, cell: Cell) -> Database:
        """The cell's database: the API database itself where it is that cell (or for a server
        not scheduled yet); cell0's beside it is created, empty, on first use. cell0's that
        cannot be created or opened is ``CellDown``, as a cell that does not answer."""
        if cell.id is None:
            return self.api
        url = self.url_of(cell)
        if url == self.api.url:
            return self.api
        with self._lock:
            db = self._dbs.get(url)
            if db is None:
                from novakit.db.engine import Database

                # Only cell0's database beside the API database is made on first use; a mapped
                # cell's SQLite file that is missing stays missing: the cell is down.
                derived = cell.is_cell0 and not cell.database_url
                if derived:
                    _create_database(url)
                try:
                    db = Database(url, kind="cell", auto_upgrade=False, create_dir=False, create_file=derived)
                except exceptions.ConfigError as exc:  # a SQLite file whose directory is gone
                    raise exceptions.CellDown(
                        cell=cell.name, reason=str(exc.kwargs.get("reason", exc))
                    ) from None
                if derived:
                    try:
                        db.upgrade_if_needed()
                    except DBAPIError as exc:
                        db.dispose()
                        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
                        raise exceptions.CellDown(
                            cell=cell.name, reason=f"its database {_shown(url)} cannot be opened ({reason})"
                        ) from None
                self._dbs[url] = db
        return db

    @contextlib.contextmanager
    def placement_gates(self) -> Iterator[None]:
        """Hold the writers' gates of the databases a claim may place servers in besides the API
        database (every cell's but cell0's, by name; no-ops but for SQLite files), for a claims'
        transaction that writes its servers into their cell before it commits
        (``novakit.cells.moves``): the cell's gate is taken before the API database's, the one
        order every writer keeps. A cell whose database cannot be opened is skipped (it is down,
        and the scheduler places nothing there)."""
        from novakit.db.engine import write_gate

        with contextlib.ExitStack() as stack:
            for cell in self.all():
                if cell.is_cell0 or self.is_api(cell):
                    continue
                try:
                    db = self.database(cell)
                except exceptions.CellDown:
                    continue
                stack.enter_context(write_gate(db))
            yield

    def dispose(self) -> None:
        with self._lock:
            for db in self._dbs.values():
                db.dispose()
            self._dbs.clear()

    # --- where things are ----------------------------------------------------------------

    def of_instances(self, uuids: Sequence[str]) -> dict[Cell, list[str]]:
        """The uuids by the cell they live in (unmapped ones are left out). The cells of
        instances that are in a cell are kept (module docstring); only the others are read."""
        if not uuids:
            return {}
        kept = self._kept_instances()
        where: dict[str, int | None] = {u: kept[u] for u in uuids if u in kept}
        missing = [u for u in uuids if u not in where]
        if missing:
            epoch = self._epoch[1]
            with self.api.reader() as session:
                rows = session.execute(
                    select(InstanceMapping.instance_uuid, InstanceMapping.cell_id).where(
                        InstanceMapping.instance_uuid.in_(missing)
                    )
                ).all()
            where.update(rows)  # type: ignore[arg-type]
            self._keep_instances({u: c for u, c in rows if c is not None}, epoch)
        out: dict[Cell, list[str]] = defaultdict(list)
        for uuid in uuids:
            if uuid in where:
                out[self.by_id(where[uuid])].append(uuid)
        return dict(out)

    def remember(self, uuids: Sequence[str], cell: Cell) -> None:
        """Keep that the instances ``uuids`` are in ``cell``, as the caller has just written or
        read their mappings (nothing is kept for ``UNSCHEDULED``)."""
        if cell.id is not None:
            self._keep_instances(dict.fromkeys(uuids, cell.id), self._epoch[1])

    def _kept_instances(self) -> dict[str, int]:
        if self._instances_read != self._epoch[1]:
            self._instances = {}
            self._instances_read = self._epoch[1]
        return self._instances

    def _keep_instances(self, cells: dict[str, int], epoch: int) -> None:
        # Read before a delete of mappings in this process: not kept, it may be gone.
        if not cells or epoch != self._epoch[1]:
            return
        kept = self._kept_instances()
        if len(kept) + len(cells) > INSTANCES_KEPT:
            kept.clear()
        kept.update(cells)

    def of_instance(self, uuid: str) -> Cell:
        found = self.of_instances([uuid])
        if not found:
            raise exceptions.InstanceNotFound(instance_id=uuid)
        return next(iter(found))

    def of_host(self, host: str) -> Cell | None:
        """The cell ``host`` is mapped to, read (registering a host asks this: never kept)."""
        with self.api.reader() as session:
            cell_id = session.execute(select(HostMapping.cell_id).where(HostMapping.host == host)).scalar()
        return self.by_id(cell_id) if cell_id is not None else None

    def host_cells(self, hosts: Iterable[str] | None = None) -> dict[str, Cell]:
        """Host -> cell, for ``hosts`` (kept: module docstring; a host not kept is read) or
        every mapped host (read)."""
        if hosts is None:
            rows = self._read_hosts()
            return {host: self.by_id(cell_id) for host, cell_id in rows.items()}
        wanted = list(hosts)
        if not self._still_good(self._hosts_read):
            # Every mapping at once, in one statement (10,000 hosts: a few milliseconds every
            # MAPPINGS_SECONDS), rather than each host again as a boot next asks for it.
            self._read_hosts()
        kept = self._hosts
        missing = [h for h in wanted if h not in kept]
        if missing:
            epoch = self._epoch[0]
            with self.api.reader() as session:
                found = dict(
                    session.execute(
                        select(HostMapping.host, HostMapping.cell_id).where(HostMapping.host.in_(missing))
                    ).all()
                )
            if epoch == self._epoch[0]:
                kept.update(found)  # type: ignore[arg-type]
            return {h: self.by_id(kept.get(h, found.get(h))) for h in wanted if h in kept or h in found}
        return {h: self.by_id(kept[h]) for h in wanted}

    def _read_hosts(self) -> dict[str, int]:
        """Every host mapping, read and kept (module docstring)."""
        read = (time.monotonic(), self._epoch[0])
        with self.api.reader() as session:
            rows: dict[str, int] = dict(session.execute(_ALL_HOSTS).all())  # type: ignore[arg-type]
        with self._lock:
            self._hosts, self._hosts_read = rows, read
        return rows


def _shown(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _create_database(url: str) -> None:
    """Create a derived PostgreSQL database if it is missing (a SQLite file is made by ``Database``).
    ``CellDown`` saying what the database user needs when it may not."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        return
    from sqlalchemy import create_engine

    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            name = parsed.database
            if conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first():
                return
            try:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            except Exception as exc:  # a concurrent creator, or no right to create
                if "already exists" not in str(exc):
                    raise exceptions.CellDown(cell="cell0", reason=_cannot_create(parsed, exc)) from None
    except DBAPIError as exc:  # the server does not answer, or refuses the user
        raise exceptions.CellDown(
            cell="cell0", reason=f"its database {parsed.database} cannot be reached ({str(exc.orig).strip()})"
        ) from None
    finally:
        admin.dispose()


def _cannot_create(parsed: Any, exc: BaseException) -> str:
    said = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
    user, name = parsed.username or "(the database user)", parsed.database
    return (
        f"its database {name} does not exist and the database user {user} may not create it ({said}): "
        f"give {user} the CREATEDB privilege (ALTER ROLE {user} CREATEDB), or create the database by hand "
        f"(CREATE DATABASE {name} OWNER {user}); then run novakit db upgrade again"
    )


def cell0_problem(api: Database) -> str:
    """Why cell0's database, made beside the API database on first use, could not be made or
    opened, told without making it; "" when nothing stands in the way (or cell0 is mapped to a
    database of its own, checked as any cell's). ``novakit db upgrade`` asks this first."""
    try:
        with api.engine.connect() as conn:
            own = conn.execute(
                select(CellMapping.database_url).where(CellMapping.uuid == CELL0_UUID)
            ).scalar_one_or_none()
    except DBAPIError:  # no cell_mappings yet: a new or pre-cells database; cell0 will be derived
        own = None
    if own:
        return ""
    url = derived_url(api.url, "cell0")
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        import os

        path = parsed.database or ""
        if path and os.path.exists(path) and not os.path.isfile(path):
            return f"its database file {path} is not a file: remove what stands at that path"
        return ""
    from sqlalchemy import create_engine

    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if conn.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": parsed.database}
            ).first():
                return ""
            may = conn.execute(
                text("SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user")
            ).scalar()
    except DBAPIError as exc:
        return f"its database {parsed.database} cannot be reached ({str(exc.orig).strip()})"
    finally:
        admin.dispose()
    if may:
        return ""
    return _cannot_create(parsed, PermissionError("the user has no CREATEDB privilege"))


def new_cell_uuid() -> str:
    return str(uuidlib.uuid4())


def kind_of(db: Any) -> str:
    """What a database holds: "api", "cell" (migrated), "empty", "cell-old" or "other"."""
    from novakit.db import migration

    with db.engine.connect() as conn:
        insp = sa_inspect(conn)
        names = set(insp.get_table_names())
        if "cell_mappings" in names:
            return "api"
        if not names:
            return "empty"
        revision = migration.current_revision(conn, "cell")
    if revision is None:
        return "other"
    return "cell" if revision == migration.head_revision("cell") else "cell-old"


def locate(
    registry: CellRegistry, ctx: Any, ref: str, *, deleted: bool = False, include_deleted: bool = False
) -> Cell:
    """The cell of the server ``ref`` (uuid or name) means to ``ctx``.

    Not mapped at all: ``UNSCHEDULED``, where the look-up that follows says what is missing
    as it always did. A name that means servers in two cells is ambiguous, as in one.
    """
    from novakit.cells import mappings

    with registry.api.reader() as session:
        found = mappings.find(session, ctx, ref, deleted=deleted, include_deleted=include_deleted)
        if not found and not deleted:
            # Only a deleted one of that name: its cell, where the look-up says how to reach it.
            found = mappings.find(session, ctx, ref, deleted=True)[:1]
        if not found:
            return UNSCHEDULED
        cell_ids = [m.cell_id for m in found]
    if not deleted and len(set(cell_ids)) > 1:
        raise exceptions.Invalid(reason=f"more than one server is named {ref!r} (use its uuid)")
    return registry.by_id(cell_ids[0])


@contextmanager
def targeting(db: Database, uuid: str, *, cell: Cell | None = None) -> Iterator[Cell]:
    """Target the cell that holds the instance ``uuid`` for what runs inside
    (``UNSCHEDULED`` for an unmapped one, where a look-up then finds nothing).

    ``cell``: the cell the caller knows holds it (it has just placed it there, or read its
    mapping in its own transaction); nothing is read, and the registry keeps it."""
    if cell is None:
        found = db.cells.of_instances([uuid])
        cell = next(iter(found)) if found else UNSCHEDULED
    else:
        db.cells.remember([uuid], cell)
    with db.target_cell(cell):
        yield cell


def grouped(db: Database, uuids: Sequence[str]) -> Iterator[tuple[Cell, list[str]]]:
    """The instances ``uuids`` by cell, each cell targeted while its group is handled."""
    for cell, group in db.cells.of_instances(uuids).items():
        with db.target_cell(cell):
            yield cell, group


F = TypeVar("F", bound=Callable[..., Any])


def in_cell_of(param: str) -> Callable[[F], F]:
    """Run the decorated function in the cell of the instance its argument ``param`` names
    (a uuid, or an object with ``.uuid``). The database is its ``db`` argument or ``self.db``."""

    def wrap(fn: F) -> F:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            db = bound.arguments.get("db") or bound.arguments["self"].db
            ref = bound.arguments[param]
            with targeting(db, getattr(ref, "uuid", ref)):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return wrap


def default_cell(registry: CellRegistry) -> Cell:
    """The cell a host goes to when nobody says: the one cell that is not cell0, or ``cell1``."""
    cells = [c for c in registry.all() if not c.is_cell0]
    if len(cells) == 1:
        return cells[0]
    named = [c for c in cells if c.name == "cell1"]
    if named:
        return named[0]
    raise exceptions.ValidationError(
        "cell",
        f"there are several cells ({', '.join(c.name for c in cells)}) and none is cell1: "
        "say which the host goes to (novakit host add --cell, inventory variable novakit_cell)",
    )
