"""playbooks/host_maintenance.yml and evacuate.yml, run by ansible-runner against the prepared fake
fleet: a host emptied live and cold, check mode truthful, a second run changes nothing, heal agrees."""

from __future__ import annotations

from pathlib import Path

import pytest

from novakit.context import RequestContext
from novakit.fleet import hosts
from novakit.heal.manager import heal
from novakit.placement import api as placement
from novakit.virt.fake import failure_env_var
from tests.e2e.prepared import api_for, fleet_env
from tests.e2e.test_flows import play, results_of

pytestmark = pytest.mark.e2e
ADMIN = RequestContext.admin()
DRAIN = "Disable the host and move its servers away"


def _in_process(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's API (which builds the servers) reaches the fake hosts the playbook does."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def test_host_maintenance_empties_a_host_and_can_take_it_back(
    prepared_fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    _in_process(env, monkeypatch)
    api = api_for(env)
    for other in ("compute-small", "compute-medium"):
        hosts.set_disabled(api.db, ADMIN, other, True, "test")
    servers = [
        api.create(ADMIN, {"name": f"m{i}", "flavor": "m1.small", "image": "tiny"})[0] for i in range(3)
    ]
    api.act(ADMIN, "m2", "stop")
    for other in ("compute-small", "compute-medium"):
        hosts.set_disabled(api.db, ADMIN, other, False)
    assert {api.get(ADMIN, s["id"])["host"] for s in servers} == {"compute-large"}

    planned = play("host_maintenance.yml", tmp_path, env, {"host": "compute-large"}, check=True)
    assert planned.ok, planned.runner.stdout.read()
    (rows,) = results_of(planned, DRAIN)
    assert {(r["name"], r["result"], r["how"]) for r in rows["servers"]} == {
        ("m0", "would move", "live"),
        ("m1", "would move", "live"),
        ("m2", "would move", "cold"),
    }
    assert {api.get(ADMIN, s["id"])["host"] for s in servers} == {"compute-large"}  # nothing moved

    done = play("host_maintenance.yml", tmp_path, env, {"host": "compute-large", "reason": "kernel"})
    assert done.ok, done.runner.stdout.read()
    (rows,) = results_of(done, DRAIN)
    assert rows["changed"] and {r["result"] for r in rows["servers"]} == {"moved"}
    after = {s["name"]: s for s in (api.get(ADMIN, x["id"]) for x in servers)}
    assert all(s["host"] != "compute-large" for s in after.values())
    assert (after["m0"]["status"], after["m2"]["status"]) == ("ACTIVE", "SHUTOFF")
    assert placement.get_usages(api.db, "compute-large")["VCPU"] == 0
    state = {h["host"]: h for h in hosts.list_hosts(api.db, api.conf, ctx=ADMIN)}["compute-large"]
    assert (state["status"], state["disabled_reason"]) == ("disabled", "kernel")

    again = play("host_maintenance.yml", tmp_path, env, {"host": "compute-large", "enable_after": True})
    assert again.ok, again.runner.stdout.read()
    (rows,) = results_of(again, DRAIN)
    assert rows["changed"] is False and rows["servers"] == []
    state = {h["host"]: h for h in hosts.list_hosts(api.db, api.conf, ctx=ADMIN)}["compute-large"]
    assert state["status"] == "enabled"
    assert heal(api.db, api.conf, ctx=ADMIN).corrections == []


def test_evacuate_refuses_a_host_that_is_up_and_rebuilds_the_servers_of_a_dead_one(
    prepared_fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    _in_process(env, monkeypatch)
    api = api_for(env)
    server = api.create(ADMIN, {"name": "e1", "flavor": "m1.small", "image": "tiny"})[0]
    host = api.get(ADMIN, server["id"])["host"]
    refused = play("evacuate.yml", tmp_path, env, {"host": host})
    assert not refused.ok
    (res,) = results_of(refused, "Rebuild its servers on other hosts")
    assert "is up" in res["msg"] and api.get(ADMIN, server["id"])["host"] == host

    hosts.set_forced_down(api.db, ADMIN, host, True, "power supply")
    done = play("evacuate.yml", tmp_path, env, {"host": host})
    assert done.ok, done.runner.stdout.read()
    moved = api.get(ADMIN, server["id"])
    assert moved["host"] != host and moved["status"] == "ACTIVE"


def test_a_failed_migration_fails_the_playbook_with_its_error_and_leaves_the_server_where_it_was(
    prepared_fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    _in_process(env, monkeypatch)
    api = api_for(env)
    server = api.create(ADMIN, {"name": "mv", "flavor": "m1.small", "image": "tiny"})[0]
    source = api.get(ADMIN, server["id"])["host"]
    # Every other host fails to bring a moved guest up (the move runs in the controller's play).
    failing = {
        failure_env_var(h["host"]): "fail_migrate_dest" for h in hosts.list_hosts(api.db, api.conf, ctx=ADMIN)
    }
    failing.pop(failure_env_var(source))
    held = placement.get_allocations_for_consumer(api.db, server["id"])

    run = play(
        "server_action.yml", tmp_path, {**env, **failing}, {"server_action": "migrate", "servers": "mv"}
    )
    assert not run.ok
    (res,) = results_of(run, "Fail if the action failed on a server")
    assert res["msg"].startswith("migrate failed on mv:") and "fake failure" in res["msg"], res["msg"]
    shown = api.get(ADMIN, server["id"])
    assert (shown["status"], shown["host"]) == ("ACTIVE", source)
    assert placement.get_allocations_for_consumer(api.db, server["id"]) == held
