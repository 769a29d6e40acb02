"""ansible-playbook on the embedded default: inventory/local.yml, three fake hosts, SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest

from novakit.compute.api import API
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from tests.e2e.runner import run_playbook, task_results

pytestmark = pytest.mark.e2e


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    state = tmp_path / "state"
    return {"NOVAKIT_STATE_DIR": str(state), "NOVAKIT_FAKE_STATE_DIR": str(state / "fake")}


def _api(env: dict[str, str]) -> API:
    conf = load_config(state_dir=env["NOVAKIT_STATE_DIR"])
    return API(Database.from_config(conf), conf)


def test_boot_playbook_boots_servers_on_the_fake_hosts(tmp_path: Path, env: dict[str, str]) -> None:
    prep = run_playbook("compute_node.yml", tmp_path, env)
    assert prep.rc == 0, prep.stdout.read()
    run = run_playbook(
        "boot.yml", tmp_path, env, {"server_name": "demo", "count": 3, "flavor": "m1.small"}, ident="job-42"
    )
    assert run.rc == 0, run.stdout.read()

    api = _api(env)
    admin = RequestContext.admin()
    servers = api.list(admin)
    assert sorted(s["name"] for s in servers) == ["demo-1", "demo-2", "demo-3"]
    assert all(s["status"] == "ACTIVE" and s["power_state_name"] == "Running" for s in servers)
    assert {s["host"] for s in servers} <= {"compute-small", "compute-medium", "compute-large"}
    for s in servers:
        (create,) = api.list_actions(admin, s["id"])
        assert create["action"] == "create" and create["finish_time"] is not None
        assert [e["event"] for e in create["events"]] == ["compute__do_build_and_run_instance"]
        assert create["events"][0]["host"] == s["host"]
    # set_stats publishes each server and the request id for AWX.
    stats = run.stats
    assert stats is not None
    summary = task_results(run, "Publish each server's uuid, host, addresses and status")
    assert summary and summary[0]["ansible_stats"]["data"]["novakit_servers"]
    published = summary[0]["ansible_stats"]["data"]
    assert {s["id"] for s in published["novakit_servers"]} == {s["id"] for s in servers}
    assert published["novakit_request_id"] == create["request_id"]

    # The same run again changes nothing.
    again = run_playbook("boot.yml", tmp_path, env, {"server_name": "demo", "count": 3, "flavor": "m1.small"})
    assert again.rc == 0
    assert len(api.list(admin)) == 3
    assert again.stats["changed"].get("localhost", 0) == 0


def test_a_failing_host_in_the_inventory_sends_builds_to_alternates(
    tmp_path: Path, env: dict[str, str]
) -> None:
    prep = run_playbook("compute_node.yml", tmp_path, env)
    assert prep.rc == 0, prep.stdout.read()
    env = {**env, "NOVAKIT_FAKE_FAILURE_COMPUTE_LARGE": "fail_every_spawn"}
    run = run_playbook("boot.yml", tmp_path, env, {"server_name": "rescued", "count": 2})
    assert run.rc == 0, run.stdout.read()
    api = _api(env)
    servers = api.list(RequestContext.admin())
    assert all(s["status"] == "ACTIVE" and s["host"] != "compute-large" for s in servers)
    for s in servers:
        events = api.list_actions(RequestContext.admin(), s["id"])[0]["events"]
        assert [(e["host"], e["result"]) for e in events][0] == ("compute-large", "Error")


def test_no_valid_host_is_reported_with_its_reason(tmp_path: Path, env: dict[str, str]) -> None:
    from novakit.catalog import flavors

    assert run_playbook("compute_node.yml", tmp_path, env).rc == 0
    api = _api(env)
    flavors.create(api.db, RequestContext.admin(), {"name": "giant", "vcpus": 2, "memory_mb": 40000})
    run = run_playbook("boot.yml", tmp_path, env, {"server_name": "huge", "count": 1, "flavor": "giant"})
    out = run.stdout.read()
    assert run.rc != 0, out  # the last play fails, naming the server and its fault
    # count=1 is huge-1: with a count, the servers are numbered, one or many
    assert "huge-1: ERROR" in out and "1 server(s) in error: huge-1: No valid host" in out
    servers = api.list(RequestContext.admin())
    assert len(servers) == 1 and servers[0]["status"] == "ERROR"
    assert all("No valid host" in s["fault"]["message"] for s in servers)


def test_a_refused_request_fails_the_play_with_its_reason(tmp_path: Path, env: dict[str, str]) -> None:
    assert run_playbook("compute_node.yml", tmp_path, env).rc == 0
    run = run_playbook("boot.yml", tmp_path, env, {"server_name": "many", "count": 40})
    assert run.rc != 0
    assert "Quota exceeded for instances" in run.stdout.read()
    assert _api(env).list(RequestContext.admin()) == []


def test_boot_from_volume_through_the_playbook_variables(tmp_path: Path, env: dict[str, str]) -> None:
    from novakit.volume import volumes

    assert run_playbook("compute_node.yml", tmp_path, env).rc == 0
    # As a survey answers them: strings.
    extra = {"server_name": "bfv", "boot_from_volume": "3", "delete_on_termination": "false"}
    run = run_playbook("boot.yml", tmp_path, env, extra)
    assert run.rc == 0, run.stdout.read()
    api = _api(env)
    admin = RequestContext.admin()
    (server,) = api.list(admin)
    assert server["status"] == "ACTIVE"
    (root,) = volumes.list_volumes(api.conductor, admin, all_projects=True)
    assert root["status"] == "in-use" and root["size"] == 3 and root["host"] == server["host"]
    assert root["attachments"][0]["delete_on_termination"] is False
    again = run_playbook("boot.yml", tmp_path, env, extra)
    assert again.rc == 0 and again.stats["changed"].get("localhost", 0) == 0
