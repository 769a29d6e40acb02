"""One round trip to the hosts (novakit.compute.rounds): delivered in process or carried by a
playbook, each request is paired with its own answer and recorded with one wording per outcome."""

from __future__ import annotations

from sqlalchemy import select

from novakit.cells.registry import targeting
from novakit.compute import rounds
from novakit.context import RequestContext
from novakit.db.models import InstanceFault
from novakit.host.messages import ComputeResult, InstanceResult
from tests.functional.cloud import Cloud, boot


def _faults(cloud: Cloud, uuid: str) -> list[str]:
    with targeting(cloud.db, uuid), cloud.db.reader() as session:
        return list(
            session.scalars(
                select(InstanceFault.message)
                .where(InstanceFault.instance_uuid == uuid)
                .order_by(InstanceFault.id)
            )
        )


def _create_unbuilt(cloud: Cloud, ctx: RequestContext, name: str, count: int = 1) -> list[str]:
    servers = cloud.api.create(
        ctx, {"name": name, "flavor": "m1.small", "image": "tiny", "max_count": count}, build=False
    )
    return [s["id"] for s in servers]


def test_run_delivers_in_process_and_records_until_every_build_has_settled(
    cloud: Cloud, ctx: RequestContext
) -> None:
    conductor = cloud.api.conductor
    uuids = _create_unbuilt(cloud, ctx, "direct", 3)
    requests = conductor.schedule_instances(ctx, uuids)

    pairs = rounds.deliver(conductor.rpc, requests)
    assert [(r.host, res.host) for r, res in pairs] == [(r.host, r.host) for r in requests]
    recorded = rounds.record_all(conductor, ctx, pairs)

    assert recorded.follow_ups == [] and recorded.failed == {}
    assert {cloud.api.get(ctx, u)["status"] for u in uuids} == {"ACTIVE"}
    # The worker's and the conductor's loop: the same deliver and record, round after round.
    later = _create_unbuilt(cloud, ctx, "looped")
    rounds.run(conductor.rpc, conductor, ctx, conductor.schedule_instances(ctx, later))
    assert cloud.api.get(ctx, later[0])["status"] == "ACTIVE"


def test_a_playbook_round_pairs_each_hosts_answers_in_order_and_words_what_is_missing(
    cloud: Cloud, ctx: RequestContext
) -> None:
    first, second = (boot(cloud, ctx, name) for name in ("one", "two"))
    host = "compute-1"
    # Two stops to one host, whose compute task answered the first and nothing more.
    stops = [cloud.api.act(ctx, s["id"], "stop", defer=True).request for s in (first, second)]
    stops = [r.model_copy(update={"host": host}) for r in stops if r is not None]
    answered = ComputeResult(
        request_id=ctx.request_id,
        host=host,
        operation="stop",
        results=[InstanceResult(uuid=first["id"], ok=True)],
    )

    pairs = rounds.collect(stops, {host: [answered]}, carrier="Ansible")

    assert [(r.instances[0].uuid, a is answered) for r, a in pairs] == [
        (first["id"], True),
        (second["id"], False),
    ]
    silent = pairs[1][1]
    message = f"Connection to the hypervisor on {host} is broken: Ansible: host {host} returned no result"
    assert silent.error is not None and silent.error.message == message and silent.error.reschedule
    assert rounds.failures(*pairs[0]) == {} and rounds.failures(*pairs[1]) == {second["id"]: message}
    # What Ansible said of the host explains it instead, in the same words.
    said = rounds.collect(stops, {}, {host: rounds.unreachable(host, "Failed to connect")})
    broken = f"Connection to the hypervisor on {host} is broken"
    assert {r.error.message for _, r in said if r.error} == {
        f"{broken}: Ansible: host {host} unreachable: Failed to connect"
    }


def test_an_answer_that_says_nothing_of_an_instance_fails_its_action_with_the_no_result_fault(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "mute")
    request = cloud.api.act(ctx, server["id"], "stop", defer=True).request
    assert request is not None
    empty = ComputeResult(request_id=request.request_id, host=request.host, operation=request.operation)

    recorded = rounds.record_all(cloud.api.conductor, ctx, [(request, empty)])

    message = f"Compute operation failed: host {server['host']} returned no result"
    assert recorded.failed == {server["id"]: message}
    shown = cloud.api.get(ctx, server["id"])
    assert (shown["status"], shown["task_state"]) == ("ACTIVE", None)
    assert _faults(cloud, server["id"]) == [message]
    stop = cloud.api.list_actions(ctx, server["id"])[-1]
    assert stop["action"] == "stop" and stop["finish_time"] is not None
