"""Eight OS processes boot servers onto one small subnet at once: no address is given twice.

The subnet's pool holds fewer addresses than the processes ask for. Each process
(spawned: nothing shared but the database and the fake hypervisors' files) boots
servers until the pool refuses it, deletes one of its servers and boots again, so
allocations, refusals and frees all race. Afterwards, on SQLite and PostgreSQL:

* every address is held at most once, by a live server's port, and every live
  server's recorded NIC is that port's MAC and address;
* a refused request left nothing: no server, no port, no address;
* a deleted server holds no port and no address, and its address went back to the pool.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import text

from novakit.cells.registry import UNSCHEDULED
from novakit.db.engine import Database

PROCESSES = 8
PER_PROCESS = 3  # boots before the delete; one more after it
POOL = ("10.20.0.2", "10.20.0.13")  # 12 addresses for 8 x 4 boot requests


def _worker(url: str, state_dir: str, n: int, start: Any, results: Any) -> None:
    from novakit import exceptions
    from novakit.compute.api import API
    from novakit.config import load_config
    from novakit.context import RequestContext

    conf = load_config(db_url=url, state_dir=state_dir, quota={"instances": -1, "cores": -1, "ram": -1})
    db = Database(url, auto_upgrade=False)
    api = API(db, conf)
    ctx = RequestContext("race", "racer", ["member"])
    booted: list[str] = []
    deleted: list[str] = []
    refused = 0
    start.wait()
    try:

        def boot(name: str) -> None:
            nonlocal refused
            request = {"name": name, "flavor": "m1.small", "image": "tiny", "networks": [{"net_id": "lan"}]}
            try:
                [server] = api.create(ctx, request)
            except exceptions.IpAddressGenerationFailure:
                refused += 1
                return
            assert server["status"] == "ACTIVE", server
            booted.append(server["id"])

        for i in range(PER_PROCESS):
            boot(f"p{n}-{i}")
        if booted:
            api.delete(ctx, booted[0])
            deleted.append(booted.pop(0))
        boot(f"p{n}-again")
        results.put(("ok", booted, deleted, refused))
    except Exception:
        results.put(("error", traceback.format_exc(), [], 0))
    finally:
        db.dispose()


def _race(url: str, state_dir: str) -> list[tuple[str, Any, list[str], int]]:
    ctx = mp.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, state_dir, n, start, results)) for n in range(PROCESSES)]
    for proc in procs:
        proc.start()
    start.set()
    out = [results.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    return out


def _rows(db: Database, sql: str) -> list[Any]:
    with db.target_cell(UNSCHEDULED), db.reader() as session:
        return list(session.execute(text(sql)).all())


def test_eight_processes_never_share_an_address_refused_hold_none_deleted_free_theirs(
    db_url: str, tmp_path: Path
) -> None:
    from novakit.network import networks, subnets
    from tests.functional.cloud import make_cloud

    db = Database(db_url)
    cloud = make_cloud(db, tmp_path)
    networks.create(db, cloud.admin, {"name": "lan"})
    subnets.create(
        db,
        cloud.admin,
        {
            "name": "lan-v4",
            "network": "lan",
            "cidr": "10.20.0.0/24",
            "allocation_pools": [{"start": POOL[0], "end": POOL[1]}],
        },
    )
    out = _race(db_url, str(cloud.conf.state_dir))
    errors = [o[1] for o in out if o[0] == "error"]
    assert errors == [], "\n".join(errors)
    live = {uuid for _, booted, _, _ in out for uuid in booted}
    gone = {uuid for _, _, deleted, _ in out for uuid in deleted}
    refused = sum(o[3] for o in out)
    assert refused > 0 and len(live) == 12, (len(live), refused)  # the pool is full, and full only

    allocations = _rows(
        db,
        "SELECT a.ip_address, p.device_id, p.mac_address, p.uuid FROM ip_allocations a "
        "JOIN ports p ON p.id = a.port_id",
    )
    addresses = Counter(ip for ip, _, _, _ in allocations)
    assert all(n == 1 for n in addresses.values()), addresses
    # Every address is a live server's, and every port is one; deleted and refused servers hold none.
    assert {device for _, device, _, _ in allocations} == live
    assert len(_rows(db, "SELECT id FROM ports")) == len(live)
    assert not gone & {device for _, device, _, _ in allocations}
    # The servers recorded are those that booted (a refused request wrote none), each with its port.
    servers = {s["id"]: s for s in cloud.api.list(cloud.admin)}
    assert set(servers) == live
    by_device = {device: (mac, ip, port) for ip, device, mac, port in allocations}
    for uuid in live:
        [nic] = servers[uuid]["nics"]
        assert (nic["mac"], nic["fixed_ips"][0], nic["port_id"]) == by_device[uuid]
    # The deleted servers' addresses went back: the pool holds exactly the live servers' now.
    assert len(addresses) == len(live) == 12
