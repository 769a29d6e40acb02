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

The processes also move servers (resize, confirm, revert, cold and live migration, shelve,
offload, unshelve, snapshot, rescue, unrescue), so that kills land half way through each move
type and through deletes of servers being moved; after each round two or three heals run at
once (threads), as an operator's timer and a playbook would, and then (issue 25):

* placement holds exactly the flavors of the live servers with a host, plus, for a server in
  VERIFY_RESIZE, its migration's claim of the old flavor on the source; nothing for a move
  whose server is gone;
* no guest is left without a live server (a resize waiting for its answer keeps its source's);
* no server keeps a task state past its lease;
* no recovery put a server in error when it had a true state to go to: heal's ``vanished``
  never fires (nothing here destroys guests behind novakit's back), and an interrupted task
  ends in error only where Nova's rule says so (a rebuild), or when no host has its guest.

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
from novakit.db.models import Instance, InstanceAction, Migration, utcnow
from novakit.heal.moves import MOVE_TASKS
from novakit.moves.migrations import IN_PROGRESS

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
    "shelved": {PowerState.SHUTDOWN},
    "resized": {PowerState.RUNNING, PowerState.SHUTDOWN, PowerState.PAUSED},
    "rescued": {PowerState.RUNNING},
}
# vm_states of a live server without a host
HOSTLESS = {"error", "shelved_offloaded"}
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
    ("resize", 1),
    ("confirm_resize", 1),
    ("revert_resize", 1),
    ("migrate", 1),
    ("live_migrate", 1),
    ("shelve", 1),
    ("shelve_offload", 1),
    ("unshelve", 1),
    ("create_image", 1),
    ("rescue", 1),
    ("unrescue", 1),
]
# Moves only an admin may ask for (the storm's admin acts in the storm's project).
ADMIN_ACTIONS = {"migrate", "live_migrate", "shelve_offload"}
# Servers booted before the first round, so that kills land in actions and moves at once.
SEEDED = 8
# How many heals run at once after each round, in turn.
HEALS_AT_ONCE = (2, 3)


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
        # Moves: nowhere to go, a migration another request moved on, an image gone meanwhile.
        exceptions.NoValidHost,
        exceptions.Conflict,
        exceptions.ImageNotFound,
        exceptions.InstanceHostDown,
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
            elif action == "resize":
                try:
                    api.act(ctx, name, "resize", {"flavor": rng.choice(["m1.large", "m1.small"])})
                except exceptions.ValidationError as exc:
                    # The flavor it has already, or a smaller disk: refused with nothing changed.
                    if "flavor" not in exc.format_message():
                        raise
            elif action == "create_image":
                api.act(ctx, name, "create_image", {"name": f"snap-{os.getpid()}-{rng.random():.9f}"})
            elif action in ADMIN_ACTIONS:
                api.act(RequestContext(PROJECT, "storm-admin", ["admin"]), name, action)
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
        elif task_state in MOVE_TASKS or (task_state == "spawning" and vm_state.startswith("shelved")):
            out["move"] += 1
        elif task_state is not None:
            out["action"] += 1
    return out


def _heals_at_once(db: Database, conf: Any, count: int, later: Any) -> list[Any]:
    """``count`` heals at once (threads, each its own request), as a timer and a playbook would
    run them; each must finish its run, whichever wins each write."""
    import threading

    from novakit.context import RequestContext
    from novakit.heal.manager import heal

    reports: list[Any] = []
    failures: list[str] = []

    def run(n: int) -> None:
        try:
            ctx = RequestContext.admin(f"req-storm-heal-{n}-{time.monotonic_ns()}")
            reports.append(heal(db, conf, ctx=ctx, clock=lambda: later, destroy_orphans=True))
        except Exception:
            failures.append(traceback.format_exc())

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert failures == [], "\n".join(failures)
    return reports


def _false_errors(reports: list[Any]) -> list[str]:
    """Recoveries that put a server in error although it had a true state to go to."""
    out = []
    for report in reports:
        for c in report.corrections:
            if c.kind == "vanished" and c.applied:
                out.append(f"heal called the guest of {c.instance} on {c.host} vanished: {c.detail}")
            # Nova's rule: an interrupted rebuild (an evacuation's too) is in error; and a move
            # whose guest no host has (the fake's live migration hands the guest over between two
            # host calls, and a kill there loses it) has nowhere else to be.
            rebuild = c.before.endswith(("/rebuilding", "/rebuild_block_device_mapping", "/rebuild_spawning"))
            nowhere = "on neither host" in c.after or "interrupted rebuild" in c.after
            if (
                c.kind == "task_recovered"
                and c.applied
                and c.after.startswith("error")
                and not (rebuild or nowhere)
            ):
                out.append(f"heal put {c.instance} in error from {c.before}: {c.detail}")
    return out


def _findings(cloud: Any, db: Database) -> list[str]:
    """Every invariant of the module docstring that does not hold, as a readable line."""
    from novakit import quota

    out: list[str] = []
    with db.target_cell(UNSCHEDULED), db.reader() as session:
        live = list(session.execute(select(Instance).where(Instance.deleted == 0)).scalars())
        moves = list(session.execute(select(Migration).where(Migration.status.in_(IN_PROGRESS))).scalars())
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
    now = utcnow()
    out += [
        f"{i.display_name} {i.uuid}: task {i.task_state} past its lease ({i.task_lease_until})"
        for i in live
        if i.task_state and i.task_lease_until is not None and i.task_lease_until < now
    ]
    # A resize waiting for its answer: its migration holds the old flavor on the source, which
    # keeps the guest for a revert. Every other move is over once heal ran.
    by_uuid = {i.uuid: i for i in live}
    waiting = {m.uuid: m for m in moves if m.status == "finished" and m.instance_uuid in by_uuid}
    out += [
        f"migration {m.uuid} of {m.instance_uuid} still {m.status}"
        for m in moves
        if m.uuid not in waiting and m.status != "done"
    ]
    out += [
        f"migration {m.uuid}: its server {by_uuid[m.instance_uuid].display_name} is "
        f"{by_uuid[m.instance_uuid].vm_state}, not resized"
        for m in waiting.values()
        if by_uuid[m.instance_uuid].vm_state != "resized"
    ]
    out += [f"{i.display_name} {i.uuid}: still building" for i in live if i.vm_state == "building"]
    out += [f"action {a} of {u} (request {r}) never finished" for u, a, r in unfinished]
    with_host = [i for i in live if i.host]
    for i in live:
        where = f"{i.display_name} {i.uuid} ({i.vm_state}, power {i.power_state}, host {i.host})"
        if i.host is None:
            if i.vm_state not in HOSTLESS:
                out.append(f"{where}: no host but not in error or offloaded")
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
    owners = {(i.host, i.uuid) for i in with_host} | {
        (m.source_compute, m.instance_uuid) for m in waiting.values()
    }
    for m in waiting.values():
        old = m.old_flavor or {}
        want = {
            (m.source_compute, "VCPU"): int(old["vcpus"]),
            (m.source_compute, "MEMORY_MB"): int(old["memory_mb"]),
            (m.source_compute, "DISK_GB"): int(old["root_gb"]),
        }
        if allocations.get(m.uuid) != want:
            out.append(
                f"migration {m.uuid} (resize waiting): holds {allocations.get(m.uuid)} instead of {want}"
            )
    out += [
        f"guest {u} on {h}: no live server there owns it"
        for h, g in guests.items()
        for u in g
        if (h, u) not in owners
    ]
    out += [
        f"allocation of {c}: no live server with a host"
        for c in set(allocations) - {i.uuid for i in with_host} - set(waiting)
    ]
    # A resize waiting for its answer holds the old flavor on the source too (the migration's
    # claim), and the project pays for both until confirm or revert, as in Nova.
    held = [*((i.flavor or {}) for i in with_host), *((m.old_flavor or {}) for m in waiting.values())]
    exact = {
        "instances": len(with_host),
        "cores": sum(int(f["vcpus"]) for f in held),
        "ram": sum(int(f["memory_mb"]) for f in held),
        # The storm makes no volumes, and no ports: no project gets its default security group.
        "volumes": 0,
        "gigabytes": 0,
        "security_groups": 0,
        "security_group_rules": 0,
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
    from novakit.heal.manager import heal
    from tests.functional.cloud import make_cloud

    started = time.monotonic()
    db = Database(db_url)
    cloud = make_cloud(db, tmp_path)
    quota.set_quota(db, PROJECT, "instances", QUOTA_INSTANCES)
    logs = tmp_path / "storm-logs"
    logs.mkdir()
    # Servers to act on and move from the first request of the first round (a round is short).
    from novakit.context import RequestContext

    for name in NAMES[:SEEDED]:
        cloud.api.create(
            RequestContext(PROJECT, "storm-user", ["member"]),
            {"name": name, "flavor": "m1.small", "image": "tiny"},
        )
    left: Counter[str] = Counter()
    reports: list[Any] = []
    later = utcnow().replace(year=utcnow().year + 1)  # past every lease
    kinds = ("create", "action", "delete", "move")
    for n in range(ROUNDS[1]):
        if n >= ROUNDS[0] and all(left[kind] for kind in kinds):
            break
        _round(db_url, str(cloud.conf.state_dir), logs, n)
        left += _in_flight(db)
        # Every process of the round is dead: heal settles what they left, two or three at once.
        reports += _heals_at_once(db, cloud.conf, HEALS_AT_ONCE[n % 2], later)
        print(f"round {n}: {dict(left)} at {time.monotonic() - started:.0f} s", flush=True)
    errors = [p.read_text() for p in sorted(logs.iterdir())]
    assert errors == [], "\n".join(errors)[:20000]
    corrections = [c for r in reports for c in r.corrections]
    false_errors = _false_errors(reports)
    assert false_errors == [], "\n".join(false_errors)
    findings = _findings(cloud, db)
    assert findings == [], "\n".join(findings) + "\n" + "\n".join(map(repr, corrections))
    again = heal(db, cloud.conf, clock=lambda: later)
    assert again.corrections == [], again.corrections
    # The kills must have hit each kind of work, or this storm proved little.
    assert all(left[kind] for kind in kinds), left
    print(
        f"\nstorm on {db.engine.dialect.name}: in flight when killed {dict(left)}, "
        f"{len(corrections)} corrections by {len(reports)} heals, {time.monotonic() - started:.0f} s"
    )
    db.dispose()
