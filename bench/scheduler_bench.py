"""Benchmark select_destinations at fleet sizes 1,000 / 10,000 / 100,000, on SQLite and PostgreSQL.

Prints figures and a Markdown table; asserts nothing. Usage:

    .venv/bin/python bench/scheduler_bench.py [--sizes 1000,10000,100000] [--backends sqlite,postgresql]
        [--pg-url postgresql+psycopg://...] [--runs 40] [--claim-seconds 5]

Each size gets a fresh database and a fleet of fake hosts (16 VCPU, 64 GB, 1 TB each), a tenth
of them already half used. Measured per size: one decision (dry run: prefilter, filters,
weighers; nothing claimed), one decision with its claim, a 100-instance request (dry run and
claimed), Python heap peak of one decision (tracemalloc), and claims per second with 8
processes each looping single-instance claims.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import tracemalloc
import uuid as uuidlib
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select, text

from novakit.config import load_config
from novakit.db.engine import Database
from novakit.db.models import Allocation, Base, ResourceProvider
from novakit.host.messages import FlavorSpec, ImageSpec
from novakit.placement.fake_fleet import FakeHost, register_fleet
from novakit.scheduler.manager import SchedulerManager
from novakit.scheduler.request_spec import RequestSpec

FLAVOR = FlavorSpec(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20)


def bench_config(url: str) -> Any:
    """Unlimited quotas; heartbeats count as fresh for a day, since a large size runs for minutes."""
    return load_config(
        db_url=url, quota={"instances": -1, "cores": -1, "ram": -1}, compute={"service_down_time": 86400}
    )


def spec(n: int = 1) -> RequestSpec:
    return RequestSpec(
        request_id="bench",
        project_id="bench",
        user_id="bench",
        flavor=FLAVOR,
        image=ImageSpec(id="img-1"),
        num_instances=n,
    )


def fresh_database(backend: str, pg_url: str, workdir: Path, size: int) -> str:
    if backend == "sqlite":
        url = f"sqlite:///{workdir / f'bench-{size}.db'}"
        Database(url).dispose()
        return url
    db = Database(pg_url, auto_upgrade=False)
    with db.engine.begin() as conn:
        Base.metadata.drop_all(conn)
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    db.upgrade_if_needed()
    db.dispose()
    return pg_url


def populate(url: str, size: int) -> float:
    started = time.perf_counter()
    db = Database(url, auto_upgrade=False)
    register_fleet(
        db, (FakeHost(f"cn{n:06d}", cached_images=["img-1"] if n % 7 == 0 else []) for n in range(size))
    )
    # A tenth of the fleet half used, so usage sums read real rows.
    with db.writer() as session:
        ids = list(
            session.execute(select(ResourceProvider.id).where(ResourceProvider.id % 10 == 0)).scalars()
        )
        rows = []
        for rp_id in ids:
            consumer = str(uuidlib.uuid4())
            for rc, used in (("VCPU", 32), ("MEMORY_MB", 32000), ("DISK_GB", 500)):
                rows.append(
                    {
                        "resource_provider_id": rp_id,
                        "consumer_id": consumer,
                        "resource_class": rc,
                        "used": used,
                        "project_id": "other",
                        "user_id": "other",
                    }
                )
        if rows:
            session.execute(insert(Allocation), rows)
    if not db.is_sqlite:
        with db.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
    else:
        with db.engine.begin() as conn:
            conn.execute(text("ANALYZE"))
    db.dispose()
    return time.perf_counter() - started


def timed(fn: Any, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _claimer(url: str, seconds: float, mode: str, ready: Any, start: Any, results: Any) -> None:
    """One of the 8 processes: loop placement claims, or whole scheduling decisions with their claim."""
    import random

    from sqlalchemy import text

    from novakit.placement import api as placement

    db = Database(url, auto_upgrade=False)
    conf = bench_config(url)
    scheduler = SchedulerManager(db, conf)
    one = spec()
    with db.reader() as session:
        providers = list(session.execute(text("SELECT uuid FROM resource_providers LIMIT 1000")).scalars())
    wanted = {"VCPU": FLAVOR.vcpus, "MEMORY_MB": FLAVOR.memory_mb, "DISK_GB": FLAVOR.root_gb}

    def claim_once() -> bool:
        if mode == "claim":
            consumer = str(uuidlib.uuid4())
            return placement.claim_resources(db, consumer, random.choice(providers), wanted, "bench", "bench")
        return bool(scheduler.select_destinations(one, [str(uuidlib.uuid4())]))

    claim_once()  # warm caches and connections before the clock starts
    ready.put(1)
    start.wait()
    count = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        count += bool(claim_once())
    results.put((count, time.perf_counter() - t0))
    db.dispose()


def claims_per_second(url: str, seconds: float, mode: str = "claim", processes: int = 8) -> float:
    """Successful claims per second, summed over ``processes`` that all start at the same moment.

    ``mode="claim"``: placement's claim alone (allocations written with the generation
    compare-and-swap), the figure the goal speaks of. ``mode="schedule"``: whole
    ``select_destinations`` calls (candidates, filters, weighers, claim).
    """
    ctx = mp.get_context("spawn")
    ready, start, results = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_claimer, args=(url, seconds, mode, ready, start, results))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    for _ in procs:  # every process has imported, connected and claimed once
        ready.get(timeout=300)
    start.set()
    done = [results.get(timeout=seconds + 300) for _ in procs]
    for p in procs:
        p.join()
    return sum(n for n, _ in done) / max(elapsed for _, elapsed in done)


def bench_one(backend: str, url: str, size: int, runs: int, claim_seconds: float) -> dict[str, Any]:
    db = Database(url, auto_upgrade=False)
    conf = bench_config(url)
    scheduler = SchedulerManager(db, conf)
    scheduler.select_destinations(spec(), ["warm-up"], dry_run=True)
    decide = timed(lambda: scheduler.select_destinations(spec(), [str(uuidlib.uuid4())], dry_run=True), runs)
    claim = timed(lambda: scheduler.select_destinations(spec(), [str(uuidlib.uuid4())]), runs)
    hundred_ids = lambda: [str(uuidlib.uuid4()) for _ in range(100)]  # noqa: E731
    big_dry = timed(
        lambda: scheduler.select_destinations(spec(100), hundred_ids(), dry_run=True), max(3, runs // 8)
    )
    big = timed(lambda: scheduler.select_destinations(spec(100), hundred_ids()), max(3, runs // 8))
    tracemalloc.start()
    scheduler.select_destinations(spec(), [str(uuidlib.uuid4())], dry_run=True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    db.dispose()
    cps = claims_per_second(url, claim_seconds, "claim") if claim_seconds > 0 else float("nan")
    sps = claims_per_second(url, claim_seconds, "schedule") if claim_seconds > 0 else float("nan")
    return {
        "backend": backend,
        "size": size,
        "decide_med": statistics.median(decide),
        "decide_p99": pct(decide, 0.99),
        "claim_med": statistics.median(claim),
        "claim_p99": pct(claim, 0.99),
        "big_dry_med": statistics.median(big_dry),
        "big_med": statistics.median(big),
        "big_p99": pct(big, 0.99),
        "peak_kib": peak / 1024,
        "claims_per_s": cps,
        "schedules_per_s": sps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument(
        "--pg-url", default=os.environ.get("NOVAKIT_BENCH_PG_URL", os.environ.get("NOVAKIT_TEST_PG_URL", ""))
    )
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--claim-seconds", type=float, default=4.0)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="novakit-bench-") as tmp:
        for backend in args.backends.split(","):
            if backend == "postgresql" and not args.pg_url:
                print("skipping postgresql: no --pg-url / NOVAKIT_BENCH_PG_URL")
                continue
            for size in (int(s) for s in args.sizes.split(",")):
                url = fresh_database(backend, args.pg_url, Path(tmp), size)
                setup = populate(url, size)
                load_before = os.getloadavg()[0]
                row = bench_one(backend, url, size, args.runs, args.claim_seconds)
                row["load_before"], row["load_after"] = load_before, os.getloadavg()[0]
                row["setup_s"] = setup
                rows.append(row)
                print(
                    f"{backend:10} {size:>7} providers: "
                    f"decide {row['decide_med']:.2f} ms (p99 {row['decide_p99']:.2f}), "
                    f"decide+claim {row['claim_med']:.2f} ms (p99 {row['claim_p99']:.2f}), "
                    f"100 instances {row['big_med']:.0f} ms (dry {row['big_dry_med']:.0f}), "
                    f"{row['claims_per_s']:.0f} claims/s x8, "
                    f"{row['schedules_per_s']:.0f} decisions+claims/s x8, "
                    f"heap peak {row['peak_kib']:.0f} KiB, "
                    f"setup {setup:.0f} s",
                    flush=True,
                )
    lines = table(rows)
    print()
    print("\n".join(lines))
    out = Path(__file__).parent / "results" / "scheduler.md"
    out.parent.mkdir(exist_ok=True)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    out.write_text(
        f"# select_destinations benchmark\n\nMeasured {time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} "
        f"cores, load average at the end {load} (shared machine). Command: "
        f"`python bench/scheduler_bench.py --sizes {args.sizes} --runs {args.runs} "
        f"--claim-seconds {args.claim_seconds}`.\n\n" + "\n".join(lines) + "\n"
    )
    print(f"written to {out}")


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| back end | providers | 1 decision median / p99 (ms) | decision + claim median / p99 (ms) "
        "| 100 instances claimed median / p99 (ms) | 100 instances dry run (ms) | claims/s, 8 processes "
        "| decisions with claim/s, 8 processes | heap peak per decision (KiB) | load before / after |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['size']:,} | {r['decide_med']:.2f} / {r['decide_p99']:.2f} "
            f"| {r['claim_med']:.2f} / {r['claim_p99']:.2f} | {r['big_med']:.0f} / {r['big_p99']:.0f} "
            f"| {r['big_dry_med']:.0f} | {r['claims_per_s']:.0f} | {r['schedules_per_s']:.0f} "
            f"| {r['peak_kib']:.0f} "
            f"| {r['load_before']:.1f} / {r['load_after']:.1f} |"
        )
    return lines


if __name__ == "__main__":
    main()
