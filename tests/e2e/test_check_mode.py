"""Check mode of the lifecycle playbooks (server_action.yml, delete.yml): nothing moves, and the
output says what a real run would do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from novakit.context import RequestContext
from tests.e2e.prepared import api_for, fleet_env
from tests.e2e.test_flows import fake_guests, play

pytestmark = pytest.mark.e2e
ADMIN = RequestContext.admin()


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
