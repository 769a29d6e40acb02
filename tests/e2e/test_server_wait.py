"""``wait`` and ``timeout`` of the server and server_action modules, through ansible-playbook.

``wait: false`` hands the work to a detached worker (novakit.worker); the tests
read the database to see it finish after the task has returned.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from novakit import exceptions
from novakit.context import RequestContext
from novakit.virt.fake import failure_env_var
from tests.e2e.prepared import api_for, fleet_env
from tests.e2e.test_flows import allocations, play

pytestmark = pytest.mark.e2e
PLAYBOOK = Path(__file__).parent / "playbooks" / "server_wait.yml"
ADMIN = RequestContext.admin()
HOSTS = ("compute-small", "compute-medium", "compute-large")


def every_host(mode: str) -> dict[str, str]:
    return {failure_env_var(h): mode for h in HOSTS}


def server_task(tmp_path: Path, env: dict[str, str], **extravars: Any) -> dict[str, Any]:
    """The task's result, with ``failed`` set when the task failed."""
    run = play(PLAYBOOK, tmp_path, env, extravars)
    task = "The action" if "server_action" in extravars else "The server"
    (event,) = [
        e
        for e in run.runner.events
        if e.get("event") in ("runner_on_ok", "runner_on_failed") and e["event_data"].get("task") == task
    ]
    return {**event["event_data"]["res"], "failed": event["event"] == "runner_on_failed"}


def eventually(read: Callable[[], Any], check: Callable[[Any], bool], within: float = 30) -> Any:
    deadline = time.monotonic() + within
    while True:
        value = read()
        if check(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def server_or_none(api: Any, name: str) -> dict[str, Any] | None:
    try:
        return api.get(ADMIN, name)
    except exceptions.InstanceNotFound:
        return None


def test_wait_false_returns_build_and_the_worker_finishes_later(prepared_fleet: Path, tmp_path: Path) -> None:
    env = {**fleet_env(prepared_fleet, tmp_path), **every_host("slow_spawn")}
    api = api_for(env)
    started = time.monotonic()
    res = server_task(tmp_path, env, server_name="later", server_wait=False, server_user_data="ud-wait-3e1f")
    assert res["changed"] and not res["failed"] and res["server"]["status"] == "BUILD", res
    log = Path(res["worker_log"])
    assert log.parent == Path(env["NOVAKIT_STATE_DIR"]) / "workers"

    # The task returned with the server still building (above); the worker carries the build on.
    server = eventually(lambda: api.get(ADMIN, "later"), lambda s: s["status"] != "BUILD")
    assert server["status"] == "ACTIVE" and server["host"], server
    assert time.monotonic() - started < 60
    actions = api.list_actions(ADMIN, "later")
    assert [a["action"] for a in actions] == ["create"] and actions[0]["finish_time"] is not None
    assert "ud-wait-3e1f" not in log.read_text() and "done: " in log.read_text()

    # The same task again: nothing to do (it waits for nothing, and changes nothing).
    again = server_task(tmp_path, env, server_name="later", server_user_data="ud-wait-3e1f")
    assert again["changed"] is False and again["server"]["status"] == "ACTIVE"

    # A hard reboot without waiting: accepted as HARD_REBOOT, done later, in the audit trail.
    reboot = server_task(tmp_path, env, server_name="later", server_action="reboot", server_wait=False)
    assert reboot["changed"] and reboot["server"]["status"] == "HARD_REBOOT", reboot
    server = eventually(lambda: api.get(ADMIN, "later"), lambda s: s["task_state"] is None)
    assert server["status"] == "ACTIVE"
    assert [a["action"] for a in api.list_actions(ADMIN, "later")] == ["create", "reboot"]

    # A delete without waiting: the server goes, with its claim.
    gone = server_task(tmp_path, env, server_name="later", server_state="absent", server_wait=False)
    assert gone["changed"]
    assert eventually(lambda: server_or_none(api, "later"), lambda s: s is None) is None
    assert allocations(env) == 0


def test_timeout_names_the_server_and_its_state_and_the_build_goes_on(
    prepared_fleet: Path, tmp_path: Path
) -> None:
    env = {**fleet_env(prepared_fleet, tmp_path), **every_host("slow_spawn")}
    api = api_for(env)
    res = server_task(tmp_path, env, server_name="slow", server_timeout=1)
    assert res["failed"] and res["changed"], res
    assert re.search(
        r"timed out after 1 s waiting for server slow to be ACTIVE: it is BUILD \(task_state: [a-z_]+\); "
        r"the work goes on in the background \(log: .+\.log\)",
        res["msg"],
    ), res["msg"]
    server = eventually(lambda: api.get(ADMIN, "slow"), lambda s: s["status"] != "BUILD")
    assert server["status"] == "ACTIVE"


def test_wait_on_a_failing_build_ends_in_error_with_the_fault(prepared_fleet: Path, tmp_path: Path) -> None:
    env = {**fleet_env(prepared_fleet, tmp_path), **every_host("abort_spawn")}
    api = api_for(env)
    res = server_task(tmp_path, env, server_name="doomed")
    assert res["failed"] and res["changed"], res
    assert res["msg"].startswith("server doomed is ERROR: ") and "fake failure: spawns on host" in res["msg"]
    assert res["server"]["status"] == "ERROR" and res["fault"]["message"] in res["msg"]
    server = api.get(ADMIN, "doomed")
    assert server["status"] == "ERROR" and "abort" in server["fault"]["message"]
    assert allocations(env) == 0
