"""server_action.yml sends an action only the options the user gave: one the action does not take
is refused by the API, naming it, and nothing changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from novakit.context import RequestContext
from tests.e2e.prepared import api_for, fleet_env
from tests.e2e.test_flows import play

pytestmark = pytest.mark.e2e
ADMIN = RequestContext.admin()


def test_an_option_is_sent_only_when_given_and_only_where_it_is_taken(
    prepared_fleet: Path, tmp_path: Path
) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    api = api_for(env)
    assert play("boot", tmp_path, env, {"server_name": "opt"}).ok

    refused = play(
        "server_action", tmp_path, env, {"server_action": "stop", "servers": "opt", "reboot_type": "hard"}
    )
    out = refused.runner.stdout.read()
    assert not refused.ok and "reboot_type" in out, out
    assert api.get(ADMIN, "opt")["status"] == "ACTIVE"
    assert [a["action"] for a in api.list_actions(ADMIN, "opt")] == ["create"]

    stop = play("server_action", tmp_path, env, {"server_action": "stop", "servers": "opt"})
    assert stop.ok, stop.runner.stdout.read()
    assert api.get(ADMIN, "opt")["status"] == "SHUTOFF"

    # reboot takes it (lower case is fine): a hard reboot starts a stopped server.
    reboot = play(
        "server_action", tmp_path, env, {"server_action": "reboot", "servers": "opt", "reboot_type": "hard"}
    )
    assert reboot.ok, reboot.runner.stdout.read()
    assert api.get(ADMIN, "opt")["status"] == "ACTIVE"
    assert [a["action"] for a in api.list_actions(ADMIN, "opt")] == ["create", "stop", "reboot"]
