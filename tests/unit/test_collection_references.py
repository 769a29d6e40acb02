"""Every repository file the collection's EE files point a reader at exists (issue 25 item 16:
they named ee/execution-environment.yml, which never did)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["requirements.txt", "bindep.txt", "meta/execution-environment.yml"])
def test_the_files_a_collection_file_names_exist(name: str) -> None:
    named = set(re.findall(r"\b((?:[\w.-]+/)+[\w.-]+\.(?:yml|yaml|txt|toml))\b", (ROOT / name).read_text()))
    missing = sorted(p for p in named if not p.startswith("usr/") and not (ROOT / p).exists())
    assert missing == [], f"{name} names files that do not exist: {missing}"


def test_building_the_collection_needs_nothing_beyond_novakits_own_dependencies() -> None:
    """galaxy.yml packs by an allow list (manifest mode), which ansible-galaxy builds with distlib:
    README command 1's venv (novakit and its dependencies, no test extra) must build it."""
    import tomllib

    import yaml

    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert "manifest" in galaxy
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.match(r"distlib\b", d) for d in deps), deps
