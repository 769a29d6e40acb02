"""Eight OS processes move servers at once onto hosts with room for only some of them.

Twenty-four m1.small servers run on compute-1 and compute-2, which are then disabled: compute-3 is
the only destination, and it has RAM left for three m1.large servers and four m1.small ones only.
Eight processes (spawned: nothing shared but the database and the
fake hypervisors' files) each resize a server to m1.large (4 vCPUs) and confirm, live-migrate
another, and cold-migrate a third, all at the same moment. Afterwards, on SQLite and PostgreSQL:

* no host holds more than its capacity, and each host's usage is exactly the sum of what its
  servers (and no one else) hold: no claim of a migration is left behind;
* every server is ACTIVE on one host with one guest there and none elsewhere, its flavor the
  one its claim is for; every refused move changed nothing (NoValidHost, server where it was);
* every migration ended (confirmed, completed, error): none is left under way.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from pathlib import Path
from typing import Any

from sqlalchemy import text

from novakit.db.engine import Database

PROCESSES = 8


def _worker(url: str, state_dir: str, n: int, servers: list[str], start: Any, results: Any) -> None:
    from novakit import exceptions
    from novakit.compute.api import API
    from novakit.config import load_config
    from novakit.context import RequestContext

    conf = load_config(db_url=url, state_dir=state_dir, quota={"instances": -1, "cores": -1, "ram": -1})
    db = Database(url, auto_upgrade=False)
    api = API(db, conf)
    admin = RequestContext.admin()
    outcome: dict[str, str] = {}
    start.wait()
    try:
        resize, live, cold = servers
        for uuid, steps in (
            (resize, [("resize", {"flavor": "m1.large"}), ("confirm_resize", None)]),
            (live, [("live_migrate", None)]),
            (cold, [("migrate", None), ("confirm_resize", None)]),
        ):
            try:
                for action, options in steps:
                    out = api.act(admin, uuid, action, options)
                    assert out.error is None, out.error
                outcome[uuid] = "moved"
            except exceptions.NoValidHost:
                outcome[uuid] = "no valid host"
        results.put(("ok", outcome))
    except Exception:
        results.put(("error", traceback.format_exc()))
    finally:
        db.dispose()


def test_eight_processes_moving_servers_never_overcommit_and_leave_no_claim(
    db_url: str, tmp_path: Path
) -> None:
    from novakit.catalog import flavors
    from novakit.fleet import hosts
    from novakit.moves import migrations
    from novakit.placement import api as placement
    from tests.functional.cloud import make_cloud

    db = Database(db_url)
    cloud = make_cloud(db, tmp_path)
    hosts.set_disabled(db, cloud.admin, "compute-3", True, "filling the others first")
    uuids = [
        cloud.api.create(cloud.admin, {"name": f"s{i}", "flavor": "m1.small", "image": "tiny"})[0]["id"]
        for i in range(PROCESSES * 3)
    ]
    for host in ("compute-1", "compute-2"):
        hosts.set_disabled(db, cloud.admin, host, True, "being emptied")
    hosts.set_disabled(db, cloud.admin, "compute-3", False)
    # compute-3 keeps RAM for 3 x m1.large (8192) + 4 x m1.small (1024): a filler takes the rest.
    free = _capacity(db, "compute-3")["MEMORY_MB"] - placement.get_usages(db, "compute-3")["MEMORY_MB"]
    filler_mb = int(free) - 3 * 8192 - 4 * 1024
    flavors.create(db, cloud.admin, {"name": "filler", "vcpus": 1, "memory_mb": filler_mb, "root_gb": 1})
    cloud.api.create(cloud.admin, {"name": "filler", "flavor": "filler", "image": "tiny"})

    ctx = mp.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker,
            args=(db_url, str(cloud.conf.state_dir), n, uuids[3 * n : 3 * n + 3], start, results),
        )
        for n in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    start.set()
    out = [results.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    errors = [o[1] for o in out if o[0] == "error"]
    assert errors == [], "\n".join(errors)
    outcome = {u: r for _, o in out for u, r in o.items()}
    assert set(outcome) == set(uuids)
    assert "moved" in outcome.values() and "no valid host" in outcome.values(), outcome

    for host in ("compute-1", "compute-2", "compute-3"):
        capacity = _capacity(db, host)
        for rc, used in placement.get_usages(db, host).items():
            assert used <= capacity[rc], (host, rc, used, capacity[rc])
    servers = {s["id"]: s for s in cloud.api.list(cloud.admin)}
    on_host: dict[str, set[str]] = {}
    for uuid in uuids:
        s = servers[uuid]
        assert (s["status"], s["task_state"]) == ("ACTIVE", None), s
        held = placement.get_allocations_for_consumer(db, uuid)
        assert len(held) == 1, held
        (claim,) = held.values()
        assert claim["VCPU"] == s["flavor"]["vcpus"], (s["flavor"], claim)
        on_host.setdefault(s["host"], set()).add(uuid)
    for host in ("compute-1", "compute-2", "compute-3"):
        guests = set(cloud.fake(host).list_instances()) & set(uuids)
        assert guests == on_host.get(host, set()), host
    # Every claim is a live server's: no migration holds anything, and none is under way.
    with db.engine.connect() as conn:
        consumers = set(conn.execute(text("SELECT DISTINCT consumer_id FROM allocations")).scalars())
    assert consumers <= set(servers)
    rows = migrations.list_migrations(db, cloud.admin)
    assert rows and {m["status"] for m in rows} <= {"confirmed", "completed", "error"}, rows


def _capacity(db: Database, host: str) -> dict[str, float]:
    """What placement lets a host's consumers hold, per resource class."""
    with db.engine.connect() as conn:
        return {
            rc: float(total)
            for rc, total in conn.execute(
                text(
                    "SELECT i.resource_class, (i.total - i.reserved) * i.allocation_ratio FROM inventories i "
                    "JOIN resource_providers rp ON rp.id = i.resource_provider_id WHERE rp.name = :h"
                ),
                {"h": host},
            ).all()
        }
