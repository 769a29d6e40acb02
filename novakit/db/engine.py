"""Engines and transactions for SQLite (embedded default) and PostgreSQL.

Two kinds of transaction, because SQLite needs to know up front:

* ``db.writer()`` starts with ``BEGIN IMMEDIATE`` on SQLite, taking the write
  lock before the first read. A plain ``BEGIN`` that reads and then writes
  fails at once with "database is locked" when another writer got there
  first, whatever the busy timeout; ``BEGIN IMMEDIATE`` waits its turn.
* ``db.reader()`` is a deferred transaction that never blocks writers (WAL).

SQLite lets one transaction write at a time, and a writer that finds the lock
taken is retried by SQLite's busy handler, which sleeps 1, 2, 5, 10 ... up to
100 ms between attempts and cannot be woken when the lock is freed: with a few
processes writing at once most of them sleep while the database sits idle
(eight processes managed 2 to 18 claims per second although one claim holds
the lock for about a millisecond). So on SQLite every writer first queues on
an ``flock`` of a file next to the database (``write_gate``): the kernel wakes
the next waiter the moment the holder lets go, and then BEGIN IMMEDIATE finds
SQLite's lock free. PostgreSQL needs none of this: its row locks queue
waiters and wake them at commit.

``run_in_transaction`` retries a whole writer function when the database
reports a transient conflict: SQLite "database is locked" after the busy
timeout, PostgreSQL serialisation failures and deadlocks.

Cells (``novakit.cells``): a ``Database`` is the API database; the instance
tables (``models.CELL_TABLES``) are read and written in the cell an operation
targets, as Nova's ``target_cell``: ``with db.target_cell(cell): ...`` routes
every session opened inside it, the instance tables to the cell's database and
the rest to the API database. A session opened with no cell targeted refuses
the instance tables (``CellNotTargeted``) instead of guessing a cell.
"""

from __future__ import annotations

import contextvars
import fcntl
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import orjson
from sqlalchemy import create_engine, event, make_url
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker

from novakit import exceptions, files
from novakit.config import Config, load_config

if TYPE_CHECKING:
    from novakit.cells.registry import Cell, CellRegistry

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000


def _is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def _setup_sqlite(engine: Engine, path: str) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event decide how each transaction starts.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        # Turning a new file to WAL needs it to itself, and SQLite's busy handler does not wait
        # for that: retry briefly if another process has it open at that moment.
        for attempt in range(50):
            try:
                cur.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 49:
                    raise
                time.sleep(0.02)
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get("novakit_write", False)
        if mode and path:
            _gate_on_begin(path)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if mode else "BEGIN")


_gates_lock = threading.Lock()
# Per database file: (a lock for the threads of this process, the gate file's descriptor).
_gates: dict[str, tuple[threading.Lock, int]] = {}
_held = threading.local()


def _forget_gates_after_fork() -> None:
    # A forked child shares the parent's open file descriptions, and with them its flocks:
    # it must open the gate files again to queue against its parent.
    global _gates_lock
    _gates_lock = threading.Lock()
    for _thread_lock, fd in _gates.values():
        os.close(fd)
    _gates.clear()
    _held.__dict__.clear()


os.register_at_fork(after_in_child=_forget_gates_after_fork)


def _gate(path: str) -> tuple[threading.Lock, int]:
    with _gates_lock:
        gate = _gates.get(path)
        if gate is None:
            fd = files.create_private(path + ".writers.lock", os.O_RDWR)
            gate = _gates[path] = (threading.Lock(), fd)
        return gate


def _held_paths() -> set[str]:
    held: set[str] = _held.__dict__.setdefault("paths", set())
    return held


def _take(path: str) -> bool:
    """Take the gate of ``path`` for this thread; False when this thread holds it already."""
    held = _held_paths()
    if path in held:
        return False
    thread_lock, fd = _gate(path)
    thread_lock.acquire()
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        thread_lock.release()
        raise
    held.add(path)
    return True


def _give(path: str) -> None:
    thread_lock, fd = _gate(path)
    _held_paths().discard(path)
    fcntl.flock(fd, fcntl.LOCK_UN)
    thread_lock.release()


@contextmanager
def write_gate(db: Database) -> Iterator[None]:
    """Hold the writers' gate of ``db``'s file (re-entrant within a thread); a no-op for
    PostgreSQL and ``:memory:``. Threads of a process queue on a lock, processes on the flock."""
    path = db.sqlite_path
    if not path or not _take(path):
        yield
        return
    try:
        yield
    finally:
        _give(path)


@contextmanager
def _gate_when_written(db: Database) -> Iterator[None]:
    """``db``'s gate taken only if a write transaction begins on it inside (the ``begin`` event
    of its SQLite engine takes it), and then held until the end: a writer targeted at another
    cell's database that writes none of the API database's tables does not queue behind the
    API database's writers."""
    path = db.sqlite_path
    if not path or path in _held_paths():
        yield
        return
    waiting: dict[str, bool] = _held.__dict__.setdefault("when_written", {})
    waiting[path] = False
    try:
        yield
    finally:
        if waiting.pop(path, False):
            _give(path)


def _gate_on_begin(path: str) -> None:
    """In a writer's ``begin`` on ``path``: its gate, if the writer left it to be taken now."""
    waiting = _held.__dict__.get("when_written")
    if waiting and waiting.get(path) is False:
        waiting[path] = _take(path)


def is_transient(exc: BaseException) -> bool:
    """A conflict that a retry of the whole transaction may clear."""
    if isinstance(exc, OperationalError) and "database is locked" in str(exc):
        return True
    if isinstance(exc, DBAPIError):
        code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        # serialization_failure, deadlock_detected
        return code in {"40001", "40P01"}
    return False


def _sqlite_file(url: str) -> str:
    """The database file of a SQLite URL, or "" for one novakit keeps no files beside.

    Parsed, not split: a query (``?timeout=...``) is no part of the file's name, and the
    lock files named after the file must not carry what the query holds. "" is an
    in-memory database, and a SQLite URI filename (``file:...?uri=true``), which SQLite
    resolves itself.
    """
    parsed = make_url(url)
    if parsed.query.get("uri") or parsed.database in (None, "", ":memory:"):
        return ""
    return str(parsed.database)


def _prepare_sqlite_file(path: str, *, create_dir: bool, create_file: bool = True) -> None:
    """The directory of a database file (made only if ``create_dir``) and the file itself, 0600
    (made only if ``create_file``).

    The file is created here, before SQLite opens it, because SQLite creates it with
    the umask's mode (0644) and then gives the ``-wal`` and ``-shm`` files the same.
    """
    directory = Path(path).parent
    if create_dir:
        files.private_dir(directory)
    elif not directory.is_dir():
        raise exceptions.ConfigError(
            option="db_url",
            reason=f"the directory {directory} of the SQLite database {path} does not exist; create it, "
            "or leave db_url (NOVAKIT_DB_URL) unset for the default database in the state directory",
        )
    if create_file and not os.path.exists(path):
        os.close(files.create_private(path))


def _keep_to_existing_file(engine: Engine, path: str) -> None:
    """Open ``path`` only if it exists, and drop a pooled connection whose file is gone.

    SQLite creates a missing file when it opens one; a cell's database made that way is empty,
    so its cell would answer and fail every query ("no such table"). Opened read-write without
    create, a missing file fails as a stopped server does ("unable to open database file"). A
    connection opened before the file was removed (or replaced) would go on reading the removed
    one: each checkout compares the file's inode with the one it was opened on.
    """
    uri = f"file:{quote(path)}?mode=rw"

    @event.listens_for(engine, "do_connect")
    def _open_existing(_dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
        cargs[:1] = [uri]
        cparams["uri"] = True

    @event.listens_for(engine, "connect")
    def _remember_file(_dbapi_conn: Any, record: Any) -> None:
        record.info["novakit_inode"] = _inode(path)

    @event.listens_for(engine, "checkout")
    def _still_there(_dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        if _inode(path) != record.info.get("novakit_inode"):
            raise DisconnectionError(f"the database file {path} is gone")


def _inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


#: A pooled PostgreSQL connection older than this is opened again.
RECYCLE_SECONDS = 1800

#: A pooled PostgreSQL connection that sat idle this long is pinged before it is used.
IDLE_PING_SECONDS = 10.0


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection only when it has sat idle for ``IDLE_PING_SECONDS``.

    A connection in steady use answers its next statement, or fails it as a disconnection
    (the pool then drops every connection it holds, and the error says the server went away:
    a down cell answers "down" at once). One that sat idle may have been closed by the server
    (a restart, an idle timeout): the ping finds out and the pool opens a new one (and fails,
    at once, if the server does not answer)."""

    @event.listens_for(engine, "checkin")
    def _idle_from(_dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info["novakit_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("novakit_idle_since")
        if since is None or time.monotonic() - since < IDLE_PING_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:  # any failure: the connection is not to be used
            raise DisconnectionError(f"a pooled connection did not answer: {exc}") from exc


def is_unreachable(exc: BaseException) -> bool:
    """A database that cannot be reached at all (server down, file gone), not a conflict."""
    if not isinstance(exc, DBAPIError) or is_transient(exc):
        return False
    if exc.connection_invalidated:
        return True
    said = str(exc.orig).lower()
    return any(
        w in said
        for w in (
            "connection refused",
            "connection failed",
            "could not connect",
            "server closed the connection",
            "terminating connection",
            "unable to open database file",
            "connection is closed",
            "no connection to the server",
        )
    )


_WRITES = ("INSERT", "UPDATE", "DELETE", "TRUNCATE", "DROP")


def _watch_mappings(engine: Engine, url: str) -> None:
    """Tell the cell registries of this process (``novakit.cells.registry``) when this API
    database's mappings are written through ``engine``: once when the statement runs and again
    when its transaction ends, so that nothing read in between is kept as the new truth."""

    def told(instances_only: bool) -> None:
        from novakit.cells.registry import mappings_written

        mappings_written(url, instances_only=instances_only)

    @event.listens_for(engine, "before_cursor_execute")
    def _written(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "_mappings" not in statement or not statement.lstrip()[:8].upper().startswith(_WRITES):
            return
        if "cell_mappings" in statement or "host_mappings" in statement:
            instances_only = False
        elif "instance_mappings" in statement and not statement.lstrip()[:6].upper().startswith("UPDATE"):
            instances_only = True  # a delete (a rename or a new cell keeps what was kept)
        else:
            return
        told(instances_only)
        conn.info["novakit_mappings"] = conn.info.get("novakit_mappings", True) and instances_only

    def _ended(conn: Any) -> None:
        if "novakit_mappings" in conn.info:
            told(conn.info.pop("novakit_mappings"))

    event.listen(engine, "commit", _ended)
    event.listen(engine, "rollback", _ended)


class _Untargeted:
    """What the instance tables are bound to in a session no cell was targeted for."""


_UNTARGETED = _Untargeted()


class _CellSession(Session):
    """A session whose instance tables live in a cell's database (``Database.target_cell``)."""

    def get_bind(self, mapper: Any = None, *, clause: Any = None, **kw: Any) -> Any:
        bind = super().get_bind(mapper, clause=clause, **kw)
        if bind is _UNTARGETED:
            raise exceptions.CellNotTargeted()
        return bind


def _cell_binds(cell_bind: Any) -> dict[Any, Any]:
    from novakit.db.models import CELL_TABLES, Base

    binds: dict[Any, Any] = {}
    for mapper in Base.registry.mappers:
        if getattr(mapper.local_table, "name", None) in CELL_TABLES:
            binds[mapper.class_] = cell_bind
            binds[mapper.local_table] = cell_bind
    return binds


class Database:
    """One database, with writer and reader transactions.

    ``create_dir``: make the directory of a SQLite file when it is missing, as the
    embedded default's is (``from_config``); the directory of a URL someone gave must exist.
    ``kind``: "api" (the API database, which may be a cell too) or "cell" (a cell's own
    database: instance tables only, migrated by the cell tree).
    ``create_file``: a SQLite file that does not exist is created (empty, 0600); without it,
    it stays missing and the database does not answer (a mapped cell's: a down cell).
    """

    def __init__(
        self,
        url: str,
        *,
        auto_upgrade: bool | None = None,
        echo: bool = False,
        create_dir: bool = False,
        kind: str = "api",
        create_file: bool = True,
    ) -> None:
        self.url = url
        self.kind = kind
        self.is_sqlite = _is_sqlite(url)
        self.sqlite_path = _sqlite_file(url) if self.is_sqlite else ""
        if self.is_sqlite:
            if self.sqlite_path:
                _prepare_sqlite_file(self.sqlite_path, create_dir=create_dir, create_file=create_file)
            self.engine = create_engine(
                url,
                echo=echo,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
                json_deserializer=orjson.loads,
            )
            if self.sqlite_path and not create_file:
                _keep_to_existing_file(self.engine, self.sqlite_path)
            _setup_sqlite(self.engine, self.sqlite_path)
        else:
            self.engine = create_engine(
                url,
                echo=echo,
                # No ping on every checkout (a round trip per transaction): a connection is
                # pinged only after it sat idle (``_ping_when_idle``) and renewed by age.
                pool_recycle=RECYCLE_SECONDS,
                pool_size=5,
                max_overflow=10,
                # A cell whose server is down must answer "down" at once, not after minutes.
                connect_args={"connect_timeout": 5},
                json_deserializer=orjson.loads,
            )
            _ping_when_idle(self.engine)
        if kind == "api":
            _watch_mappings(self.engine, url)
        self.write_engine = self.engine.execution_options(novakit_write=True)
        self._writer = sessionmaker(bind=self.write_engine, expire_on_commit=False)
        self._reader = sessionmaker(bind=self.engine, expire_on_commit=False)
        self._target: contextvars.ContextVar[Cell | None] = contextvars.ContextVar(
            f"novakit-target-cell-{id(self)}", default=None
        )
        self._routed: dict[tuple[str, bool], tuple[Database | None, sessionmaker[Session]]] = {}
        self._cells: CellRegistry | None = None
        # The embedded default upgrades itself on first use; a shared
        # PostgreSQL is upgraded explicitly with `novakit db upgrade`.
        if auto_upgrade if auto_upgrade is not None else self.is_sqlite:
            self.upgrade_if_needed()

    @classmethod
    def from_config(cls, conf: Config | None = None) -> Database:
        """The configured database; the default one's directory (the state directory) is made if missing."""
        conf = conf or load_config()
        return cls(conf.database_url, create_dir=not conf.db_url)

    # --- cells --------------------------------------------------------------------

    @property
    def cells(self) -> CellRegistry:
        """The cells of this API database (``novakit.cells.registry``)."""
        if self._cells is None:
            from novakit.cells.registry import CellRegistry

            self._cells = CellRegistry(self)
        return self._cells

    @contextmanager
    def target_cell(self, cell: Cell) -> Iterator[Cell]:
        """Route the instance tables of every session opened inside to ``cell``'s database."""
        token = self._target.set(cell)
        try:
            yield cell
        finally:
            self._target.reset(token)

    @property
    def targeted(self) -> Cell | None:
        return self._target.get()

    def _sessions(self, write: bool) -> tuple[sessionmaker[Session], Database | None]:
        """The session factory for the targeted cell, and the cell's database when it is not this one."""
        cell = self._target.get()
        if self.kind != "api":
            return (self._writer if write else self._reader), None
        cell_db = self.cells.database(cell) if cell is not None else None
        if cell_db is self:
            return (self._writer if write else self._reader), None
        key = (cell.uuid if cell is not None else "", write)
        known = self._routed.get(key)
        # Made again when the cell's database is another object than it was (the registry let go of it).
        if known is None or known[0] is not cell_db:
            if cell_db is None:
                cell_bind: Any = _UNTARGETED
            else:
                cell_bind = cell_db.write_engine if write else cell_db.engine
            factory: sessionmaker[Session] = sessionmaker(  # type: ignore[assignment]
                class_=_CellSession,
                bind=self.write_engine if write else self.engine,
                binds=_cell_binds(cell_bind),
                expire_on_commit=False,
            )
            self._routed[key] = (cell_db, factory)
            return factory, cell_db
        return known[1], cell_db

    @contextmanager
    def _cell_reached(self, cell_db: Database | None) -> Iterator[None]:
        """A cell database that cannot be reached fails with ``CellDown``, naming the cell."""
        if cell_db is None:
            yield
            return
        try:
            yield
        except DBAPIError as exc:
            if not is_unreachable(exc):
                raise
            cell = self._target.get()
            raise exceptions.CellDown(cell=cell.name if cell else "?", reason=str(exc.orig).strip()) from None

    @contextmanager
    def writer(self) -> Iterator[Session]:
        """A write transaction: committed on success, rolled back on any error."""
        factory, cell_db = self._sessions(True)
        # One gate per database written. Targeted at a cell of its own: the cell's gate first, the
        # API database's only when the session begins a write there. No writer takes them the other
        # way round (a writer targeted at a cell is never opened inside an API database's writer),
        # so two writers never wait for each other's gate.
        gates = write_gate(self) if cell_db is None else _both_gates(cell_db, self)
        with (
            self._schema_told(),
            self._cell_reached(cell_db),
            gates,
            factory() as session,
            session.begin(),
        ):
            yield session

    @contextmanager
    def reader(self) -> Iterator[Session]:
        factory, cell_db = self._sessions(False)
        with self._schema_told(), self._cell_reached(cell_db), factory() as session, session.begin():
            yield session

    @contextmanager
    def _schema_told(self) -> Iterator[None]:
        """A statement that failed on a missing table or column of a database that is not at the
        newest revision fails with ``DatabaseNotMigrated``, saying what to run, instead of the SQL.
        Asked only on that error: a migrated database pays nothing."""
        try:
            yield
        except (ProgrammingError, OperationalError) as exc:
            said = str(exc.orig).lower()
            if not any(w in said for w in ("does not exist", "no such table", "no such column")):
                raise
            from novakit.db import migration

            try:
                current, head = self.current_revision(), migration.head_revision()
            except Exception:
                raise exc from None
            if current == head:
                raise
            raise exceptions.DatabaseNotMigrated(
                database=self.engine.url.render_as_string(hide_password=True),
                current=current or "none",
                head=head,
            ) from None

    def run_in_transaction(self, fn: Callable[[Session], T], *, retries: int = 10) -> T:
        """Run ``fn`` in a writer transaction, retrying transient conflicts with jitter."""
        for attempt in range(retries + 1):
            try:
                with self.writer() as session:
                    return fn(session)
            except (OperationalError, DBAPIError) as exc:
                if attempt >= retries or not is_transient(exc):
                    raise
                time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
        raise AssertionError("unreachable")

    def run_or_dry_run(self, fn: Callable[[Session], T], *, dry_run: bool) -> T:
        """``run_in_transaction(fn)``, or with ``dry_run`` ``fn`` in a read: check mode runs the same
        checks, and ``fn`` itself stops before it writes."""
        if dry_run:
            with self.reader() as session:
                return fn(session)
        return self.run_in_transaction(fn)

    # --- schema -----------------------------------------------------------------

    def current_revision(self) -> str | None:
        from novakit.db import migration

        return migration.current_revision(self.engine, "cell" if self.kind == "cell" else "api")

    def _trees(self) -> tuple[str, ...]:
        # The API database carries the cell tree too: its instance tables hold the servers not
        # scheduled yet, and cell1's where it is cell1.
        return ("cell",) if self.kind == "cell" else ("api", "cell")

    def _at_head(self) -> bool:
        from novakit.db import migration

        with self.engine.connect() as conn:
            return all(
                migration.current_revision(conn, tree) == migration.head_revision(tree)  # type: ignore[arg-type]
                for tree in self._trees()
            )

    def upgrade(self) -> None:
        """Bring every tree this database carries to its head.

        A cell database with no tables at all is made from the models and stamped (the cell
        tree's schema test holds them equal), without loading Alembic: cell0 is made this way
        on first use.
        """
        from novakit.db import migration

        if self.kind == "cell" and self._create_empty_cell():
            return
        for tree in self._trees():
            migration.upgrade(self.engine, tree=tree)  # type: ignore[arg-type]

    def _create_empty_cell(self) -> bool:
        from sqlalchemy import inspect as sa_inspect
        from sqlalchemy import text as sa_text

        from novakit.db import migration
        from novakit.db.models import CELL_TABLES, Base

        with self.write_engine.begin() as conn:
            if not self.is_sqlite:
                conn.execute(sa_text("SELECT pg_advisory_xact_lock(7205759)"))
            if sa_inspect(conn).get_table_names():
                return False
            tables = [t for t in Base.metadata.sorted_tables if t.name in CELL_TABLES]
            Base.metadata.create_all(conn, tables=tables)
            conn.execute(
                sa_text("CREATE TABLE alembic_version_cell (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
            )
            conn.execute(
                sa_text("INSERT INTO alembic_version_cell VALUES (:v)"),
                {"v": migration.head_revision("cell")},
            )
        return True

    def upgrade_if_needed(self) -> None:
        path = self.sqlite_path
        # Created empty (0600) by __init__; SQLite has written nothing to it yet.
        new_file = bool(path) and (not os.path.exists(path) or not os.path.getsize(path))
        # A new file is first touched under the lock below: turning it to WAL is a write of its own.
        if not new_file and self._at_head():
            return
        if path:
            # Several processes may open a new file at once: one upgrades, the others wait for it.
            lock = files.create_private(path + ".migrate.lock", os.O_RDWR)
            try:
                with write_gate(self):
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    if not self._at_head():
                        self.upgrade()
            finally:
                os.close(lock)  # and with it the flock
        else:
            self.upgrade()

    def dispose(self) -> None:
        if self._cells is not None:
            self._cells.dispose()
        self.engine.dispose()


@contextmanager
def _both_gates(cell_db: Database, api: Database) -> Iterator[None]:
    with write_gate(cell_db), _gate_when_written(api):
        yield
