"""The conductor's steps run in Ansible's own worker process (plugins/action/conductor.py).

At -vvv Ansible names every module it sends to a host (``AnsiballZ_<module>.py``): the
compute module goes to the chosen hosts, the conductor module never goes anywhere while the
controller steps run on the controller. What the steps did is read back from the database.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from novakit.catalog import flavors, images
from novakit.compute.api import API
from novakit.compute.passwords import sha512_crypt
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.fleet import hosts
from novakit.host.messages import HostResources
from novakit.runner import RunResult, run
from tests.e2e.prepared import BASE_CONFIG, api_for, fleet_env
from tests.pgdatabases import base_url, own_database

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
ADMIN = RequestContext.admin()
LOCAL_HOSTS = {"compute-small": 8192, "compute-medium": 16384, "compute-large": 32768}
SECRET = "ud-secret-inproc-41d7"
PASSWORD = "pw-secret-inproc-93c2"


def modules_sent(stdout: str) -> set[tuple[str, str]]:
    """(host, module) for each module -vvv shows Ansible sending to (or running on) a host."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", stdout)
    return set(re.findall(r"^<([^>]+)> .*AnsiballZ_(\w+)\.py", plain, re.M))


def module_names(stdout: str) -> set[str]:
    return {module for _, module in modules_sent(stdout)}


def boot(tmp_path: Path, env: dict[str, str], extravars: dict[str, Any], **kwargs: Any) -> RunResult:
    return run(
        "boot", private_data_dir=tmp_path / "runner", envvars=env, extravars=extravars, verbosity=3, **kwargs
    )


def allocations(api: API) -> int:
    with api.db.reader() as session:
        return int(session.execute(text("SELECT COUNT(DISTINCT consumer_id) FROM allocations")).scalar_one())


def assert_booted(api: API, result: RunResult, names: list[str]) -> None:
    """Each server is active on a fake host, with its claim and the run's audit trail."""
    servers = {s["name"]: s for s in api.list(ADMIN)}
    assert sorted(servers) == sorted(names)
    for s in servers.values():
        assert s["status"] == "ACTIVE" and s["power_state_name"] == "Running", s
        assert s["host"] in LOCAL_HOSTS
        (create,) = api.list_actions(ADMIN, s["id"])
        assert create["request_id"] == result.request_id and create["finish_time"] is not None
        assert [(e["host"], e["result"]) for e in create["events"]] == [(s["host"], "Success")]
    assert allocations(api) == len(names)
    assert {p["id"]: p["status"] for p in result.servers} == {s["id"]: "ACTIVE" for s in servers.values()}


def assert_no_secret(private_dir: Path, secret: str) -> None:
    needles = [secret, base64.b64encode(secret.encode()).decode()]
    files = [p for p in private_dir.rglob("*") if p.is_file()]
    assert files
    for path in files:
        content = path.read_text(errors="replace")
        assert not any(n in content for n in needles), f"the secret is in {path}"


def test_boot_records_and_schedules_without_sending_a_module(prepared_fleet: Path, tmp_path: Path) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    extravars = {"server_name": "inproc", "count": 4, "flavor": "m1.small", "user_data": SECRET}
    result = boot(tmp_path, env, {**extravars, "admin_password": PASSWORD})
    out = result.runner.stdout.read()
    assert result.ok, out
    sent = modules_sent(out)
    assert {host for host, module in sent if module == "compute"} <= set(LOCAL_HOSTS), sent
    assert module_names(out) == {"compute"}, sent
    assert_booted(api_for(env), result, [f"inproc-{i}" for i in range(1, 5)])
    # The step in the worker kept the task's no_log: the user data and the password are in no
    # artifact, even at -vvv.
    assert_no_secret(tmp_path / "runner", SECRET)
    assert_no_secret(tmp_path / "runner", PASSWORD)
    # The build play, made from the records, handed each guest the password's hash.
    guests = [
        g
        for path in Path(env["NOVAKIT_FAKE_STATE_DIR"]).glob("*.json")
        for g in json.loads(path.read_text())["instances"].values()
    ]
    assert len(guests) == 4
    for g in guests:
        salt = g["admin_password_hash"].split("$")[2]
        assert sha512_crypt(PASSWORD, salt) == g["admin_password_hash"]


def test_check_mode_runs_the_dry_run_in_process_and_records_nothing(
    prepared_fleet: Path, tmp_path: Path
) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    result = boot(tmp_path, env, {"server_name": "dry", "count": 2, "flavor": "m1.small"}, check=True)
    out = result.runner.stdout.read()
    assert result.ok, out
    assert "conductor" not in module_names(out)
    would = dict(re.findall(r"(dry-\d) would be scheduled to (compute-\w+)", out))
    assert sorted(would) == ["dry-1", "dry-2"] and set(would.values()) <= set(LOCAL_HOSTS)
    api = api_for(env)
    assert api.list(ADMIN, include_deleted=True) == [] and allocations(api) == 0


STEP_PLAYBOOK = """---
- name: The same step on the controller and on a host reached by another connection
  hosts: localhost:relay
  gather_facts: false
  tasks:
    - name: Schedule one server
      novakit.cloud.conductor:
        step: schedule
        server: {name: "{{ inventory_hostname }}-srv", flavor: m1.small, image: tiny}
      register: scheduled
"""


def test_off_the_controller_the_module_runs_with_the_same_result(
    prepared_fleet: Path, tmp_path: Path
) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    env["ANSIBLE_CONNECTION_PLUGINS"] = str(ROOT / "tests" / "e2e" / "connection_plugins")
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
        "  hosts:\n    localhost: {ansible_connection: local}\n    relay: {ansible_connection: elsewhere}\n"
    )
    (tmp_path / "step.yml").write_text(STEP_PLAYBOOK)
    result = run(
        tmp_path / "step.yml",
        inventory=tmp_path / "hosts.yml",
        private_data_dir=tmp_path / "runner",
        envvars=env,
        verbosity=3,
    )
    out = result.runner.stdout.read()
    assert result.ok, out
    assert {(h, m) for h, m in modules_sent(out) if m == "conductor"} == {("relay", "conductor")}
    by_host = {
        e["event_data"]["host"]: e["event_data"]["res"]
        for e in result.runner.events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Schedule one server"
    }
    assert set(by_host) == {"localhost", "relay"}
    module_result, action_result = by_host["relay"], by_host["localhost"]
    assert "invocation" in module_result and "invocation" not in action_result
    assert set(module_result) - {"invocation", "_ansible_no_log"} == set(action_result) - {"_ansible_no_log"}
    api = api_for(env)
    for host, res in by_host.items():
        assert res["changed"] and res["request_id"] == result.request_id
        (server,) = res["servers"]
        assert server["name"] == f"{host}-srv" and server["status"] == "BUILD"
        (request,) = res["requests"]
        assert request["host"] == server["host"] == api.get(ADMIN, server["id"])["host"]
    assert allocations(api) == 2


PG_DATABASE_SUFFIX = "_action_plugin"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A database of this test's own (the tests' server, its name plus a suffix), created empty."""
    with own_database(f"{make_url(base_url()).database}{PG_DATABASE_SUFFIX}") as url:
        yield url


def test_boot_and_check_mode_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    state = tmp_path / "state"
    (tmp_path / "novakit.toml").write_text(BASE_CONFIG)
    env = {
        "NOVAKIT_DB_URL": pg_url,
        "NOVAKIT_STATE_DIR": str(state),
        "NOVAKIT_FAKE_STATE_DIR": str(state / "fake"),
        "NOVAKIT_CONFIG": str(tmp_path / "novakit.toml"),
    }
    conf = load_config(env["NOVAKIT_CONFIG"], db_url=pg_url, state_dir=str(state))
    api = API(Database(pg_url, auto_upgrade=True), conf)
    try:
        for host, ram in LOCAL_HOSTS.items():
            resources = HostResources(
                hypervisor_hostname=host, hypervisor_type="fake", vcpus=8, memory_mb=ram, local_gb=500
            )
            hosts.register_host(api.db, conf, host, resources, {"driver": "fake", "transport": "local"})
        flavors.create(api.db, ADMIN, {"name": "m1.small", "vcpus": 1, "memory_mb": 2048, "root_gb": 20})
        images.create(api.db, ADMIN, {"name": "tiny"})

        dry = boot(tmp_path / "dry", env, {"server_name": "pg", "count": 5, "flavor": "m1.small"}, check=True)
        out = dry.runner.stdout.read()
        assert dry.ok, out
        assert len(re.findall(r"pg-\d would be scheduled to compute-\w+", out)) == 5
        assert api.list(ADMIN, include_deleted=True) == [] and allocations(api) == 0

        result = boot(tmp_path / "real", env, {"server_name": "pg", "count": 5, "flavor": "m1.small"})
        out = result.runner.stdout.read()
        assert result.ok, out
        assert module_names(out) == {"compute"}
        assert_booted(api, result, [f"pg-{i}" for i in range(1, 6)])
    finally:
        api.db.dispose()
