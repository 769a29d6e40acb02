"""Processes booting and deleting at once across two cells: every server is in one place.

Four OS processes (spawned: nothing shared but the databases and the fake hypervisors'
files) boot one-server requests onto a fleet split between cell1 (the API database) and
cell2 (a database of its own), delete every other one as soon as it is up, and also boot
servers that fit nowhere (cell0). Afterwards every server is in exactly one database, the
one its mapping names; names are unique per project; placement holds exactly the live
servers' claims; a listing shows each live server once. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from novakit.catalog import flavors
from novakit.cells import manage
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import InstanceMapping
from tests.functional.cloud import make_cloud
from tests.functional.test_cells import PG2_URL, _empty_pg2

PROCESSES = 4
PER_PROCESS = 8


def _worker(url: str, state: str, n: int, start: Any, out: Any) -> None:
    from novakit.compute.api import API
    from novakit.config import load_config

    # Any of the three hosts, at random (Nova's host_subset_size): both cells get servers.
    conf = load_config(
        db_url=url,
        state_dir=state,
        quota={"instances": -1, "cores": -1, "ram": -1},
        scheduler={"host_subset_size": 3},
    )
    api = API(Database(url, auto_upgrade=False), conf)
    ctx = RequestContext("race", f"u{n}", ["member"])
    errors: list[str] = []
    start.wait()
    for i in range(PER_PROCESS):
        try:
            flavor = "whale" if i % 4 == 3 else "m1.small"
            [server] = api.create(ctx, {"name": f"w{n}-{i}", "flavor": flavor, "image": "tiny"})
            if i % 2 == 0 and server["status"] == "ACTIVE":
                api.delete(ctx, server["id"])
        except Exception as exc:  # reported to the test, which fails on any
            errors.append(f"{type(exc).__name__}: {exc}")
    out.put((n, errors))


def test_racing_boots_and_deletes_leave_each_server_in_one_cell(db_url: str, tmp_path: Path) -> None:
    backend = "sqlite" if db_url.startswith("sqlite") else "postgresql"
    db = Database(db_url)
    cloud = make_cloud(db, tmp_path)
    cell2_url = f"sqlite:///{tmp_path / 'cell2.db'}" if backend == "sqlite" else PG2_URL
    if backend == "postgresql":
        if not PG2_URL:
            pytest.fail("NOVAKIT_TEST_PG2_URL is not set (tests/run.sh starts a second PostgreSQL server)")
        _empty_pg2()
    manage.create_cell(db, cloud.admin, "cell2", cell2_url, migrate=True)
    with db.writer() as session:
        session.execute(text("DELETE FROM host_mappings WHERE host = 'compute-3'"))
    manage.discover_hosts(db, cloud.admin, "cell2")
    flavors.create(db, cloud.admin, {"name": "whale", "vcpus": 1, "memory_mb": 10**6, "root_gb": 1})

    spawn = mp.get_context("spawn")
    start, out = spawn.Event(), spawn.Queue()
    procs = [
        spawn.Process(target=_worker, args=(db_url, str(tmp_path / "state"), n, start, out))
        for n in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(not errors for _, errors in results), results

    # Every server (live or deleted) is in exactly one database: the one its mapping names.
    with db.reader() as session:
        maps = {m.instance_uuid: m for m in session.execute(select(InstanceMapping)).scalars()}
    assert len(maps) == PROCESSES * PER_PROCESS
    where: dict[str, list[str]] = {}
    for cell in db.cells.all():
        cell_db = db.cells.database(cell)
        with cell_db.engine.connect() as conn:
            for uuid in conn.execute(text("SELECT uuid FROM instances")).scalars():
                where.setdefault(uuid, []).append(cell.name)
    assert {u: len(cells) for u, cells in where.items() if len(cells) != 1} == {}
    assert set(where) == set(maps)
    for uuid, cells in where.items():
        assert db.cells.by_id(maps[uuid].cell_id).name == cells[0], uuid
    counts = Counter(cells[0] for cells in where.values())
    assert counts["cell0"] == PROCESSES * (PER_PROCESS // 4)  # every whale
    assert counts["cell1"] and counts["cell2"]
    # Live ones: listed once each, named once each, holding exactly their claims.
    admin = RequestContext.admin()
    live = cloud.api.list_servers(admin, {"all_projects": True})
    assert len(live) == len({s["id"] for s in live}) == len({s["name"] for s in live})
    expected_live = {f"w{n}-{i}" for n in range(PROCESSES) for i in range(PER_PROCESS) if i % 2 == 1}
    assert {s["name"] for s in live} == expected_live
    active = {s["id"] for s in live if s["status"] == "ACTIVE"}
    with db.reader() as session:
        consumers = set(session.execute(text("SELECT DISTINCT consumer_id FROM allocations")).scalars())
    assert consumers == active
