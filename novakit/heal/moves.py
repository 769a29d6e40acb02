"""Heal's part in moves (``novakit.moves``): what Nova's compute service does at start-up and in
its periodic tasks for servers that moved.

* **Evacuated guests** (Nova's ``_destroy_evacuated_instances`` when a compute service starts):
  a host that answers again and still has the old guest of a server evacuated from it (its
  migration ``done``) gets that guest destroyed; the migration's claim on it goes and the
  migration is ``completed``. A guest a move keeps on its source for a revert (a migration
  ``finished``, ``confirming`` or ``reverting``) is no orphan either.
* **Unconfirmed resizes** (``_poll_unconfirmed_resizes``): with
  ``compute.resize_confirm_window`` > 0, a resize waiting for its answer longer than that is
  confirmed, as its owner would.
* **Shelved servers** (``_poll_shelved_instances``): with ``compute.shelved_offload_time`` > 0,
  a server shelved longer than that is offloaded.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select

from novakit import exceptions
from novakit.compute.states import PowerState, VmState
from novakit.db.models import Instance, Migration
from novakit.fleet import aggregates as fleet_aggregates
from novakit.heal.base import Correction, _power, bare_spec, recover_event, skipped
from novakit.host.messages import ComputeRequest
from novakit.moves import migrations
from novakit.placement.allocations import remove_allocations_in_session

#: a source keeps the guest for a revert while its move is in one of these
_KEPT_FOR_REVERT = ("finished", "confirming", "reverting")


class Moves:
    db: Any
    _holders: Any
    _in_cell: Any
    conf: Any
    ctx: Any
    rpc: Any
    clock: Any
    conductor: Any
    _gather: Any

    def _moved_away(
        self, host: str, guests: dict[str, int], dry_run: bool
    ) -> tuple[list[Correction], set[str]]:
        """The guests on ``host`` that belong to a move: evacuated ones are removed (with their
        migration's claim), ones kept for a revert are left. Returns the corrections and every
        guest handled, which the orphan rule then leaves alone."""
        rows = self._migrations(
            Migration.source_compute == host, Migration.status.in_(["done", *_KEPT_FOR_REVERT])
        )
        with self.db.reader() as session:
            # A move under way has its guest on its destination before the records say so.
            arriving = set(
                session.execute(
                    select(Migration.instance_uuid).where(
                        Migration.dest_compute == host, Migration.status.in_(migrations.IN_PROGRESS)
                    )
                ).scalars()
            )
        handled = {m.instance_uuid for m in rows if m.status in _KEPT_FOR_REVERT} | arriving
        out: list[Correction] = []
        for m in rows:
            if m.status != "done":
                continue
            handled.add(m.instance_uuid)
            c = Correction(
                kind="evacuated_guest",
                instance=m.instance_uuid,
                host=host,
                before=_power(guests[m.instance_uuid]) if m.instance_uuid in guests else "gone",
                after="destroyed",
                detail=f"the old guest of a server evacuated from {host} to {m.dest_compute}",
            )
            if not dry_run:
                ok = True
                if m.instance_uuid in guests:
                    ok, c.error = self._destroy_on(host, m.instance_uuid)
                if ok:

                    def write(session: Any, mig: str = m.uuid) -> None:
                        remove_allocations_in_session(session, mig)
                        migrations.set_status(session, mig, "done", "completed")

                    ok = self._write_migration(c, write)
                c.applied = ok
            out.append(c)
        return out, handled

    def _migrations(self, *where: Any) -> list[Migration]:
        with self.db.reader() as session:
            return list(session.execute(select(Migration).where(*where)).scalars())

    def _write_migration(self, c: Correction, write: Any) -> bool:
        """Run a migration's guarded write; a racing heal that changed it first leaves ``c``
        skipped."""
        try:
            self.db.run_in_transaction(write)
        except exceptions.Conflict as exc:
            c.error = f"skipped: the migration changed meanwhile ({exc.format_message()})"
            return False
        return True

    def _moves_of_gone_servers(self, reports: dict[str, dict[str, int]], dry_run: bool) -> list[Correction]:
        """Moves whose server no longer exists (a delete killed after the record went, before it
        released the server's moves): each ends as the delete would have ended it
        (``release_moves``), see ``_release_gone_move``."""
        rows = self._migrations(Migration.status.in_([st for st in migrations.IN_PROGRESS if st != "done"]))
        if not rows:
            return []
        gone = self._holders(sorted({m.instance_uuid for m in rows}), None).gone
        out: list[Correction] = []
        for m in rows:
            if m.instance_uuid not in gone:
                continue
            c = Correction(
                kind="orphan_allocation",
                instance=m.uuid,
                host=m.source_compute,
                before=f"{m.migration_type} {m.status}",
                after="freed",
                detail=f"the {m.migration_type} of server {m.instance_uuid}, which no longer exists: "
                "its guests and claims go",
            )
            out.append(c)
            self._release_gone_move(c, m, reports, dry_run)
        return out

    def _release_gone_move(
        self, c: Correction, m: Migration, reports: dict[str, dict[str, int]], dry_run: bool
    ) -> None:
        """The move of a server gone ends: its guests on its hosts destroyed (the server is gone,
        so no copy of it is anyone's), its claims freed, the migration ``error`` (``confirmed``
        once it had finished). Only once every host of the move has answered: a host that did
        not may still run a copy, and its claim stays until it can be asked."""
        hosts = sorted({h for h in (m.source_compute, m.dest_compute) if h})
        silent = [h for h in hosts if h not in reports]
        if silent:
            c.error = f"left until {', '.join(silent)} answers (it may run a copy)"
            return
        if dry_run:
            return
        failed = [
            f"{h}: {why}"
            for h in hosts
            if m.instance_uuid in reports[h]
            for ok, why in [self._destroy_on(h, m.instance_uuid)]
            if not ok
        ]
        if failed:
            c.error = "a guest could not be destroyed: " + "; ".join(failed)
            return
        end = "confirmed" if m.status in ("finished", "confirming") else "error"

        def write(session: Any) -> None:
            migrations.set_status(session, m.uuid, m.status, end)
            remove_allocations_in_session(session, m.uuid)
            remove_allocations_in_session(session, m.instance_uuid)

        c.applied = self._write_migration(c, write)

    def _interrupted_confirms(
        self, seen: dict[str, Any], reports: dict[str, dict[str, int]], dry_run: bool
    ) -> list[Correction]:
        """Confirms cut off half way: a confirm has no task state (Nova's neither), only its
        migration's ``confirming``, so a migration left ``confirming`` for longer than
        ``compute.build_timeout`` (its last change counts, as a volume's) was abandoned. The
        user asked for it and the guard let it start, so heal finishes it as the confirm's owner
        would (``_finish_confirm``). A source that does not answer leaves it for a later heal."""
        older = self.clock() - dt.timedelta(seconds=self.conf.compute.build_timeout)
        out: list[Correction] = []
        for m in self._migrations(Migration.status == "confirming", Migration.updated_at < older):
            s = seen.get(m.instance_uuid)
            if s is None or s.vm_state != VmState.RESIZED.value:
                continue  # a server gone is ``_moves_of_gone_servers``'; one changed, its owner's
            c = Correction(
                kind="task_recovered",
                instance=m.instance_uuid,
                host=m.source_compute,
                before="resized/confirming",
                after="confirmed",
                detail=f"its confirm was cut off (migration {m.uuid} confirming since {m.updated_at}): "
                "finished",
            )
            out.append(c)
            if m.source_compute not in reports:
                c.error = f"left until {m.source_compute} answers"
            elif not dry_run:
                self._finish_confirm(c, m, s)
        return out

    def _finish_confirm(self, c: Correction, m: Migration, s: Any) -> None:
        """The source's kept copy removed (``confirm_migration``, idempotent), then the records
        as the confirm would have left them (``_record_confirmed``)."""
        result = self.rpc.send(
            ComputeRequest(
                request_id=self.ctx.request_id,
                host=str(m.source_compute),
                operation="confirm_migration",
                instances=[bare_spec(m.instance_uuid)],
            )
        )
        res = result.results[0] if result.results else None
        if res is None or not res.ok:
            fault = (res.fault if res is not None else None) or result.error
            c.error = f"the source kept its copy: {fault.message if fault else 'no answer'}"
            return
        events = [recover_event(c.detail, ok=True, host=m.source_compute), *res.events]
        try:
            self._in_cell(
                s.cell, self.db.run_in_transaction, lambda session: self._record_confirmed(session, m, events)
            )
        except exceptions.NovakitError as exc:
            skipped(c, exc)
            return
        c.applied = True

    def _record_confirmed(self, session: Any, m: Migration, events: list[Any]) -> None:
        """The migration's claim on the source freed, the migration ``confirmed``, the server
        ``active`` (or ``stopped`` as it was) on its new host, the ``confirmResize`` action
        finished."""
        from novakit.compute import actions
        from novakit.db import api as db_api

        end = VmState.STOPPED if m.old_vm_state == VmState.STOPPED.value else VmState.ACTIVE
        migrations.set_status(session, m.uuid, "confirming", "confirmed")
        remove_allocations_in_session(session, m.uuid)
        db_api.instance_update(
            session,
            m.instance_uuid,
            {"vm_state": end},
            expected_vm_state=[VmState.RESIZED],
            expected_task_state=[None],
            fetch=False,
        )
        row = actions.unfinished_action(session, m.instance_uuid, "confirmResize")
        ctx = self.ctx.with_request_id(row.request_id) if row is not None else self.ctx
        actions.record_outcome(
            session,
            ctx,
            m.instance_uuid,
            start=None if row is not None else "confirmResize",
            events=events,
            finish="confirmResize",
        )

    def _destroy_on(self, host: str, uuid: str) -> tuple[bool, str | None]:
        result = self.rpc.send(
            ComputeRequest(
                request_id=self.ctx.request_id, host=host, operation="destroy", instances=[bare_spec(uuid)]
            )
        )
        if result.results and result.results[0].ok:
            return True, None
        fault = result.results[0].fault if result.results else result.error
        return False, fault.message if fault else "destroy failed"

    def _due_moves(self, dry_run: bool) -> list[Correction]:
        """Resizes past their confirm window are confirmed; shelved servers past their offload
        time are offloaded. Each through the API, as their owner would."""
        out: list[Correction] = []
        window = int(self.conf.compute.resize_confirm_window)
        now = self.clock()
        if window > 0:
            with self.db.reader() as session:
                due = list(
                    session.execute(
                        select(Migration.instance_uuid).where(
                            Migration.status == "finished",
                            Migration.updated_at < now - dt.timedelta(seconds=window),
                        )
                    ).scalars()
                )
            out += [self._act_due(u, "confirm_resize", "resize_confirmed", dry_run) for u in due]
        offload = int(self.conf.compute.shelved_offload_time)
        if offload > 0:
            older = now - dt.timedelta(seconds=offload)
            found = self._gather(
                lambda cell, session: [
                    i.uuid
                    for i in session.execute(
                        select(Instance).where(
                            Instance.vm_state == VmState.SHELVED.value,
                            Instance.task_state.is_(None),
                            Instance.deleted == 0,
                            Instance.updated_at < older,
                        )
                    ).scalars()
                ]
            )
            for _cell, uuids in found:
                out += [self._act_due(u, "shelve_offload", "shelved_offloaded", dry_run) for u in uuids]
        return out

    def _act_due(self, uuid: str, action: str, kind: str, dry_run: bool) -> Correction:
        from novakit.compute.api import API

        c = Correction(kind=kind, instance=uuid, before="waiting", after=action)  # type: ignore[arg-type]
        if not dry_run:
            try:
                API(self.db, self.conf, conductor=self.conductor).act(self.ctx, uuid, action)
                c.applied = True
            except exceptions.NovakitError as exc:
                c.error = exc.format_message()
        return c


# --- interrupted moves ------------------------------------------------------------------------

#: the task states of moves and images, whose owner heal may find gone (``recover_move``)
MOVE_TASKS = frozenset(
    {
        "resize_prep",
        "resize_migrating",
        "resize_migrated",
        "resize_finish",
        "resize_reverting",
        "migrating",
        "image_snapshot_pending",
        "image_pending_upload",
        "image_uploading",
        "shelving",
        "shelving_image_pending_upload",
        "shelving_image_uploading",
        "shelving_offloading",
        "unshelving",
        "rescuing",
        "unrescuing",
    }
)


class MoveRecovery:
    """Heal's rule for a move or an image task whose owner is gone (Nova's ``_init_instance``
    rolls an interrupted resize or migration back for safety, and clears image tasks):

    * a move with its migration under way: where the guest is decides. Still on the source (or
      kept there for a revert): rolled back, the destination's copy removed, the claims back to
      the instance, the migration error, the server as it was. Only on the destination: the
      records follow it (a live migration that finished, a resize that reached VERIFY_RESIZE).
      On neither: the server is in error.
    * an evacuation (``rebuilding`` with an evacuation under way): the new host's guest decides,
      as for a build: there, the server is active there; not there, in error on its old host.
    * a snapshot or shelve: the task is cleared and an image never written goes; rescue and
      unrescue: the task is cleared, the power state recorded.
    * an offload (``shelving_offloading``): its host's guest list tells whether it happened. No
      guest there: the host offloaded it and only the record was lost, so the server ends
      ``shelved_offloaded`` with no host, no claim, its ports unbound (what the offload writes).
      The guest still there: the task is cleared and the server stays ``shelved`` on its host
      with its claim, for an offload asked again (``compute.shelved_offload_time``, or the user).
    * an unshelve (``unshelving``, or ``spawning`` of a shelved server), see ``_settle_unshelve``:
      the guest on the chosen host finishes it, no guest there rolls it back to offloaded.
    """

    db: Any
    conf: Any
    ctx: Any
    rpc: Any
    clock: Any
    conductor: Any
    _destroy_on: Any

    def _recover_move(self, s: Any, power: int | None, host: str | None, dry_run: bool) -> Correction:
        task = str(s.task_state)
        c = Correction(
            kind="task_recovered",
            instance=s.uuid,
            host=host,
            before=f"{s.vm_state}/{task}",
            after="rolled back",
            detail=f"the owner of its {task} task ({s.task_owner or 'unknown'}) is gone",
        )
        if dry_run:
            return c
        try:
            c.after = self._settle_move(s, task, power)
            c.applied = True
        except exceptions.NovakitError as exc:
            c.error = exc.format_message()
        return c

    def _settle_move(self, s: Any, task: str, power: int | None) -> str:
        from novakit.conductor.core import ctx_admin
        from novakit.conductor.flows.snapshot import drop_queued as _drop_queued
        from novakit.db import api as db_api
        from novakit.db.models import Image

        with self.db.reader() as session:
            mig = migrations.in_progress(session, s.uuid)
            inst = db_api.instance_get(session, ctx_admin(self.ctx), s.uuid)
            queued = [
                i.uuid
                for i in session.execute(select(Image).where(Image.status == "queued")).scalars()
                if (i.properties or {}).get("instance_uuid") == s.uuid
            ]
        on_source = on_dest = False
        if mig is not None:
            on_source = self._has_guest(str(mig.source_compute), s.uuid)
            on_dest = bool(mig.dest_compute) and self._has_guest(str(mig.dest_compute), s.uuid)

        def write(session: Any) -> tuple[str, bool]:
            values: dict[str, Any] = {"task_state": None}
            if mig is not None:
                where, finished = _settle_migration(session, s.uuid, mig, on_source, on_dest, values), False
            else:
                where, finished = self._settle_task(session, s, task, inst.vm_state, power, values)
            for image in queued:
                _drop_queued(session, image)
            if power is not None:
                values["power_state"] = int(power)
            fleet_aggregates.with_zone(session, self.conf, values)
            db_api.instance_update(
                session,
                s.uuid,
                values,
                expected_task_state=[task],
                expected_owner=s.task_owner,
                lease_expired_at=self.clock(),
            )
            self._record_recovery(session, s.uuid, task, finished, where)
            return where, finished

        where: str
        where, finished = self.db.run_in_transaction(write)
        if finished and is_unshelve(task, inst.vm_state):
            self._unshelved(s.uuid)
        if mig is not None and mig.migration_type != "evacuation" and not (on_dest and not on_source):
            self._roll_back_on_hosts(s.uuid, mig, on_source, on_dest)
        return where

    def _settle_task(
        self, session: Any, s: Any, task: str, vm_state: str, power: int | None, values: dict[str, Any]
    ) -> tuple[str, bool]:
        """A task with no migration under way: an unshelve or an offload is ended by what its
        host holds; any other task is cleared. Returns where the server ended and whether its
        task was finished (not rolled back)."""
        from novakit.network import ports

        if is_unshelve(task, vm_state):
            where = self._settle_unshelve(session, s, vm_state, power, values)
            return where, where.startswith("unshelved")
        if task == "shelving_offloading" and power is None:
            # The host offloaded the guest; only the offload's own write was lost.
            remove_allocations_in_session(session, s.uuid)
            ports.bind_host(session, [s.uuid], None)
            values.update(vm_state=VmState.SHELVED_OFFLOADED, host=None, node=None)
            return "offloaded", True
        if vm_state == VmState.ACTIVE and power == PowerState.SHUTDOWN:
            # A shelve killed after it powered the guest off: the server is stopped, as heal's
            # power sync would record it (a later heal may not come before someone looks).
            values["vm_state"] = VmState.STOPPED
            return "cleared, stopped (its guest is off)", False
        return "cleared", False

    def _record_recovery(self, session: Any, uuid: str, task: str, finished: bool, where: str) -> None:
        """The recovery event, finishing the action the task belonged to (or a ``heal`` one)."""
        from novakit.compute import actions

        event = recover_event(f"interrupted {task}: {where}", ok=finished)
        row = _task_action(session, uuid, task)
        task_ctx = self.ctx.with_request_id(row.request_id) if row is not None else self.ctx
        if row is None:
            actions.action_start(session, self.ctx, uuid, "heal")
        actions.record_outcome(
            session, task_ctx, uuid, events=[event], finish=row.action if row is not None else "heal"
        )

    def _roll_back_on_hosts(self, uuid: str, mig: Migration, on_source: bool, on_dest: bool) -> None:
        """The host side of a roll back: the destination's copy goes, the source's guest comes
        back."""
        if on_dest and mig.dest_compute != mig.source_compute:
            self._destroy_on(str(mig.dest_compute), uuid)
        if on_source and mig.migration_type in ("resize", "migration"):
            self._revert_on_source(str(mig.source_compute), uuid, mig.old_vm_state)

    def _settle_unshelve(
        self, session: Any, s: Any, vm_state: str, power: int | None, values: dict[str, Any]
    ) -> str:
        """An unshelve whose owner is gone, by the guest on the server's (new) host.

        Nova's ``_init_instance`` puts an instance interrupted in ``spawning`` in error: the
        compute service that starts again cannot tell a guest half made from one that runs.
        Heal can: a driver's spawn leaves nothing behind when it fails, so a guest listed on
        the host is the unshelved one. Heal therefore ends it as Nova's ``unshelve_instance``
        itself ends once its spawn returned or raised (and as heal's build rule adopts a build
        whose guest exists), never in error:

        * the guest is on the host: the unshelve happened. ``active`` there (``stopped`` if the
          guest is not running), the claim the unshelve took kept, its ports active, and the
          shelved image deleted, as at the end of an unshelve.
        * no guest: Nova's failed spawn (``_unshelve_instance``): the claim goes, the host is
          let go and its ports unbound, the server ``shelved_offloaded`` again with its shelved
          image, to be unshelved again.

        A ``shelved`` server (not offloaded) is started where it is: a running guest finishes it
        (``active``); otherwise the task is cleared and it stays ``shelved``.
        """
        from novakit.compute.states import PowerState
        from novakit.network import ports

        running = power == PowerState.RUNNING
        if vm_state == VmState.SHELVED_OFFLOADED.value:
            if power is not None:
                values.update(vm_state=VmState.ACTIVE if running else VmState.STOPPED)
                ports.set_status(session, [s.uuid], "ACTIVE")
                return f"unshelved on {s.host}"
            remove_allocations_in_session(session, s.uuid)
            ports.bind_host(session, [s.uuid], None)
            values.update(host=None, node=None)
            return "offloaded again"
        if running:
            values.update(vm_state=VmState.ACTIVE)
            ports.set_status(session, [s.uuid], "ACTIVE")
            return f"unshelved on {s.host}"
        return "shelved"

    def _unshelved(self, uuid: str) -> None:
        """The shelved image of a server whose unshelve heal finished goes, as the unshelve's own
        end deletes it (``novakit.conductor.flows.shelve``)."""
        from novakit.catalog import images
        from novakit.conductor.flows.shelve import Unshelve

        with self.db.reader() as session:
            shelved = images.shelved_image_of(session, uuid)
        flow = self.conductor.flow_of("unshelve")
        if shelved is not None and isinstance(flow, Unshelve):
            flow.delete_image(self.ctx, shelved)

    def _has_guest(self, host: str, uuid: str) -> bool:
        spec = bare_spec(uuid)
        result = self.rpc.send(
            ComputeRequest(request_id=self.ctx.request_id, host=host, operation="get_info", instances=[spec])
        )
        if result.error is not None:
            raise exceptions.ComputeHostNotFound(host=f"{host} (it did not answer: {result.error.message})")
        return bool(result.results) and result.results[0].ok

    def _revert_on_source(self, host: str, uuid: str, old_vm_state: str) -> None:
        self.rpc.send(
            ComputeRequest(
                request_id=self.ctx.request_id,
                host=host,
                operation="finish_revert_migration",
                instances=[bare_spec(uuid)],
                options={"power_on": old_vm_state != VmState.STOPPED.value},
            )
        )


def _settle_migration(
    session: Any, uuid: str, mig: Migration, on_source: bool, on_dest: bool, values: dict[str, Any]
) -> str:
    """The records of a move whose owner is gone follow its guest: an evacuation's new host
    decides; a guest only on the destination moves the records forward; otherwise the move is
    rolled back. Returns where the server ended."""
    if mig.migration_type == "evacuation":
        return _settle_evacuation(session, uuid, mig, on_dest, values)
    if on_dest and not on_source:
        return _follow_to_destination(session, uuid, mig, values)
    return _roll_back(session, uuid, mig, on_source, values)


def _settle_evacuation(session: Any, uuid: str, mig: Migration, on_dest: bool, values: dict[str, Any]) -> str:
    from novakit.placement.allocations import move_allocations_in_session

    if on_dest:
        values.update(host=mig.dest_compute, node=mig.dest_compute, vm_state=VmState.ACTIVE)
        migrations.set_status(session, mig.uuid, migrations.IN_PROGRESS, "done")
        return f"active on {mig.dest_compute}"
    remove_allocations_in_session(session, uuid)
    move_allocations_in_session(session, mig.uuid, uuid)
    migrations.set_status(session, mig.uuid, migrations.IN_PROGRESS, "error")
    values.update(host=mig.source_compute, node=mig.source_compute, vm_state=VmState.ERROR)
    return "error (the new host has no guest: an interrupted rebuild)"


def _follow_to_destination(session: Any, uuid: str, mig: Migration, values: dict[str, Any]) -> str:
    """The records follow a guest found only on the destination: a live migration that
    finished, a resize that reached VERIFY_RESIZE."""
    from novakit.conductor.flows.resize import flavor_values
    from novakit.network import ports

    values.update(host=mig.dest_compute, node=mig.dest_compute)
    if mig.migration_type == "live-migration":
        remove_allocations_in_session(session, mig.uuid)
        migrations.set_status(session, mig.uuid, migrations.IN_PROGRESS, "completed")
    else:
        values.update(vm_state=VmState.RESIZED, **flavor_values(dict(mig.new_flavor)))
        migrations.set_status(session, mig.uuid, migrations.IN_PROGRESS, "finished")
    ports.bind_host(session, [uuid], mig.dest_compute)
    return f"moved to {mig.dest_compute}"


def _roll_back(session: Any, uuid: str, mig: Migration, on_source: bool, values: dict[str, Any]) -> str:
    """The claims back to the instance, the migration error, the server as it was on its
    source (in error when its guest is on neither host)."""
    from novakit.conductor.flows.resize import flavor_values
    from novakit.network import ports
    from novakit.placement.allocations import move_allocations_in_session

    remove_allocations_in_session(session, uuid)
    move_allocations_in_session(session, mig.uuid, uuid)
    migrations.set_status(session, mig.uuid, migrations.IN_PROGRESS, "error")
    values.update(host=mig.source_compute, node=mig.source_compute)
    if mig.migration_type in ("resize", "migration"):
        values.update(vm_state=mig.old_vm_state, **flavor_values(dict(mig.old_flavor)))
    if not on_source:
        values["vm_state"] = VmState.ERROR
    ports.bind_host(session, [uuid], mig.source_compute)
    return "rolled back" if on_source else "error (its guest is on neither host)"


def is_unshelve(task: str | None, vm_state: str | None) -> bool:
    """Whether an instance's task is its unshelve's: ``unshelving``, then ``spawning`` (a build's
    task state too; a shelved server's is its unshelve's)."""
    shelved = vm_state in (VmState.SHELVED.value, VmState.SHELVED_OFFLOADED.value)
    return shelved and task in ("unshelving", "spawning")


def _task_action(session: Any, uuid: str, task: str) -> Any:
    """The unfinished action an interrupted move or image task belongs to (its request's)."""
    from novakit.compute.states import ACTIONS
    from novakit.db.models import InstanceAction

    names = {t.record_as for t in ACTIONS.values() if task in {p.value for p in t.passes}}
    return session.execute(
        select(InstanceAction)
        .where(
            InstanceAction.instance_uuid == uuid,
            InstanceAction.action.in_(sorted(names)),
            InstanceAction.finish_time.is_(None),
        )
        .order_by(InstanceAction.id.desc())
        .limit(1)
    ).scalar_one_or_none()
