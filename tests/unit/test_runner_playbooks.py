"""Where novakit.runner takes its playbooks and default inventory from, in a checkout.

Installed, away from a checkout: tests/e2e/test_collection_install.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from novakit import exceptions, runner

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_carries_the_same_default_inventory_as_the_checkout() -> None:
    # Installed, there is no inventory/local.yml: the copy in the package must not drift from it.
    assert yaml.safe_load(runner.BUILTIN_INVENTORY.read_text()) == yaml.safe_load(
        (ROOT / "inventory" / "local.yml").read_text()
    )


def test_from_a_checkout_names_are_its_playbook_files() -> None:
    assert runner.in_checkout()
    assert runner.playbook_path("boot") == str(ROOT / "playbooks" / "boot.yml")
    assert runner.playbook_path("delete.yml") == str(ROOT / "playbooks" / "delete.yml")
    assert runner.playbook_path("novakit.cloud.heal") == "novakit.cloud.heal"
    assert runner.default_inventory() == ROOT / "inventory" / "local.yml"


def test_an_unknown_playbook_names_the_known_ones() -> None:
    with pytest.raises(exceptions.ValidationError) as err:
        runner.playbook_path("bot")
    assert "no playbook 'bot'" in str(err.value) and "boot" in str(err.value)


def test_the_installed_collection_is_found_in_the_collections_path(tmp_path: Path) -> None:
    playbooks = tmp_path / "ansible_collections" / "novakit" / "cloud" / "playbooks"
    playbooks.mkdir(parents=True)
    for name in ("boot", "heal"):
        (playbooks / f"{name}.yml").write_text("---\n")
    assert runner.installed_playbooks({"ANSIBLE_COLLECTIONS_PATH": f"/nowhere:{tmp_path}"}) == [
        "boot",
        "heal",
    ]
