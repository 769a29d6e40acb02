"""A fresh benchmark cloud: an empty database, fake compute hosts, one flavor and one image.

Shared by the benchmarks that boot through the Python API (``boot_api.py``,
``fleet_scale.py``), so that both measure the same set-up. With cells
(``add_cell``), the API database is cell1 as the embedded default is, and each
further cell has a database of its own; ``fake_hosts(cells=...)`` spreads the
hosts over them. ``CostCounter`` counts what a phase costs: statements, transactions,
pool checkouts and client CPU (per boot: ``Cost.per``).
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event, make_url, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import Pool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from novakit.catalog import flavors, images  # noqa: E402
from novakit.cells import manage  # noqa: E402
from novakit.cells.registry import derived_url  # noqa: E402
from novakit.config import Config, load_config  # noqa: E402
from novakit.context import RequestContext  # noqa: E402
from novakit.db.engine import Database  # noqa: E402
from novakit.db.models import Base  # noqa: E402
from novakit.fleet import hosts  # noqa: E402
from novakit.virt.driver import load_driver  # noqa: E402

#: what every benchmark server is built from
FLAVOR, IMAGE = "m1.tiny", "tiny"


@dataclass
class Cost:
    """What a phase cost this process: statements and transactions every engine ran (the API
    database's and each cell's), pool checkouts, client CPU seconds (``time.process_time``: every
    thread of the process, the in-process fake hosts' included; not the database server's)."""

    statements: int = 0
    transactions: int = 0
    checkouts: int = 0
    cpu: float = 0.0

    def per(self, boots: int) -> str:
        """The figures per boot, as the benchmarks print them."""
        n = max(boots, 1)
        return (
            f"{self.statements / n:.1f} statements, {self.transactions / n:.1f} transactions, "
            f"{self.checkouts / n:.1f} pool checkouts, {self.cpu / n * 1000:.2f} ms client CPU per boot"
        )


class CostCounter:
    """Counts a phase's :class:`Cost`, as ``tests/functional/test_boot_cost.py`` does.

    A **statement** is one the driver executes (``before_cursor_execute``), except the
    ``BEGIN [IMMEDIATE]`` novakit's SQLite engines send when a transaction starts; a
    **transaction** is an engine's ``begin`` event (one per transaction on both back ends:
    PostgreSQL's BEGIN is sent by the driver itself and never seen as a statement). A **pool
    checkout** is a connection taken from a pool: with ``pool_pre_ping`` each one is a round trip
    (PostgreSQL) that the statements do not show. Listens to every engine while on only.
    """

    def __init__(self) -> None:
        self.cost = Cost()
        self._on = False
        self._lock = threading.Lock()
        event.listen(Engine, "before_cursor_execute", self._statement)
        event.listen(Engine, "begin", self._begin)
        event.listen(Pool, "checkout", self._checkout)

    def _statement(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if self._on and not re.match(r"\s*BEGIN\b", statement, re.IGNORECASE):
            with self._lock:
                self.cost.statements += 1

    def _begin(self, _conn: Any) -> None:
        if self._on:
            with self._lock:
                self.cost.transactions += 1

    def _checkout(self, *_: Any) -> None:
        if self._on:
            with self._lock:
                self.cost.checkouts += 1

    @contextmanager
    def counting(self) -> Iterator[Cost]:
        """The cost of the block (filled in when it ends)."""
        self.cost = Cost()
        cpu = time.process_time()
        self._on = True
        try:
            yield self.cost
        finally:
            self._on = False
            self.cost.cpu = time.process_time() - cpu


def empty_database(url: str, *, kind: str = "api") -> None:
    """Drop every novakit table of a PostgreSQL database and both migration trees' version
    tables (``tests/functional/test_cells.py::_empty_pg2``); a database that does not exist
    is left alone. SQLite: nothing (each benchmark makes its files in a fresh directory)."""
    if make_url(url).get_backend_name() != "postgresql":
        return
    db = Database(url, kind=kind, auto_upgrade=False)
    try:
        with db.engine.begin() as conn:
            for table in reversed(Base.metadata.sorted_tables):
                conn.execute(text(f'DROP TABLE IF EXISTS "{table.name}" CASCADE'))
            conn.execute(text("DROP TABLE IF EXISTS alembic_version_cell"))
            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    except OperationalError as exc:
        if "does not exist" not in str(exc.orig):
            raise
    finally:
        db.dispose()


def fresh_database(db_url: str | None, area: Path) -> Database:
    """An empty, migrated database: SQLite in ``area`` by default; a PostgreSQL URL has its
    novakit tables dropped first, and those of its cell0 database beside it (``<name>_cell0``,
    made on first use), which would otherwise keep an earlier run's servers."""
    url = db_url or f"sqlite:///{area / 'novakit.db'}"
    empty_database(url)
    empty_database(derived_url(url, "cell0"), kind="cell")
    db = Database(url, auto_upgrade=False)
    db.upgrade_if_needed()
    return db


def add_cell(db: Database, name: str, url: str) -> dict:
    """Map a new cell to the database ``url``, emptied first (PostgreSQL) and migrated."""
    empty_database(url, kind="cell")
    return manage.create_cell(db, RequestContext.admin(), name, url, migrate=True)


def bench_config(db: Database, area: Path) -> Config:
    """The configuration every process of a benchmark uses: no quota limits."""
    return load_config(db_url=db.url, state_dir=area, quota={"instances": -1, "cores": -1, "ram": -1})


def fake_hosts(
    db: Database,
    conf: Config,
    area: Path,
    count: int,
    vcpus: int = 64,
    *,
    exact: bool = False,
    prefix: str = "bench",
    catalog: bool = True,
    cells: Sequence[str] | None = None,
) -> list[str]:
    """Register ``count`` fake hosts (``bench-NN``) that spawn at once, and the catalog.

    ``exact``: each host takes exactly ``vcpus`` one-vCPU servers (no overcommit), so that a
    stacking scheduler fills every host alike instead of piling the fleet on the first few.
    ``cells``: the cells (names) the hosts are mapped to, in equal consecutive shares (two
    cells: the first half in the first, the second half in the second); None, the default cell.
    """
    admin = RequestContext.admin()
    names = []
    width = max(2, len(str(count - 1)))
    overrides = {"cpu_allocation_ratio": 1.0, "reserved_host_cpus": 0} if exact else None
    for n in range(count):
        name = f"{prefix}-{n:0{width}d}"
        info = {
            "driver": "fake",
            "transport": "local",
            "options": {
                "vcpus": vcpus,
                "memory_mb": vcpus * 4096,
                "local_gb": vcpus * 64,
                "spawn_delay": 0,
                "state_dir": str(area / "fake"),
            },
        }
        driver = load_driver("fake", name, info["options"])
        driver.init_host()
        cell = cells[n * len(cells) // count] if cells else None
        hosts.register_host(db, conf, name, driver.get_available_resource(), info, overrides, cell=cell)
        names.append(name)
    if not catalog:
        return names
    flavors.create(db, admin, {"name": FLAVOR, "vcpus": 1, "memory_mb": 512, "root_gb": 1})
    images.create(db, admin, {"name": IMAGE})
    return names
