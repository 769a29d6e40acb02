"""The collection's playbooks and roles pass ansible-lint's production profile; its docs render."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.e2e


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "playbooks" / "collections"),
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
    }


def test_ansible_lint_production_profile() -> None:
    playbooks = sorted(str(p) for p in (ROOT / "playbooks").glob("*.yml"))
    proc = subprocess.run(
        [
            str(BIN / "ansible-lint"),
            "--profile",
            "production",
            "--offline",
            "--nocolor",
            *playbooks,
            str(ROOT / "roles" / "compute_node"),
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.mark.parametrize("module", sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py")))
def test_ansible_doc_renders(module: str) -> None:
    proc = subprocess.run(
        [str(BIN / "ansible-doc"), f"novakit.cloud.{module}"], env=_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "OPTIONS" in proc.stdout and "EXAMPLES" in proc.stdout
