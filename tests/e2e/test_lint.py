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


def test_ansible_lint_production_profile_passes_at_the_root() -> None:
    """What a contributor types at the root, no arguments: .ansible-lint says what and how."""
    proc = subprocess.run(
        [str(BIN / "ansible-lint"), "--profile", "production"],
        cwd=ROOT,
        env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "NO_COLOR": "1"},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    # The role and every playbook of the collection were linted, not skipped.
    assert "Profile 'production' was required, and it passed" in proc.stdout + proc.stderr


def test_the_changelog_fragments_and_changelog_are_valid() -> None:
    for command in (["lint"], ["lint-changelog-yaml", "changelogs/changelog.yaml"]):
        proc = subprocess.run(
            [str(BIN / "antsibull-changelog"), *command], cwd=ROOT, capture_output=True, text=True
        )
        assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


@pytest.mark.parametrize("module", sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py")))
def test_ansible_doc_renders(module: str) -> None:
    proc = subprocess.run(
        [str(BIN / "ansible-doc"), f"novakit.cloud.{module}"], env=_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "OPTIONS" in proc.stdout and "EXAMPLES" in proc.stdout
