"""Two callers racing for one instance: exactly one wins, the other gets a clear conflict."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import time
from collections import Counter

import pytest
from sqlalchemy import text

from novakit.cells.registry import targeting
from novakit.context import RequestContext
from novakit.db import api as db_api
from tests.functional import workers
from tests.functional.cloud import Cloud, boot


def _pool(n: int) -> multiprocessing.pool.Pool:
    return multiprocessing.get_context("spawn").Pool(n)


def test_guarded_write_race_has_exactly_one_winner(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "raced")
    start_at = time.time() + 3.0  # every process imports and connects first, then all go at once
    with _pool(8) as pool:
        outcomes = pool.starmap(workers.guarded_write, [(cloud.db.url, server["id"], start_at)] * 8)
    assert Counter(outcomes) == {"won": 1, "lost": 7}
    with targeting(cloud.db, server["id"]), cloud.db.reader() as session:
        assert db_api.instance_get(session, cloud.admin, server["id"]).task_state == "powering-off"


@pytest.mark.parametrize("first,second", [("stop", "pause"), ("stop", "stop")])
def test_two_actions_at_once_one_wins(cloud: Cloud, ctx: RequestContext, first: str, second: str) -> None:
    server = boot(cloud, ctx, f"raced-{first}-{second}")
    start_at = time.time() + 3.0
    args = [(cloud.db.url, str(cloud.conf.state_dir), server["id"], a, start_at) for a in (first, second)]
    with _pool(2) as pool:
        outcomes = pool.starmap(workers.api_action, args)
    wins = [o for o in outcomes if o.startswith("ok:")]
    conflicts = [o for o in outcomes if o.startswith("conflict:")]
    assert len(wins) == 1 and len(conflicts) == 1, outcomes
    final = cloud.api.get(ctx, server["id"])
    assert final["task_state"] is None
    assert final["vm_state"] == wins[0].removeprefix("ok:")
    # The loser left no action behind: only create and the winner's action.
    assert [a["action"] for a in cloud.api.list_actions(ctx, server["id"])][0] == "create"
    assert len(cloud.api.list_actions(ctx, server["id"])) == 2


def test_two_runs_scaling_one_name_at_once_make_each_server_once(cloud: Cloud, ctx: RequestContext) -> None:
    """Two boot runs asking for 3 of ``race`` at once: 3 servers, each scheduled and claimed once."""
    start_at = time.time() + 3.0
    args = [(cloud.db.url, str(cloud.conf.state_dir), "race", 3, start_at)] * 2
    with _pool(2) as pool:
        outcomes = pool.starmap(workers.scale, args)
    assert not [o for o in outcomes if o.startswith("error:")], outcomes
    # Each run scheduled what it recorded or picked up; together, the three.
    assert "race-1,race-2,race-3" in outcomes, outcomes
    servers = cloud.api.list(ctx)
    assert sorted(s["name"] for s in servers) == ["race-1", "race-2", "race-3"]
    with cloud.db.reader() as session:
        rows = session.execute(
            text("SELECT consumer_id, resource_provider_id, resource_class FROM allocations")
        )
        claims = [tuple(r) for r in rows]
    assert {c for c, _, _ in claims} == {s["id"] for s in servers}
    for s in servers:
        mine = [(p, rc) for c, p, rc in claims if c == s["id"]]
        assert len({p for p, _ in mine}) == 1 and len(mine) == len({rc for _, rc in mine}), mine


def _claims(cloud: Cloud, uuid: str) -> list[tuple[int, str]]:
    with cloud.db.reader() as session:
        rows = session.execute(
            text("SELECT resource_provider_id, resource_class FROM allocations WHERE consumer_id = :c"),
            {"c": uuid},
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


def test_a_recorded_server_is_taken_over_only_when_its_owner_is_gone_and_by_one_run(cloud: Cloud) -> None:
    """A run between recording and scheduling a server owns it: another run leaves it alone. Once
    its lease has run out (the run was killed), one of two runs at once takes it over and builds it."""
    owner = RequestContext("project-a", "alice", ["member"])
    (recorded,) = cloud.api.create(
        owner, {"name": "adopt", "flavor": "m1.small", "image": "tiny", "max_count": 1}, build=False
    )
    assert (recorded["name"], recorded["task_state"], recorded["host"]) == ("adopt-1", "scheduling", None)

    # Its owner is alive: a second run finds the server and schedules nothing.
    assert workers.scale(cloud.db.url, str(cloud.conf.state_dir), "adopt", 1, time.time()) == ""
    assert cloud.api.get(owner, recorded["id"])["task_state"] == "scheduling"
    assert _claims(cloud, recorded["id"]) == []

    # The owner died and its lease ran out: two runs at once, one takes it over.
    cloud.db.run_in_transaction(
        lambda s: s.execute(
            text("UPDATE instances SET task_lease_until = :t WHERE uuid = :u"),
            {"t": dt.datetime(2000, 1, 1), "u": recorded["id"]},
        )
    )
    start_at = time.time() + 3.0
    args = [(cloud.db.url, str(cloud.conf.state_dir), "adopt", 1, start_at)] * 2
    with _pool(2) as pool:
        outcomes = pool.starmap(workers.scale, args)
    assert sorted(outcomes) == ["", "adopt-1"], outcomes
    server = cloud.api.get(cloud.admin, recorded["id"])
    assert server["host"] is not None and server["task_state"] == "scheduling"
    claims = _claims(cloud, recorded["id"])
    assert claims and len({p for p, _ in claims}) == 1, claims
    assert [s["name"] for s in cloud.api.list(owner)] == ["adopt-1"]
