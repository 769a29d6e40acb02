"""A job run as AWX runs it, with the environment the novakit credential type injects.

AWX renders the injectors of meta/awx/ over the credential's inputs and hands the
result to ansible-runner as environment variables, with the job id as ``JOB_ID``
and the extra variable ``awx_job_id``. The job boots a server through
playbooks/boot.yml; what the user sees afterwards is the database the credential
named holding the server, in the credential's project, with an audit trail that
records the credential's user and the job; and none of its job events showing the
database URL.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from novakit import runner as novakit_runner
from novakit.compute.api import API
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from tests.e2e.prepared import fleet_env
from tests.e2e.runner import run_playbook
from tests.unit.test_awx_credential_type import inject

pytestmark = [
    pytest.mark.e2e,
    # The password rides in the URL's query, which pysqlite ignores and SQLAlchemy warns about.
    pytest.mark.filterwarnings("ignore:Query string argument"),
]
PASSWORD = "awx-pa55-Kd2-not-real"
JOB_ID = 4711
# None of these may reach the job from the test's own environment: the credential sets them.
NOT_INHERITED = (
    "NOVAKIT_DB_URL",
    "NOVAKIT_PROJECT",
    "NOVAKIT_USER",
    "NOVAKIT_ROLES",
    "NOVAKIT_REQUEST_ID",
    "ANSIBLE_CALLBACKS_ENABLED",
    "JOB_ID",
    "AWX_JOB_ID",
    "TOWER_JOB_ID",
)


def test_a_job_acts_as_the_credential_on_the_credential_database(
    prepared_fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in NOT_INHERITED:
        monkeypatch.delenv(name, raising=False)
    # The execution environment's own settings (fake hosts, configuration, state directory) ...
    ee_env = fleet_env(prepared_fleet, tmp_path)
    # ... and the database somewhere else: had the job not used the credential's URL, it would
    # have found an empty default database in the state directory.
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.move(tmp_path / "state" / "novakit.db", shared / "novakit.db")
    url = f"sqlite:///{shared / 'novakit.db'}?password={PASSWORD}"
    credential = inject({"db_url": url, "project": "demo", "user": "alice", "roles": ""})

    run = run_playbook(
        "boot.yml",
        tmp_path,
        {**ee_env, **credential, "JOB_ID": str(JOB_ID)},
        extravars={"server_name": "awx-web", "flavor": "m1.small", "awx_job_id": JOB_ID},
    )
    out = run.stdout.read()
    assert run.rc == 0, out

    api = API(Database(url), load_config(ee_env["NOVAKIT_CONFIG"], db_url=url))
    (server,) = api.list(RequestContext.admin())
    assert (server["name"], server["status"]) == ("awx-web", "ACTIVE")
    assert (server["project_id"], server["user_id"]) == ("demo", "alice")
    (create,) = api.list_actions(RequestContext.admin(), server["id"])
    assert (create["action"], create["request_id"]) == ("create", f"req-awx-{JOB_ID}")
    assert (create["project_id"], create["user_id"]) == ("demo", "alice")
    assert not (tmp_path / "state" / "novakit.db").exists()

    events = json.dumps(list(run.events))
    assert "awx-web" in events  # the events are there, and they name the server ...
    assert PASSWORD not in events and str(shared) not in events  # ... but not the database
    assert PASSWORD not in out


USER_DATA = "#!/bin/sh\necho awx-ud-s3cret-8f2c\n"
ADMIN_PASSWORD = "awx-root-pw-Q7x-not-real"


def _secrets() -> dict[str, str]:
    """Each secret as a run could leak it: as given, and base64'd (user data travels so)."""
    plain = {
        "database password": PASSWORD,
        "user data": "awx-ud-s3cret-8f2c",
        "admin password": ADMIN_PASSWORD,
    }
    out = dict(plain)
    for what, text in [("user data", USER_DATA), *((k, v) for k, v in plain.items() if k != "user data")]:
        out[f"{what} (base64)"] = base64.b64encode(text.encode()).decode()
    return out


def _files_under(*roots: Path, skip: tuple[Path, ...] = ()) -> list[Path]:
    found = []
    for root in roots:
        if not root.exists():
            continue
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and not path.is_symlink() and not any(path.is_relative_to(s) for s in skip):
                found.append(path)
    return found


def test_boot_stop_and_delete_at_vvv_leave_no_secret_on_disk(
    prepared_fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flows as AWX runs them, -vvv, with the credential's environment: afterwards no file the
    runs left (their runner directory, the state directory with its notifications and worker logs,
    ansible-runner's and Ansible's temporary places) holds the database password, the user data or
    the admin password, plain or base64. The database's own columns are the only place for them."""
    for name in NOT_INHERITED:
        monkeypatch.delenv(name, raising=False)
    ee_env = fleet_env(prepared_fleet, tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.move(tmp_path / "state" / "novakit.db", shared / "novakit.db")
    url = f"sqlite:///{shared / 'novakit.db'}?password={PASSWORD}"
    env = {
        **ee_env,
        **inject({"db_url": url, "project": "demo", "user": "alice", "roles": ""}),
        "JOB_ID": "4712",
    }

    private = tmp_path / "runner"  # kept (named by the caller), so that what it holds can be read

    def job(playbook: str, extravars: dict[str, Any]) -> Any:
        done = novakit_runner.run(
            playbook, envvars=env, extravars=extravars, private_data_dir=private, verbosity=3
        )
        assert done.rc == 0, done.stdout[-3000:]
        return done

    boot = job("boot", {"server_name": "quiet", "user_data": USER_DATA, "admin_password": ADMIN_PASSWORD})
    stop = job("server_action", {"server_action": "stop", "servers": "quiet"})
    delete = job("delete", {"servers": "quiet"})
    api = API(Database(url), load_config(ee_env["NOVAKIT_CONFIG"], db_url=url))
    (gone,) = [s for s in api.list(RequestContext.admin(), include_deleted=True) if s["name"] == "quiet"]
    assert gone["status"] == "DELETED"

    left = _files_under(
        tmp_path,
        *Path("/tmp").glob("novakit-runner-*"),
        Path.home() / ".ansible" / "tmp",
        skip=(shared,),  # the database: its columns are where user data belongs
    )
    assert any(p.name == "stdout" for p in left) and any(p.suffix == ".json" for p in left)
    for path in left:
        text = path.read_bytes().decode(errors="replace")
        for what, secret in _secrets().items():
            assert secret not in text, f"{what} in {path}"
    for done in (boot, stop, delete):
        said = done.stdout + json.dumps(done.events)
        assert not [what for what, secret in _secrets().items() if secret in said]
