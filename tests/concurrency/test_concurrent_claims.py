"""Real OS processes racing for one fleet, on SQLite and PostgreSQL: no over-commit, quotas hold exactly.

Eight processes (spawned, so nothing is shared but the database) wait on one
event and then all ask at once. The fleet holds exactly 200 instances of the
flavor used (20 hosts x 10 VCPU, 1 VCPU each).
"""

from __future__ import annotations

import multiprocessing as mp
import uuid as uuidlib
from typing import Any

from sqlalchemy import text

from novakit.db.engine import Database
from novakit.placement.fake_fleet import FakeHost, register_fleet

PROCESSES = 8
PER_PROCESS = 50
HOSTS, SLOTS_PER_HOST = 20, 10
CHURN = 12


def _worker(url: str, mode: str, start: Any, results: Any) -> None:
    from novakit import exceptions
    from novakit.config import load_config
    from novakit.host.messages import FlavorSpec, ImageSpec
    from novakit.scheduler.manager import SchedulerManager
    from novakit.scheduler.request_spec import RequestSpec

    db = Database(url, auto_upgrade=False)
    conf = load_config(db_url=url, quota={"instances": -1, "cores": -1, "ram": -1})
    scheduler = SchedulerManager(db, conf)
    spec = RequestSpec(
        request_id="r",
        project_id="p-race",
        user_id="u",
        flavor=FlavorSpec(name="one", vcpus=1, memory_mb=256, root_gb=1),
        image=ImageSpec(id="img"),
    )
    placed = no_host = over_quota = 0
    start.wait()
    try:
        if mode == "churn":
            # Every writer of allocations at once: batch claims, moves, releases.
            from novakit.placement import api as placement

            others = [placement.get_provider(db, f"race{n}").uuid for n in range(HOSTS)]
            for n in range(CHURN):
                uuid = str(uuidlib.uuid4())
                try:
                    scheduler.select_destinations(spec, [uuid])
                except exceptions.NoValidHost:
                    no_host += 1
                    continue
                placed += 1
                placement.claim_resources(db, uuid, others[n % HOSTS], {"VCPU": 1}, "p-race", "u")
                if n % 2:
                    placement.remove_allocations(db, uuid)
        elif mode == "one-request-of-50":
            ids = [str(uuidlib.uuid4()) for _ in range(PER_PROCESS)]
            try:
                result = scheduler.select_destinations(
                    spec.model_copy(update={"num_instances": PER_PROCESS}), ids
                )
                placed = sum(1 for r in result if r)
            except exceptions.NoValidHost:
                no_host = PER_PROCESS
        else:
            for _ in range(PER_PROCESS):
                try:
                    scheduler.select_destinations(spec, [str(uuidlib.uuid4())])
                    placed += 1
                except exceptions.NoValidHost:
                    no_host += 1
                except exceptions.OverQuota:
                    over_quota += 1
        results.put(("ok", placed, no_host, over_quota))
    except Exception as exc:  # reported to the test, which fails with it
        results.put(("error", repr(exc), 0, 0))
    finally:
        db.dispose()


def _race(url: str, mode: str) -> list[tuple[str, Any, int, int]]:
    ctx = mp.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, mode, start, results)) for _ in range(PROCESSES)]
    for proc in procs:
        proc.start()
    start.set()
    out = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    return out


def _fleet(url: str) -> Database:
    db = Database(url)
    register_fleet(
        db, [FakeHost(f"race{n}", vcpus=SLOTS_PER_HOST, cpu_allocation_ratio=1.0) for n in range(HOSTS)]
    )
    return db


def _over_committed(db: Database) -> list[Any]:
    with db.reader() as session:
        return session.execute(
            text(
                "SELECT rp.name, i.resource_class, SUM(a.used), (i.total - i.reserved) * i.allocation_ratio "
                "FROM allocations a JOIN inventories i ON i.resource_provider_id = a.resource_provider_id "
                "AND i.resource_class = a.resource_class "
                "JOIN resource_providers rp ON rp.id = a.resource_provider_id "
                "GROUP BY rp.name, i.resource_class, i.total, i.reserved, i.allocation_ratio "
                "HAVING SUM(a.used) > (i.total - i.reserved) * i.allocation_ratio"
            )
        ).all()


def _usage_cache_drift(db: Database) -> list[Any]:
    """Inventory rows whose trigger-kept ``used``/``free`` differ from SUM(allocations) / capacity - SUM."""
    with db.reader() as session:
        rows = session.execute(
            text(
                "SELECT i.resource_provider_id, i.resource_class, i.used, i.free, "
                "CAST((i.total - i.reserved) * i.allocation_ratio AS INTEGER), "
                "(SELECT COALESCE(SUM(a.used), 0) FROM allocations a WHERE a.resource_provider_id = "
                "i.resource_provider_id AND a.resource_class = i.resource_class) FROM inventories i"
            )
        ).all()
    return [r for r in rows if r[2] != r[5] or r[3] != r[4] - r[5]]


def _consumers(db: Database) -> int:
    with db.reader() as session:
        return int(session.execute(text("SELECT COUNT(DISTINCT consumer_id) FROM allocations")).scalar_one())


def test_eight_processes_of_fifty_fill_exactly_the_fleet_and_no_more(db_url: str) -> None:
    db = _fleet(db_url)
    results = _race(db_url, "one-request-of-50")
    assert [r for r in results if r[0] != "ok"] == []
    assert sum(r[1] for r in results) == HOSTS * SLOTS_PER_HOST
    # All-or-nothing: four requests got all 50, four got "no valid host" and hold nothing.
    assert sorted(r[1] for r in results) == [0] * 4 + [50] * 4
    assert _consumers(db) == HOSTS * SLOTS_PER_HOST
    assert _over_committed(db) == []
    assert _usage_cache_drift(db) == []
    db.dispose()


def test_project_quota_of_120_lets_exactly_120_through(db_url: str) -> None:
    from novakit import quota

    db = _fleet(db_url)
    quota.set_quota(db, "p-race", "instances", 120)
    results = _race(db_url, "fifty-single-requests")
    assert [r for r in results if r[0] != "ok"] == []
    assert sum(r[1] for r in results) == 120
    assert sum(r[3] for r in results) == PROCESSES * PER_PROCESS - 120
    assert _consumers(db) == 120
    assert _over_committed(db) == []
    assert _usage_cache_drift(db) == []
    db.dispose()


def test_usage_cache_equals_the_sum_of_allocations_after_every_writer_raced(db_url: str) -> None:
    db = _fleet(db_url)
    results = _race(db_url, "churn")
    assert [r for r in results if r[0] != "ok"] == []
    assert sum(r[1] for r in results) == PROCESSES * CHURN  # 96 live at most at once: the fleet holds 200
    assert _consumers(db) == PROCESSES * CHURN // 2  # every other one released
    assert _over_committed(db) == []
    assert _usage_cache_drift(db) == []
    db.dispose()
