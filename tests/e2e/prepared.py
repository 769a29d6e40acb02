"""One prepared fleet for the e2e tests: compute_node.yml runs once, each test gets a copy.

compute_node.yml costs about half a minute here (a module run per host and per flavor),
so it runs once per session; each test copies the state directory (the SQLite file and
the fake hosts' files) and so starts from the same registered fleet. The copied hosts'
heartbeats get older as the session goes on, so the tests' configuration keeps a host
"up" for a day (``service_down_time``) rather than the production minute.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from novakit.compute.api import API
from novakit.config import load_config
from novakit.db.engine import Database
from tests.e2e.runner import run_playbook

BASE_CONFIG = "[compute]\nservice_down_time = 86400\n"


@pytest.fixture(scope="session")
def prepared_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet")
    (root / "novakit.toml").write_text(BASE_CONFIG)
    env = {
        "NOVAKIT_STATE_DIR": str(root / "state"),
        "NOVAKIT_FAKE_STATE_DIR": str(root / "state" / "fake"),
        "NOVAKIT_CONFIG": str(root / "novakit.toml"),
    }
    run = run_playbook("compute_node.yml", root, env)
    assert run.rc == 0, run.stdout.read()
    return root / "state"


def fleet_env(prepared: Path, tmp_path: Path, config: str = "") -> dict[str, str]:
    """A private copy of the prepared fleet, and the environment that selects it."""
    state = tmp_path / "state"
    shutil.copytree(prepared, state)
    conf = tmp_path / "novakit.toml"
    conf.write_text(BASE_CONFIG + config)
    return {
        "NOVAKIT_STATE_DIR": str(state),
        "NOVAKIT_FAKE_STATE_DIR": str(state / "fake"),
        "NOVAKIT_CONFIG": str(conf),
    }


def api_for(env: dict[str, str]) -> API:
    conf = load_config(env["NOVAKIT_CONFIG"], state_dir=env["NOVAKIT_STATE_DIR"])
    return API(Database.from_config(conf), conf)
