"""Requests to hosts (novakit.compute.rpc): answered by registered hosts, refused for others,
and the way heal and the background worker reach hosts without a conductor's scheduler."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import update

from novakit import worker
from novakit.cells.registry import targeting
from novakit.compute.api import API
from novakit.compute.rpc import ComputeRPC, instance_spec
from novakit.compute.states import PowerState
from novakit.conductor.manager import Conductor
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import ComputeNode
from novakit.heal.manager import heal
from novakit.host.messages import ComputeRequest
from novakit.transport.factory import get_transport
from tests.functional.cloud import Cloud, boot


class _Counted:
    """A transport factory that counts what it was asked to carry, per host and operation."""

    def __init__(self, cloud: Cloud) -> None:
        self.cloud = cloud
        self.calls: list[tuple[str, str]] = []

    def __call__(self, host: str, info: dict[str, Any]) -> Any:
        transport = get_transport(host, info, self.cloud.conf.compute.max_concurrent_builds)
        call = transport.call

        def counted(request: ComputeRequest) -> Any:
            self.calls.append((host, request.operation))
            return call(request)

        transport.call = counted  # type: ignore[method-assign]
        return transport


def _no_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    from novakit.scheduler import manager

    def refuse(*args: Any, **kwargs: Any) -> None:
        pytest.fail("a scheduler was built where nothing is scheduled")

    monkeypatch.setattr(manager.SchedulerManager, "__init__", refuse)


def test_a_registered_host_answers_and_many_are_asked_at_once(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "listed")
    rpc = ComputeRPC(cloud.db, cloud.conf)
    hosts = ["compute-1", "compute-2", "compute-3"]
    requests = [ComputeRequest(request_id="req-rpc", host=h, operation="list_instances") for h in hosts]

    results = rpc.send_all(requests)

    assert [r.host for r in results] == hosts and all(r.error is None for r in results)
    guests = {r.host: r.instances_on_host for r in results}
    assert guests[server["host"]] == {server["id"]: int(PowerState.RUNNING)}
    assert all(guests[h] == {} for h in hosts if h != server["host"])
    # One host, with the spec its records give: the guest's power state as the hypervisor says.
    with targeting(cloud.db, server["id"]), cloud.db.reader() as session:
        spec = instance_spec(session, db_api.instance_get(session, cloud.admin, server["id"]))
    [info] = rpc.send(
        ComputeRequest(request_id="req-rpc", host=server["host"], operation="get_info", instances=[spec])
    ).results
    assert info.ok and info.power_state == int(PowerState.RUNNING)


def test_a_conductor_given_a_transport_factory_builds_and_acts_through_it(
    cloud: Cloud, ctx: RequestContext
) -> None:
    counted = _Counted(cloud)
    api = API(cloud.db, cloud.conf, Conductor(cloud.db, cloud.conf, transport_factory=counted))

    [server] = api.create(ctx, {"name": "carried", "flavor": "m1.small", "image": "tiny"})
    assert api.stop(ctx, server["id"])["status"] == "SHUTOFF"
    server = api.get(cloud.admin, server["id"])

    assert counted.calls == [(server["host"], "build"), (server["host"], "stop")]


def test_a_host_that_is_not_registered_could_not_run_the_request(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "stranded")
    with targeting(cloud.db, server["id"]), cloud.db.reader() as session:
        spec = instance_spec(session, db_api.instance_get(session, cloud.admin, server["id"]))
    request = ComputeRequest(request_id="req-rpc", host="nowhere-7", operation="stop", instances=[spec])

    result = ComputeRPC(cloud.db, cloud.conf).send(request)

    assert result.host == "nowhere-7" and result.error is not None
    assert "nowhere-7" in result.error.message and result.error.reschedule
    [res] = result.results
    assert (res.uuid, res.ok) == (server["id"], False) and res.fault == result.error
    # Nothing reached the server's real host: its guest still runs.
    assert cloud.fake(server["host"]).list_instances()[server["id"]] == PowerState.RUNNING


def test_a_delete_whose_host_left_the_fleet_leaves_the_server_in_error_naming_the_host(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "orphaned")
    with cloud.db.writer() as session:
        session.execute(update(ComputeNode).where(ComputeNode.host == server["host"]).values(deleted=1))

    cloud.api.delete(ctx, server["id"])

    shown = cloud.api.get(ctx, server["id"])
    assert (shown["status"], shown["task_state"]) == ("ERROR", None)
    assert shown["fault"]["message"] == f"Compute host {server['host']} could not be found."
    delete = cloud.api.list_actions(ctx, server["id"])[-1]
    assert delete["action"] == "delete" and delete["finish_time"] is not None


def test_heal_asks_the_hosts_and_powers_off_through_rpc_without_a_conductor(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "zombie")
    cloud.api.stop(ctx, server["id"])
    cloud.fake(server["host"]).power_on(SimpleNamespace(uuid=server["id"]))

    def refuse(*args: Any, **kwargs: Any) -> None:
        pytest.fail("heal built a conductor")

    monkeypatch.setattr(Conductor, "__init__", refuse)
    _no_scheduler(monkeypatch)
    counted = _Counted(cloud)

    report = heal(cloud.db, cloud.conf, rpc=ComputeRPC(cloud.db, cloud.conf, counted))

    assert [(c.kind, c.instance, c.applied) for c in report.corrections] == [("stopped", server["id"], True)]
    assert sorted(counted.calls) == sorted(
        [(h, "list_instances") for h in report.hosts] + [(server["host"], "stop")]
    )
    assert cloud.fake(server["host"]).list_instances()[server["id"]] == PowerState.SHUTDOWN
    shown = cloud.api.get(ctx, server["id"])
    assert (shown["status"], shown["power_state_name"]) == ("SHUTOFF", "Shutdown")
    [healed] = [a for a in cloud.api.list_actions(ctx, server["id"]) if a["request_id"] == report.request_id]
    assert healed["action"] == "stop" and healed["finish_time"] is not None
    assert [(e["event"], e["result"]) for e in healed["events"]] == [
        ("compute_sync_power_state", "Success"),
        ("compute_stop_instance", "Success"),
    ]


def test_the_worker_sends_a_deferred_action_and_records_it_without_a_scheduler(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "later")
    request = cloud.api.act(ctx, server["id"], "stop", defer=True).request
    assert cloud.api.get(ctx, server["id"])["task_state"] == "powering-off"
    _no_scheduler(monkeypatch)

    worker.run(worker.Job.for_context(ctx, server["id"], db_url=cloud.db.url, request=request.to_wire()))

    shown = cloud.api.get(ctx, server["id"])
    assert (shown["status"], shown["task_state"], shown["power_state_name"]) == ("SHUTOFF", None, "Shutdown")
    assert cloud.fake(server["host"]).list_instances()[server["id"]] == PowerState.SHUTDOWN
    stop = cloud.api.list_actions(cloud.admin, server["id"])[-1]
    assert stop["action"] == "stop" and stop["finish_time"] is not None
    assert [(e["event"], e["host"], e["result"]) for e in stop["events"]][-1] == (
        "compute_stop_instance",
        server["host"],
        "Success",
    )
