"""The modules' literal choices (ansible-doc reads them as written) agree with the state table."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from novakit import desired
from novakit.compute import states

ROOT = Path(__file__).resolve().parents[2]


def module(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "playbooks" / "collections"))
    return importlib.import_module(f"ansible_collections.novakit.cloud.plugins.modules.{name}")


def choices(mod: ModuleType, cls: str, option: str) -> list[str]:
    """The option's choices in the argument spec, checked against the documentation's."""
    spec = getattr(mod, cls).argument_spec[option]["choices"]
    assert yaml.safe_load(mod.DOCUMENTATION)["options"][option]["choices"] == spec
    return list(spec)


def test_the_conductor_offers_every_action_of_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    conductor = module("conductor", monkeypatch)
    assert choices(conductor, "ConductorModule", "action") == list(states.ACTION_NAMES)


def test_server_and_server_action_together_offer_every_action(monkeypatch: pytest.MonkeyPatch) -> None:
    server = module("server", monkeypatch)
    server_action = module("server_action", monkeypatch)
    offered = choices(server_action, "ServerActionModule", "action")
    assert set(offered) <= set(states.ACTION_NAMES)

    assert choices(server, "ServerModule", "state") == list(desired.STATES)
    # The server module's states reach the rest: delete, and every step of a path to a power state.
    reachable = {"delete"}
    for here in states.VmState:
        for wanted in desired.POWER_STATES.values():
            reachable.update(states.path(here.value, wanted) or [])
    assert set(offered) | reachable >= set(states.ACTION_NAMES)


def test_readmes_state_table_is_the_generated_one() -> None:
    from pathlib import Path

    from novakit.compute.states import state_table_markdown

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert state_table_markdown() in readme, "regenerate README's table with `novakit states`"


def test_server_action_offers_exactly_the_tables_actions_the_server_module_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new action's row is followed by its name in server_action's literal choices (the
    power states and delete stay the server module's ``state``): this test names what is missing."""
    server_action = module("server_action", monkeypatch)
    offered = choices(server_action, "ServerActionModule", "action")
    assert sorted(offered) == sorted(states.MODULE_ACTIONS)
