"""Heal settles volumes whose operation was cut off, on SQLite and PostgreSQL with the fake driver.

Each test kills the request for real at one point (the process "dies" when the host call is made,
before the host acts or after it and before its answer is recorded), so that the library's own
writes leave the volume in its transitional status; then heal runs with a clock past
``compute.build_timeout`` instead of sleeping. What is checked is what a user sees: the volume's
status and attachments, the guest's definition on its host, and a second heal finding nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select, text, update

from novakit.compute import volume_attach
from novakit.context import RequestContext
from novakit.db.models import ComputeNode, utcnow
from novakit.heal.manager import HealReport, heal
from novakit.host.messages import ComputeRequest, ComputeResult
from novakit.placement import api as placement
from novakit.volume import volumes
from novakit.volume.states import set_status
from tests.functional.cloud import Cloud, boot


class Killed(BaseException):
    """The process died: nothing of the library's catches it, nothing after it runs."""


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext("demo", "alice", ["member"])


def _later(cloud: Cloud) -> Callable[[], dt.datetime]:
    at = utcnow() + dt.timedelta(seconds=cloud.conf.compute.build_timeout + 5)
    return lambda: at


def _kill_at(cloud: Cloud, operation: str, *, host_acts: bool) -> None:
    """The caller dies when its ``operation`` request is made, once: before the host acts on it,
    or (``host_acts``) after the host did and before its answer gets back."""
    real = cloud.api.conductor.rpc.transport_factory

    def factory(host: str, info: dict[str, Any]) -> Any:
        transport = real(host, info)

        class Dying:
            def call(self, request: ComputeRequest) -> ComputeResult:
                if request.operation != operation:
                    return transport.call(request)
                cloud.api.conductor.rpc.transport_factory = real  # the next process lives
                if host_acts:
                    transport.call(request)
                raise Killed(operation)

        return Dying()

    cloud.api.conductor.rpc.transport_factory = factory


def _recovered(report: HealReport) -> list[tuple[str, str, str, bool]]:
    return [
        (c.instance, c.before, c.after, c.applied) for c in report.corrections if c.kind == "volume_recovered"
    ]


def _guest_volumes(cloud: Cloud, server: dict[str, Any]) -> tuple[str, ...] | None:
    return cloud.fake(server["host"]).get_info(SimpleNamespace(uuid=server["id"])).volumes


def _show(cloud: Cloud, ctx: RequestContext, ref: str) -> dict[str, Any]:
    return volumes.show(cloud.api.conductor, ctx, ref)


def _attachment_rows(cloud: Cloud) -> int:
    with cloud.db.engine.connect() as conn:
        return int(
            conn.execute(text("SELECT COUNT(*) FROM volume_attachments WHERE deleted = 0")).scalar_one()
        )


@pytest.mark.parametrize("host_acts", [False, True], ids=["before-the-host", "answer-lost"])
def test_an_interrupted_create_ends_in_error_keeping_its_claim_until_deleted(
    cloud: Cloud, ctx: RequestContext, host_acts: bool
) -> None:
    _kill_at(cloud, "volume_create", host_acts=host_acts)
    with pytest.raises(Killed):
        volumes.create(cloud.api.conductor, ctx, "data", 3, host="compute-1")
    vol = _show(cloud, ctx, "data")
    assert vol["status"] == "creating"
    # Its caller may still be at work: a fresh one is left alone.
    assert _recovered(heal(cloud.db, cloud.conf)) == []

    later = _later(cloud)
    report = heal(cloud.db, cloud.conf, clock=later)
    assert _recovered(report) == [(vol["id"], "creating", "error", True)]
    vol = _show(cloud, ctx, "data")
    assert vol["status"] == "error" and vol["status_reason"].startswith("interrupted")
    # Cinder's rule: the host may hold part of it, so its space stays claimed until it is deleted.
    assert placement.get_allocations_for_consumer(cloud.db, vol["id"])
    assert _recovered(heal(cloud.db, cloud.conf, clock=later)) == []

    assert volumes.delete(cloud.api.conductor, ctx, "data")["status"] == "deleted"
    assert placement.get_allocations_for_consumer(cloud.db, vol["id"]) == {}
    assert vol["id"] not in cloud.fake("compute-1").volumes()


def test_a_reservation_whose_attach_never_started_is_undone(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "web")
    volumes.create(cloud.api.conductor, ctx, "data", 1, host=server["host"])
    real_act = cloud.api.act

    def dies_at_the_action(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("defer"):
            raise Killed("act")
        return real_act(*args, **kwargs)

    cloud.api.act = dies_at_the_action  # type: ignore[method-assign]
    with pytest.raises(Killed):
        volume_attach.attach(cloud.api, ctx, "web", "data")
    cloud.api.act = real_act  # type: ignore[method-assign]
    vol = _show(cloud, ctx, "data")
    assert vol["status"] == "reserved" and vol["attachments"][0]["server_id"] == server["id"]
    assert _recovered(heal(cloud.db, cloud.conf)) == []

    later = _later(cloud)
    assert _recovered(heal(cloud.db, cloud.conf, clock=later)) == [(vol["id"], "reserved", "available", True)]
    vol = _show(cloud, ctx, "data")
    assert vol["status"] == "available" and vol["attachments"] == [] and _attachment_rows(cloud) == 0
    assert _guest_volumes(cloud, server) == ()
    assert _recovered(heal(cloud.db, cloud.conf, clock=later)) == []
    # The volume is free for the attach that was cut off.
    assert volume_attach.attach(cloud.api, ctx, "web", "data")["status"] == "in-use"


@pytest.mark.parametrize(
    ("host_acts", "ends"), [(False, "available"), (True, "in-use")], ids=["before-the-host", "answer-lost"]
)
def test_an_interrupted_attach_ends_as_the_guest_definition_says(
    cloud: Cloud, ctx: RequestContext, host_acts: bool, ends: str
) -> None:
    server = boot(cloud, ctx, "web")
    volumes.create(cloud.api.conductor, ctx, "data", 1, host=server["host"])
    _kill_at(cloud, "attach_volume", host_acts=host_acts)
    with pytest.raises(Killed):
        volume_attach.attach(cloud.api, ctx, "web", "data")
    vol = _show(cloud, ctx, "data")
    assert vol["status"] == "attaching"
    assert _recovered(heal(cloud.db, cloud.conf)) == []

    later = _later(cloud)
    dry = heal(cloud.db, cloud.conf, clock=later, dry_run=True)
    assert _recovered(dry) == [(vol["id"], "attaching", ends, False)]
    assert _show(cloud, ctx, "data")["status"] == "attaching"

    report = heal(cloud.db, cloud.conf, clock=later)
    assert _recovered(report) == [(vol["id"], "attaching", ends, True)]
    # The attach_volume action its caller started is finished too (heal's abandoned actions).
    assert ("abandoned_action", server["id"]) in [(c.kind, c.instance) for c in report.corrections]
    vol = _show(cloud, ctx, "data")
    assert vol["status"] == ends
    if host_acts:
        [att] = vol["attachments"]
        assert att["server_id"] == server["id"] and att["attach_status"] == "attached"
        assert _guest_volumes(cloud, server) == (vol["id"],)
    else:
        assert vol["attachments"] == [] and _attachment_rows(cloud) == 0
        assert _guest_volumes(cloud, server) == ()
    assert _recovered(heal(cloud.db, cloud.conf, clock=later)) == []
    # Either way the volume takes its next step as usual.
    if host_acts:
        assert volume_attach.detach(cloud.api, ctx, "web", "data")["status"] == "available"
    else:
        assert volume_attach.attach(cloud.api, ctx, "web", "data")["status"] == "in-use"


@pytest.mark.parametrize(
    ("host_acts", "ends"), [(False, "in-use"), (True, "available")], ids=["before-the-host", "answer-lost"]
)
def test_an_interrupted_detach_ends_as_the_guest_definition_says(
    cloud: Cloud, ctx: RequestContext, host_acts: bool, ends: str
) -> None:
    server = boot(cloud, ctx, "web")
    volumes.create(cloud.api.conductor, ctx, "data", 1, host=server["host"])
    volume_attach.attach(cloud.api, ctx, "web", "data")
    _kill_at(cloud, "detach_volume", host_acts=host_acts)
    with pytest.raises(Killed):
        volume_attach.detach(cloud.api, ctx, "web", "data")
    vol = _show(cloud, ctx, "data")
    assert vol["status"] == "detaching"
    assert _recovered(heal(cloud.db, cloud.conf)) == []

    later = _later(cloud)
    assert _recovered(heal(cloud.db, cloud.conf, clock=later)) == [(vol["id"], "detaching", ends, True)]
    vol = _show(cloud, ctx, "data")
    assert vol["status"] == ends
    if host_acts:
        assert vol["attachments"] == [] and _guest_volumes(cloud, server) == ()
        assert cloud.fake(server["host"]).volumes()[vol["id"]]["attached_to"] is None
    else:
        assert vol["attachments"][0]["attach_status"] == "attached"
        assert _guest_volumes(cloud, server) == (vol["id"],)
    assert _recovered(heal(cloud.db, cloud.conf, clock=later)) == []


@pytest.mark.parametrize("host_acts", [False, True], ids=["before-the-host", "answer-lost"])
def test_an_interrupted_delete_is_done_again(cloud: Cloud, ctx: RequestContext, host_acts: bool) -> None:
    vol = volumes.create(cloud.api.conductor, ctx, "data", 2, host="compute-2")
    _kill_at(cloud, "volume_delete", host_acts=host_acts)
    with pytest.raises(Killed):
        volumes.delete(cloud.api.conductor, ctx, "data")
    assert _show(cloud, ctx, "data")["status"] == "deleting"
    assert _recovered(heal(cloud.db, cloud.conf)) == []

    later = _later(cloud)
    assert _recovered(heal(cloud.db, cloud.conf, clock=later)) == [(vol["id"], "deleting", "deleted", True)]
    assert volumes.list_volumes(cloud.api.conductor, ctx) == []
    assert placement.get_allocations_for_consumer(cloud.db, vol["id"]) == {}
    assert vol["id"] not in cloud.fake("compute-2").volumes()
    assert _recovered(heal(cloud.db, cloud.conf, clock=later)) == []
    # The name is free again.
    assert volumes.create(cloud.api.conductor, ctx, "data", 1)["status"] == "available"


def test_a_failed_delete_is_left_for_the_user_to_retry(cloud: Cloud, ctx: RequestContext) -> None:
    vol = volumes.create(cloud.api.conductor, ctx, "data", 2, host="compute-2")
    _kill_at(cloud, "volume_delete", host_acts=False)
    with pytest.raises(Killed):
        volumes.delete(cloud.api.conductor, ctx, "data")
    # As a host that refused the delete leaves it (the guarded step of the library's own table).
    row_id = _row_id(cloud, vol["id"])
    with cloud.db.writer() as session:
        set_status(session, row_id, "delete_failed", reason="the pool said no")
    assert heal(cloud.db, cloud.conf, clock=_later(cloud)).corrections == []
    assert _show(cloud, ctx, "data")["status"] == "error_deleting"
    assert vol["id"] in cloud.fake("compute-2").volumes()


def test_a_host_that_does_not_answer_leaves_the_volume_as_it_is(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "web")
    vol = volumes.create(cloud.api.conductor, ctx, "data", 1, host=server["host"])
    _kill_at(cloud, "attach_volume", host_acts=True)
    with pytest.raises(Killed):
        volume_attach.attach(cloud.api, ctx, "web", "data")
    with cloud.db.writer() as session:
        driver = session.execute(
            select(ComputeNode.driver).where(ComputeNode.host == server["host"])
        ).scalar_one()
        session.execute(
            update(ComputeNode)
            .where(ComputeNode.host == server["host"])
            .values(driver={"driver": "fake", "transport": "carrier-pigeon"})
        )
    later = _later(cloud)
    report = heal(cloud.db, cloud.conf, clock=later)
    [c] = [c for c in report.corrections if c.kind == "volume_recovered"]
    assert (c.instance, c.after, c.applied) == (vol["id"], "attaching", False)
    assert c.error is not None and "left as it is" in c.error and "carrier-pigeon" in c.error
    assert _show(cloud, ctx, "data")["status"] == "attaching"

    with cloud.db.writer() as session:
        session.execute(update(ComputeNode).where(ComputeNode.host == server["host"]).values(driver=driver))
    assert _recovered(heal(cloud.db, cloud.conf, clock=later)) == [(vol["id"], "attaching", "in-use", True)]


def test_the_root_volume_of_a_build_is_left_to_the_build(cloud: Cloud, ctx: RequestContext) -> None:
    # The build was cut off after its claim: its new root volume is ``creating``, the server building.
    [uuid] = [
        s["id"]
        for s in cloud.api.create(
            ctx, {"name": "bfv", "flavor": "m1.small", "image": "tiny", "boot_from_volume": 4}, build=False
        )
    ]
    cloud.api.conductor.schedule_instances(ctx, [uuid])
    [root] = volumes.list_volumes(cloud.api.conductor, ctx)
    assert root["status"] == "creating" and root["attachments"][0]["server_id"] == uuid

    report = heal(cloud.db, cloud.conf, clock=_later(cloud))
    kinds = [(c.kind, c.instance) for c in report.corrections]
    # Heal's stuck-build rule ends the build and frees its new volume with it, as a failed build's.
    assert ("build_timeout", uuid) in kinds and _recovered(report) == []
    assert volumes.list_volumes(cloud.api.conductor, ctx) == []
    assert placement.get_allocations_for_consumer(cloud.db, root["id"]) == {}


def _row_id(cloud: Cloud, volume_uuid: str) -> int:
    with cloud.db.engine.connect() as conn:
        return int(
            conn.execute(text("SELECT id FROM volumes WHERE uuid = :u"), {"u": volume_uuid}).scalar_one()
        )
