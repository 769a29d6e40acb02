"""The api role (``novakit serve`` as a systemd service), run by the real ansible-playbook against
this machine with ``api_manage_service: false``: it writes the unit, the environment file (0600,
with the database URL), the state directory and the key repository, and a second run changes
nothing. ``systemd-analyze verify`` checks the unit where it is installed."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PLAY = """\
- name: The novakit API service
  hosts: localhost
  gather_facts: false
  roles:
    - role: novakit.cloud.api
"""


def _run(tmp_path: Path, extravars: dict[str, object]) -> tuple[dict[str, int], str]:
    """ansible-playbook on localhost: the recap's counts for it, and what it printed."""
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "vars.json").write_text(json.dumps(extravars))
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "playbooks" / "collections"),
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "NO_COLOR": "1",
    }
    env.pop("NOVAKIT_DB_URL", None)  # the role is given its database
    proc = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-e",
            f"@{tmp_path / 'vars.json'}",
            str(tmp_path / "play.yml"),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    recap = re.search(r"^localhost\s*:(.*)$", proc.stdout, re.MULTILINE)
    assert recap, proc.stdout
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))}, proc.stdout


def test_api_role_writes_the_unit_env_file_and_keys_and_is_idempotent(tmp_path: Path) -> None:
    state = tmp_path / "state"
    db_url = f"sqlite:///{state / 'novakit.db'}"
    unit = tmp_path / "novakit-api.service"
    env_file = tmp_path / "etc" / "novakit-api.env"
    user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    extravars = {
        "api_manage_service": False,
        "api_create_user": False,
        "api_become": False,
        "api_user": user,
        "api_group": group,
        "api_executable": str(BIN / "novakit"),
        "api_venv": str(BIN.parent),
        "api_state_dir": str(state),
        "api_db_url": db_url,
        "api_unit_path": str(unit),
        "api_env_file": str(env_file),
    }
    counts, out = _run(tmp_path, extravars)
    assert counts["failed"] == 0 and counts["changed"] > 0, out
    assert db_url not in out  # the tasks that see it log nothing of it

    lines = unit.read_text().splitlines()
    keys = state / "fernet-keys"
    assert (
        f"ExecStart={BIN / 'novakit'} serve --bind 127.0.0.1:8774 --workers 2 --log-level info"
        f" --key-repository {keys}"
    ) in lines
    assert f"EnvironmentFile={env_file}" in lines
    assert f"User={user}" in lines and f"Group={group}" in lines
    assert {"Type=exec", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=full"} <= set(lines)
    assert f"ReadWritePaths={state}" in lines
    # The state directory is under /tmp: the service must see the real one, not a private /tmp.
    assert "PrivateTmp=no" in lines

    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    env_lines = env_file.read_text().splitlines()
    assert f'NOVAKIT_DB_URL="{db_url}"' in env_lines
    assert f'NOVAKIT_STATE_DIR="{state}"' in env_lines
    assert "NOVAKIT_SERVE_WORK_THREADS=8" in env_lines
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert sorted(p.name for p in keys.iterdir()) == ["0", "1"]  # staged and primary
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700

    again, out = _run(tmp_path, extravars)
    assert again["changed"] == 0 and again["failed"] == 0, out
    assert sorted(p.name for p in keys.iterdir()) == ["0", "1"]  # never set up twice

    analyze = shutil.which("systemd-analyze")
    if analyze:
        proc = subprocess.run(
            [analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, check=False
        )
        # It warns of a line it ignores and still exits 0: nothing may be said of this unit.
        assert proc.returncode == 0 and str(unit) not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
