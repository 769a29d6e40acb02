"""Instance actions, events and faults, with Nova's rules."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from novakit import exceptions
from novakit.cells.registry import UNSCHEDULED
from novakit.compute import actions
from novakit.context import RequestContext
from novakit.db.models import InstanceAction, InstanceFault
from novakit.host.faults import fault_from_exception
from tests.functional.cloud import Cloud, boot


def test_a_boot_records_one_action_with_timed_events(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "audited")
    acts = cloud.api.list_actions(ctx, server["id"])
    assert [a["action"] for a in acts] == ["create"]
    create = acts[0]
    assert create["request_id"] == ctx.request_id
    assert create["user_id"] == ctx.user_id and create["project_id"] == ctx.project_id
    assert create["message"] is None and create["finish_time"] is not None
    events = create["events"]
    assert [e["event"] for e in events] == ["compute__do_build_and_run_instance"]
    assert events[0]["result"] == "Success"
    assert events[0]["host"] is None  # hosts are the operator's: the member's view leaves them out
    admin_events = cloud.api.list_actions(cloud.admin, server["id"])[0]["events"]
    assert admin_events[0]["host"] == server["host"]
    assert events[0]["start_time"] <= events[0]["finish_time"]


def test_each_request_is_its_own_action(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "twice")
    cloud.api.stop(ctx.with_request_id("req-stop-1"), server["id"])
    cloud.api.start(ctx.with_request_id("req-start-1"), server["id"])
    acts = cloud.api.list_actions(ctx, server["id"])
    assert [(a["action"], a["request_id"]) for a in acts] == [
        ("create", ctx.request_id),
        ("stop", "req-stop-1"),
        ("start", "req-start-1"),
    ]
    assert [e["event"] for e in acts[1]["events"]] == ["compute_stop_instance"]


def test_a_failed_event_marks_its_action_error_and_records_a_fault(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "failing")
    req_ctx = ctx.with_request_id("req-manual")
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.writer() as session:
        actions.action_start(session, req_ctx, server["id"], "stop")
    with (
        pytest.raises(ValueError),
        actions.instance_event(cloud.db, req_ctx, server["id"], "compute_stop_instance", "compute-1"),
    ):
        raise ValueError("secret detail: hunter2")
    acts = cloud.api.list_actions(cloud.admin, server["id"])
    stop = next(a for a in acts if a["request_id"] == "req-manual")
    assert stop["message"] == "Error"
    assert stop["events"][0]["result"] == "Error"
    # The traceback is kept, and shown to admins only.
    assert "hunter2" in stop["events"][0]["traceback"]
    non_admin_view = next(
        a for a in cloud.api.list_actions(ctx, server["id"]) if a["request_id"] == "req-manual"
    )
    assert "traceback" not in non_admin_view["events"][0]


def test_internal_faults_show_only_the_class_to_non_admins(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "faulty")
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.writer() as session:
        fault = fault_from_exception(KeyError("the database password is hunter2"), "compute-1")
        actions.record_fault(session, server["id"], fault)
        fault_row = session.execute(select(InstanceFault)).scalar_one()
        assert fault_row.code == 500
        assert fault_row.message == "KeyError"
        assert fault_row.details.startswith("Traceback") and "hunter2" in fault_row.details
        assert "hunter2" not in str(actions.fault_view(fault_row, ctx))
        assert "hunter2" in actions.fault_view(fault_row, cloud.admin)["details"]


def test_novakit_errors_keep_their_message_without_a_traceback() -> None:
    fault = fault_from_exception(exceptions.InstanceNotRunning(instance_uuid="abc"), "h1")
    assert fault.code == 409
    assert fault.message == "Instance abc is not running."
    assert fault.details is None


def test_fault_messages_are_cut_at_255_characters(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "long")
    fault = fault_from_exception(exceptions.ComputeError(reason="x" * 1000), "compute-1")
    assert len(fault.message) == 255
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.writer() as session:
        row = actions.record_fault(session, server["id"], fault)
        assert len(row.message) == 255


def test_an_event_without_its_action_is_refused(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "orphan-event")
    with (
        pytest.raises(exceptions.NotFound, match="action"),
        actions.instance_event(cloud.db, ctx.with_request_id("req-none"), server["id"], "x"),
    ):
        pass
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.reader() as session:
        assert (
            session.execute(select(InstanceAction).where(InstanceAction.request_id == "req-none")).first()
            is None
        )
