"""Boot throughput through the Python API with the fake driver, and where the time goes.

Two shapes of load, each on a fresh database and fresh fake hosts, repeated:

* ``serial``: 200 one-server requests, one after another (200 users, one at a time);
* ``burst``:  one request for 100 servers (``max_count=100``), built at once;
* ``clients``: 200 one-server requests from 4 processes at once (50 each, one
  after another), as several AWX jobs or API users share one database: the
  figure is servers per second over all of them (no per-part split: the parts
  run in other processes). Afterwards no host may hold more than its capacity.

For serial and burst, what a boot cost this process on average, always
(``cloud.CostCounter``): SQL statements and transactions of every engine (the
API database's and each cell's; a transaction is an engine's ``begin`` event,
a statement one the driver executes, SQLite's BEGIN left out), pool checkouts
(each a pre-ping round trip on PostgreSQL) and client CPU
(``time.process_time`` over the phase, per server: the in-process fake hosts'
threads included, the database server not).

``--cells 2``: two cells, the hosts half in cell1 (the API database) and half
in cell2, a database of its own (a SQLite file beside the first, or
``--cell2-url``, needed with a PostgreSQL ``--db-url``; its tables are dropped).

For each: servers per second end to end (API call to ACTIVE), and the time
per server spent in scheduling (``select_destinations``, its SQL included), in
the database outside scheduling (SQL statements, as the driver executes them),
and in the compute side (transport call: manager and fake driver), as Nova's
logs split a boot ("Took N seconds to schedule / to spawn / to build"). The
compute side runs on up to 16 hosts in parallel, so per-server sums can exceed
the wall time per server. Anchors: a Nova deployment sustained 2.5 new VMs/s;
OpenNebula's best storm was 512 VMs in 53.5 s (9.6/s). Goal here: over 50/s.

    python bench/boot_api.py [--rounds 3] [--db-url postgresql+psycopg://...] [--profile burst]
    python bench/boot_api.py --only serial [--cells 2 [--cell2-url URL]]   # the serial figures alone

Figures only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cloud import CostCounter, add_cell, bench_config, fake_hosts, fresh_database  # noqa: E402

from novakit.compute.api import API  # noqa: E402
from novakit.config import load_config  # noqa: E402
from novakit.context import RequestContext  # noqa: E402
from novakit.db.engine import Database  # noqa: E402
from novakit.transport.factory import get_transport  # noqa: E402

HOSTS = 20
SERIAL = 200
COST = CostCounter()


class Split:
    """Time per part, summed over threads. Nested calls count for the outermost part of their thread:
    the SQL inside scheduling is scheduling; a transaction inside the API is database."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()
        self._local = threading.local()

    def add(self, part: str, seconds: float) -> None:
        with self._lock:
            self.totals[part] += seconds

    def _enter(self, part: str) -> bool:
        if getattr(self._local, "part", None) is not None:
            return False
        self._local.part = part
        return True

    def timed(self, part: str, fn: Callable[..., Any], exclusive: bool = True) -> Callable[..., Any]:
        def inner(*args: Any, **kwargs: Any) -> Any:
            if not exclusive:
                start = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.add(part, time.perf_counter() - start)
            if not self._enter(part):
                return fn(*args, **kwargs)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(part, time.perf_counter() - start)
                self._local.part = None

        return inner

    def timed_context(self, part: str, cm: Callable[..., Any]) -> Callable[..., Any]:
        @contextlib.contextmanager
        def inner(*args: Any, **kwargs: Any) -> Iterator[Any]:
            if not self._enter(part):
                with cm(*args, **kwargs) as value:
                    yield value
                return
            start = time.perf_counter()
            try:
                with cm(*args, **kwargs) as value:
                    yield value
            finally:
                self.add(part, time.perf_counter() - start)
                self._local.part = None

        return inner

    def watch(self, db: Database) -> None:
        """Database time: every transaction (ORM, SQL, commit) outside scheduling and compute calls."""
        db.run_in_transaction = self.timed("database", db.run_in_transaction)  # type: ignore[method-assign]
        db.reader = self.timed_context("database", db.reader)  # type: ignore[method-assign]


def _fresh_cloud(
    db_url: str | None, area: Path, cells: int = 1, cell2_url: str | None = None
) -> tuple[API, Database, Split]:
    db = fresh_database(db_url, area)
    conf = bench_config(db, area)
    if cells > 1:
        add_cell(db, "cell2", cell2_url or f"sqlite:///{area / 'cell2.db'}")
    fake_hosts(db, conf, area, HOSTS, cells=["cell1", "cell2"] if cells > 1 else None)
    split = Split()
    api = API(db, conf)
    conductor = api.conductor
    scheduler = conductor.scheduler
    scheduler.select_destinations = split.timed("scheduling", scheduler.select_destinations)

    def transport(host: str, info: dict[str, Any]) -> Any:
        t = get_transport(host, info, conf.compute.max_concurrent_builds)
        # Not exclusive: the compute time of every host counts, in whichever thread it ran.
        t.call = split.timed("compute", t.call, exclusive=False)  # type: ignore[method-assign]
        return t

    conductor.rpc.transport_factory = transport
    conductor.rpc.send_all = split.timed("compute_wall", conductor.rpc.send_all)  # type: ignore[method-assign]
    split.watch(db)
    return api, db, split


CLIENTS = 4
PER_CLIENT = 50


def _client(url: str, area: Path, index: int, start: Any, done: Any) -> None:
    """One client process: its own engine and API, 50 requests one after another."""
    db = Database(url, auto_upgrade=False)
    conf = load_config(db_url=url, state_dir=area, quota={"instances": -1, "cores": -1, "ram": -1})
    api = API(db, conf)
    ctx = RequestContext("bench", "bench", ["member"])
    start.wait()
    active = 0
    for i in range(PER_CLIENT):
        server = api.create(ctx, {"name": f"c{index}-{i}", "flavor": "m1.tiny", "image": "tiny"})[0]
        active += server["status"] == "ACTIVE"
    done.put(active)
    db.dispose()


def _hosts_used(db: Database) -> int:
    """Hosts that hold a live server, in every cell (a member's view of a server has no host)."""
    used = 0
    for cell in db.cells.all():
        if cell.is_cell0:
            continue
        with db.cells.database(cell).engine.connect() as conn:
            used += conn.execute(
                text("SELECT COUNT(DISTINCT host) FROM instances WHERE deleted = 0 AND host IS NOT NULL")
            ).scalar_one()
    return used


def _run_clients(db_url: str | None, cells: int, cell2_url: str | None) -> dict[str, float]:
    import multiprocessing

    with tempfile.TemporaryDirectory(prefix="novakit-bench-") as tmp:
        area = Path(tmp)
        _api, db, _split = _fresh_cloud(db_url, area, cells, cell2_url)
        url = db.url
        db.dispose()
        mp = multiprocessing.get_context("fork")
        start, done = mp.Barrier(CLIENTS + 1), mp.Queue()
        procs = [mp.Process(target=_client, args=(url, area, n, start, done)) for n in range(CLIENTS)]
        for p in procs:
            p.start()
        start.wait()
        began = time.perf_counter()
        active = sum(done.get() for _ in procs)
        wall = time.perf_counter() - began
        for p in procs:
            p.join()
        check = Database(url, auto_upgrade=False)
        with check.reader() as session:
            over = session.execute(
                text("SELECT COUNT(*) FROM inventories WHERE used > (total - reserved) * allocation_ratio")
            ).scalar_one()
        hosts_used = _hosts_used(check)
        check.dispose()
    count = CLIENTS * PER_CLIENT
    return {"wall": wall, "per_s": count / wall, "active": active, "hosts": hosts_used, "over": over}


def _run(
    shape: str, db_url: str | None, profile: bool, cells: int = 1, cell2_url: str | None = None
) -> dict[str, float]:
    if shape == "clients":
        return _run_clients(db_url, cells, cell2_url)
    with tempfile.TemporaryDirectory(prefix="novakit-bench-") as tmp:
        api, db, split = _fresh_cloud(db_url, Path(tmp), cells, cell2_url)
        ctx = RequestContext("bench", "bench", ["member"])
        prof = cProfile.Profile() if profile else None
        start = time.perf_counter()
        if prof:
            prof.enable()
        with COST.counting() as cost:
            if shape == "serial":
                count = SERIAL
                servers = [
                    api.create(ctx, {"name": f"s{i}", "flavor": "m1.tiny", "image": "tiny"})[0]
                    for i in range(count)
                ]
            else:
                count = 100
                servers = api.create(
                    ctx, {"name": "b", "flavor": "m1.tiny", "image": "tiny", "max_count": count}
                )
        if prof:
            prof.disable()
        wall = time.perf_counter() - start
        active = sum(1 for s in servers if s["status"] == "ACTIVE")
        used_hosts = _hosts_used(db)
        db.dispose()
        if prof:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    out = {
        "wall": wall,
        "per_s": count / wall,
        "active": active,
        "hosts": used_hosts,
        "sql": cost.statements / count,
        "transactions": cost.transactions / count,
        "checkouts": cost.checkouts / count,
        "cpu_ms": cost.cpu / count * 1000,
    }
    for part in ("scheduling", "database", "compute", "compute_wall"):
        out[part + "_ms"] = split.totals[part] / count * 1000
    out["other_ms"] = max(
        0.0, wall / count * 1000 - out["scheduling_ms"] - out["database_ms"] - out["compute_wall_ms"]
    )
    return out


def _summary(name: str, runs: list[dict[str, float]]) -> None:
    def stat(key: str, fmt: str) -> str:
        values = [r[key] for r in runs]
        med = statistics.median(values)
        return f"{fmt.format(med)} [{fmt.format(min(values))}..{fmt.format(max(values))}]"

    print(
        f"{name}: {stat('per_s', '{:.1f}')} servers/s  (median [min..max] of {len(runs)} runs; "
        f"{int(runs[0]['active'])} active on {int(runs[0]['hosts'])} hosts)"
    )
    if "over" in runs[0]:
        print(f"    inventories over capacity afterwards: {max(int(r['over']) for r in runs)}")
        return
    print(
        f"    per server (ms): scheduling {stat('scheduling_ms', '{:.2f}')}, "
        f"database {stat('database_ms', '{:.2f}')}, "
        f"compute {stat('compute_ms', '{:.2f}')} summed over hosts / {stat('compute_wall_ms', '{:.2f}')} "
        f"waited for, rest {stat('other_ms', '{:.2f}')}"
    )
    print(
        f"    per server: SQL statements {stat('sql', '{:.1f}')}, "
        f"transactions {stat('transactions', '{:.1f}')}, pool checkouts {stat('checkouts', '{:.1f}')}, "
        f"client CPU {stat('cpu_ms', '{:.2f}')} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--db-url", default=None, help="PostgreSQL URL (its tables are dropped!); default SQLite"
    )
    parser.add_argument(
        "--profile",
        choices=["serial", "burst"],
        default=None,
        help="print a cProfile of one run of this shape",
    )
    parser.add_argument("--only", choices=["serial", "burst", "clients"], default=None)
    parser.add_argument(
        "--cells", type=int, default=1, choices=(1, 2), help="1: one database (default); 2: two cells"
    )
    parser.add_argument(
        "--cell2-url",
        default=None,
        help="cell2's database with --cells 2 (its tables are dropped!); default a SQLite file beside "
        "the first; needed with a PostgreSQL --db-url",
    )
    args = parser.parse_args()
    if args.cells > 1 and args.db_url and not args.cell2_url:
        parser.error("--cells 2 with a PostgreSQL --db-url needs --cell2-url (cell2's database)")
    if args.cell2_url and args.cells < 2:
        parser.error("--cell2-url goes with --cells 2")
    if args.profile:
        _run(args.profile, args.db_url, True, args.cells, args.cell2_url)
        return
    where = f"{HOSTS} hosts" + (" in 2 cells" if args.cells > 1 else "")
    for shape, label in (
        ("serial", f"{SERIAL} single-server requests, {where}"),
        ("burst", f"1 request for 100 servers, {where}"),
        ("clients", f"{CLIENTS} clients x {PER_CLIENT} single-server requests at once, {where}"),
    ):
        if args.only and shape != args.only:
            continue
        runs = [_run(shape, args.db_url, False, args.cells, args.cell2_url) for _ in range(args.rounds)]
        _summary(label, runs)


if __name__ == "__main__":
    main()
