"""Fleet-scale figures: boot, list, heal, inventory and claims at 10,000 servers, in one or two cells.

One cloud of ``--hosts`` fake hosts (fake driver, no spawn delay) on a fresh
database (SQLite by default, PostgreSQL with ``--db-url``; its tables are
dropped), filled with ``--servers`` servers through the Python API
(``novakit.compute.api.API``), then read back.

``--cells 2``: two cells, as Nova's cells v2 has them. The API database is
cell1 too (as the embedded default is); cell2 is a database of its own, a
second SQLite file beside the first (``cell2.db``) or, with PostgreSQL, the
database ``--cell2-url`` names (on a second server; its tables are dropped).
The hosts are split half and half: the first half in cell1, the second in
cell2 (``hosts.register_host(cell=...)``), so the servers are too. Every
figure below is then taken across both cells.

1. **boot**: the first part of the servers (``--serial-share``, default half)
   as one-server requests one after another in this process, the rest as
   one-server requests from ``--clients`` processes at once (one engine each).
   Servers per second, overall and per tenth of the phase (median [min..max]:
   how the rate holds while the database fills). Goals: serial >= 50/s,
   4 processes >= 150/s. For the serial part, always, what a boot cost this
   process on average (``cloud.CostCounter``): SQL statements and transactions
   of every engine (the API database's and each cell's; a transaction is an
   engine's ``begin`` event, a statement one the driver executes, SQLite's
   BEGIN left out), pool checkouts (each a pre-ping round trip on PostgreSQL),
   and client CPU (``time.process_time`` over the phase, per boot).
   ``--only serial``: that figure alone, every server booted serially
   (200 by default): a quick run.
2. **list**: ``API.list_servers``, the call the CLI's ``novakit server list``
   makes, as the project's member: a page of 100 (``--limit 100``), the same
   page after a marker nine tenths into the list, and the whole list; the
   whole list also as an admin with ``all_projects``. Goals: a page < 100 ms,
   the whole list < 1 s.
3. **heal**: ``novakit.heal.heal`` over every host (asked through their local
   transports), nothing to correct. Goal < 15 s.
4. **inventory**: the ``novakit.cloud.novakit`` inventory plugin, its
   ``parse`` called in this process through Ansible's plugin loader (the way
   ``ansible-inventory`` calls it, without the CLI); and, for reference,
   ``ansible-inventory -i servers.novakit.yml --list`` as a command, next to
   the same command on an empty inventory (Ansible's own floor).
   Goal < 3 s (for the in-process parse).
5. **claims**: placement claims per second from ``--claim-processes`` (8)
   processes at once, each looping ``placement.claim_resources`` of one
   server's resources on a random one of 1,000 providers registered for it
   (``placement.fake_fleet``, half mapped to each cell; removed afterwards with
   their claims), ``--claim-seconds`` each round, as ``scheduler_bench.py``
   measures it but on the API database that holds the fleet. Goals: PostgreSQL
   >= 500/s, SQLite >= 450/s. For reference, also whole scheduling decisions
   with their claim (``select_destinations``) per second, no goal.

Every figure is a median with [min..max] over ``--rounds`` runs, against its
goal (PASS/MISS), with the load average before and after its phase. For a
MISS, the operation runs once more under cProfile and with its SQL statements
counted, and the report shows where the time went (for boot: 200 more serial
boots, and 4 x 50 in processes with the first one profiled; for claims:
another round with the first process profiled).

A phase that fails (heal while it is being adapted to cells, say) is reported
as "not run" with its error, and the others go on.

    python bench/fleet_scale.py [--servers 10000] [--hosts 100] [--db-url postgresql+psycopg://...]
    python bench/fleet_scale.py --servers 500 --hosts 20      # a quick run while developing
    python bench/fleet_scale.py --only serial [--cells 2]     # the serial figure and its cost alone
    python bench/fleet_scale.py --cells 2 [--db-url URL1 --cell2-url URL2]   # two cells

Figures only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import multiprocessing
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cloud import FLAVOR, IMAGE, CostCounter, add_cell, bench_config, fake_hosts, fresh_database  # noqa: E402

from novakit.cells import manage  # noqa: E402
from novakit.compute.api import API  # noqa: E402
from novakit.config import Config  # noqa: E402
from novakit.context import RequestContext  # noqa: E402
from novakit.db.engine import Database  # noqa: E402
from novakit.heal.manager import heal  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / "playbooks" / "collections"
PROJECT = "bench"
GOALS = {
    "boot_serial": ("servers/s", ">=", 50.0),
    "boot_clients": ("servers/s", ">=", 150.0),
    "list_page": ("ms", "<", 100.0),
    "list_page_marker": ("ms", "<", 100.0),
    "list_all": ("ms", "<", 1000.0),
    "list_all_admin": ("ms", "<", 1000.0),
    "heal": ("s", "<", 15.0),
    "inventory_parse": ("s", "<", 3.0),
    "inventory_command": ("s", "<", 3.0),
    # PostgreSQL >= 500/s; set for the back end in ``run``.
    "claims": ("claims/s", ">=", 450.0),
}
#: what ``--only`` may name; ``serial`` is the serial boot figure alone
PHASES = ("boot", "list", "heal", "inventory", "claims", "serial")
#: servers booted by default: the fleet, or with ``--only serial`` a quick serial run
SERVERS, SERIAL_SERVERS = 10_000, 200
CLAIM_GOALS = {"postgresql": 500.0, "sqlite": 450.0}
#: what a benchmark claim takes (one m1.tiny server's resources)
CLAIM = {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}


# ---------------------------------------------------------------------- measuring


class Statements:
    """SQL statements every engine of this process executes, by their first words, while on."""

    def __init__(self) -> None:
        self.on = False
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        event.listen(Engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if self.on:
            words = re.sub(r"\s+", " ", statement).strip()
            with self._lock:
                self.counts[words[:90]] += 1

    @contextmanager
    def counting(self) -> Iterator[Counter[str]]:
        self.counts = Counter()
        self.on = True
        try:
            yield self.counts
        finally:
            self.on = False


STATEMENTS = Statements()
COST = CostCounter()


@dataclass
class Figure:
    key: str
    label: str
    values: list[float]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    note: str = ""
    where: list[str] = field(default_factory=list)

    def median(self) -> float:
        return statistics.median(self.values)

    def verdict(self) -> str:
        _unit, op, goal = GOALS[self.key]
        med = self.median()
        return "PASS" if (med >= goal if op == ">=" else med < goal) else "MISS"

    def line(self) -> str:
        unit, op, goal = GOALS[self.key]
        fmt = _fmt(unit)
        spread = f"[{fmt(min(self.values))}..{fmt(max(self.values))}]"
        load = f"load {self.load_before[0]:.2f} -> {self.load_after[0]:.2f}"
        out = (
            f"  {self.label:<52} {fmt(self.median()):>9} {unit:<9} {spread:<22} "
            f"goal {op} {fmt(goal)} {self.verdict()}  ({load})"
        )
        return out + (f"\n      {self.note}" if self.note else "")


def _fmt(unit: str) -> Callable[[float], str]:
    return {"ms": "{:.1f}", "s": "{:.2f}", "servers/s": "{:.1f}", "claims/s": "{:.0f}"}[unit].format


def _load() -> tuple[float, float, float]:
    return os.getloadavg()


def timed_rounds(fn: Callable[[], Any], rounds: int) -> tuple[list[float], Any]:
    """Seconds of each of ``rounds`` calls of ``fn``, and the last result."""
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def where_time_goes(fn: Callable[[], Any], top: int = 18, per: int = 1) -> list[str]:
    """One more call of ``fn`` under cProfile with its SQL counted: the lines to print."""
    prof = cProfile.Profile()
    with STATEMENTS.counting() as counts:
        prof.enable()
        try:
            fn()
        finally:
            prof.disable()
    return _profile_lines(prof, counts, top, per)


def _profile_lines(prof: cProfile.Profile, counts: Counter[str], top: int, per: int) -> list[str]:
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.strip_dirs().sort_stats("cumulative").print_stats(top)
    lines = [line for line in buf.getvalue().splitlines() if line.strip()]
    # Keep pstats' header line with the totals and the table.
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    total = sum(counts.values())
    out = [f"profile ({lines[0].strip() if lines else ''}):"] + lines[start:]
    each = "per call" if per == 1 else f"per each of {per}"
    out.append(f"SQL statements: {total} ({total / per:.1f} {each}), the most frequent:")
    out += [f"  {n / per:8.1f}  {sql}" for sql, n in counts.most_common(10)]
    return out


# ---------------------------------------------------------------------- boot


def _boot(api: API, ctx: RequestContext, names: list[str]) -> list[float]:
    """One-server requests one after another: the time each one finished (monotonic)."""
    done = []
    for name in names:
        server = api.create(ctx, {"name": name, "flavor": FLAVOR, "image": IMAGE})[0]
        if server["status"] != "ACTIVE":
            raise SystemExit(f"{name} ended {server['status']}: the benchmark cloud is broken")
        done.append(time.monotonic())
    return done


def _rates(started: float, finished: list[float], parts: int = 10) -> list[float]:
    """Servers per second in each of ``parts`` consecutive slices of the finish times."""
    finished = sorted(finished)
    size = max(1, len(finished) // parts)
    rates, begin = [], started
    for i in range(0, len(finished) - size + 1, size):
        end = finished[i + size - 1]
        rates.append(size / max(end - begin, 1e-9))
        begin = end
    return rates


def _client(url: str, area: str, names: list[str], start: Any, out: Any, profile_to: str | None) -> None:
    db = Database(url, auto_upgrade=False)
    api = API(db, bench_config(db, Path(area)))
    ctx = RequestContext(PROJECT, PROJECT, ["member"])
    prof = cProfile.Profile() if profile_to else None
    start.wait()
    if prof:
        prof.enable()
    finished = _boot(api, ctx, names)
    if prof:
        prof.disable()
        prof.dump_stats(profile_to)
    out.put(finished)
    db.dispose()


def boot_in_processes(url: str, area: Path, names: list[str], clients: int, profile: bool = False) -> Any:
    """``names`` booted by ``clients`` processes at once: (start, finish times, profile file)."""
    mp = multiprocessing.get_context("fork")
    start, out = mp.Barrier(clients + 1), mp.Queue()
    prof_file = str(area / "client0.prof") if profile else None
    parts = [names[i::clients] for i in range(clients)]
    procs = [
        mp.Process(target=_client, args=(url, str(area), part, start, out, prof_file if n == 0 else None))
        for n, part in enumerate(parts)
    ]
    for p in procs:
        p.start()
    start.wait()
    began = time.monotonic()
    finished: list[float] = []
    for _ in procs:
        finished += out.get()
    for p in procs:
        p.join()
        if p.exitcode:
            raise SystemExit(f"a client process failed (exit {p.exitcode})")
    return began, finished, prof_file


# ---------------------------------------------------------------------- inventory


def _inventory_source(area: Path, url: str) -> Path:
    source = area / "servers.novakit.yml"
    source.write_text(f"plugin: novakit.cloud.novakit\ndb_url: {url}\n")
    return source


def inventory_parse(source: Path) -> int:
    """The plugin's parse as ansible-inventory runs it (plugin loader, InventoryData): hosts seen."""
    from ansible.inventory.data import InventoryData
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader, inventory_loader

    if not getattr(inventory_parse, "_loader_ready", False):
        init_plugin_loader([str(COLLECTIONS)])
        inventory_parse._loader_ready = True  # type: ignore[attr-defined]
    plugin = inventory_loader.get("novakit.cloud.novakit")
    if plugin is None:
        raise SystemExit(f"Ansible cannot load novakit.cloud.novakit from {COLLECTIONS}")
    data = InventoryData()
    plugin.parse(data, DataLoader(), str(source), cache=False)
    return len(data.hosts)


def inventory_command(source: str | Path) -> None:
    exe = Path(sys.executable).parent / "ansible-inventory"
    subprocess.run(
        [str(exe), "-i", str(source), "--list"],
        check=True,
        stdout=subprocess.DEVNULL,
        env={
            **os.environ,
            "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
            "ANSIBLE_INVENTORY_ENABLED": "novakit.cloud.novakit,host_list",
        },
    )


# ---------------------------------------------------------------------- claims

CLAIM_PREFIX = "claim-"


def claim_providers(db: Database, count: int, cells: list[str]) -> list[str]:
    """Register ``count`` fake hosts with room for every claim of the phase (providers, compute
    nodes, services; ``placement.fake_fleet``), mapped to ``cells`` in equal consecutive
    shares: their provider uuids."""
    from sqlalchemy import select

    from novakit.cells import mappings
    from novakit.db.models import ResourceProvider
    from novakit.placement.fake_fleet import FakeHost, register_fleet

    names = [f"{CLAIM_PREFIX}{n:04d}" for n in range(count)]
    register_fleet(
        db,
        (
            FakeHost(name, vcpus=4096, memory_mb=4096 * 1024, disk_gb=4096 * 16, cpu_allocation_ratio=1.0)
            for name in names
        ),
    )
    known = {c.name: c for c in db.cells.all()}
    with db.writer() as session:
        for n, name in enumerate(names):
            cell = known[cells[n * len(cells) // count]]
            mappings.map_host(session, name, cell.id, cell.name)  # type: ignore[arg-type]
        return list(
            session.execute(
                select(ResourceProvider.uuid).where(ResourceProvider.name.like(f"{CLAIM_PREFIX}%"))
            ).scalars()
        )


def remove_claim_providers(db: Database) -> None:
    """The claim phase's hosts and every claim on them, gone: the fleet is as it was."""
    like = {"p": f"{CLAIM_PREFIX}%"}
    ids = "SELECT id FROM resource_providers WHERE name LIKE :p"
    with db.writer() as session:
        for statement in (
            f"DELETE FROM allocations WHERE resource_provider_id IN ({ids})",
            f"DELETE FROM inventories WHERE resource_provider_id IN ({ids})",
            f"DELETE FROM resource_provider_traits WHERE resource_provider_id IN ({ids})",
            f"DELETE FROM resource_provider_aggregates WHERE resource_provider_id IN ({ids})",
            "DELETE FROM compute_nodes WHERE host LIKE :p",
            "DELETE FROM services WHERE host LIKE :p",
            "DELETE FROM host_mappings WHERE host LIKE :p",
            "DELETE FROM resource_providers WHERE name LIKE :p",
        ):
            session.execute(text(statement), like)


def _claimer(
    url: str,
    area: str,
    providers: list[str],
    seconds: float,
    mode: str,
    start: Any,
    out: Any,
    profile_to: str | None,
) -> None:
    """One of the claiming processes: loop placement claims (``mode`` "claim") or whole
    scheduling decisions with their claim ("schedule") for ``seconds``; (successes, seconds)."""
    import random

    from novakit.config import load_config
    from novakit.host.messages import FlavorSpec, ImageSpec
    from novakit.placement import api as placement
    from novakit.scheduler.manager import SchedulerManager
    from novakit.scheduler.request_spec import RequestSpec

    db = Database(url, auto_upgrade=False)
    # Heartbeats count as fresh for a day: the claim hosts are registered once, before the rounds.
    conf = load_config(
        db_url=url,
        state_dir=area,
        quota={"instances": -1, "cores": -1, "ram": -1},
        compute={"service_down_time": 86400},
    )
    scheduler = SchedulerManager(db, conf)
    spec = RequestSpec(
        request_id="bench",
        project_id=PROJECT,
        user_id=PROJECT,
        flavor=FlavorSpec(
            name=FLAVOR, vcpus=CLAIM["VCPU"], memory_mb=CLAIM["MEMORY_MB"], root_gb=CLAIM["DISK_GB"]
        ),
        image=ImageSpec(id="bench-image"),
        num_instances=1,
    )

    def once() -> bool:
        consumer = str(uuidlib.uuid4())
        if mode == "claim":
            return placement.claim_resources(db, consumer, random.choice(providers), CLAIM, PROJECT, PROJECT)
        return bool(scheduler.select_destinations(spec, [consumer]))

    once()  # connections and caches warm before the clock starts
    prof = cProfile.Profile() if profile_to else None
    start.wait()
    count = 0
    with STATEMENTS.counting() as counts:
        if prof:
            prof.enable()
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            count += once()
        elapsed = time.perf_counter() - began
        if prof and profile_to:
            prof.disable()
            prof.dump_stats(profile_to)
    out.put((count, elapsed, dict(counts) if profile_to else {}))
    db.dispose()


def claims_per_second(
    db: Database,
    area: Path,
    providers: list[str],
    seconds: float,
    processes: int,
    mode: str = "claim",
    profile: bool = False,
) -> tuple[float, str | None, dict[str, int], int]:
    """Successful claims per second summed over ``processes`` started at the same moment; and,
    with ``profile``, the first process's profile file, its SQL statement counts and claims."""
    db.dispose()  # no connection of this process crosses the fork
    mp = multiprocessing.get_context("fork")
    start, out = mp.Barrier(processes + 1), mp.Queue()
    prof_file = str(area / "claimer0.prof") if profile else None
    procs = [
        mp.Process(
            target=_claimer,
            args=(db.url, str(area), providers, seconds, mode, start, out, prof_file if n == 0 else None),
        )
        for n in range(processes)
    ]
    for p in procs:
        p.start()
    start.wait()
    done = [out.get(timeout=seconds + 600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode:
            raise SystemExit(f"a claiming process failed (exit {p.exitcode})")
    counted: dict[str, int] = next((c for _, _, c in done if c), {})
    first = next((n for n, _, c in done if c), 0)
    return sum(n for n, _, _ in done) / max(e for _, e, _ in done), prof_file, counted, first


def _profiled_claims(
    db: Database, area: Path, providers: list[str], seconds: float, processes: int
) -> list[str]:
    rate, prof_file, counts, first = claims_per_second(db, area, providers, seconds, processes, profile=True)
    buf = io.StringIO()
    pstats.Stats(prof_file, stream=buf).strip_dirs().sort_stats("cumulative").print_stats(25)
    lines = [line for line in buf.getvalue().splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    total = sum(counts.values())
    out = [
        f"one more round of {seconds:.0f} s from {processes} processes: {rate:.0f} claims/s; "
        f"the first process under cProfile ({first} claims):"
    ] + lines[start:]
    out.append(f"SQL statements: {total} ({total / max(first, 1):.1f} per claim), the most frequent:")
    out += [
        f"  {n / max(first, 1):8.2f}  {sql}" for sql, n in sorted(counts.items(), key=lambda kv: -kv[1])[:10]
    ]
    return out


def _claims_phase(
    args: argparse.Namespace, db: Database, area: Path, cells: list[str], profile: bool
) -> Figure:
    providers = claim_providers(db, args.claim_providers, cells)
    try:
        load0 = _load()
        claims = [
            claims_per_second(db, area, providers, args.claim_seconds, args.claim_processes)[0]
            for _ in range(args.claim_rounds)
        ]
        load1 = _load()
        decisions = [
            claims_per_second(db, area, providers, args.claim_seconds, args.claim_processes, "schedule")[0]
            for _ in range(args.claim_rounds)
        ]
        fig = Figure(
            "claims",
            f"placement claims, {args.claim_processes} processes",
            claims,
            load0,
            load1,
            f"{args.claim_rounds} rounds of {args.claim_seconds:.0f} s on {len(providers)} providers "
            f"({' / '.join(cells)}); whole decisions with their claim (select_destinations), "
            f"{args.claim_processes} processes, no goal: {statistics.median(decisions):.0f}/s "
            f"[{min(decisions):.0f}..{max(decisions):.0f}] (load {load1[0]:.2f} -> {_load()[0]:.2f})",
        )
        if profile and fig.verdict() == "MISS":
            fig.where = _profiled_claims(db, area, providers, args.claim_seconds, args.claim_processes)
    finally:
        remove_claim_providers(db)
    return fig


# ---------------------------------------------------------------------- the run


def _boot_figure(
    key: str,
    label: str,
    began: float,
    finished: list[float],
    wall: float,
    load0: tuple[float, float, float],
    cost: str = "",
) -> Figure:
    """A boot phase's rates over tenths of it (and what it cost, when counted), printed as soon
    as it is known."""
    rates = _rates(began, finished)
    figure = Figure(
        key,
        label,
        rates,
        load0,
        _load(),
        f"overall {len(finished) / wall:.1f}/s; median [min..max] over tenths of the phase; "
        f"first tenth {rates[0]:.1f}/s, last {rates[-1]:.1f}/s" + (f"\n      {cost}" if cost else ""),
    )
    print(figure.line(), flush=True)
    return figure


def _boot_fleet(
    args: argparse.Namespace, api: API, db: Database, area: Path, member: RequestContext, report: bool
) -> list[Figure]:
    """Boot the fleet: the serial share here, the rest from processes; their figures."""
    figures = []
    names = [f"s{i:05d}" for i in range(args.servers)]
    serial_count = round(args.servers * args.serial_share)
    serial, parallel = names[:serial_count], names[serial_count:]
    load0 = _load()
    began = time.monotonic()
    with COST.counting() as cost:
        finished = _boot(api, member, serial)
    wall = time.monotonic() - began
    if report and serial:
        label = f"boot, {len(serial)} one-server requests serially"
        spent = cost.per(len(serial))
        figures.append(_boot_figure("boot_serial", label, began, finished, wall, load0, spent))
    db.dispose()
    if not parallel:
        return figures
    load0 = _load()
    began, finished, _ = boot_in_processes(db.url, area, parallel, args.clients)
    wall = max(finished) - began if finished else 0.0
    if report and parallel:
        label = f"boot, {len(parallel)} requests from {args.clients} processes at once"
        figures.append(_boot_figure("boot_clients", label, began, finished, wall, load0))
    return figures


def _not_run(figures: list[Figure], skipped: list[str], what: str, exc: BaseException) -> None:
    said = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    line = f"{what}: not run (error {type(exc).__name__}{': ' + said if said else ''})"
    skipped.append(line)
    print(line, flush=True)
    traceback.print_exc(limit=6)


def _cell_names(cells: int) -> list[str]:
    return ["cell1", "cell2"][:cells] if cells > 1 else []


def run(args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    figures: list[Figure] = []
    skipped: list[str] = []
    profile = not args.no_profile
    wanted = set(args.only.split(",")) if args.only else {"boot", "list", "heal", "inventory", "claims"}
    cells = _cell_names(args.cells)
    with contextlib.ExitStack() as stack:
        if args.keep:
            area = Path(args.keep).resolve()
            area.mkdir(parents=True, exist_ok=True)
        else:
            area = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="novakit-fleet-")))
        marker_file = area / "fleet.json"
        kept = json.loads(marker_file.read_text()) if marker_file.exists() else None
        if kept is not None and kept["db_url"] != (args.db_url or ""):
            raise SystemExit(f"{area} holds a fleet on {kept['db_url'] or 'SQLite'}, not on this database")
        if kept is not None and kept.get("cells", 1) != args.cells:
            raise SystemExit(f"{area} holds a fleet in {kept.get('cells', 1)} cell(s), not {args.cells}")
        if kept is None:
            db = fresh_database(args.db_url, area)
            conf: Config = bench_config(db, area)
            if args.cells > 1:
                add_cell(db, "cell2", args.cell2_url or f"sqlite:///{area / 'cell2.db'}")
            per_host = -(-args.servers // args.hosts)
            host_names = fake_hosts(db, conf, area, args.hosts, vcpus=per_host, exact=True, cells=cells)
        else:
            db = Database(kept["url"], auto_upgrade=False)
            conf = bench_config(db, area)
            host_names = kept["hosts"]
        if db.is_sqlite:
            GOALS["claims"] = ("claims/s", ">=", CLAIM_GOALS["sqlite"])
        else:
            GOALS["claims"] = ("claims/s", ">=", CLAIM_GOALS["postgresql"])
        api = API(db, conf)
        member = RequestContext(PROJECT, PROJECT, ["member"])
        admin = RequestContext.admin()
        print(
            f"{args.servers if kept is None else kept['servers']} servers on {len(host_names)} fake hosts, "
            f"{db.engine.dialect.name}, {os.cpu_count()} cpus, load {_load()[0]:.2f}"
            + (f" (the fleet kept in {area}: no boot)" if kept else ""),
            flush=True,
        )
        print(_cells_line(db, admin), flush=True)
        if kept is None:
            figures += _boot_fleet(args, api, db, area, member, bool({"boot", "serial"} & wanted))
        # Whatever the fleet holds now (a kept one may have grown by profiled boots).
        every = api.list(admin)
        count = len(every)
        per_host_now = Counter(s["host"] for s in every)
        print(
            f"the fleet: {count} servers, {sum(s['status'] == 'ACTIVE' for s in every)} ACTIVE, on "
            f"{len(per_host_now)} hosts ({min(per_host_now.values(), default=0)}.."
            f"{max(per_host_now.values(), default=0)} each)",
            flush=True,
        )
        if kept is None:
            print(_cells_line(db, admin), flush=True)
        if args.keep:
            marker_file.write_text(
                json.dumps(
                    {
                        "db_url": args.db_url or "",
                        "url": db.url,
                        "hosts": host_names,
                        "servers": count,
                        "cells": args.cells,
                    }
                )
            )

        # 2. list
        if "list" in wanted:
            everything = api.list_servers(member, {})
            if len(everything) != count:
                raise SystemExit(f"the member listed {len(everything)} servers of {count}")
            marker = everything[len(everything) * 9 // 10]["id"]
            for key, label, ctx, query in (
                ("list_page", "server list --limit 100", member, {"limit": 100}),
                (
                    "list_page_marker",
                    "server list --limit 100 --marker (at 9/10)",
                    member,
                    {"limit": 100, "marker": marker},
                ),
                ("list_all", f"server list, all {count}", member, {}),
                ("list_all_admin", "server list --all-projects (admin)", admin, {"all_projects": True}),
            ):

                def call(ctx: RequestContext = ctx, query: dict[str, Any] = query) -> Any:
                    return api.list_servers(ctx, query)

                load0 = _load()
                times, _ = timed_rounds(call, args.rounds)
                fig = Figure(key, label, [t * 1000 for t in times], load0, _load())
                if profile and fig.verdict() == "MISS":
                    fig.where = where_time_goes(call)
                figures.append(fig)
                print(fig.line(), flush=True)

        # 3. heal
        if "heal" in wanted:

            def heal_all() -> Any:
                return heal(db, conf)

            load0 = _load()
            try:
                times, report = timed_rounds(heal_all, args.rounds)
            except Exception as exc:  # heal is being adapted to cells: say so, and go on
                _not_run(figures, skipped, "heal", exc)
            else:
                fig = Figure(
                    "heal",
                    f"heal, {count} servers on {len(per_host_now)} hosts",
                    times,
                    load0,
                    _load(),
                    f"{len(report.hosts)} hosts answered, {len(report.corrections)} corrections",
                )
                if profile and fig.verdict() == "MISS":
                    fig.where = where_time_goes(heal_all)
                figures.append(fig)
                print(fig.line(), flush=True)

        # 4. inventory
        if "inventory" in wanted:
            source = _inventory_source(area, db.url)
            load0 = _load()
            times, seen = timed_rounds(lambda: inventory_parse(source), args.rounds)
            fig = Figure(
                "inventory_parse",
                "inventory plugin, parse in-process",
                times,
                load0,
                _load(),
                f"{seen} hosts",
            )
            if seen != count:
                raise SystemExit(f"the inventory has {seen} hosts, the fleet {count} servers")
            if profile and fig.verdict() == "MISS":
                fig.where = where_time_goes(lambda: inventory_parse(source))
            figures.append(fig)
            print(fig.line(), flush=True)
            if shutil.which("ansible-inventory", path=str(Path(sys.executable).parent)):
                load0 = _load()
                floor, _ = timed_rounds(lambda: inventory_command("localhost,"), args.rounds)
                times, _ = timed_rounds(lambda: inventory_command(source), args.rounds)
                fig = Figure(
                    "inventory_command",
                    "ansible-inventory --list (a command)",
                    times,
                    load0,
                    _load(),
                    f"the same command on an empty inventory: {statistics.median(floor):.2f} s "
                    f"[{min(floor):.2f}..{max(floor):.2f}]",
                )
                figures.append(fig)
                print(fig.line(), flush=True)

        # 5. claims (last: the phase registers hosts of its own, and removes them after)
        if "claims" in wanted:
            try:
                fig = _claims_phase(args, db, area, cells or ["cell1"], profile)
            except Exception as exc:
                _not_run(figures, skipped, "claims", exc)
            else:
                figures.append(fig)
                print(fig.line(), flush=True)

        # Where boot's time goes, when it missed: more boots, profiled (the fleet is full-size now).
        if profile:
            extra_hosts: list[str] = []
            for fig in figures:
                if fig.verdict() == "MISS" and fig.key.startswith("boot") and not extra_hosts:
                    # The fleet's hosts are full: the profiled boots go to hosts of their own.
                    extra_hosts = fake_hosts(
                        db, conf, area, 4, 200, exact=True, prefix="extra", catalog=False, cells=cells
                    )
                if fig.key == "boot_serial" and fig.verdict() == "MISS":
                    extra = [f"p{i:05d}" for i in range(200)]
                    fig.where = [f"{len(extra)} more serial boots:"] + where_time_goes(
                        lambda extra=extra: _boot(api, member, extra), top=25, per=len(extra)
                    )
                if fig.key == "boot_clients" and fig.verdict() == "MISS":
                    fig.where = _profiled_clients(db, area, args.clients)
        db.dispose()
    return figures, skipped


def _cells_line(db: Database, admin: RequestContext) -> str:
    """The cells, their databases, hosts and servers (``novakit cell list``)."""
    return "cells: " + "; ".join(
        f"{c['name']} ({c['database']}{', the API database' if c['database_is_api'] else ''}): "
        f"{c['hosts']} hosts, {c['servers']} servers, {c['status']}"
        for c in manage.list_cells(db, admin)
    )


def _profiled_clients(db: Database, area: Path, clients: int) -> list[str]:
    names = [f"q{i:05d}" for i in range(clients * 50)]
    began, finished, prof_file = boot_in_processes(db.url, area, names, clients, profile=True)
    wall = max(finished) - began
    buf = io.StringIO()
    pstats.Stats(prof_file, stream=buf).strip_dirs().sort_stats("cumulative").print_stats(25)
    lines = [line for line in buf.getvalue().splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return [
        f"{len(names)} more boots from {clients} processes: {len(names) / wall:.1f}/s; "
        "the first process under cProfile (its 50 boots):"
    ] + lines[start:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--servers", type=int, default=None, help=f"default {SERVERS:,}; {SERIAL_SERVERS} with --only serial"
    )
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument(
        "--db-url", default=None, help="PostgreSQL URL (its tables are dropped!); default SQLite"
    )
    parser.add_argument("--clients", type=int, default=4, help="processes booting at once")
    parser.add_argument("--serial-share", type=float, default=0.5, help="part of the servers booted serially")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each list, heal and inventory figure")
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated: {','.join(PHASES)}; serial: only the serial boot figure (every server booted "
        "serially, nothing else measured)",
    )
    parser.add_argument(
        "--cells", type=int, default=1, choices=(1, 2), help="1: one database (default); 2: two cells"
    )
    parser.add_argument(
        "--cell2-url",
        default=None,
        help="cell2's database with --cells 2 (its tables are dropped!); default a SQLite file beside "
        "the first; needed with a PostgreSQL --db-url",
    )
    parser.add_argument("--claim-processes", type=int, default=8, help="processes claiming at once")
    parser.add_argument("--claim-seconds", type=float, default=4.0, help="length of a round of claims")
    parser.add_argument("--claim-rounds", type=int, default=3, help="rounds of claims (and of decisions)")
    parser.add_argument("--claim-providers", type=int, default=1000, help="providers the claims go to")
    parser.add_argument("--no-profile", action="store_true", help="do not profile the misses")
    parser.add_argument(
        "--keep",
        metavar="DIR",
        default=None,
        help="keep the fleet in DIR (fake hosts; the SQLite file); a later run with the same DIR "
        "and database measures list, heal and inventory on it without booting again",
    )
    args = parser.parse_args()
    if args.only:
        unknown = set(args.only.split(",")) - set(PHASES)
        if unknown:
            parser.error(f"--only: unknown {', '.join(sorted(unknown))}; known: {', '.join(PHASES)}")
    if args.only == "serial":
        args.serial_share = 1.0
    if args.servers is None:
        args.servers = SERIAL_SERVERS if args.only == "serial" else SERVERS
    if args.cells > 1 and args.db_url and not args.cell2_url:
        parser.error("--cells 2 with a PostgreSQL --db-url needs --cell2-url (cell2's database)")
    if args.cell2_url and args.cells < 2:
        parser.error("--cell2-url goes with --cells 2")
    figures, skipped = run(args)
    print("\nsummary (median [min..max], goal, verdict, load average 1 min before -> after):")
    for fig in figures:
        print(fig.line())
    for line in skipped:
        print(f"  {line}")
    for fig in figures:
        if fig.where:
            print(f"\nwhere the time goes: {fig.label} (MISS)")
            print("\n".join("    " + line for line in fig.where))


if __name__ == "__main__":
    main()
