"""A dry run answers exactly what the real call answers, and changes nothing.

Check mode everywhere (modules, playbooks) is ``API.create(..., dry_run=True)``
and ``API.act(..., dry_run=True)``. Each case here runs both ways on the same
database: first the dry run (which must leave every row as it was), then the
real call; the outcome must be the same exception with the same message, or
the same decision (the action would run / did run; the host the scheduler
would pick / picked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from novakit import exceptions
from novakit.catalog import flavors, images
from novakit.compute.states import ACTION_NAMES
from novakit.context import RequestContext
from tests.functional.cloud import Cloud, boot
from tests.functional.test_bad_input import BAD_CREATES, OK, UUID


def _outcome(call: Callable[[], Any]) -> tuple[str, str] | Any:
    """What a caller sees: the error's class and message, or the value."""
    try:
        return call()
    except exceptions.NovakitError as exc:
        return (type(exc).__name__, exc.format_message())


def _both_ways(cloud: Cloud, dry: Callable[[], Any], real: Callable[[], Any]) -> tuple[Any, Any]:
    before = cloud.snapshot()
    planned = _outcome(dry)
    assert cloud.snapshot() == before, "the dry run changed the database"
    return planned, _outcome(real)


# --------------------------------------------------------------------------- create

CREATE_CASES: list[tuple[str, dict[str, Any]]] = [
    *((f"bad-{field}-{i}", change) for i, (change, field, _) in enumerate(BAD_CREATES)),
    ("unknown-flavor", {"flavor": "m9.huge"}),
    ("unknown-image", {"image": "no-such-image"}),
    ("unknown-group", {"server_group": "no-such-group"}),
    ("unknown-zone", {"availability_zone": "mars"}),
    ("unknown-same-host", {"scheduler_hints": {"same_host": [UUID]}}),
    ("unknown-different-host", {"scheduler_hints": {"different_host": [UUID]}}),
    ("image-min-ram", {"image": "big-ram"}),
    ("image-min-disk", {"image": "big-disk"}),
    ("name-taken", {"name": "taken"}),
    ("names-taken", {"name": "taken", "max_count": 2}),
]


@pytest.mark.parametrize("change", [c for _, c in CREATE_CASES], ids=[i for i, _ in CREATE_CASES])
def test_a_refused_create_is_refused_alike_by_its_dry_run(
    cloud: Cloud, ctx: RequestContext, change: dict[str, Any]
) -> None:
    images.create(cloud.db, cloud.admin, {"name": "big-ram", "min_ram": 4096})
    images.create(cloud.db, cloud.admin, {"name": "big-disk", "min_disk": 100})
    boot(cloud, ctx, "taken")
    boot(cloud, ctx, "taken-1")
    data = {**OK, **change}
    planned, real = _both_ways(
        cloud,
        lambda: cloud.api.create(ctx, data, dry_run=True),
        lambda: cloud.api.create(ctx, data),
    )
    assert isinstance(real, tuple), f"the real create was accepted: {real}"
    assert planned == real


def test_over_quota_is_refused_alike_by_the_dry_run(cloud: Cloud, ctx: RequestContext) -> None:
    from novakit import quota

    quota.set_quota(cloud.db, ctx.project_id, "instances", 2)
    planned, real = _both_ways(
        cloud,
        lambda: cloud.api.create(ctx, {**OK, "max_count": 3}, dry_run=True),
        lambda: cloud.api.create(ctx, {**OK, "max_count": 3}),
    )
    assert planned == real and real[0] == "OverQuota", real


def test_the_dry_run_picks_the_host_the_real_create_gets(cloud: Cloud, ctx: RequestContext) -> None:
    boot(cloud, ctx, "anchor")
    anchor = cloud.api.get(ctx, "anchor")
    for data in (
        {**OK, "name": "plain"},
        {**OK, "name": "big", "flavor": "m1.large", "max_count": 3},
        {**OK, "name": "beside", "scheduler_hints": {"same_host": [anchor["id"]]}},
        {**OK, "name": "apart", "scheduler_hints": {"different_host": [anchor["id"]]}},
    ):
        plan = cloud.api.create(ctx, data, dry_run=True)
        servers = cloud.api.create(ctx, data)
        # A member is told the opaque host_id its servers then show, never a host's name.
        assert [(p["name"], p["host"]) for p in plan] == [(s["name"], s["host_id"]) for s in servers]
        assert all(s["status"] == "ACTIVE" for s in servers)
    admin_plan = cloud.api.create(cloud.admin, {**OK, "name": "op"}, dry_run=True)
    assert admin_plan[0]["host"] == cloud.api.create(cloud.admin, {**OK, "name": "op"})[0]["host"]


def test_no_valid_host_is_the_dry_runs_error_and_the_real_runs_fault(
    cloud: Cloud, ctx: RequestContext
) -> None:
    flavors.create(cloud.db, cloud.admin, {"name": "giant", "vcpus": 1000, "memory_mb": 1024})
    data = {**OK, "name": "giant", "flavor": "giant"}
    planned, real = _both_ways(
        cloud, lambda: cloud.api.create(ctx, data, dry_run=True), lambda: cloud.api.create(ctx, data)
    )
    assert planned[0] == "NoValidHost"
    (server,) = real
    assert server["status"] == "ERROR" and server["fault"]["message"] == planned[1][:255]


# --------------------------------------------------------------------------- actions

# Servers in the states a caller meets, made the way a user makes them.
SETUPS: dict[str, Callable[[Cloud, RequestContext, str], dict[str, Any]]] = {
    "active": lambda c, ctx, n: boot(c, ctx, n),
    "stopped": lambda c, ctx, n: c.api.stop(ctx, boot(c, ctx, n)["id"]),
    "paused": lambda c, ctx, n: c.api.pause(ctx, boot(c, ctx, n)["id"]),
    "suspended": lambda c, ctx, n: c.api.suspend(ctx, boot(c, ctx, n)["id"]),
    "locked-by-owner": lambda c, ctx, n: c.api.lock(ctx, boot(c, ctx, n)["id"], "mine"),
    "locked-by-admin": lambda c, ctx, n: c.api.lock(c.admin, boot(c, ctx, n)["id"], "admin's"),
    "never-built": lambda c, ctx, n: c.api.create(ctx, {**OK, "name": n, "flavor": "giant"})[0],
}

OPTIONS: dict[str, dict[str, Any]] = {
    "rebuild": {"image": "tiny-2"},
    "rename": {"name": "renamed"},
    "lock": {"reason": "again"},
    "stop": {"timeout": 5},
    "resize": {"flavor": "m1.large"},
    "create_image": {"name": "snap"},
}
# Requests refused whoever asks, whatever the server's state (the options are checked first).
INVALID = [("stop", {"reboot_type": "HARD"}), ("frobnicate", {})]
CASES = [
    (action, options)
    for action in ACTION_NAMES
    for options in ([OPTIONS.get(action, {})] + ([{"reboot_type": "HARD"}] if action == "reboot" else []))
] + [
    *INVALID,
    ("rebuild", {"image": "no-such-image"}),
    ("rename", {"name": "taken"}),
]


@pytest.mark.parametrize(
    "action,options", CASES, ids=[f"{a}-{'-'.join(map(str, o.values())) or 'plain'}" for a, o in CASES]
)
def test_an_action_is_decided_alike_by_its_dry_run(
    cloud: Cloud, ctx: RequestContext, other_ctx: RequestContext, action: str, options: dict[str, Any]
) -> None:
    """Every lock and state case: the owner, a colleague of the same project, an admin and
    another project, on servers in each state; declaratively (the modules) and not (the CLI)."""
    flavors.create(cloud.db, cloud.admin, {"name": "giant", "vcpus": 1000, "memory_mb": 1024})
    boot(cloud, ctx, "taken")
    colleague = RequestContext(ctx.project_id, "carol", ["member"])
    callers = {"owner": ctx, "colleague": colleague, "admin": cloud.admin, "stranger": other_ctx}
    n = 0
    decided: dict[str, set[str]] = {}
    for setup, make in SETUPS.items():
        for who, caller in callers.items():
            for declarative in (False, True):
                n += 1
                server = make(cloud, ctx, f"s{n}")

                def act(
                    dry: bool,
                    caller: RequestContext = caller,
                    declarative: bool = declarative,
                    uuid: str = server["id"],
                ) -> Any:
                    out = cloud.api.act(caller, uuid, action, options, dry_run=dry, declarative=declarative)
                    return ("changed" if out.changed else "unchanged", out.action)

                planned, real = _both_ways(cloud, lambda: act(True), lambda: act(False))
                case = f"{setup}/{who}/{'declarative' if declarative else 'direct'}"
                assert planned == real, f"{action} {options} on {case}: dry run {planned}, real {real}"
                decided.setdefault(str(real[0]), set()).add(case)
    if (action, options) in INVALID:
        assert set(decided) == {"ValidationError"}, decided
    else:  # the cases really differ: each action is refused somewhere (a lock, a state, a project)
        assert len(decided) > 1, decided
