"""Builds handed to the service's pool (``API.later``) wait together and are scheduled in one round
(``Conductor.build_later``, ``Builds.first_rounds_together``): what each server ends as, its action,
its claim and its fault are those of a build scheduled alone.

``later`` here keeps the work it is handed and the test runs it, in order, as the pool would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from novakit.catalog import flavors
from novakit.compute.api import API
from novakit.context import RequestContext
from novakit.placement import api as placement
from tests.functional.cloud import HOSTS, Cloud


class Pool:
    """What ``novakit serve``'s pool is to the API, run by hand: ``run()`` does what was handed over."""

    def __init__(self) -> None:
        self.work: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def __call__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.work.append((fn, args))

    def run(self) -> None:
        while self.work:
            fn, args = self.work.pop(0)
            fn(*args)


@pytest.fixture
def pool() -> Pool:
    return Pool()


@pytest.fixture
def served(cloud: Cloud, pool: Pool) -> API:
    return API(cloud.db, cloud.conf, later=pool)


@pytest.fixture
def passes(served: API, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many servers each pass of the scheduler placed, in order."""
    scheduler = served.conductor.services.scheduler
    seen: list[int] = []
    original = scheduler.select_destinations

    def counted(spec: Any, uuids: list[str], **kwargs: Any) -> Any:
        seen.append(len(uuids))
        return original(spec, uuids, **kwargs)

    monkeypatch.setattr(scheduler, "select_destinations", counted)
    return seen


def _own(ctx: RequestContext) -> RequestContext:
    """A request of ``ctx``'s user: its own request id, as each HTTP request has."""
    return RequestContext(project_id=ctx.project_id, user_id=ctx.user_id, roles=list(ctx.roles))


def _create_action(cloud: Cloud, uuid: str) -> dict[str, Any]:
    actions = cloud.api.list_actions(cloud.admin, uuid)
    assert [a["action"] for a in actions] == ["create"]
    return actions[0]


def test_builds_that_wait_together_are_scheduled_in_one_round_each_its_own_request(
    cloud: Cloud, ctx: RequestContext, served: API, pool: Pool, passes: list[int]
) -> None:
    requests = [_own(ctx) for _ in range(4)]
    made = [
        served.create(r, {"name": f"web-{n}", "flavor": "m1.small", "image": "tiny"})[0]
        for n, r in enumerate(requests)
    ]
    assert {s["status"] for s in made} == {"BUILD"}
    # One drain handed to the pool for all four: the later ones wait for it.
    assert len(pool.work) == 1
    pool.run()
    assert passes == [4]
    for request, server in zip(requests, made, strict=True):
        shown = cloud.api.get(cloud.admin, server["id"])
        assert shown["status"] == "ACTIVE" and shown["host"] in HOSTS
        action = _create_action(cloud, server["id"])
        assert action["request_id"] == request.request_id
        events = {e["event"]: e["result"] for e in action["events"]}
        assert events["compute__do_build_and_run_instance"] == "Success"
        usage = placement.get_usages(cloud.db, shown["host"])
        assert usage["VCPU"] >= 1
        assert server["id"] in cloud.fake(shown["host"]).list_instances()


def test_a_build_the_shared_round_left_out_ends_as_it_would_alone(
    cloud: Cloud, ctx: RequestContext, served: API, pool: Pool, passes: list[int]
) -> None:
    # Only compute-3 (64 GB) holds one of these, and only one.
    flavors.create(cloud.db, cloud.admin, {"name": "huge", "vcpus": 1, "memory_mb": 40000, "root_gb": 1})
    made = [
        served.create(_own(ctx), {"name": f"big-{n}", "flavor": "huge", "image": "tiny"})[0] for n in range(2)
    ]
    pool.run()
    # The shared round placed one; the other was scheduled again alone.
    assert passes == [2, 1]
    shown = [cloud.api.get(cloud.admin, s["id"]) for s in made]
    assert sorted(s["status"] for s in shown) == ["ACTIVE", "ERROR"]
    placed, failed = sorted(shown, key=lambda s: s["status"])
    assert placed["host"] == "compute-3"
    # The same fault as a build that never shared a round: one booted alone now, in the caller.
    alone = cloud.api.create(_own(ctx), {"name": "big-alone", "flavor": "huge", "image": "tiny"})[0]
    assert alone["status"] == "ERROR"
    assert failed["fault"]["message"] == cloud.api.get(cloud.admin, alone["id"])["fault"]["message"]
    assert failed["fault"]["message"].startswith("No valid host was found. ")
    assert failed["host"] is None
    assert placement.get_usages(cloud.db, "compute-3")["MEMORY_MB"] == 40000
    assert [e["result"] for e in _create_action(cloud, failed["id"])["events"]] == ["Error"]


def test_a_server_deleted_before_its_round_is_left_out_and_the_others_build(
    cloud: Cloud, ctx: RequestContext, served: API, pool: Pool, passes: list[int]
) -> None:
    made = [
        served.create(_own(ctx), {"name": f"app-{n}", "flavor": "m1.small", "image": "tiny"})[0]
        for n in range(3)
    ]
    cloud.api.delete(ctx, made[1]["id"])
    pool.run()
    left = {s["id"]: s["status"] for s in cloud.api.list(cloud.admin)}
    assert left == {made[0]["id"]: "ACTIVE", made[2]["id"]: "ACTIVE"}
    for host in HOSTS:
        assert made[1]["id"] not in cloud.fake(host).list_instances()
    assert sum(placement.get_usages(cloud.db, h).get("VCPU", 0) for h in HOSTS) == 2
    assert sum(passes) <= 3


def test_builds_that_ask_differently_are_scheduled_each_in_its_own_pass(
    cloud: Cloud, ctx: RequestContext, served: API, pool: Pool, passes: list[int]
) -> None:
    first = served.create(_own(ctx), {"name": "small", "flavor": "m1.small", "image": "tiny"})[0]
    second = served.create(_own(ctx), {"name": "large", "flavor": "m1.large", "image": "tiny"})[0]
    near = served.create(
        _own(ctx),
        {
            "name": "near",
            "flavor": "m1.small",
            "image": "tiny",
            "scheduler_hints": {"same_host": [first["id"]]},
        },
    )[0]
    pool.run()
    assert passes == [1, 1, 1]
    shown = {s["name"]: s for s in cloud.api.list(cloud.admin)}
    assert {n: s["status"] for n, s in shown.items()} == {
        "small": "ACTIVE",
        "large": "ACTIVE",
        "near": "ACTIVE",
    }
    assert shown["near"]["host"] == shown["small"]["host"]
    assert second["id"] == shown["large"]["id"] and near["id"] == shown["near"]["id"]


def test_a_round_where_one_host_fails_reschedules_its_builds_each_under_its_request(
    cloud: Cloud, ctx: RequestContext, served: API, pool: Pool, passes: list[int]
) -> None:
    cloud.add_host("compute-3", failure_mode="fail_every_spawn")  # the roomiest host: chosen first
    requests = [_own(ctx) for _ in range(3)]
    made = [
        served.create(r, {"name": f"re-{n}", "flavor": "m1.small", "image": "tiny"})[0]
        for n, r in enumerate(requests)
    ]
    pool.run()
    assert passes == [3]
    rescheduled = 0
    for request, server in zip(requests, made, strict=True):
        shown = cloud.api.get(cloud.admin, server["id"])
        assert shown["status"] == "ACTIVE" and shown["host"] != "compute-3"
        action = _create_action(cloud, server["id"])
        assert action["request_id"] == request.request_id
        builds = [
            (e["host"], e["result"])
            for e in action["events"]
            if e["event"] == "compute__do_build_and_run_instance"
        ]
        assert builds[-1] == (shown["host"], "Success")
        assert builds[:-1] in ([], [("compute-3", "Error")])
        rescheduled += len(builds) - 1
    assert rescheduled >= 1  # the shared round sent at least one build to the failing host
    assert placement.get_usages(cloud.db, "compute-3").get("VCPU", 0) == 0
    assert not cloud.fake("compute-3").list_instances()
