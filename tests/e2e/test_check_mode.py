"""Check mode of the lifecycle playbooks (server_action.yml, delete.yml) and of the server modules:
nothing moves, the output says what a real run would do, and a refusal is the real run's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from novakit.catalog import flavors, images
from novakit.context import RequestContext
from tests.e2e.prepared import api_for, fleet_env
from tests.e2e.runner import run_playbook
from tests.e2e.test_flows import fake_guests, play

pytestmark = pytest.mark.e2e
ADMIN = RequestContext.admin()
SERVER_CHECK = Path(__file__).parent / "playbooks" / "server_check.yml"
ALICE = {"caller_project": "project-a", "caller_user": "alice", "caller_roles": ["member"]}
BOB = {**ALICE, "caller_user": "bob"}


def snapshot(env: dict[str, str]) -> dict[str, Any]:
    """Everything a lifecycle run could change: instances, the audit trail, claims, the guests."""
    tables = (
        "instances",
        "instance_actions",
        "instance_actions_events",
        "instance_faults",
        "allocations",
        "resource_providers",
        "compute_nodes",
        "services",
    )
    with api_for(env).db.reader() as session:
        out: dict[str, Any] = {
            t: [tuple(r) for r in session.execute(text(f"SELECT * FROM {t} ORDER BY 1"))] for t in tables
        }
    out["guests"] = fake_guests(env)
    return out


def test_server_action_and_delete_in_check_mode_change_nothing(prepared_fleet: Path, tmp_path: Path) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    api = api_for(env)
    boot = play("boot", tmp_path, env, {"server_name": "dry", "count": 2})
    assert boot.ok, boot.runner.stdout.read()
    stop = play("server_action", tmp_path, env, {"server_action": "stop", "servers": "dry-2"})
    assert stop.ok, stop.runner.stdout.read()
    before = snapshot(env)
    assert {s["name"]: s["status"] for s in api.list(ADMIN)} == {"dry-1": "ACTIVE", "dry-2": "SHUTOFF"}
    assert len(before["allocations"]) > 0 and sum(len(g) for g in before["guests"].values()) == 2

    cases: list[tuple[str, dict[str, Any], str]] = [
        # (playbook, variables, what the output must say would happen)
        ("server_action", {"server_action": "stop", "servers": "dry-1,dry-2"}, "stop would run on: dry-1"),
        ("server_action", {"server_action": "reboot", "servers": "dry-1"}, "reboot would run on: dry-1"),
        ("server_action", {"server_action": "start", "servers": "dry-1, dry-2"}, "start would run on: dry-2"),
        ("server_action", {"server_action": "lock", "servers": "dry-1"}, "lock would run on: dry-1"),
        ("delete", {"servers": "dry-1,dry-2,never-was"}, "delete would run on: dry-1, dry-2"),
    ]
    for playbook, extravars, says in cases:
        result = play(playbook, tmp_path, env, extravars, check=True)
        out = result.runner.stdout.read()
        assert result.ok, out
        assert says in out, out
        assert snapshot(env) == before, f"{playbook} {extravars} changed something in check mode"
        # Something would change, and the run says so; no compute host was asked to act.
        assert result.stats["changed"], result.stats
        assert set(result.stats["ok"]) == {"localhost"}, result.stats

    # A server already stopped: check mode says nothing would run, and reports no change.
    result = play("server_action", tmp_path, env, {"server_action": "stop", "servers": "dry-2"}, check=True)
    out = result.runner.stdout.read()
    assert result.ok and "stop would run on: nothing" in out, out
    assert result.stats["changed"] == {}

    # A refusal is the same in check mode as in a real run: a stopped server cannot be paused.
    refused = play("server_action", tmp_path, env, {"server_action": "pause", "servers": "dry-2"}, check=True)
    assert not refused.ok and "pause" in refused.runner.stdout.read()
    assert snapshot(env) == before
    assert {s["name"]: s["status"] for s in api.list(ADMIN)} == {"dry-1": "ACTIVE", "dry-2": "SHUTOFF"}


def server_task(tmp_path: Path, env: dict[str, str], check: bool, **extravars: Any) -> dict[str, Any]:
    """The result of server_check.yml's one task, with ``failed`` set when it failed."""
    run = play(SERVER_CHECK, tmp_path, env, extravars, check=check)
    task = "The action" if "server_action" in extravars else "The server"
    (event,) = [
        e
        for e in run.runner.events
        if e.get("event") in ("runner_on_ok", "runner_on_failed") and e["event_data"].get("task") == task
    ]
    return {**event["event_data"]["res"], "failed": event["event"] == "runner_on_failed"}


def check_then_real(
    tmp_path: Path, env: dict[str, str], **extravars: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The task in check mode, which must change nothing, then for real."""
    before = snapshot(env)
    dry = server_task(tmp_path, env, True, **extravars)
    assert snapshot(env) == before, f"{extravars} changed something in check mode"
    return dry, server_task(tmp_path, env, False, **extravars)


def test_the_server_modules_refuse_in_check_mode_as_the_real_run_does(
    prepared_fleet: Path, tmp_path: Path
) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    api = api_for(env)
    flavors.create(api.db, ADMIN, {"name": "m1.256", "vcpus": 1, "memory_mb": 256})
    images.create(api.db, ADMIN, {"name": "hungry", "min_ram": 2048})

    # An image that needs more RAM than the flavor has: the same message, and nothing recorded.
    dry, real = check_then_real(
        tmp_path, env, server_name="small", server_flavor="m1.256", server_image="hungry", **ALICE
    )
    assert dry["failed"] and real["failed"], (dry, real)
    assert dry["msg"] == real["msg"] == "Invalid flavor: image hungry needs at least 2048 MB of RAM"
    assert dry["error"] == real["error"] == "ValidationError"
    assert api.list(ADMIN) == []

    # Alice's server, locked by Alice.
    made = server_task(
        tmp_path, env, False, server_name="mine", server_flavor="m1.small", server_image="tiny", **ALICE
    )
    assert made["changed"] and made["server"]["status"] == "ACTIVE", made
    dry, real = check_then_real(
        tmp_path, env, server_name="mine", server_action="lock", lock_reason="hers", **ALICE
    )
    assert dry["changed"] and dry["actions"] == ["lock"] and not dry["failed"], dry
    assert real["changed"] and real["server"]["locked"], real

    # Alice's own stop of the server she locked: check mode answers what the real run then does.
    dry, real = check_then_real(tmp_path, env, server_name="mine", server_state="stopped", **ALICE)
    assert dry["failed"] is real["failed"], (dry, real)
    if real["failed"]:
        assert dry["msg"] == real["msg"] and "is locked (hers)" in real["msg"], (dry, real)
        assert api.get(ADMIN, "mine")["status"] == "ACTIVE"
    else:
        assert dry["actions"] == real["actions"] == ["stop"] and dry["changed"] and real["changed"]
        assert real["server"]["status"] == "SHUTOFF"

    # Bob, of the same project, may not delete it: the same refusal in both.
    dry, real = check_then_real(tmp_path, env, server_name="mine", server_state="absent", **BOB)
    assert dry["failed"] and real["failed"] and dry["msg"] == real["msg"], (dry, real)
    assert "is locked (hers)" in real["msg"] and real["error"] == "InstanceIsLocked"
    assert [s["name"] for s in api.list(ADMIN)] == ["mine"]


def test_server_action_and_delete_with_check_and_diff_show_what_would_change(
    prepared_fleet: Path, tmp_path: Path
) -> None:
    """README: ``--diff`` shows each server's state before and after, on server_action.yml and
    delete.yml; in check mode the after is what the real run would leave."""
    env = fleet_env(prepared_fleet, tmp_path)
    boot = play("boot", tmp_path, env, {"server_name": "df", "count": 2})
    assert boot.ok, boot.runner.stdout.read()
    before = snapshot(env)

    stop = run_playbook(
        "server_action.yml",
        tmp_path,
        env,
        {"server_action": "stop", "servers": "df-1"},
        cmdline="--check --diff",
    )
    out = stop.stdout.read()
    assert stop.rc == 0 and "[WARNING]" not in out, out
    assert '-        "status": "ACTIVE"' in out and '+        "status": "SHUTOFF"' in out, out
    assert '+        "power_state": "Shutdown"' in out, out

    gone = run_playbook("delete.yml", tmp_path, env, {"servers": "df-2"}, cmdline="--check --diff")
    out = gone.stdout.read()
    assert gone.rc == 0 and "[WARNING]" not in out, out
    assert '-    "df-2": {' in out and '-    "df-1": {' not in out, out
    assert snapshot(env) == before

    # Nothing to do: no diff, no change.
    stop = run_playbook(
        "server_action.yml",
        tmp_path,
        env,
        {"server_action": "start", "servers": "df-1"},
        cmdline="--check --diff",
    )
    out = stop.stdout.read()
    assert stop.rc == 0 and "start would run on: nothing" in out and "changed=0" in out, out
    assert snapshot(env) == before


def test_heal_in_check_mode_reports_the_change_the_real_run_makes(
    prepared_fleet: Path, tmp_path: Path
) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    api = api_for(env)
    boot = play("boot", tmp_path, env, {"server_name": "hl"})
    assert boot.ok, boot.runner.stdout.read()
    (server,) = api.list(ADMIN)
    # The guest stops behind novakit's back.
    state_file = Path(env["NOVAKIT_FAKE_STATE_DIR"]) / f"{server['host']}.json"
    state = json.loads(state_file.read_text())
    state["instances"][server["id"]]["power_state"] = 4  # shut down
    state_file.write_text(json.dumps(state))
    before = snapshot(env)

    dry = play("heal", tmp_path, env, check=True)
    assert dry.ok, dry.runner.stdout.read()
    assert snapshot(env) == before and api.get(ADMIN, "hl")["status"] == "ACTIVE"
    real = play("heal", tmp_path, env)
    assert real.ok, real.runner.stdout.read()
    assert api.get(ADMIN, "hl")["status"] == "SHUTOFF"
    # The check run said what the real run then did.
    assert dry.stats["changed"] == real.stats["changed"] == {"localhost": 1}, (dry.stats, real.stats)

    again = play("heal", tmp_path, env, check=True)
    assert again.ok and again.stats["changed"] == {}, again.stats
