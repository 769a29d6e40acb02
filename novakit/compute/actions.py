"""The audit trail: instance actions, their events, and instance faults.

Nova's rules, kept here and nowhere else:

* one action per (instance, request id, action name); a retry of the same
  request reuses it;
* an event has a start, a finish and a result; a failed event marks its
  action's message ``Error``;
* a fault keeps a code, a message of at most 255 characters and, for
  internal errors only, the traceback in ``details``. An internal error is
  any exception that is not a ``NovakitError``: its message is just the
  exception's class name, because its text may carry anything; the text
  and traceback go to ``details``, which only admins see.

Callers never write these rows inline: they use ``instance_event`` (a context
manager around a step of their own), or hand what happened elsewhere (the
events a compute host returned, a fault) to ``record_outcome``, which also
starts and finishes the action; ``record_events_many`` does the same for a
whole batch of builds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select, text, update
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.cells.registry import in_cell_of, targeting
from novakit.compute.states import TaskState
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.api import ON_INSTANCES, one_of
from novakit.db.engine import Database
from novakit.db.models import InstanceAction, InstanceActionEvent, InstanceFault, utcnow
from novakit.host.faults import _truncate, fault_from_exception, fault_is_internal
from novakit.host.messages import Event, Fault, InstanceResult

# The statements of the hot path, built once (building a statement costs more than running it).
_FINISH = (
    "UPDATE instance_actions SET finish_time = :now, updated_at = :now "
    "WHERE request_id = :request_id AND action = :action AND instance_uuid {} "
    "RETURNING instance_uuid, id"
)
_FINISH_ONE = text(_FINISH.format("= :uuid"))
_FINISH_MANY = text(_FINISH.format("IN :uuids")).bindparams(bindparam("uuids", expanding=True))
_INSERT_EVENT = cast(Table, InstanceActionEvent.__table__).insert()
_INSERT_ACTION = cast(Table, InstanceAction.__table__).insert()


#: what a caller who is not an admin is told of a scheduling failure (Nova's words): the
#: scheduler's reasons name hosts and their limits, which are the operator's business
NO_VALID_HOST = "No valid host was found."


def shown_text(text: str | None, ctx: RequestContext) -> str | None:
    """A fault message or event detail as ``ctx`` may see it (see ``fault_view``)."""
    if text and not policy.allowed(ctx, "server:fault_details") and text.startswith(NO_VALID_HOST):
        return NO_VALID_HOST
    return text


def fault_view(fault: InstanceFault, ctx: RequestContext) -> dict[str, Any]:
    """A fault as a caller may see it. An admin sees all of it; anyone else sees its code and
    short message, no host and no details ("no valid host" without the scheduler's reasons)."""
    view: dict[str, Any] = {
        "code": fault.code,
        "message": shown_text(fault.message, ctx),
        "created": fault.created_at,
    }
    if policy.allowed(ctx, "server:fault_details"):
        if fault.host:
            view["host"] = fault.host
        if fault.details:
            view["details"] = fault.details
    return view


# --- actions -----------------------------------------------------------------------


def _request_action(
    session: Session, ctx: RequestContext, instance_uuid: str, action: str
) -> InstanceAction | None:
    """The instance's ``action`` recorded by ``ctx``'s request, if it was."""
    return session.execute(
        select(InstanceAction).where(
            InstanceAction.instance_uuid == instance_uuid,
            InstanceAction.request_id == ctx.request_id,
            InstanceAction.action == action,
        )
    ).scalar_one_or_none()


def action_start(session: Session, ctx: RequestContext, instance_uuid: str, action: str) -> InstanceAction:
    existing = _request_action(session, ctx, instance_uuid, action)
    if existing is not None:
        return existing
    row = InstanceAction(
        action=action,
        instance_uuid=instance_uuid,
        request_id=ctx.request_id,
        user_id=ctx.user_id,
        project_id=ctx.project_id,
        start_time=utcnow(),
    )
    session.add(row)
    session.flush()
    return row


def actions_start_new(session: Session, ctx: RequestContext, instance_uuids: list[str], action: str) -> None:
    """Start ``action`` for instances created in this transaction: they can have no action yet,
    so there is nothing to look up; one statement for all of them."""
    if not instance_uuids:
        return
    now = utcnow()
    session.execute(
        _INSERT_ACTION,
        [
            {
                "action": action,
                "instance_uuid": uuid,
                "request_id": ctx.request_id,
                "user_id": ctx.user_id,
                "project_id": ctx.project_id,
                "start_time": now,
            }
            for uuid in instance_uuids
        ],
    )


def action_finish(
    session: Session,
    ctx: RequestContext,
    instance_uuid: str,
    action: str | None = None,
    *,
    message: str | None = None,
) -> None:
    """Finish the request's action; ``message`` (why it ended as it did) replaces the action's."""
    stmt = update(InstanceAction).where(
        InstanceAction.instance_uuid == instance_uuid, InstanceAction.request_id == ctx.request_id
    )
    if action:
        stmt = stmt.where(InstanceAction.action == action)
    values: dict[str, Any] = {"finish_time": utcnow()}
    if message is not None:
        values["message"] = _truncate(message)
    session.execute(stmt.values(**values).execution_options(synchronize_session=False))


def unfinished_action(session: Session, instance_uuid: str, action: str) -> InstanceAction | None:
    """The latest ``action`` of the instance that has not finished: the one an interrupted task
    belongs to, whose request the task's events and finish are recorded under."""
    return session.execute(
        select(InstanceAction)
        .where(
            InstanceAction.instance_uuid == instance_uuid,
            InstanceAction.action == action,
            InstanceAction.finish_time.is_(None),
        )
        .order_by(InstanceAction.id.desc())
        .limit(1)
    ).scalar_one_or_none()


def _action_for(session: Session, ctx: RequestContext, instance_uuid: str) -> InstanceAction:
    row = session.execute(
        select(InstanceAction)
        .where(InstanceAction.instance_uuid == instance_uuid, InstanceAction.request_id == ctx.request_id)
        .order_by(InstanceAction.id.desc())
        .limit(1)
    ).scalar_one_or_none()
    if row is None:
        raise exceptions.NotFound(
            f"No action for instance {instance_uuid} in request {ctx.request_id}: "
            "an event needs its action recorded first"
        )
    return row


def instant_event(event: str, ok: bool, *, host: str | None = None, details: str | None = None) -> Event:
    """An event that starts and finishes now: a step the controller decided rather than ran (a
    failed schedule, a build no host answered for)."""
    now = utcnow()
    return Event(
        event=event,
        start_time=now,
        finish_time=now,
        result="Success" if ok else "Error",
        host=host,
        details=details,
    )


def _event_columns(event: Event, action_id: int) -> dict[str, Any]:
    """A host's event as its row holds it (naive UTC times)."""
    return {
        "event": event.event,
        "action_id": action_id,
        "start_time": event.start_time.replace(tzinfo=None),
        "finish_time": event.finish_time.replace(tzinfo=None) if event.finish_time else None,
        "result": event.result,
        "traceback": event.traceback,
        "host": event.host,
        "details": event.details,
    }


def _add_event(session: Session, action: InstanceAction, event: Event) -> InstanceActionEvent:
    row = InstanceActionEvent(**_event_columns(event, action.id))
    session.add(row)
    if event.result == "Error":
        action.message = "Error"
    session.flush()
    return row


def record_host_events(
    session: Session, ctx: RequestContext, instance_uuid: str, events: list[Event]
) -> None:
    """Store the events a compute host returned, with the host's own times."""
    if not events:
        return
    action = _action_for(session, ctx, instance_uuid)
    for event in events:
        _add_event(session, action, event)


def record_events_many(
    session: Session, ctx: RequestContext, events: dict[str, list[Event]], *, finish: str | None = None
) -> None:
    """``record_host_events`` for many instances at once: one look-up of their actions in this
    request (the latest of each), one insert of all the events, one update of the failed ones.

    ``finish``: the name of the action the events belong to, which they end (``action_finish``):
    the look-up is then the finishing update itself, returning the actions' ids.
    """
    if finish is not None:
        if not events:
            return
        action_ids = _finish_actions(session, ctx, list(events), finish)
    events = {uuid: evs for uuid, evs in events.items() if evs}
    if not events:
        return
    if finish is None:
        action_ids = _latest_actions(session, ctx, list(events))
    missing = sorted(events.keys() - action_ids.keys())
    if missing:
        raise exceptions.NotFound(
            f"No action for instance {missing[0]} in request {ctx.request_id}: "
            "an event needs its action recorded first"
        )
    session.execute(
        _INSERT_EVENT,
        [_event_columns(event, action_ids[uuid]) for uuid, evs in events.items() for event in evs],
    )
    failed = [action_ids[uuid] for uuid, evs in events.items() if any(e.result == "Error" for e in evs)]
    if failed:
        session.execute(
            update(InstanceAction)
            .where(one_of(InstanceAction.id, failed))
            .values(message="Error")
            .execution_options(synchronize_session=False)
        )


def _finish_actions(session: Session, ctx: RequestContext, uuids: list[str], finish: str) -> dict[str, int]:
    """The request's ``finish`` actions of the instances finished, by instance: their ids."""
    params = {"request_id": ctx.request_id, "action": finish, "now": utcnow()}
    if len(uuids) == 1:
        rows = session.execute(_FINISH_ONE, {**params, "uuid": uuids[0]}, bind_arguments=ON_INSTANCES).all()
    else:
        rows = session.execute(_FINISH_MANY, {**params, "uuids": uuids}, bind_arguments=ON_INSTANCES).all()
    return dict(rows)  # type: ignore[arg-type]


def _latest_actions(session: Session, ctx: RequestContext, uuids: list[str]) -> dict[str, int]:
    """The latest action of each instance in this request, by instance: its id."""
    return dict(
        session.execute(  # type: ignore[arg-type]
            select(InstanceAction.instance_uuid, func.max(InstanceAction.id))
            .where(one_of(InstanceAction.instance_uuid, uuids), InstanceAction.request_id == ctx.request_id)
            .group_by(InstanceAction.instance_uuid)
        ).all()
    )


def end_task(
    session: Session,
    ctx: RequestContext,
    instance_uuid: str,
    values: dict[str, Any],
    expected_task_state: Sequence[TaskState | str | None],
    **outcome: Any,
) -> None:
    """The write that ends a task its owner ran: the instance's final ``values``, written only
    while the task is one of ``expected_task_state`` and still ``ctx``'s request's (a lost race
    raises ``UnexpectedTaskStateError`` and writes nothing), then what became of its action
    (``record_outcome``'s ``outcome``), in the caller's transaction."""
    db_api.instance_update(
        session,
        instance_uuid,
        values,
        expected_task_state=list(expected_task_state),
        expected_owner=ctx.request_id,
        fetch=False,
    )
    record_outcome(session, ctx, instance_uuid, **outcome)


def record_outcome(
    session: Session,
    ctx: RequestContext,
    instance_uuid: str,
    *,
    start: str | None = None,
    events: Sequence[Event] = (),
    fault: Fault | None = None,
    finish: str | None = None,
    message: str | None = None,
    answer: InstanceResult | None = None,
) -> None:
    """What became of an instance's action, in the caller's transaction (with its state write).

    ``start``: the action to start first (one the API did not start: heal's);
    ``events``: what happened, with the times it happened (a host's, or the
    controller's own); ``fault``: why it failed; ``finish``: the action that
    this ends; ``message``: why it ended as it did, when that is not the
    events' (its state write lost to another writer); ``answer``: the host's
    answer that ends the task, its events after ``events`` and, when it failed,
    its fault.

    An owner whose state write lost a race still records what its host did:
    it calls this again in a transaction of its own, after the failed one,
    with the error as ``message`` (see ``record_lost_race``).
    """
    if start is not None:
        action_start(session, ctx, instance_uuid, start)
    if answer is not None:
        events = [*events, *answer.events]
        fault = fault if answer.ok else answer.fault
    record_host_events(session, ctx, instance_uuid, list(events))
    if fault is not None:
        record_fault(session, instance_uuid, fault)
    if finish is not None:
        action_finish(session, ctx, instance_uuid, finish, message=message)


def record_fault(session: Session, instance_uuid: str, fault: Fault) -> InstanceFault:
    row = InstanceFault(
        instance_uuid=instance_uuid,
        code=fault.code,
        message=_truncate(fault.message),
        details=fault.details,
        host=fault.host,
    )
    session.add(row)
    session.flush()
    return row


@contextmanager
def instance_event(
    db: Database,
    ctx: RequestContext,
    instance_uuid: str,
    event_name: str,
    host: str | None = None,
    *,
    fault_on_error: bool = True,
) -> Iterator[dict[str, Any]]:
    """Record ``event_name`` around a block: start, finish, result; a fault if it raises.

    The block may put text for the event's ``details`` into the yielded dict.
    The exception is re-raised after it is recorded.
    """
    start = utcnow()
    extra: dict[str, Any] = {}

    def finish(fault: Fault | None) -> None:
        """The event, ended now (``fault``: it failed so; its fault kept when asked to)."""
        event = Event(
            event=event_name,
            start_time=start,
            finish_time=utcnow(),
            result="Success" if fault is None else "Error",
            host=host,
            details=extra.get("details"),
            traceback=fault.details if fault is not None and fault_is_internal(fault.details) else None,
        )

        def write(session: Session) -> None:
            _add_event(session, _action_for(session, ctx, instance_uuid), event)
            if fault is not None and fault_on_error:
                record_fault(session, instance_uuid, fault)

        with targeting(db, instance_uuid):
            db.run_in_transaction(write)

    try:
        yield extra
    except BaseException as exc:
        finish(fault_from_exception(exc, host))
        raise
    finish(None)


def list_actions(session: Session, instance_uuid: str) -> list[InstanceAction]:
    stmt = (
        select(InstanceAction)
        .where(InstanceAction.instance_uuid == instance_uuid)
        .order_by(InstanceAction.start_time, InstanceAction.id)
    )
    return list(session.execute(stmt).scalars())


# --------------------------------------------------------------- lost races


def lost_race(exc: exceptions.NovakitError) -> str:
    """The message of an action whose final state write lost a race."""
    return f"Not recorded: the instance changed meanwhile ({exc.format_message()})"


@in_cell_of("instance_uuid")
def record_lost_race(
    db: Database,
    ctx: RequestContext,
    instance_uuid: str,
    action: str,
    events: Sequence[Event],
    fault: Fault | None,
    exc: exceptions.NovakitError,
    host: str | None = None,
) -> bool:
    """After an owner's state write lost to another writer: record what happened anyway.

    In a transaction of its own (the failed one rolled back): the events, the fault if
    there was one, and the finish of ``ctx``'s ``action``, with the lost race as the
    action's message. Returns whether the instance's claims are free to go (``fate``).
    """

    def write(session: Session) -> bool:
        record_outcome(
            session, ctx, instance_uuid, events=events, fault=fault, finish=action, message=lost_race(exc)
        )
        return fate(session, instance_uuid, host)[1]

    return db.run_in_transaction(write)


_FATE_OF = text("SELECT deleted, host, task_state FROM instances WHERE uuid = :uuid")


def fate(session: Session, instance_uuid: str, host: str | None) -> tuple[bool, bool]:
    """After an owner's state write lost: (whether the guest it made on ``host`` must go,
    whether the instance's claims are free to go), from what the record now says.

    Deleted: nothing uses either. Being deleted: the guest goes, the delete frees the
    claim. Let go of its host (a failed build, heal reaped it): both go. Recorded on
    another host: the guest here goes, the claim there stays. Recorded on ``host`` by
    someone else (heal adopted the build): both stay, a recorded server uses them.
    """
    row = session.execute(_FATE_OF, {"uuid": instance_uuid}, bind_arguments=ON_INSTANCES).first()
    if row is None or row.deleted:
        return True, True
    if row.task_state == TaskState.DELETING.value:
        return True, False
    if row.host is None:
        return True, True
    return row.host != host, False


def failure_of(session: Session, ctx: RequestContext, instance_uuid: str, action: str) -> str | None:
    """Why ``ctx``'s request's ``action`` on the instance failed, or None if it did not.

    A move that fails on a host is rolled back and its server is ACTIVE where it was: its
    status cannot tell, its action's message (``Error``) does. The answer names the failed
    events and the fault recorded with them, as ``ctx`` may see it.
    """
    row = _request_action(session, ctx, instance_uuid, action)
    if row is None or row.message != "Error":
        return None
    steps = [e.event for e in row.events if e.result == "Error"]
    fault = session.execute(
        select(InstanceFault)
        .where(InstanceFault.instance_uuid == instance_uuid, InstanceFault.created_at >= row.start_time)
        .order_by(InstanceFault.id.desc())
        .limit(1)
    ).scalar_one_or_none()
    why = shown_text(fault.message, ctx) if fault is not None else "no fault recorded"
    return f"{why} (failed: {', '.join(steps) or 'see the server events'})"
