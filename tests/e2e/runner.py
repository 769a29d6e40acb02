"""Run the repository's playbooks through ansible-runner, as AWX does."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import ansible_runner

ROOT = Path(__file__).resolve().parents[2]


def run_playbook(
    playbook: str,
    tmp_path: Path,
    env: dict[str, str],
    extravars: dict[str, Any] | None = None,
    inventory: Path | None = None,
    verbosity: int = 0,
    ident: str | None = None,
    cmdline: str | None = None,
) -> ansible_runner.Runner:
    private = tmp_path / "runner"
    private.mkdir(exist_ok=True)
    # ansible-runner reads env/extravars (and envvars) written by an earlier run in the same
    # directory along with this run's: each run starts from its own variables only.
    for name in ("extravars", "envvars", "cmdline"):
        (private / "env" / name).unlink(missing_ok=True)
    envvars = {
        # ansible-playbook from this venv, so that modules run with the Python that has novakit
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        **env,
    }
    return ansible_runner.run(
        private_data_dir=str(private),
        playbook=str(ROOT / "playbooks" / playbook),
        inventory=str(inventory or ROOT / "inventory" / "local.yml"),
        envvars=envvars,
        extravars=extravars or {},
        quiet=True,
        verbosity=verbosity,
        ident=ident,
        cmdline=cmdline,
    )


def task_results(runner: ansible_runner.Runner, task: str) -> list[dict[str, Any]]:
    return [
        e["event_data"]["res"]
        for e in runner.events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == task
    ]
