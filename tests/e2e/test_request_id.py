"""A run under ansible-runner without the novakit callback still has one request id.

The conductor steps find it themselves, both as the action plugin on the controller (which
sees the play's variables) and as the module on a host reached another way (which sees only
its environment): the ansible-runner ident (from ``AWX_ISOLATED_DATA_DIR``), or AWX's job id.
What a user sees is the request id of the instance actions in the database.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from novakit.context import RequestContext
from tests.e2e.prepared import api_for, fleet_env
from tests.e2e.runner import run_playbook

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
ADMIN = RequestContext.admin()
# ansible-runner hands the playbook the test's environment: none of these may come from it.
NOT_INHERITED = ("ANSIBLE_CALLBACKS_ENABLED", "NOVAKIT_REQUEST_ID", "JOB_ID", "AWX_JOB_ID", "TOWER_JOB_ID")
# localhost runs the conductor action plugin in Ansible's worker; relay (connection
# "elsewhere", not local) gets the conductor module, as a host reached over SSH would.
HOSTS = (
    "all:\n  vars:\n    ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    "  hosts:\n    localhost: {ansible_connection: local}\n    relay: {ansible_connection: elsewhere}\n"
)
STEP_PLAYBOOK = """---
- name: A first step that is given no request id
  hosts: "{{ step_hosts }}"
  gather_facts: false
  tasks:
    - name: Schedule one server
      novakit.cloud.conductor:
        step: schedule
        server: {name: "{{ inventory_hostname }}-{{ tag }}", flavor: m1.small, image: tiny}
"""


@pytest.fixture
def env(prepared_fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name in NOT_INHERITED:  # no callback, and nothing else that could name the run
        monkeypatch.delenv(name, raising=False)
    env = fleet_env(prepared_fleet, tmp_path)
    env["ANSIBLE_COLLECTIONS_PATH"] = str(ROOT / "playbooks" / "collections")
    env["ANSIBLE_CONNECTION_PLUGINS"] = str(ROOT / "tests" / "e2e" / "connection_plugins")
    (tmp_path / "hosts.yml").write_text(HOSTS)
    (tmp_path / "step.yml").write_text(STEP_PLAYBOOK)
    return env


def _run(tmp_path: Path, name: str, playbook: str, env: dict[str, str], **kwargs: Any) -> str:
    """Run a playbook in a private directory of its own; returns its ident."""
    (tmp_path / name).mkdir()
    ident = f"{name}-{uuid.uuid4().hex[:8]}"
    run = run_playbook(playbook, tmp_path / name, env, ident=ident, **kwargs)
    out = run.stdout.read()
    assert run.rc == 0, out
    assert "NOVAKIT SUMMARY" not in out  # the callback did not run
    return ident


def _request_ids(env: dict[str, str], tag: str) -> dict[str, str]:
    """{server name: the request id of its create action} for the servers of one run."""
    api = api_for(env)
    ids = {}
    for server in api.list(ADMIN):
        if server["name"].endswith(f"-{tag}"):
            (create,) = api.list_actions(ADMIN, server["id"])
            assert create["action"] == "create"
            ids[server["name"]] = create["request_id"]
    return ids


def test_the_boot_playbook_is_named_by_the_runner_ident(env: dict[str, str], tmp_path: Path) -> None:
    ident = _run(tmp_path, "boot", "boot.yml", env, extravars={"server_name": "rid", "flavor": "m1.small"})
    api = api_for(env)
    (server,) = api.list(ADMIN)
    assert server["status"] == "ACTIVE"
    (create,) = api.list_actions(ADMIN, server["id"])
    assert create["request_id"] == f"req-{ident}"


def test_the_action_plugin_and_the_module_agree_on_the_runner_ident(
    env: dict[str, str], tmp_path: Path
) -> None:
    extravars = {"step_hosts": "localhost:relay", "tag": "runner"}
    ident = _run(
        tmp_path,
        "runner",
        str(tmp_path / "step.yml"),
        env,
        extravars=extravars,
        inventory=tmp_path / "hosts.yml",
    )
    assert _request_ids(env, "runner") == {"localhost-runner": f"req-{ident}", "relay-runner": f"req-{ident}"}


def test_an_awx_job_is_named_by_its_job_id(env: dict[str, str], tmp_path: Path) -> None:
    # AWX gives a job both the extra variable and JOB_ID; the module sees only JOB_ID.
    extravars = {"step_hosts": "localhost:relay", "tag": "awx", "awx_job_id": 4242}
    awx_env = dict(env, JOB_ID="4242")
    _run(
        tmp_path,
        "awx",
        str(tmp_path / "step.yml"),
        awx_env,
        extravars=extravars,
        inventory=tmp_path / "hosts.yml",
    )
    assert _request_ids(env, "awx") == {"localhost-awx": "req-awx-4242", "relay-awx": "req-awx-4242"}
    # The action plugin needs only the variable, as a playbook that leaves request_id out would give it.
    extravars = {"step_hosts": "localhost", "tag": "var", "awx_job_id": 77}
    _run(
        tmp_path,
        "var",
        str(tmp_path / "step.yml"),
        env,
        extravars=extravars,
        inventory=tmp_path / "hosts.yml",
    )
    assert _request_ids(env, "var") == {"localhost-var": "req-awx-77"}
