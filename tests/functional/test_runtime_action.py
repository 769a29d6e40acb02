"""Adding an action is one row: a row registered at run time works through every face.

The test adds ``ping`` (a harmless action: the host asks a running guest to answer ``count``
times) as a new action would be added: one row of the state table (its operation and the
driver call that runs it, its recorded name, what failure does, its recovery rule) and one
operation on the fake driver. Nothing else changes, and the Python API, the CLI's
``server action``, the conductor (the playbooks' round trip) and heal all take it from the row.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import Field
from typer.testing import CliRunner

from novakit import exceptions
from novakit.cli.main import app
from novakit.compute import schemas, states
from novakit.compute.states import HostCall, PowerState, Recovery, Transition, VmState
from novakit.context import RequestContext
from novakit.db.models import utcnow
from novakit.heal.manager import RECOVER_EVENT, heal
from novakit.host.messages import InstanceSpec
from novakit.virt.fake import FakeDriver
from tests.functional.cloud import Cloud, boot


class PingTask(enum.StrEnum):
    """The ping's task state (a row added at run time brings its own)."""

    PINGING = "pinging"


class PingOptions(schemas.NoOptions):
    count: int = Field(1, ge=1, le=5)


def _fake_ping(self: FakeDriver, instance: InstanceSpec, count: int) -> None:
    """The fake driver's new operation: a running guest answers; any other is refused."""
    with self._locked_state() as state:
        guest = self._guest(state, instance.uuid)
        if guest["power_state"] != PowerState.RUNNING:
            raise exceptions.InstanceNotRunning(instance_uuid=instance.uuid)
        guest["pings"] = guest.get("pings", 0) + count


PING = Transition(
    "ping",
    vm_states=frozenset({VmState.ACTIVE}),
    task_states=frozenset({None}),
    passes=(PingTask.PINGING,),  # type: ignore[arg-type]
    end_power_state=PowerState.RUNNING,
    operation="ping",
    host_call=HostCall("compute_ping_instance", lambda d, i, o: d.ping(i, int(o.get("count", 1)))),  # type: ignore[attr-defined]
    needs_host=True,
    options=PingOptions,
    recovery={PingTask.PINGING: Recovery({PowerState.RUNNING: "retry"}, "roll_back")},
    retry_options=lambda conf: {"count": 1},
)


@pytest.fixture
def ping(monkeypatch: pytest.MonkeyPatch) -> Iterator[Transition]:
    """The row and the fake driver's operation, for one test; taken out again after it."""
    monkeypatch.setattr(FakeDriver, "ping", _fake_ping, raising=False)
    states.register(PING)
    try:
        yield PING
    finally:
        states.unregister("ping")
    assert "ping" not in states.ACTIONS and "ping" not in states.ACTION_NAMES


def _pings(cloud: Cloud, server: dict[str, Any]) -> int:
    state = json.loads(cloud.fake(server["host"]).state_file.read_text())
    return int(state["instances"][server["id"]].get("pings", 0))


def _action(cloud: Cloud, ctx: RequestContext, uuid: str) -> dict[str, Any]:
    return [a for a in cloud.api.list_actions(ctx, uuid) if a["action"] == "ping"][-1]


def _events(action: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["event"], e["result"]) for e in action["events"]]


def _later(cloud: Cloud) -> Callable[[], dt.datetime]:
    at = utcnow() + dt.timedelta(
        seconds=cloud.conf.compute.build_timeout + cloud.conf.compute.shutdown_timeout + 5
    )
    return lambda: at


def test_a_registered_action_runs_through_the_python_api(
    cloud: Cloud, ctx: RequestContext, ping: Transition
) -> None:
    server = boot(cloud, ctx, "pinged")

    out = cloud.api.act(ctx, server["id"], "ping", {"count": 2})

    assert out.changed and out.action == "ping"
    assert out.server is not None and (out.server["status"], out.server["task_state"]) == ("ACTIVE", None)
    assert _pings(cloud, server) == 2
    recorded = _action(cloud, ctx, server["id"])
    assert recorded["finish_time"] is not None and not recorded.get("message")
    assert _events(recorded) == [("compute_ping_instance", "Success")]


def test_a_registered_action_refuses_as_its_row_says(
    cloud: Cloud, ctx: RequestContext, ping: Transition
) -> None:
    server = boot(cloud, ctx, "refused")
    before = cloud.snapshot()

    with pytest.raises(exceptions.ValidationError) as bad:
        cloud.api.act(ctx, server["id"], "ping", {"count": 9})
    assert bad.value.field == "options.count"
    with pytest.raises(exceptions.ValidationError) as unknown:
        cloud.api.act(ctx, server["id"], "ping", {"size": 1})
    assert unknown.value.field == "options.size"
    cloud.api.act(ctx, server["id"], "stop")
    stopped = cloud.snapshot()
    with pytest.raises(exceptions.InstanceInvalidState):
        cloud.api.act(ctx, server["id"], "ping")
    assert cloud.snapshot() == stopped
    assert before != stopped  # the stop did change it; the refusals did not


def test_a_registered_action_that_fails_on_its_host_leaves_the_server_as_it_was(
    cloud: Cloud, ctx: RequestContext, ping: Transition
) -> None:
    server = boot(cloud, ctx, "unanswered")
    cloud.fake(server["host"]).pause(InstanceSpec.model_construct(uuid=server["id"]))
    # The records still say active (nothing told them of the pause): the host refuses the ping.

    out = cloud.api.act(ctx, server["id"], "ping")

    assert out.server is not None
    assert (out.server["vm_state"], out.server["task_state"]) == ("active", None)  # on_failure: as it was
    recorded = _action(cloud, ctx, server["id"])
    assert _events(recorded) == [("compute_ping_instance", "Error")]


def test_a_registered_action_runs_through_the_cli(
    cloud: Cloud, ctx: RequestContext, ping: Transition
) -> None:
    server = boot(cloud, ctx, "cli-pinged")
    env = {
        "NOVAKIT_DB_URL": cloud.db.url,
        "NOVAKIT_STATE_DIR": str(cloud.conf.state_dir),
        "NOVAKIT_CONFIG": None,
        "NOVAKIT_PROJECT": ctx.project_id,
        "NOVAKIT_USER": ctx.user_id,
        "NOVAKIT_ROLES": ",".join(ctx.roles),
        "NOVAKIT_REQUEST_ID": None,
        "COLUMNS": "250",
    }
    runner = CliRunner()

    done = runner.invoke(app, ["server", "action", "ping", "cli-pinged", "-o", "count=3"], env=env)

    assert done.exit_code == 0, (done.stdout, done.stderr)
    assert done.stdout.strip() == "cli-pinged: ACTIVE (vm_state active, power Running)"
    assert _pings(cloud, server) == 3
    table = runner.invoke(app, ["states"], env=env)
    assert table.exit_code == 0 and "| ping | active | none | pinging |" in table.stdout

    bad = runner.invoke(app, ["server", "action", "ping", "cli-pinged", "-o", "count=none"], env=env)
    assert bad.exit_code == 1 and "options.count" in bad.stderr
    unknown = runner.invoke(app, ["server", "action", "pong", "cli-pinged"], env=env)
    assert unknown.exit_code == 1 and "'pong' is not one of" in unknown.stderr and "ping" in unknown.stderr
    assert _pings(cloud, server) == 3


def test_a_registered_action_runs_through_the_conductors_round_trip(
    cloud: Cloud, ctx: RequestContext, ping: Transition
) -> None:
    """The playbooks' shape: the API starts it, the request goes to the host, the answer is
    recorded by the conductor."""
    server = boot(cloud, ctx, "played")

    started = cloud.api.act(ctx, server["id"], "ping", {"count": 4}, defer=True)
    assert started.request is not None
    assert (started.request.operation, started.request.action) == ("ping", "ping")
    assert started.request.options == {"count": 4}
    assert cloud.api.get(ctx, server["id"])["task_state"] == "pinging"

    conductor = cloud.api.conductor
    result = conductor.rpc.send(started.request)
    conductor.record_action_result(ctx, started.request, result)

    shown = cloud.api.get(ctx, server["id"])
    assert (shown["status"], shown["task_state"]) == ("ACTIVE", None)
    assert _pings(cloud, server) == 4
    assert _events(_action(cloud, ctx, server["id"])) == [("compute_ping_instance", "Success")]


@pytest.mark.parametrize(
    ("paused", "end", "pings", "result"), [(False, "active", 1, "Success"), (True, "active", 0, "Error")]
)
def test_heal_recovers_an_interrupted_registered_action_by_its_rule(
    cloud: Cloud, ctx: RequestContext, ping: Transition, paused: bool, end: str, pings: int, result: str
) -> None:
    """Its owner died after the write that started it: a running guest is pinged again (the
    row's ``retry``), any other is rolled back (``roll_back``: the task cleared)."""
    server = boot(cloud, ctx, f"interrupted-ping-{paused}")
    started = cloud.api.act(ctx, server["id"], "ping", defer=True)
    assert started.request is not None  # never sent
    if paused:
        cloud.fake(server["host"]).pause(InstanceSpec.model_construct(uuid=server["id"]))

    report = heal(cloud.db, cloud.conf, clock=_later(cloud))

    assert [(c.kind, c.applied) for c in report.corrections] == [("task_recovered", True)], report
    shown = cloud.api.get(ctx, server["id"])
    assert (shown["vm_state"], shown["task_state"]) == (end, None)
    assert _pings(cloud, server) == pings
    recorded = _action(cloud, ctx, server["id"])
    assert recorded["request_id"] == ctx.request_id and recorded["finish_time"] is not None
    assert _events(recorded)[0] == (RECOVER_EVENT, result)
    assert heal(cloud.db, cloud.conf, clock=_later(cloud)).corrections == []


def test_a_row_that_does_not_hold_together_is_refused(ping: Transition) -> None:
    with pytest.raises(exceptions.ValidationError) as taken:
        states.register(ping)
    assert taken.value.field == "action"
    stray = Transition(
        "pong",
        vm_states=frozenset({VmState.ACTIVE}),
        task_states=frozenset({None}),
        passes=(PingTask.PINGING,),  # type: ignore[arg-type]
        recovery={"powering-off": Recovery({}, "retry")},
    )
    with pytest.raises(exceptions.ValidationError) as rule:
        states.register(stray)
    assert rule.value.field == "recovery" and "pong" not in states.ACTIONS


def test_the_tables_rows_hold_together() -> None:
    """Every step of ``prepare`` belongs to a row; every operation a row runs on its host has a
    recovery rule for each task state it passes through (an interrupted one has an owner)."""
    from novakit.compute import prepare

    assert set(prepare.STEPS) <= set(states.ACTIONS)
    for t in states.ACTIONS.values():
        if t.host_call is not None:
            assert set(t.recovery) == set(t.passes), t.action
    assert states.host_calls()["reboot"].event == "compute_reboot_instance"
