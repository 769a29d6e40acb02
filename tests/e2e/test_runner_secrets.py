"""A run through ``novakit.runner`` (and ``novakit boot``) leaves no secret on disk.

ansible-runner records the whole environment of a run (``artifacts/<ident>/command``,
``env/envvars``) and its extra variables (``env/extravars``). Here the database URL
carries a password, as a PostgreSQL URL would (SQLite ignores the query, so the
playbooks really run with it), and a boot carries user data; after the run, and
at every event during it, no file of the run's directory, the temporary directory
or the state directory holds either.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from novakit import runner
from novakit.cli.main import app
from tests.e2e.prepared import fleet_env

pytestmark = [
    pytest.mark.e2e,
    # The password rides in the URL's query, which pysqlite ignores and SQLAlchemy warns about.
    pytest.mark.filterwarnings("ignore:Query string argument"),
]
PASSWORD = "pa55-Qv7-not-real"
USER_DATA = "#cloud-config\n# user-data-Zr9-not-real\n"
NOT_INHERITED = ("NOVAKIT_REQUEST_ID", "NOVAKIT_DB_URL", "JOB_ID", "AWX_JOB_ID", "TOWER_JOB_ID")


def holding(root: Path, *secrets: str) -> list[str]:
    """The paths under ``root`` whose name or content contains one of ``secrets``."""
    found = []
    for path in root.rglob("*"):
        named = any(s in str(path) for s in secrets)
        if named or (path.is_file() and any(s.encode() in path.read_bytes() for s in secrets)):
            found.append(str(path.relative_to(root)))
    return found


@pytest.fixture
def area(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own temporary directory (so only its runs count), database and state."""
    for name in NOT_INHERITED:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "db").mkdir()
    monkeypatch.setenv("NOVAKIT_DB_URL", f"sqlite:///{tmp_path / 'db' / 'novakit.db'}?password={PASSWORD}")
    monkeypatch.setenv("NOVAKIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NOVAKIT_FAKE_STATE_DIR", str(tmp_path / "state" / "fake"))
    return tmp_path


def scanner(root: Path, *secrets: str) -> tuple[Callable[[dict[str, Any]], None], list[str]]:
    """An ``on_event`` that looks for the secrets on disk at every event of a run."""
    seen: list[str] = []

    def scan(event: dict[str, Any]) -> None:
        seen.extend(f"{event.get('event')}: {p}" for p in holding(root, *secrets))

    return scan, seen


def test_a_run_and_novakit_boot_leave_nothing_behind(area: Path) -> None:
    scan, seen = scanner(area, PASSWORD)
    result = runner.run("compute_node", on_event=scan)
    assert result.ok, result.stdout
    assert result.artifact_dir is None and result.runner is None
    assert result.events and "PLAY RECAP" in result.stdout
    assert PASSWORD not in json.dumps(result.events) + result.stdout
    assert seen == []

    boot = CliRunner().invoke(app, ["boot", "web", "--count", "2", "--output", "json"])
    assert boot.exit_code == 0, boot.output
    assert [s["status"] for s in json.loads(boot.stdout)["servers"]] == ["ACTIVE", "ACTIVE"]

    assert list((area / "tmp").iterdir()) == []  # no /tmp/novakit-runner-* of either run
    assert holding(area, PASSWORD) == []


def test_a_kept_run_keeps_its_output_and_events_but_no_environment(
    prepared_fleet: Path, area: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = fleet_env(prepared_fleet, area)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NOVAKIT_DB_URL", f"sqlite:///{area / 'state' / 'novakit.db'}?password={PASSWORD}")
    scan, seen = scanner(area / "tmp", PASSWORD)
    user_data_seen: list[str] = []
    started = False

    def on_event(event: dict[str, Any]) -> None:
        nonlocal started
        scan(event)
        # From the playbook's start on, ansible-playbook has read its extra variables: off the disk.
        started = started or event.get("event") == "playbook_on_start"
        if started:
            user_data_seen.extend(holding(area / "tmp", USER_DATA))

    result = runner.boot("kept", user_data=USER_DATA, keep_artifacts=True, on_event=on_event)
    assert result.ok, result.stdout
    assert [s["status"] for s in result.servers] == ["ACTIVE"]
    assert seen == [] and user_data_seen == []

    artifacts = result.artifact_dir
    assert artifacts is not None and (artifacts / "job_events").is_dir() and (artifacts / "stdout").is_file()
    assert result.runner is not None and "PLAY RECAP" in result.runner.stdout.read()
    command = json.loads((artifacts / "command").read_text())
    assert command["command"][0] == "ansible-playbook" and "env" not in command
    private = artifacts.parent.parent
    assert private.parent == area / "tmp" and private.name.startswith("novakit-runner-")
    assert not any((private / "env").glob("*"))
    assert holding(area / "tmp", PASSWORD, USER_DATA) == []
    assert holding(area / "state", PASSWORD) == []
