"""Actions: the conductor's half of a lifecycle action, the request a host runs and where it ends.

The API has already made the guarded write that starts the action (its task state, its owner);
``prepare_action`` builds the request for the instance's host, ``record_action_result`` (the
playbooks) or ``run_action`` (direct mode) hands the host's answer to ``finish_action``, which
writes the end the state table gives for the action (``novakit.compute.states.ACTIONS``) and its
audit trail. An owner whose final write loses a race records the host's events on their own, with
the lost race as its message (what the race leaves is ``actions.fate``'s to say).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.catalog import images
from novakit.cells.registry import in_cell_of, targeting
from novakit.compute import actions
from novakit.compute.rpc import instance_spec, volume_spec
from novakit.compute.states import ACTIONS, Transition, VmState
from novakit.conductor.core import Services, ctx_admin
from novakit.conductor.flows.release import release_moves
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import InstanceAction, InstanceGroupMember
from novakit.fleet import hosts
from novakit.host.messages import ComputeRequest, ComputeResult, InstanceResult
from novakit.network import filter_sync, ports

LOG = logging.getLogger(__name__)


class Actions:
    """Lifecycle actions one host runs (stop, reboot, rebuild, delete, attach a volume...)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.db = services.db

    @in_cell_of("uuid")
    def prepare_action(
        self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any] | None = None
    ) -> ComputeRequest | None:
        """The compute request for an action the API has started; None if no host holds the instance.

        ``action`` is the state table's row; ``options`` what the host needs of it
        (an ``image`` to rebuild with goes into the instance's spec).
        """
        t = ACTIONS[action]
        opts = dict(options or {})
        with self.db.reader() as session:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            if not inst.host:
                return None
            spec = instance_spec(session, inst)
            volume_id = opts.pop("volume_id", None)
            # attach_volume / detach_volume: the volume as its host needs it, with its device.
            volumes = [volume_spec(session, volume_id, uuid)] if volume_id else []
            image = opts.pop("image", None)
            if image:
                spec.image = images.spec(images.get(session, image))
                spec.preserve_power_off = bool(opts.pop("preserve_power_off", False))
            # The host keeps an instance's operations in the order their actions started.
            issued_at = session.scalar(
                select(InstanceAction.start_time)
                .where(
                    InstanceAction.instance_uuid == uuid,
                    InstanceAction.request_id == ctx.request_id,
                    InstanceAction.action == t.record_as,
                )
                .order_by(InstanceAction.id.desc())
                .limit(1)
            )
        return ComputeRequest(
            request_id=ctx.request_id,
            host=inst.host,
            operation=t.operation,  # type: ignore[arg-type]
            action=t.action,
            instances=[spec],
            volumes=volumes,
            options=opts,
            issued_at=issued_at,
        )

    def record_action_result(
        self, ctx: RequestContext, request: ComputeRequest, result: ComputeResult
    ) -> None:
        action = request.action or request.operation
        hosts.report(self.db, request.host, result)
        for spec in request.instances:
            res = next((r for r in result.results if r.uuid == spec.uuid), None)
            if res is None:
                res = InstanceResult(uuid=spec.uuid, ok=False, fault=result.error)
            self.finish_action(ctx, spec.uuid, action, res, host=request.host)

    @in_cell_of("uuid")
    def finish_action(
        self,
        ctx: RequestContext,
        uuid: str,
        action: str,
        res: InstanceResult | None,
        host: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        """Write where ``action`` ends (or, on failure, where the table says), with its events.

        The write expects the task's owner: ``owner``, by default ``ctx``'s request, which
        started it (heal passes its own once it has taken a task over). When another writer
        changed the instance meanwhile (a hard reboot over a pause, a delete over anything,
        heal's take-over) nothing is written over it and nothing is raised: the host's events
        and the action's finish are recorded on their own, with the lost race as its message.
        """
        from novakit.placement import api as placement

        t = ACTIONS[action]
        ok = res is None or res.ok
        expected = list(t.passes)
        deletes = t.end_vm_state == VmState.DELETED
        expected_owner = owner or ctx.request_id

        StateChange = tuple[tuple[str, str | None], tuple[str, str | None]]
        touched: list[str] = []  # the other members' ports, whose filters lose its addresses

        def write(session: Session) -> StateChange:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            old_state = (inst.vm_state, inst.task_state)
            if deletes and ok:
                db_api.instance_soft_delete(
                    session, uuid, expected_task_state=expected, expected_owner=expected_owner
                )
                session.execute(delete(InstanceGroupMember).where(InstanceGroupMember.instance_uuid == uuid))
                # Its ports made for it go with their addresses, the ones it was given are unbound.
                touched[:] = filter_sync.members_touched(session, [uuid])
                ports.free_for_instance(session, uuid)
                new_state: tuple[str, str | None] = (VmState.DELETED.value, None)
            else:
                values: dict[str, Any] = {"task_state": None}
                if ok:
                    end = t.end_vm_state
                    if t.keeps_stopped and inst.vm_state == VmState.STOPPED.value:
                        end = VmState.STOPPED
                    if end is not None:
                        values["vm_state"] = end
                    if res is not None and res.addresses:
                        values["addresses"] = res.addresses
                elif t.on_failure is not None:
                    # Nova's reverts_task_state puts the instance back where it was; some
                    # failures (a delete, a hard reboot, a rebuild) leave it in error instead.
                    values["vm_state"] = t.on_failure
                if res is not None and res.power_state is not None:
                    values["power_state"] = res.power_state
                elif ok and t.end_power_state is not None:
                    values["power_state"] = int(t.end_power_state)
                if expected:  # an action with no task state of its own (attach_volume) writes none
                    db_api.instance_update(
                        session, uuid, values, expected_task_state=expected, expected_owner=expected_owner
                    )
                new_state = (str(values.get("vm_state", inst.vm_state)), None)
            actions.record_outcome(
                session,
                ctx,
                uuid,
                events=res.events if res is not None else (),
                fault=res.fault if res is not None and not ok else None,
                finish=t.record_as,
            )
            return old_state, new_state

        try:
            old_state, new_state = self.db.run_in_transaction(write)
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound) as exc:
            LOG.info("instance %s changed while its %s ran: %s", uuid, action, exc.format_message())
            free = actions.record_lost_race(
                self.db,
                ctx,
                uuid,
                t.record_as,
                res.events if res is not None else (),
                res.fault if res is not None and not ok else None,
                exc,
                host,
            )
            if deletes and ok and free:
                placement.remove_allocations(self.db, uuid)
                self._release_volumes(ctx, uuid)
                release_moves(self.services, ctx, uuid)
            return
        self.services.notifier.state_update(uuid, old_state, new_state, host=host)
        if deletes and ok:
            placement.remove_allocations(self.db, uuid)
            self._release_volumes(ctx, uuid)
            release_moves(self.services, ctx, uuid)
            filter_sync.push_filters(self.services.rpc, ctx.request_id, touched)
        self.services.notifier.emit(f"instance.{t.notify_as}.{'end' if ok else 'error'}", uuid, host=host)

    def _release_volumes(self, ctx: RequestContext, uuid: str) -> None:
        """A deleted server's volumes are detached in the records (Nova's _cleanup_volumes);
        those marked delete_on_termination are deleted. A volume that cannot be deleted now stays,
        in error_deleting with the reason, for ``novakit volume delete`` to retry."""
        from novakit.volume import attachments

        try:
            attachments.release_server(self.services, ctx, uuid)
        except exceptions.NovakitError as exc:
            LOG.warning("volumes of deleted server %s not all released: %s", uuid, exc.format_message())

    def finish_local(self, ctx: RequestContext, uuid: str, t: Transition) -> None:
        """An action no host acts on (lock, rename...): its event and its finish recorded."""
        with actions.instance_event(self.db, ctx, uuid, f"api_{t.action}", fault_on_error=False):
            pass

        def write(session: Session) -> None:
            actions.action_finish(session, ctx, uuid, t.record_as)

        with targeting(self.db, uuid):
            self.db.run_in_transaction(write)
