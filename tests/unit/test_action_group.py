"""meta/runtime.yml's action group names every module that takes the common options, so that
``module_defaults: {group/novakit.cloud.novakit: {db_url: ...}}`` reaches each of them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_with_the_common_options_is_in_the_action_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "playbooks" / "collections"))
    from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule

    group = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["action_groups"]["novakit"]
    takes_db_url = set()
    for path in sorted((ROOT / "plugins" / "modules").glob("*.py")):
        mod = importlib.import_module(f"ansible_collections.novakit.cloud.plugins.modules.{path.stem}")
        classes = [c for c in vars(mod).values() if isinstance(c, type) and issubclass(c, NovakitModule)]
        if any(c.needs_database for c in classes if c.__module__ == mod.__name__):
            takes_db_url.add(path.stem)
    assert {"network", "subnet", "port", "heal", "db"} <= takes_db_url
    assert sorted(takes_db_url - set(group)) == []
