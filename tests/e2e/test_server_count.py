"""The ``server`` module's ``count``: the wanted number of servers NAME-1 ... NAME-N (ansible-playbook)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from novakit.context import RequestContext
from tests.e2e.prepared import api_for, fleet_env
from tests.e2e.test_flows import allocations, play, results_of

pytestmark = pytest.mark.e2e
PLAYBOOK = Path(__file__).parent / "playbooks" / "server_count.yml"
ADMIN = RequestContext.admin()


def task(tmp_path: Path, env: dict[str, str], check: bool = False, **extravars: Any) -> dict[str, Any]:
    run = play(PLAYBOOK, tmp_path, env, extravars, check=check)
    (res,) = results_of(run, "The servers")
    assert "[WARNING]" not in run.stdout
    return res


def live(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in api_for(env).list(ADMIN)}


def test_count_scales_the_family_up_and_down(prepared_fleet: Path, tmp_path: Path) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    one = task(tmp_path, env, server_name="m", server_count=1)
    assert one["changed"] and one["created"] == ["m-1"] and one["deleted"] == [], one
    assert sorted(live(env)) == ["m-1"]  # count=1 is m-1, as for many

    up = task(tmp_path, env, server_name="m", server_count=3)
    assert up["changed"] and up["created"] == ["m-2", "m-3"], up
    assert [s["name"] for s in up["servers"]] == ["m-1", "m-2", "m-3"]
    assert all(s["status"] == "ACTIVE" for s in live(env).values())
    kept = live(env)["m-1"]["id"]

    same = task(tmp_path, env, server_name="m", server_count=3)
    assert same["changed"] is False and same["created"] == [] and same["deleted"] == [], same

    dry = task(tmp_path, env, check=True, server_name="m", server_count=1)
    assert dry["changed"] and dry["deleted"] == ["m-3", "m-2"] and dry["created"] == [], dry
    assert sorted(live(env)) == ["m-1", "m-2", "m-3"]  # check mode changed nothing

    dry_up = task(tmp_path, env, check=True, server_name="m", server_count=4)
    assert dry_up["created"] == ["m-4"] and dry_up["would_schedule_to"]["m-4"], dry_up
    assert sorted(live(env)) == ["m-1", "m-2", "m-3"]

    down = task(tmp_path, env, server_name="m", server_count=1)
    assert down["changed"] and down["deleted"] == ["m-3", "m-2"], down
    assert {n: s["id"] for n, s in live(env).items()} == {"m-1": kept}
    assert allocations(env) == 1


def test_count_with_state_absent_is_refused_naming_count(prepared_fleet: Path, tmp_path: Path) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    res = task(tmp_path, env, server_name="n", server_count=2, server_state="absent")
    assert res["error"] == "ValidationError" and res["msg"].startswith("Invalid count: "), res
    assert live(env) == {}
