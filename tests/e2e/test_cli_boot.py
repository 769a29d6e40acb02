"""`novakit boot`: the boot playbook through ansible-runner, from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from novakit.cli.main import app
from tests.e2e.runner import run_playbook

pytestmark = pytest.mark.e2e


def test_novakit_boot_runs_the_playbook_and_prints_the_servers(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {"NOVAKIT_STATE_DIR": str(state), "NOVAKIT_FAKE_STATE_DIR": str(state / "fake")}
    assert run_playbook("compute_node.yml", tmp_path, env).rc == 0
    cli = CliRunner()
    result = cli.invoke(app, ["boot", "cli-web", "--count", "2", "--output", "json"], env=env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] and data["request_id"]
    assert sorted(s["name"] for s in data["servers"]) == ["cli-web-1", "cli-web-2"]
    assert all(s["status"] == "ACTIVE" and s["host"] for s in data["servers"])
    listed = json.loads(cli.invoke(app, ["server", "list", "--output", "json"], env=env).stdout)
    assert {s["id"] for s in listed} == {s["id"] for s in data["servers"]}
