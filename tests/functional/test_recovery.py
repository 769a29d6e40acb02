"""Interrupted work: its owner, its lease, and Nova's recovery rule for every task state.

Each test stops a request part-way, deterministically (an action started and never sent, or a
transport that lets another caller act at a chosen point), and then moves a clock past the
owner's lease instead of sleeping.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select

from novakit import exceptions, quota
from novakit.cells.registry import UNSCHEDULED
from novakit.compute.states import PowerState
from novakit.context import RequestContext
from novakit.db.models import Instance, utcnow
from novakit.heal.manager import RECOVER_EVENT, heal
from novakit.host.messages import ComputeRequest, ComputeResult
from novakit.placement import api as placement
from tests.functional.cloud import Cloud, boot


def _later(cloud: Cloud) -> Callable[[], dt.datetime]:
    """A clock past every lease taken now."""
    at = utcnow() + dt.timedelta(
        seconds=cloud.conf.compute.build_timeout + cloud.conf.compute.shutdown_timeout + 5
    )
    return lambda: at


def _guest(cloud: Cloud, server: dict[str, Any]) -> PowerState | None:
    # A member's view names no host; boot() gives the operator's, which does.
    host = server["host"] or cloud.api.get(cloud.admin, server["id"])["host"]
    return cloud.fake(host).list_instances().get(server["id"])


def _action(cloud: Cloud, ctx: RequestContext, uuid: str, name: str) -> dict[str, Any]:
    return [a for a in cloud.api.list_actions(ctx, uuid) if a["action"] == name][-1]


def _events(action: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["event"], e["result"]) for e in action["events"]]


def _abandon(cloud: Cloud, ctx: RequestContext, uuid: str, action: str, **options: Any) -> ComputeRequest:
    """Start ``action`` and never send it: its owner died after the write that started it."""
    out = cloud.api.act(ctx, uuid, action, options, defer=True)
    assert out.changed and out.request is not None
    return out.request


class _Between:
    """A transport factory that lets ``between()`` run once, when an ``operation`` request reaches its
    host: ``before`` the host acts, or after it and before the answer gets back."""

    def __init__(self, cloud: Cloud, operation: str, between: Callable[[], None], *, before: bool) -> None:
        self.real = cloud.api.conductor.rpc.transport_factory
        self.operation, self.between, self.before = operation, between, before
        self.done = False

    def __call__(self, host: str, info: dict[str, Any]) -> Any:
        transport = self.real(host, info)
        outer = self

        class Wrapped:
            def call(self, request: ComputeRequest) -> ComputeResult:
                due = request.operation == outer.operation and not outer.done
                if due and outer.before:
                    outer.done = True
                    outer.between()
                result = transport.call(request)
                if due and not outer.before:
                    outer.done = True
                    outer.between()
                return result

        return Wrapped()


def _interleave(cloud: Cloud, operation: str, between: Callable[[], None], *, before: bool = False) -> None:
    cloud.api.conductor.rpc.transport_factory = _Between(cloud, operation, between, before=before)


# --- issue 12, item 1: a crashed delete ----------------------------------------------------------


def test_a_delete_killed_half_way_is_finished_by_heal_once_its_owner_is_gone(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "half-deleted")
    _abandon(cloud, ctx, server["id"], "delete")
    assert cloud.api.get(ctx, server["id"])["task_state"] == "deleting"

    # While the delete's lease lasts its owner may still be at it: heal leaves it alone.
    assert heal(cloud.db, cloud.conf).corrections == []
    report = heal(cloud.db, cloud.conf, clock=_later(cloud))

    assert [(c.kind, c.instance, c.applied) for c in report.corrections] == [
        ("task_recovered", server["id"], True)
    ]
    with pytest.raises(exceptions.InstanceNotFound):
        cloud.api.get(ctx, server["id"])
    assert _guest(cloud, server) is None
    assert placement.get_allocations_for_consumer(cloud.db, server["id"]) == {}
    delete = _action(cloud, ctx, server["id"], "delete")
    assert delete["finish_time"] is not None
    assert _events(delete) == [(RECOVER_EVENT, "Success"), ("compute_terminate_instance", "Success")]
    assert heal(cloud.db, cloud.conf, clock=_later(cloud)).corrections == []


@pytest.mark.parametrize("declarative", [True, False])
def test_a_delete_asked_again_drives_a_delete_whose_owner_is_gone(
    cloud: Cloud, ctx: RequestContext, declarative: bool
) -> None:
    server = boot(cloud, ctx, "stuck-deleting")
    _abandon(cloud, ctx, server["id"], "delete")
    if declarative:
        # Its owner may still be at it: a declarative delete finds it under way and changes nothing.
        again = cloud.api.act(
            ctx.with_request_id("req-again-early"), server["id"], "delete", declarative=True
        )
        assert not again.changed and again.server is not None and again.server["task_state"] == "deleting"

    cloud.api.conductor.clock = _later(cloud)
    again = cloud.api.act(ctx.with_request_id("req-again"), server["id"], "delete", declarative=declarative)

    assert again.changed and again.server is not None and again.server["status"] == "DELETED"
    assert _guest(cloud, server) is None
    assert placement.get_allocations_for_consumer(cloud.db, server["id"]) == {}
    assert _action(cloud, ctx, server["id"], "delete")["finish_time"] is not None


# --- issue 12, item 2: a lost quota race ---------------------------------------------------------


def test_losers_of_the_quota_recheck_go_to_error_saying_which_quota(
    cloud: Cloud, ctx: RequestContext
) -> None:
    quota.set_quota(cloud.db, ctx.project_id, "instances", 1)
    # Both pass the early check (nothing is claimed yet); the recheck in the claim decides.
    [first] = cloud.api.create(ctx, {"name": "first", "flavor": "m1.small", "image": "tiny"}, build=False)
    [second] = cloud.api.create(ctx, {"name": "second", "flavor": "m1.small", "image": "tiny"}, build=False)
    cloud.api.conductor.build_instances(ctx, [first["id"]])

    cloud.api.conductor.build_instances(ctx, [second["id"]])

    lost = cloud.api.get(ctx, second["id"])
    assert (lost["status"], lost["task_state"], lost["host"]) == ("ERROR", None, None)
    assert lost["fault"]["message"].startswith("Quota exceeded for instances in project project-a")
    create = _action(cloud, ctx, second["id"], "create")
    assert create["finish_time"] is not None and create["message"] == "Error"
    assert placement.get_allocations_for_consumer(cloud.db, second["id"]) == {}
    assert cloud.api.get(ctx, first["id"])["status"] == "ACTIVE"
    assert cloud.api.delete(ctx, second["id"])["status"] == "DELETED"  # its name is free again


def test_instances_a_quota_trimmed_from_a_request_say_which_quota(cloud: Cloud, ctx: RequestContext) -> None:
    quota.set_quota(cloud.db, ctx.project_id, "instances", 3)
    servers = cloud.api.create(
        ctx,
        {"name": "trim", "flavor": "m1.small", "image": "tiny", "min_count": 1, "max_count": 3},
        build=False,
    )
    boot(cloud, ctx, "meanwhile")  # takes one of the three before the request is claimed

    cloud.api.conductor.build_instances(ctx, [s["id"] for s in servers])

    shown = [cloud.api.get(ctx, s["id"]) for s in servers]
    assert [s["status"] for s in shown] == ["ACTIVE", "ACTIVE", "ERROR"]
    message = shown[2]["fault"]["message"]
    assert message.startswith("Quota exceeded for instances") and "did not fit" not in message
    assert _action(cloud, ctx, servers[2]["id"], "create")["finish_time"] is not None


# --- issue 12, item 3: heal and a live build -----------------------------------------------------


def test_a_build_heal_adopted_keeps_its_guest_and_claim_when_its_owner_records_it(
    cloud: Cloud, ctx: RequestContext
) -> None:
    # The owner stalls past its lease after the host built the guest; heal adopts the build;
    # then the owner's own record comes in and loses its guarded write.
    reports: list[Any] = []
    _interleave(cloud, "build", lambda: reports.append(heal(cloud.db, cloud.conf, clock=_later(cloud))))

    [server] = cloud.api.create(ctx, {"name": "adopted", "flavor": "m1.small", "image": "tiny"})

    assert [c.kind for c in reports[0].corrections] == ["build_adopted"]
    assert (server["status"], server["power_state_name"]) == ("ACTIVE", "Running")
    assert _guest(cloud, server) == PowerState.RUNNING
    assert placement.get_allocations_for_consumer(cloud.db, server["id"]) != {}
    create = _action(cloud, ctx, server["id"], "create")
    assert create["finish_time"] is not None and create["message"].startswith("Not recorded")
    assert ("conductor_heal_adopt_build", "Success") in _events(create)
    assert ("compute__do_build_and_run_instance", "Success") in _events(create)
    assert cloud.api.stop(ctx, server["id"])["status"] == "SHUTOFF"


def test_a_build_deleted_while_it_ran_loses_its_guest_and_claim(cloud: Cloud, ctx: RequestContext) -> None:
    # Deleted while its host builds it: the delete finds no guest to destroy yet.
    _interleave(
        cloud, "build", lambda: cloud.api.delete(ctx.with_request_id("req-deleter"), "doomed"), before=True
    )

    assert cloud.api.create(ctx, {"name": "doomed", "flavor": "m1.small", "image": "tiny"}) == []

    with cloud.db.target_cell(UNSCHEDULED), cloud.db.reader() as session:
        row = session.execute(select(Instance).where(Instance.display_name == "doomed")).scalar_one()
        uuid, host = row.uuid, row.host
    assert uuid not in cloud.fake(host).list_instances()
    assert placement.get_allocations_for_consumer(cloud.db, uuid) == {}
    create = _action(cloud, ctx, uuid, "create")
    assert create["finish_time"] is not None and create["message"].startswith("Not recorded")


# --- issue 12, item 7: the audit trail of an action that lost a race -----------------------------


def test_a_hard_reboot_over_a_pause_leaves_the_pause_recorded_and_its_caller_answered(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "paused-over")
    rebooter = ctx.with_request_id("req-hard-reboot")
    _interleave(cloud, "pause", lambda: cloud.api.reboot(rebooter, server["id"], "HARD"), before=True)

    # The hard reboot, started after the pause, reaches the host first; the pause then comes.
    shown = cloud.api.pause(ctx, server["id"])  # no error: a hard reboot took over

    assert (shown["status"], shown["task_state"]) == ("ACTIVE", None)
    # The host did not run the older pause after the newer reboot: database == hypervisor.
    assert _guest(cloud, server) == PowerState.RUNNING
    actions = cloud.api.list_actions(ctx, server["id"])
    pause = next(a for a in actions if a["action"] == "pause")
    assert pause["finish_time"] is not None
    assert pause["message"].startswith("Not recorded: the instance changed meanwhile")
    assert _events(pause) == [("compute_pause_instance", "Error")]
    reboot = next(a for a in actions if a["action"] == "reboot")
    assert reboot["request_id"] == "req-hard-reboot" and reboot["finish_time"] is not None
    assert _events(reboot) == [("compute_reboot_instance", "Success")]


def test_a_host_runs_an_instances_operations_in_the_order_they_started(
    cloud: Cloud, ctx: RequestContext
) -> None:
    """Two requests for one instance reach its host in the other order: the older is refused."""
    server = boot(cloud, ctx, "in-order")
    pause = _abandon(cloud, ctx, server["id"], "pause")
    reboot = _abandon(cloud, ctx.with_request_id("req-later"), server["id"], "reboot", reboot_type="HARD")
    assert pause.issued_at is not None and reboot.issued_at is not None
    assert pause.issued_at < reboot.issued_at

    rpc = cloud.api.conductor.rpc
    first = rpc.send(reboot)
    late = rpc.send(pause)

    assert first.results[0].ok
    (refused,) = late.results
    assert not refused.ok and refused.fault is not None
    assert "started later" in refused.fault.message and server["id"] in refused.fault.message
    assert _guest(cloud, server) == PowerState.RUNNING


def test_a_delete_over_a_stop_leaves_the_stop_recorded_and_its_caller_answered(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "stopped-over")
    _interleave(cloud, "stop", lambda: cloud.api.delete(ctx.with_request_id("req-delete"), server["id"]))

    shown = cloud.api.stop(ctx, server["id"])

    assert shown["status"] == "DELETED"
    stop = _action(cloud, ctx, server["id"], "stop")
    assert stop["finish_time"] is not None and stop["message"].startswith("Not recorded")
    assert _events(stop) == [("compute_stop_instance", "Success")]
    assert placement.get_allocations_for_consumer(cloud.db, server["id"]) == {}


# --- ownership -------------------------------------------------------------------------------------


def test_an_owner_heal_took_over_from_records_its_work_without_overwriting(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "slow-owner")
    request = _abandon(cloud, ctx, server["id"], "stop")
    heal(cloud.db, cloud.conf, clock=_later(cloud))  # stops it again, and records it stopped
    cloud.api.start(ctx.with_request_id("req-start"), server["id"])

    cloud.api.conductor.run_action(ctx, request)  # the old owner comes back at last

    shown = cloud.api.get(ctx, server["id"])
    assert (shown["status"], shown["task_state"]) == ("ACTIVE", None)  # the later start stands
    stop = _action(cloud, ctx, server["id"], "stop")
    assert stop["message"].startswith("Not recorded")
    assert (RECOVER_EVENT, "Success") in _events(stop)


def test_a_worker_that_starts_after_heal_took_its_work_over_leaves_it(
    cloud: Cloud, ctx: RequestContext
) -> None:
    from novakit import worker

    server = boot(cloud, ctx, "late-worker")
    request = _abandon(cloud, ctx, server["id"], "pause")
    heal(cloud.db, cloud.conf, clock=_later(cloud))  # the guest runs: the pause is rolled back
    job = worker.Job.for_context(
        ctx, server["id"], db_url=cloud.db.url, request=request.to_wire(), config=None
    )
    cloud.api.conductor.renew_leases(ctx, [server["id"]])  # nothing of this request's left to renew
    worker.run(job)

    assert cloud.api.get(ctx, server["id"])["status"] == "ACTIVE"
    assert _guest(cloud, server) == PowerState.RUNNING


# --- Nova's rule for every task state (heal's TASK_RULES) ------------------------------------------

#: (the action interrupted, the state it starts from, what the host got done before the owner died,
#:  the vm_state heal leaves, the guest's power state, the recovery event's result)
CASES = [
    ("stop", None, None, "stopped", PowerState.SHUTDOWN, "Success"),
    ("stop", None, "power_off", "stopped", PowerState.SHUTDOWN, "Success"),
    ("start", "stop", None, "active", PowerState.RUNNING, "Success"),
    ("start", "stop", "power_on", "active", PowerState.RUNNING, "Success"),
    ("reboot", None, None, "active", PowerState.RUNNING, "Success"),
    ("reboot", None, "power_off", "active", PowerState.RUNNING, "Success"),
    ("reboot_hard", "stop", None, "active", PowerState.RUNNING, "Success"),
    ("pause", None, None, "active", PowerState.RUNNING, "Error"),
    ("pause", None, "pause", "paused", PowerState.PAUSED, "Success"),
    ("unpause", "pause", None, "active", PowerState.RUNNING, "Success"),
    ("unpause", "pause", "unpause", "active", PowerState.RUNNING, "Success"),
    ("suspend", None, None, "active", PowerState.RUNNING, "Error"),
    ("suspend", None, "suspend", "suspended", PowerState.SUSPENDED, "Success"),
    ("resume", "suspend", None, "active", PowerState.RUNNING, "Success"),
    ("resume", "suspend", "resume", "active", PowerState.RUNNING, "Success"),
    ("rebuild", None, None, "error", PowerState.RUNNING, "Error"),
    ("pause", None, "vanish", "error", None, "Error"),
]


@pytest.mark.parametrize(("action", "before", "done", "end", "power", "result"), CASES)
def test_an_interrupted_task_is_finished_or_rolled_back_as_nova_does(
    cloud: Cloud,
    ctx: RequestContext,
    action: str,
    before: str | None,
    done: str | None,
    end: str,
    power: PowerState | None,
    result: str,
) -> None:
    server = boot(cloud, ctx, f"interrupted-{action}-{done}")
    if before is not None:
        cloud.api.act(ctx, server["id"], before)
    name, options = ("reboot", {"reboot_type": "HARD"}) if action == "reboot_hard" else (action, {})
    if action == "rebuild":
        options = {"image": "tiny-2"}
    _abandon(cloud, ctx, server["id"], name, **options)
    if done is not None:
        getattr(cloud.fake(server["host"]), done)(
            server["id"] if done == "vanish" else SimpleNamespace(uuid=server["id"])
        )

    report = heal(cloud.db, cloud.conf, clock=_later(cloud))

    assert [(c.kind, c.applied) for c in report.corrections] == [("task_recovered", True)], report
    shown = cloud.api.get(ctx, server["id"])
    assert (shown["vm_state"], shown["task_state"]) == (end, None)
    assert _guest(cloud, server) == power
    assert shown["power_state"] == int(power if power is not None else PowerState.NOSTATE)
    recorded = _action(cloud, ctx, server["id"], "reboot" if action == "reboot_hard" else action)
    assert recorded["request_id"] == ctx.request_id and recorded["finish_time"] is not None
    assert (RECOVER_EVENT, result) == _events(recorded)[0]
    if end == "error":
        assert "interrupted" in shown["fault"]["message"] or "vanished" in shown["fault"]["message"]
    # Nothing left for a second heal; the server takes requests again.
    assert heal(cloud.db, cloud.conf, clock=_later(cloud)).corrections == []
    assert cloud.api.delete(ctx, server["id"])["status"] == "DELETED"
