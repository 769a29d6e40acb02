"""The conductor task's steps (``playflow.run_step``) as the action plugin and the module call them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from novakit import playflow
from novakit.cells.registry import UNSCHEDULED, targeting
from novakit.context import RequestContext
from novakit.db.models import InstanceFault
from novakit.host.manager import ComputeManager
from novakit.host.messages import ComputeRequest
from tests.functional.cloud import Cloud


def build_on_hosts(cloud: Cloud, requests: list[dict[str, Any]], skip: str | None = None) -> dict[str, Any]:
    """What each host's compute task would register, except ``skip``'s (it never answered)."""
    out: dict[str, Any] = {}
    for raw in requests:
        request = ComputeRequest.model_validate(raw)
        if request.host == skip:
            continue
        result = ComputeManager(request.host, cloud.fake(request.host)).handle(request)
        out.setdefault(request.host, {"changed": True, "results": []})["results"].append(
            result.model_dump(mode="json")
        )
    return out


def test_a_host_the_callback_saw_fail_is_rescheduled_with_its_reason(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = {"name": "step", "flavor": "m1.small", "image": "tiny", "count": 3}
    scheduled = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": server})
    assert scheduled["changed"] and len(scheduled["instances"]) == 3
    assert [p["status"] for p in scheduled["published"]] == ["BUILD"] * 3
    assert set(scheduled["published"][0]) == set(playflow.PUBLISHED)
    silent = scheduled["hosts"][0]
    params = {
        "step": "record",
        "requests": scheduled["requests"],
        "results": build_on_hosts(cloud, scheduled["requests"], skip=silent),
    }
    recorded = playflow.run_step(
        cloud.api, ctx, params, host_failures={silent: "host gone (task Build)", "other": "not in this round"}
    )
    moved = {i["uuid"] for r in recorded["requests"] for i in r["instances"]}
    assert moved and silent not in recorded["hosts"]
    by_id = {s["id"]: s for s in recorded["servers"]}
    for uuid in moved:
        assert by_id[uuid]["status"] == "BUILD"
        (action,) = cloud.api.list_actions(cloud.admin, uuid)
        assert [(e["host"], e["result"]) for e in action["events"]] == [(silent, "Error")]
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.reader() as session:
        columns = (InstanceFault.instance_uuid, InstanceFault.host, InstanceFault.message)
        faults = session.execute(select(*columns)).all()
    # The callback's reason, not the other host's, is the fault of each moved server.
    assert {(f.instance_uuid, f.host) for f in faults} == {(u, silent) for u in moved}
    assert all(f.message.endswith("Ansible: host gone (task Build)") for f in faults), faults
    for uuid in set(by_id) - moved:
        assert by_id[uuid]["status"] == "ACTIVE"
    assert {p["id"]: p["status"] for p in recorded["published"]} == {u: s["status"] for u, s in by_id.items()}


def test_check_mode_steps_write_nothing(cloud: Cloud, ctx: RequestContext) -> None:
    before = cloud.snapshot()
    server = {"name": "dry", "flavor": "m1.small", "image": "tiny", "count": 2}
    plan = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": server}, check_mode=True)
    assert sorted(plan["would_schedule_to"]) == ["dry-1", "dry-2"]
    assert plan["requests"] == [] and plan["published"] == []
    record = playflow.run_step(cloud.api, ctx, {"step": "record", "requests": []}, check_mode=True)
    assert record["changed"] is False and record["published"] == []
    assert cloud.snapshot() == before


def _round(cloud: Cloud, ctx: RequestContext, scheduled: dict[str, Any]) -> dict[str, Any]:
    """The build play and the record step of one round, secrets put back as the compute module does."""
    secrets = scheduled.get("secrets") or {}
    requests = [
        {**r, "instances": [{**i, **secrets.get(i["uuid"], {})} for i in r["instances"]]}
        for r in scheduled["requests"]
    ]
    params = {
        "step": "record",
        "requests": scheduled["requests"],
        "instances": scheduled["instances"],
        "results": build_on_hosts(cloud, requests),
    }
    return playflow.run_step(cloud.api, ctx, params)


def test_count_scales_and_the_requests_carry_no_secrets(cloud: Cloud, ctx: RequestContext) -> None:
    server = {"name": "sc", "flavor": "m1.small", "image": "tiny", "count": 2, "user_data": "c2VjcmV0LXVk"}
    up = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": server})
    assert [p["name"] for p in up["published"]] == ["sc-1", "sc-2"]
    # The secrets travel apart (for the compute task's no_log option), not in the requests.
    assert "c2VjcmV0LXVk" not in repr(up["requests"])
    assert {s["user_data"] for s in up["secrets"].values()} == {"c2VjcmV0LXVk"}
    assert set(up["secrets"]) == set(up["instances"])
    built = _round(cloud, ctx, up)
    assert "secrets" not in built and built["requests"] == []
    assert [s["status"] for s in built["servers"]] == ["ACTIVE", "ACTIVE"]

    # count=1: sc-2 is deleted, through the delete action, in the same round trip
    down = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": {**server, "count": 1}})
    assert down["changed"] and down["before"].keys() == {"sc-1", "sc-2"}
    (delete,) = down["requests"]
    assert delete["action"] == "delete" and [i["name"] for i in delete["instances"]] == ["sc-2"]
    recorded = _round(cloud, ctx, down)
    assert [p["name"] for p in recorded["published"]] == ["sc-1"]
    assert "sc-2: DELETED on -" in recorded["report"]
    assert [s["name"] for s in cloud.api.list(ctx)] == ["sc-1"]
    sc2 = next(s for s in built["servers"] if s["name"] == "sc-2")
    assert [a["action"] for a in cloud.api.list_actions(ctx, sc2["id"])] == ["create", "delete"]

    # the same count again changes nothing; no count at all is one server named sc, beside them
    same = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": {**server, "count": 1}})
    assert same["changed"] is False and same["requests"] == []
    single = {k: v for k, v in server.items() if k != "count"}
    alone = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": single})
    assert [p["name"] for p in alone["published"]] == ["sc"]


def test_a_count_below_one_is_refused_naming_count(cloud: Cloud, ctx: RequestContext) -> None:
    import pytest

    from novakit import exceptions

    before = cloud.snapshot()
    server = {"name": "zero", "flavor": "m1.small", "image": "tiny", "count": 0}
    with pytest.raises(exceptions.ValidationError) as err:
        playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": server})
    assert err.value.field == "count", err.value.errors
    assert cloud.snapshot() == before


def _faults(cloud: Cloud, uuid: str) -> list[str]:
    """The fault messages recorded for ``uuid``, oldest first, wherever its cell is."""
    with targeting(cloud.db, uuid), cloud.db.reader() as session:
        return list(
            session.scalars(
                select(InstanceFault.message)
                .where(InstanceFault.instance_uuid == uuid)
                .order_by(InstanceFault.id)
            )
        )


def test_a_host_that_returned_no_result_is_worded_alike_for_a_build_and_an_action(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = {"name": "quiet", "flavor": "m1.small", "image": "tiny"}
    scheduled = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": server})
    (uuid,) = scheduled["instances"]
    (first,) = scheduled["hosts"]
    # The build play ran, but the host registered nothing for it and nobody said why.
    params = {"step": "record", "requests": scheduled["requests"], "results": {}}
    rescheduled = playflow.run_step(cloud.api, ctx, params)
    assert rescheduled["requests"] and first not in rescheduled["hosts"]
    built = _round(cloud, ctx, {**rescheduled, "instances": scheduled["instances"]})
    assert [s["status"] for s in built["servers"]] == ["ACTIVE"]
    second = cloud.api.get(cloud.admin, uuid)["host"]
    assert second not in (first, None)

    stop = playflow.run_step(cloud.api, ctx, {"step": "action", "action": "stop", "servers": [uuid]})
    params = {"step": "record_action", "requests": stop["requests"], "results": {}}
    recorded = playflow.run_step(cloud.api, ctx, params)

    build_fault, stop_fault = _faults(cloud, uuid)
    assert (
        build_fault
        == f"Connection to the hypervisor on {first} is broken: Ansible: host {first} returned no result"
    )
    assert stop_fault == build_fault.replace(first, second)
    # What the playbook prints for the failed stop is what the server's record says.
    assert recorded["failed_servers"] == [{"id": uuid, "name": "quiet", "message": stop_fault}]


def test_an_unreachable_host_is_worded_alike_whoever_said_so(cloud: Cloud, ctx: RequestContext) -> None:
    said: dict[str, str] = {}
    for name, how in (("told", "registered"), ("listed", "listed")):
        server = {"name": name, "flavor": "m1.small", "image": "tiny"}
        scheduled = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": server})
        (host,) = scheduled["hosts"]
        params: dict[str, Any] = {"step": "record", "requests": scheduled["requests"]}
        if how == "registered":  # what the compute task registered for a host Ansible could not reach
            params["results"] = {host: {"unreachable": True, "msg": "Failed to connect", "changed": False}}
        else:
            params["unreachable"] = [host]
        playflow.run_step(cloud.api, ctx, params)
        (fault,) = _faults(cloud, scheduled["instances"][0])
        said[how] = fault.replace(host, "<host>")
    broken = "Connection to the hypervisor on <host> is broken: Ansible: host <host> unreachable"
    assert said == {"registered": f"{broken}: Failed to connect", "listed": broken}
    # A heartbeat says the same of the same host.
    beat = playflow.run_step(
        cloud.api,
        cloud.admin,
        {"step": "heartbeat", "results": {"compute-1": {"unreachable": True, "msg": "Failed to connect"}}},
    )
    assert beat["down"] == {"compute-1": "Ansible: host compute-1 unreachable: Failed to connect"}
