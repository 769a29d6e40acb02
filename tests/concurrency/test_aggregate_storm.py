"""Eight OS processes move hosts between aggregates and zones and boot servers into zones, at once.

Each process (spawned: nothing shared but the database and the fake hypervisors' files) adds
and removes hosts of two zone aggregates (``east``, ``west``) and one plain aggregate at
random, and boots servers asked into ``east``, ``west`` or the default zone ``nova``. The zone
rule is raced on purpose: two processes adding one host to the two zones at once. Afterwards,
on SQLite and PostgreSQL:

* no host is in two zones, and the aggregates as the operator lists them are exactly
  placement's membership rows (one store), and the zones listed are what those rows say;
* every refusal was one of Nova's answers (already in it, not in it, in another zone);
* every server that was placed recorded the zone it asked for (a host moved out of a zone
  between the scheduler's plan and its claim is not claimed), and holds its flavor in
  placement on its host.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from novakit.db.engine import Database

PROCESSES = 8
STEPS = 10
HOSTS = [f"compute-{n}" for n in range(1, 7)]
ZONES = {"agg-east": "east", "agg-west": "west"}
PROJECT = "storm"


def _worker(url: str, state_dir: str, n: int, start: Any, results: Any) -> None:
    from novakit import exceptions
    from novakit.compute.api import API
    from novakit.config import load_config
    from novakit.context import RequestContext
    from novakit.fleet import aggregates

    conf = load_config(db_url=url, state_dir=state_dir, quota={"instances": -1, "cores": -1, "ram": -1})
    db = Database(url, auto_upgrade=False)
    api = API(db, conf)
    admin = RequestContext.admin()
    member = RequestContext(PROJECT, f"user-{n}", ["member"])
    rng = random.Random(n)
    refusals: Counter[str] = Counter()
    booted: list[tuple[str, str]] = []
    start.wait()
    try:
        for step in range(STEPS):
            roll = rng.random()
            host = rng.choice(HOSTS)
            agg = rng.choice([*ZONES, "agg-plain"])
            if step == 0:
                # Everyone at once: the last host into east (even) or west (odd). One wins.
                roll, host, agg = 0.0, HOSTS[-1], ["agg-east", "agg-west"][n % 2]
            try:
                if roll < 0.45:
                    aggregates.add_host(db, admin, agg, host)
                elif roll < 0.75:
                    aggregates.remove_host(db, admin, agg, host)
                else:
                    zone = rng.choice(["east", "west", "nova"])
                    [server] = api.create(
                        member,
                        {
                            "name": f"p{n}-{step}",
                            "flavor": "m1.small",
                            "image": "tiny",
                            "availability_zone": zone,
                        },
                    )
                    booted.append((server["id"], zone))
            except exceptions.Conflict as exc:
                message = str(exc)
                known = ("already in aggregate", "is not in aggregate", "one availability zone only")
                refusals[next((k for k in known if k in message), message)] += 1
        results.put(("ok", dict(refusals), booted))
    except Exception:
        results.put(("error", traceback.format_exc(), []))
    finally:
        db.dispose()


@pytest.mark.postgres
def test_eight_processes_moving_hosts_and_booting_into_zones_leave_one_truth(
    db_url: str, tmp_path: Path
) -> None:
    from novakit.context import RequestContext
    from novakit.fleet import aggregates
    from tests.functional.cloud import make_cloud

    db = Database(db_url)
    cloud = make_cloud(db, tmp_path)
    for host in HOSTS[3:]:
        cloud.add_host(host)
    admin = RequestContext.admin()
    for name, zone in ZONES.items():
        aggregates.create(db, admin, name, availability_zone=zone)
    aggregates.create(db, admin, "agg-plain", metadata={"k": "v"})
    ctx = mp.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    state = str(tmp_path / "state")
    procs = [ctx.Process(target=_worker, args=(db_url, state, n, start, results)) for n in range(PROCESSES)]
    for proc in procs:
        proc.start()
    start.set()
    out = [results.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    errors = [o[1] for o in out if o[0] == "error"]
    assert errors == [], "\n".join(errors)
    refusals: Counter[str] = Counter()
    for o in out:
        refusals.update(o[1])
    assert set(refusals) <= {"already in aggregate", "is not in aggregate", "one availability zone only"}, (
        refusals
    )

    with db.reader() as session:
        rows = session.execute(
            text(
                "SELECT rp.name, pa.name, pa.availability_zone FROM resource_provider_aggregates rpa "
                "JOIN resource_providers rp ON rp.id = rpa.resource_provider_id "
                "JOIN placement_aggregates pa ON pa.id = rpa.aggregate_id"
            )
        ).all()
    zones_of: dict[str, set[str]] = {}
    for host, _agg, zone in rows:
        if zone:
            zones_of.setdefault(host, set()).add(zone)
    assert all(len(z) == 1 for z in zones_of.values()), zones_of
    listed = {a["name"]: set(a["hosts"]) for a in aggregates.list_aggregates(db, admin)}
    stored: dict[str, set[str]] = {name: set() for name in listed}
    for host, agg, _zone in rows:
        stored[agg].add(host)
    assert listed == stored
    detail = {z["zone"]: set(z["hosts"]) for z in aggregates.list_zones(db, admin, cloud.conf, long=True)}
    expected = {zone: {h for h, zs in zones_of.items() if zone in zs} for zone in ZONES.values()}
    expected["nova"] = set(HOSTS) - set(zones_of)
    assert {z: h for z, h in detail.items() if h or z in expected and expected[z]} == {
        z: h for z, h in expected.items() if h
    }

    booted = [b for o in out for b in o[2]]
    assert booted, "no server was asked for"
    placed = 0
    for uuid, zone in booted:
        server = cloud.api.get(admin, uuid)
        if server["status"] == "ACTIVE":
            placed += 1
            assert server["availability_zone"] == zone, (server["name"], server["host"], zone)
            usage = cloud.api.db  # the claim: its flavor on its host
            with usage.reader() as session:
                held = dict(
                    session.execute(
                        text(
                            "SELECT a.resource_class, a.used FROM allocations a JOIN resource_providers rp "
                            "ON rp.id = a.resource_provider_id WHERE a.consumer_id = :u AND rp.name = :h"
                        ),
                        {"u": uuid, "h": server["host"]},
                    ).all()
                )
            assert held == {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}, (uuid, held)
        else:
            assert server["status"] == "ERROR"
    assert placed, "no server was placed"
    db.dispose()
