"""A storm: eight OS processes create, act on and delete shared servers at random, and are killed.

Each round starts eight processes (spawned: nothing is shared but the database and the fake
hypervisors' files), lets them run, and ends them with ``kill -9`` (by the pids started here,
nothing else) wherever they are: mid-create, mid-action, mid-delete. Then heal runs once, with
its clock moved past every lease, and every record must tell the truth again:

* no task state is left set, no server is left building, and every instance action has finished;
* the database agrees with the hypervisors (the fake driver's files) for every live server:
  its host, its power state, a vm_state that goes with that power state; no guest is left
  that no live server on its host owns;
* every live server with a host holds exactly its flavor in placement, on that host;
  nothing is allocated for a deleted server or one without a host;
* the project's quota usage is exactly what its live servers hold, and within its limit;
* a second heal finds nothing to correct.

Deterministic tests of each rule are in ``tests/functional/test_recovery.py``; this one
looks for what they did not think of.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from novakit.cells.registry import UNSCHEDULED
from novakit.compute.states import PowerState
from novakit.db.engine import Database
from novakit.db.models import Instance, InstanceAction, utcnow

PROCESSES = 8
# Rounds: at least the first number, and more (up to the second) until the kills have left
# builds, actions and deletes in flight, each at least once.
ROUNDS = (5, 12)
NAMES = [f"s{n}" for n in range(16)]
PROJECT = "storm"
QUOTA_INSTANCES = 12  # below the 16 names: quota rechecks are lost, and losers go to error
# A round lasts this long (seconds, at random) before its processes are killed.
ROUND_TIME = (1.0, 2.5)
# The power states each vm_state may be recorded with when heal has nothing left to correct
# (Nova's power-state sync: an active server whose guest is paused only has its power state
# recorded; an error server may have any guest, or none).
AGREES = {
    "active": {PowerState.RUNNING, PowerState.PAUSED},
    "stopped": {PowerState.SHUTDOWN, PowerState.CRASHED},
    "paused": {PowerState.PAUSED},
    "suspended": {PowerState.SUSPENDED},
}
ACTIONS = [
    ("create", 4),
    ("delete", 2),
    ("delete_declarative", 1),
    ("stop", 1),
    ("start", 1),
    ("reboot", 1),
    ("reboot_hard", 1),
    ("pause", 1),
    ("unpause", 1),
    ("suspend", 1),
    ("resume", 1),
    ("rebuild", 1),
]


def _storm(url: str, state_dir: str, log_dir: str, seed: int, started: Any) -> None:
    """One process: random requests on the shared names until it is killed."""
    from novakit import exceptions
    from novakit.compute.api import API
    from novakit.config import load_config
    from novakit.context import RequestContext

    expected = (
        exceptions.InstanceNotFound,
        exceptions.InstanceInvalidState,
        exceptions.UnexpectedTaskStateError,
        exceptions.InstanceNotReady,
        exceptions.DuplicateName,
        exceptions.OverQuota,
    )
    conf = load_config(db_url=url, state_dir=state_dir, quota={"instances": -1, "cores": -1, "ram": -1})
    api = API(Database(url, auto_upgrade=False), conf)
    rng = random.Random(seed)
    names, weights = zip(*ACTIONS, strict=True)
    log = Path(log_dir) / f"{os.getpid()}.log"
    with started.get_lock():
        started.value += 1
    while True:
        name = rng.choice(NAMES)
        action = rng.choices(names, weights)[0]
        ctx = RequestContext(PROJECT, "storm-user", ["member"])
        try:
            if action == "create":
                api.create(ctx, {"name": name, "flavor": "m1.small", "image": "tiny"})
            elif action == "delete_declarative":
                api.act(ctx, name, "delete", declarative=True)
            elif action == "reboot_hard":
                api.act(ctx, name, "reboot", {"reboot_type": "HARD"})
            elif action == "rebuild":
                api.act(ctx, name, "rebuild", {"image": rng.choice(["tiny", "tiny-2"])})
            else:
                api.act(ctx, name, action)
        except expected:
            pass
        except Exception:
            # Anything else is a finding: the test reads these files and fails with them.
            with open(log, "a") as fh:
                fh.write(f"{action} {name}: {traceback.format_exc()}\n")


def _round(url: str, state_dir: str, log_dir: Path, seed: int) -> None:
    ctx = mp.get_context("spawn")
    started = ctx.Value("i", 0)
    procs = [
        ctx.Process(target=_storm, args=(url, state_dir, str(log_dir), seed * 100 + n, started), daemon=True)
        for n in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + 60
    while started.value < PROCESSES and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(random.Random(seed).uniform(*ROUND_TIME))
    for proc in procs:
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
    for proc in procs:
        proc.join(timeout=30)


def _in_flight(db: Database) -> Counter[str]:
    """What the killed processes left running: builds, actions, deletes."""
    with db.target_cell(UNSCHEDULED), db.reader() as session:
        rows = session.execute(
            select(Instance.vm_state, Instance.task_state).where(Instance.deleted == 0)
        ).all()
    out: Counter[str] = Counter()
    for vm_state, task_state in rows:
        if vm_state == "building":
            out["create"] += 1
        elif task_state == "deleting":
            out["delete"] += 1
        elif task_state is not None:
            out["action"] += 1
    return out


def _findings(cloud: Any, db: Database) -> list[str]:
    """Every invariant of the module docstring that does not hold, as a readable line."""
    from novakit import quota

    out: list[str] = []
    with db.target_cell(UNSCHEDULED), db.reader() as session:
        live = list(session.execute(select(Instance).where(Instance.deleted == 0)).scalars())
        unfinished = session.execute(
            select(InstanceAction.instance_uuid, InstanceAction.action, InstanceAction.request_id).where(
                InstanceAction.finish_time.is_(None)
            )
        ).all()
        held = session.execute(
            text(
                "SELECT a.consumer_id, rp.name, a.resource_class, a.used FROM allocations a "
                "JOIN resource_providers rp ON rp.id = a.resource_provider_id"
            )
        ).all()
        usage = quota.count_usage(session, PROJECT)
    guests = {host: cloud.fake(host).list_instances() for host in ("compute-1", "compute-2", "compute-3")}
    allocations: dict[str, dict[tuple[str, str], int]] = {}
    for consumer, provider, rc, used in held:
        allocations.setdefault(consumer, {})[(provider, rc)] = int(used)

    out += [f"{i.display_name} {i.uuid}: {i.vm_state}/{i.task_state} left" for i in live if i.task_state]
    out += [f"{i.display_name} {i.uuid}: still building" for i in live if i.vm_state == "building"]
    out += [f"action {a} of {u} (request {r}) never finished" for u, a, r in unfinished]
    with_host = [i for i in live if i.host]
    for i in live:
        where = f"{i.display_name} {i.uuid} ({i.vm_state}, power {i.power_state}, host {i.host})"
        if i.host is None:
            if i.vm_state != "error":
                out.append(f"{where}: no host but not in error")
            out += [f"{where}: has a guest on {h}" for h, g in guests.items() if i.uuid in g]
            continue
        guest = guests[i.host].get(i.uuid)
        if guest is None:
            if i.vm_state != "error" or i.power_state != PowerState.NOSTATE:
                out.append(f"{where}: no guest on its host")
        elif i.power_state != guest:
            out.append(f"{where}: its guest is {guest.name}")
        elif i.vm_state != "error" and guest not in AGREES.get(i.vm_state, set()):
            out.append(f"{where}: a {i.vm_state} server with a {guest.name} guest")
        flavor = i.flavor or {}
        want = {
            (i.host, "VCPU"): int(flavor["vcpus"]),
            (i.host, "MEMORY_MB"): int(flavor["memory_mb"]),
            (i.host, "DISK_GB"): int(flavor["root_gb"]),
        }
        if allocations.get(i.uuid) != want:
            out.append(f"{where}: holds {allocations.get(i.uuid)} instead of {want}")
    owners = {(i.host, i.uuid) for i in with_host}
    out += [
        f"guest {u} on {h}: no live server there owns it"
        for h, g in guests.items()
        for u in g
        if (h, u) not in owners
    ]
    out += [
        f"allocation of {c}: no live server with a host"
        for c in set(allocations) - {i.uuid for i in with_host}
    ]
    exact = {
        "instances": len(with_host),
        "cores": sum(int((i.flavor or {})["vcpus"]) for i in with_host),
        "ram": sum(int((i.flavor or {})["memory_mb"]) for i in with_host),
        # The storm makes no volumes.
        "volumes": 0,
        "gigabytes": 0,
    }
    if usage != exact:
        out.append(f"quota usage {usage}, the live servers hold {exact}")
    if usage["instances"] > QUOTA_INSTANCES:
        out.append(f"quota usage {usage['instances']} over the limit {QUOTA_INSTANCES}")
    return out


@pytest.mark.postgres
def test_a_storm_of_killed_requests_leaves_records_that_tell_the_truth_after_heal(
    db_url: str, tmp_path: Path
) -> None:
    from novakit import quota
    from novakit.heal import heal
    from tests.functional.cloud import make_cloud

    started = time.monotonic()
    db = Database(db_url)
    cloud = make_cloud(db, tmp_path)
    quota.set_quota(db, PROJECT, "instances", QUOTA_INSTANCES)
    logs = tmp_path / "storm-logs"
    logs.mkdir()
    left: Counter[str] = Counter()
    for n in range(ROUNDS[1]):
        if n >= ROUNDS[0] and all(left[kind] for kind in ("create", "action", "delete")):
            break
        _round(db_url, str(cloud.conf.state_dir), logs, n)
        left += _in_flight(db)
    errors = [p.read_text() for p in sorted(logs.iterdir())]
    assert errors == [], "\n".join(errors)[:20000]
    # The kills must have hit each kind of work, or this storm proved little.
    assert left["create"] and left["action"] and left["delete"], left

    later = utcnow().replace(year=utcnow().year + 1)  # past every lease
    report = heal(db, cloud.conf, clock=lambda: later, destroy_orphans=True)
    unapplied = [c for c in report.corrections if not c.applied and c.kind != "orphan_guest"]
    assert unapplied == [], unapplied
    findings = _findings(cloud, db)
    assert findings == [], "\n".join(findings) + "\n" + "\n".join(map(repr, report.corrections))
    again = heal(db, cloud.conf, clock=lambda: later)
    assert again.corrections == [], again.corrections
    print(
        f"\nstorm on {db.engine.dialect.name}: in flight when killed {dict(left)}, "
        f"{len(report.corrections)} corrections by heal, {time.monotonic() - started:.0f} s"
    )
    db.dispose()
