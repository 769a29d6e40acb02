"""Aborting a live migration under way (Nova's ``DELETE /servers/{id}/migrations/{migration_id}``,
2.24; ``openstack server migration abort``).

The front door (``abort_live_migration``) checks, in this order: the server as the caller finds it
(404), the policy (``migration:abort``, admin only: 403), the migration one of that server
(``MigrationNotFoundForInstance``, 404), a live migration ``running`` (or ``queued`` and
``preparing`` too, as Nova's 2.65; else ``InvalidMigrationState``, 400), the server still
``migrating`` (``InstanceInvalidState``, 409). Then, in one transaction that takes the migration's
row (a compare-and-swap of its status onto itself, so that the flow's step to ``running`` and
this abort are one after the other), the instance action ``live_migration_cancel`` starts.

Who stops the migration:

- ``running``: the source host, asked through the conductor's round trip (``live_migration_abort``:
  the driver's ``abort_live_migration``, libvirt's ``abortJob``; it runs beside the migration, not
  under the instance's lock the migration holds). Its event ``compute_live_migration_abort`` ends
  the action. The flow's ``live_migration`` step then fails;
- ``queued`` or ``preparing``: nothing runs on a host yet; the flow, where it would start the
  source's step (``begin_running``), finds the abort and does not start it.

Either way the flow's one failure path rolls the move back (``novakit.conductor.flows.live``) and
tells an aborted migration by this action (``aborted``): the migration ends ``cancelled``, not
``error``, and the server keeps no fault, ACTIVE on its source, the destination's claim released.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.cells.registry import locate
from novakit.compute import actions
from novakit.compute.rpc import instance_spec
from novakit.compute.states import TaskState
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import InstanceAction, Migration
from novakit.host.messages import InstanceSpec
from novakit.moves import migrations

if TYPE_CHECKING:
    from novakit.compute.api import API

#: the instance action of an abort (Nova's ``instance_actions.LIVE_MIGRATION_CANCEL``)
CANCEL = "live_migration_cancel"
#: its event (Nova's ``wrap_instance_event`` name of the compute manager's ``live_migration_abort``)
EVENT = "compute_live_migration_abort"
#: the statuses a live migration may be aborted in (Nova's 2.65; before it ``running`` only)
ABORTABLE = ("queued", "preparing", "running")
#: a compare-and-swap lost to the flow's own step: read again and decide on what is recorded now
_RACE_RETRIES = 3


class MigrationNotFoundForInstance(exceptions.NotFound):
    msg_fmt = "Migration %(migration_id)s not found for instance %(instance_id)s"


class InvalidMigrationState(exceptions.Invalid):
    msg_fmt = (
        "Migration %(migration_id)s state of instance %(instance_uuid)s is %(state)s. "
        "Cannot %(method)s while the migration is in this state."
    )


def abort_live_migration(
    api: API, ctx: RequestContext, server: str, migration_id: str, *, queued: bool = True
) -> None:
    """Abort the live migration ``migration_id`` of ``server`` (name or uuid).

    ``queued``: a migration not running yet may be aborted too (Nova's 2.65). Returns once the
    abort is recorded and, for a running migration, its source host has been asked to stop it; the
    flow ends the move (``cancelled``). A host that could not be asked records the action's event
    in error and the fault, as Nova's does; the migration then goes on.
    """
    allowed = ABORTABLE if queued else ("running",)
    cell = locate(api.db.cells, ctx, server)
    with api.db.target_cell(cell):
        for attempt in range(_RACE_RETRIES + 1):
            try:
                uuid, source, spec = api.db.run_in_transaction(
                    lambda s: _start(s, ctx, server, migration_id, allowed)
                )
                break
            except exceptions.Conflict:  # the flow moved the migration on meanwhile
                if attempt >= _RACE_RETRIES:
                    raise
        if spec is None or source is None:
            return  # not running yet: the flow stops before its source's step
        answer = api.conductor.services.call(ctx, source, "live_migration_abort", CANCEL, spec, {})
        api.db.run_in_transaction(
            lambda s: actions.record_outcome(s, ctx, uuid, answer=answer, finish=CANCEL)
        )


def _start(
    session: Session, ctx: RequestContext, server: str, migration_id: str, allowed: tuple[str, ...]
) -> tuple[str, str | None, InstanceSpec | None]:
    """The checks, the migration's row taken and the action started: the server's uuid, and for a
    running migration its source host and the server as the host is sent it."""
    inst = db_api.instance_get_by_name_or_uuid(session, ctx, server)
    policy.authorize(ctx, "migration:abort")  # after the look-up, as Nova's: another project's is 404
    m = session.execute(select(Migration).where(Migration.uuid == migration_id)).scalar_one_or_none()
    if m is None or m.instance_uuid != inst.uuid:
        raise MigrationNotFoundForInstance(migration_id=migration_id, instance_id=inst.uuid)
    if m.migration_type != "live-migration" or m.status not in allowed:
        raise InvalidMigrationState(
            migration_id=migration_id, instance_uuid=inst.uuid, state=m.status, method="abort live migration"
        )
    if inst.task_state != TaskState.MIGRATING:
        raise exceptions.InstanceInvalidState(
            action="live_migration_abort",
            instance_uuid=inst.uuid,
            vm_state=inst.vm_state,
            task_state=inst.task_state,
        )
    migrations.set_status(session, m.uuid, m.status, m.status)
    actions.action_start(session, ctx, inst.uuid, CANCEL)
    if m.status != "running":
        return inst.uuid, None, None
    return inst.uuid, m.source_compute, instance_spec(session, inst)


# --- the flow's side (``novakit.conductor.flows.live``) -----------------------------------------


def aborted(session: Session, instance_uuid: str, migration_uuid: str) -> bool:
    """Whether an abort of the migration was asked: a ``live_migration_cancel`` of the server
    started since the migration was recorded."""
    created = session.scalar(select(Migration.created_at).where(Migration.uuid == migration_uuid))
    found = session.scalar(
        select(InstanceAction.id)
        .where(
            InstanceAction.instance_uuid == instance_uuid,
            InstanceAction.action == CANCEL,
            InstanceAction.start_time >= created,
        )
        .limit(1)
    )
    return found is not None


def begin_running(session: Session, instance_uuid: str, migration_uuid: str) -> bool:
    """The flow's step ``preparing`` -> ``running``, unless an abort came first: then True, and the
    migration stays ``preparing`` for the flow's failure path. The row is taken before the look, so
    an abort is either seen here or finds the migration ``running``."""
    migrations.set_status(session, migration_uuid, "preparing", "preparing")
    if aborted(session, instance_uuid, migration_uuid):
        return True
    migrations.set_status(session, migration_uuid, "preparing", "running")
    return False


def cancelled(session: Session, instance_uuid: str, source: str, *, ran: bool) -> None:
    """In the roll back of an aborted migration (which ends it ``cancelled``): an abort that no
    host answered (the source's step never ran: ``ran`` False) ends here, with its event."""
    pending = None if ran else actions.unfinished_action(session, instance_uuid, CANCEL)
    if pending is not None:
        actions.record_outcome(
            session,
            RequestContext.admin(pending.request_id),
            instance_uuid,
            events=[actions.instant_event(EVENT, True, host=source)],
            finish=CANCEL,
        )
