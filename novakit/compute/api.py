"""The compute API: what a caller may ask of novakit, checked before anything moves.

Every request is validated (``schemas``), scoped to the caller's project
(another project's server looks "not found"), checked against locks and the
state table (``states.ACTIONS``), and then started with one guarded write
that also records the instance action. A refused request changes nothing.
The work itself is the conductor's.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.cells import instances as cell_instances
from novakit.cells import mappings
from novakit.cells.registry import locate, targeting
from novakit.compute import actions, listing, prepare, states
from novakit.compute.create import CreateAPI
from novakit.compute.states import (
    Transition,
)
from novakit.compute.views import host_id, security_groups_view, server_view
from novakit.config import Config, load_config
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.engine import Database
from novakit.db.models import Instance
from novakit.fleet import hosts
from novakit.host.messages import ComputeRequest
from novakit.network import security_groups
from novakit.scheduler import manager as scheduler_manager

if TYPE_CHECKING:
    from novakit.conductor.manager import Conductor


#: the actions that start whatever task is under way (Nova's delete, lock, unlock and rename look
#: at no task state): a concurrent change of the server between their read and their guarded
#: write is read again, up to ``RACE_RETRIES`` times, instead of refusing them
RETRIED_ON_RACE = frozenset({"delete", "lock", "unlock", "rename"})
RACE_RETRIES = 3

#: what the guarded write of ``act`` says: the server's uuid (None: none), whether it changed
#: anything, and the options for the host
_Started = tuple[str | None, bool, dict[str, Any]]

#: runs ``fn(*args)`` elsewhere, later (``API.later``)
Later = Callable[..., None]


class API(CreateAPI):
    def __init__(
        self,
        db: Database | None = None,
        conf: Config | None = None,
        conductor: Conductor | None = None,
        *,
        later: Later | None = None,
    ) -> None:
        """``later``: where the conductor's part of a create or an action runs, when not in the
        caller's thread (``novakit serve``'s pool: ``later(fn, *args)``). The call then returns
        once the request is recorded and its task state written, as Nova's API answers 202; the
        work runs as it would in the caller, and heal recovers it as any other when its
        process dies (its lease)."""
        self.conf = conf or load_config()
        # Unknown filter or weigher names fail here, before any request is recorded.
        scheduler_manager.check_config(self.conf)
        self.db = db or Database.from_config(self.conf)
        self._conductor = conductor
        self.later = later

    def inline(self) -> API:
        """This API with the host part of its creates and actions run in the caller's thread
        (no ``later``): for a library call that reports how each of its moves ended (a host's
        drain), in ``novakit serve`` too."""
        return self if self.later is None else API(self.db, self.conf, self.conductor)

    @property
    def conductor(self) -> Conductor:
        if self._conductor is None:
            from novakit.conductor.manager import Conductor

            self._conductor = Conductor(self.db, self.conf)
        return self._conductor

    # ------------------------------------------------------------------ reads

    def get(self, ctx: RequestContext, ref: str, *, deleted: bool = False) -> dict[str, Any]:
        """A server by name or uuid; ``deleted``: a deleted one (the last deleted of a name).

        A server whose cell is down is answered with what the API database knows of it
        (status UNKNOWN, ``cell_instances.unknown_record``), as Nova does.
        """
        cell = locate(self.db.cells, ctx, ref, deleted=deleted)
        try:
            with self.db.target_cell(cell), self.db.reader() as session:
                inst = db_api.instance_get_by_name_or_uuid(session, ctx, ref, deleted=deleted)
                names = listing.image_names(session, {inst.image_ref} if inst.image_ref else set())
                view = server_view(inst, ctx, names.get(inst.image_ref or ""))
            # Its ports (and their groups) are the API database's.
            groups = security_groups.instance_groups(self.db, view["id"])
            view["security_groups"] = security_groups_view(groups)
            return view
        except exceptions.CellDown:
            with self.db.reader() as session:
                found = mappings.find(session, ctx, ref, deleted=deleted)
            return cell_instances.unknown_record(found[0], cell.name)

    def list(self, ctx: RequestContext, **filters: Any) -> builtins.list[dict[str, Any]]:
        """Every server ``ctx`` may see (an admin: every project's), in every cell, for the
        library's own callers (inventory, callback); a listing as Nova's API gives it is
        ``list_servers``. A down cell's servers come as minimal records (status UNKNOWN)."""
        rows, _down = cell_instances.list_all(self.db, ctx, filters)
        return [r if isinstance(r, dict) else server_view(r, ctx) for r in rows]

    def list_servers(
        self, ctx: RequestContext, query: listing.ServerQuery | dict[str, Any] | None = None
    ) -> builtins.list[dict[str, Any]]:
        """Nova's server listing: filters, scope and pages (``novakit.compute.listing``), over
        every cell, merge-sorted; a down cell's servers come as minimal records."""
        return self.list_servers_and_down(ctx, query)[0]

    def list_servers_and_down(
        self, ctx: RequestContext, query: listing.ServerQuery | dict[str, Any] | None = None
    ) -> tuple[builtins.list[dict[str, Any]], builtins.list[str]]:
        """``list_servers``, and the names of the cells that did not answer."""
        with self.db.reader() as session:
            filters = listing.filters_of(session, ctx, query)
        rows, down = cell_instances.list_all(self.db, ctx, filters)
        live = [r for r in rows if not isinstance(r, dict)]
        with self.db.reader() as session:
            names = listing.image_names(session, {i.image_ref for i in live if i.image_ref})
        views = [
            r if isinstance(r, dict) else server_view(r, ctx, names.get(r.image_ref or "")) for r in rows
        ]
        return views, sorted(c.name for c in down)

    def image_id(self, ctx: RequestContext, ref: str) -> str:
        """The id of the image named or numbered ``ref`` that ``ctx`` may use (``images.usable``)."""
        from novakit.catalog import images

        with self.db.reader() as session:
            return images.usable(session, ctx, ref).uuid

    def console_output(self, ctx: RequestContext, ref: str, lines: int | None = None) -> str:
        """The server's console log, read from its host (``novakit.compute.console``)."""
        from novakit.compute import console

        return console.console_output(self.db, self.conductor.rpc, ctx, ref, lines)

    def list_actions(
        self, ctx: RequestContext, ref: str, *, deleted: bool = False
    ) -> builtins.list[dict[str, Any]]:
        """The instance's actions with their events (Nova's os-instance-actions)."""
        cell = locate(self.db.cells, ctx, ref, include_deleted=True, deleted=deleted)
        with self.db.target_cell(cell), self.db.reader() as session:
            inst = db_api.instance_get_by_name_or_uuid(
                session, ctx, ref, include_deleted=True, deleted=deleted
            )
            out = []
            for a in actions.list_actions(session, inst.uuid):
                out.append(
                    {
                        "action": a.action,
                        "request_id": a.request_id,
                        "user_id": a.user_id,
                        "project_id": a.project_id,
                        "start_time": a.start_time,
                        "finish_time": a.finish_time,
                        "updated_at": a.updated_at or a.start_time,
                        "message": a.message,
                        "events": [
                            {
                                "event": e.event,
                                "start_time": e.start_time,
                                "finish_time": e.finish_time,
                                "result": e.result,
                                "host": e.host if policy.allowed(ctx, "host:show") else None,
                                # Nova's opaque hostId: the same for one project's events on one host
                                "host_id": host_id(inst.project_id, e.host) if e.host else "",
                                "details": actions.shown_text(e.details, ctx),
                                **(
                                    {"traceback": e.traceback}
                                    if e.traceback and policy.allowed(ctx, "server:fault_details")
                                    else {}
                                ),
                            }
                            for e in a.events
                        ],
                    }
                )
            return out

    # ------------------------------------------------------------------ actions

    def act(
        self,
        ctx: RequestContext,
        ref: str,
        action: str,
        options: dict[str, Any] | None = None,
        *,
        dry_run: bool = False,
        defer: bool = False,
        declarative: bool = False,
    ) -> ActOutcome:
        """Run ``action`` (a name of the state table) on a server: the one way every caller acts.

        Checks, in this order and nowhere else: the action and its options
        (``states.resolve``), the server (by name or uuid, in the caller's
        project), the lock, the state table, and the action's own look-ups (a
        rebuild's image, a rename's name). Then one guarded write starts it and
        records the instance action; the host's part follows, or with ``defer``
        is returned as ``request`` for the caller to send.

        ``dry_run`` runs exactly those checks in a read and writes nothing: it
        refuses what the real call would refuse, with the same error.
        ``declarative`` (modules, playbooks): an action already in effect (the
        table's ``in_effect``) changes nothing, and deleting a server that does
        not exist is not an error.
        """
        t, opts = states.resolve(action, options)
        cell = locate(self.db.cells, ctx, ref)
        try:
            with self.db.target_cell(cell):
                return self._act(ctx, ref, t, opts, dry_run=dry_run, defer=defer, declarative=declarative)
        except exceptions.InstanceNotFound:
            # Moved into its cell (or cell0) between the look-up and the write: act there.
            moved = locate(self.db.cells, ctx, ref)
            if moved == cell:
                raise
            with self.db.target_cell(moved):
                return self._act(ctx, ref, t, opts, dry_run=dry_run, defer=defer, declarative=declarative)

    def _act(
        self,
        ctx: RequestContext,
        ref: str,
        t: Transition,
        opts: dict[str, Any],
        *,
        dry_run: bool,
        defer: bool,
        declarative: bool,
    ) -> ActOutcome:
        """``act`` in the server's cell (targeted)."""

        def check(session: Session) -> tuple[Instance | None, dict[str, Any] | None, dict[str, Any]]:
            try:
                inst = db_api.instance_get_by_name_or_uuid(session, ctx, ref)
            except exceptions.InstanceNotFound:
                if declarative and t.action == "delete":
                    return None, None, {}
                raise
            if (
                (declarative or t.idempotent)
                and t.in_effect is not None
                and t.in_effect(inst, opts, ctx)
                and not (t.action == "delete" and self._abandoned(inst))  # its owner is gone: drive it again
            ):
                return inst, None, {}
            _check_lock(ctx, inst, t)
            states.check(t, inst, lambda host: hosts.is_up(hosts.service_in(session, host), self.conf))
            values, host_options = prepare.step_for(t.action)(self.conf, session, ctx, inst, opts)
            if t.passes:
                values["task_state"] = t.passes[0]
                # This request owns the task, on a lease its host call must end within.
                values["task_owner"] = ctx.request_id
                values["task_lease_until"] = self.conductor.lease_until(host_options.get("timeout") or 0)
            return inst, values, host_options

        if dry_run:
            with self.db.reader() as session:
                inst, values, host_options = check(session)
                view = server_view(inst, ctx) if inst is not None else None
            destination = None
            if inst is not None and values is not None and t.flow is not None:
                # A move's dry run asks the scheduler too, as a boot's does (nothing is claimed).
                destination = self.conductor.plan_move(ctx, inst.uuid, t.action, host_options)
            return ActOutcome(
                server=view, changed=values is not None, action=t.action, would_move_to=destination
            )

        def write(session: Session) -> _Started:
            inst, values, host_options = check(session)
            if inst is None or values is None:
                return (inst.uuid if inst is not None else None), False, {}
            if values:
                # The lock as the checks read it is part of the guarded write's condition.
                db_api.instance_update(
                    session,
                    inst.uuid,
                    values,
                    expected_task_state=inst.task_state,
                    expected_vm_state=inst.vm_state,
                    expected_lock=(bool(inst.locked), inst.locked_by),
                )
            actions.action_start(session, ctx, inst.uuid, t.record_as)
            return inst.uuid, True, host_options

        try:
            uuid, changed, host_options = self._guarded(t, write)
        except IntegrityError:  # the rename's name was taken meanwhile
            raise exceptions.DuplicateName(name=opts.get("name") or ref, project_id=ctx.project_id) from None
        if uuid is None:
            return ActOutcome(server=None, changed=False, action=t.action)
        # The guarded write is committed: the rest of the action is the conductor's, here or later.
        request = None
        ran = changed and (defer or self.later is None)
        if ran:
            request = self.conductor.carry_on(ctx, uuid, t, host_options, defer=defer)
        elif changed and self.later is not None:
            self.later(self.conductor.carry_on, ctx, uuid, t, host_options)
        # Read where the server is now: its mapping, not the cell it was in when the action began.
        with targeting(self.db, uuid), self.db.reader() as session:
            view = server_view(db_api.instance_get(session, ctx, uuid, include_deleted=True), ctx)
            failed = actions.failure_of(session, ctx, uuid, t.record_as) if ran and t.flow else None
        image_id = host_options.get("image_id") if changed else None
        return ActOutcome(
            server=view, changed=changed, action=t.action, request=request, error=failed, image_id=image_id
        )

    def _guarded(self, t: Transition, write: Callable[[Session], _Started]) -> _Started:
        """The guarded write that starts ``t``. The actions Nova runs whatever task is under way
        (``RETRIED_ON_RACE``) are read and checked again when another writer changed the server
        between their read and their write (on PostgreSQL a concurrent commit lands there); the
        checks then decide on what is now recorded. Bounded: a server that keeps changing wins."""
        for attempt in range(RACE_RETRIES + 1):
            try:
                return self.db.run_in_transaction(write)
            except exceptions.UnexpectedTaskStateError:
                if t.action not in RETRIED_ON_RACE or attempt == RACE_RETRIES:
                    raise
        raise AssertionError("unreachable")

    def _abandoned(self, inst: Instance) -> bool:
        """Whether ``inst``'s running task has lost its owner (its lease ran out)."""
        now = self.conductor.clock()
        older = now - timedelta(seconds=self.conf.compute.build_timeout)
        return db_api.owner_gone(inst, now, older)

    # The Python API's short forms: each is ``act`` with the action's options.

    def delete(self, ctx: RequestContext, ref: str) -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "delete"))

    def stop(self, ctx: RequestContext, ref: str, *, timeout: int | None = None) -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "stop", {"timeout": timeout}))

    def start(self, ctx: RequestContext, ref: str) -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "start"))

    def reboot(self, ctx: RequestContext, ref: str, reboot_type: str = "SOFT") -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "reboot", {"reboot_type": reboot_type}))

    def pause(self, ctx: RequestContext, ref: str) -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "pause"))

    def unpause(self, ctx: RequestContext, ref: str) -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "unpause"))

    def suspend(self, ctx: RequestContext, ref: str) -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "suspend"))

    def resume(self, ctx: RequestContext, ref: str) -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "resume"))

    def rebuild(self, ctx: RequestContext, ref: str, data: dict[str, Any]) -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "rebuild", data))

    def lock(self, ctx: RequestContext, ref: str, reason: str | None = None) -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "lock", {"reason": reason}))

    def unlock(self, ctx: RequestContext, ref: str) -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "unlock"))

    def rename(self, ctx: RequestContext, ref: str, name: str) -> dict[str, Any]:
        return self._server(self.act(ctx, ref, "rename", {"name": name}))

    @staticmethod
    def _server(outcome: ActOutcome) -> dict[str, Any]:
        assert outcome.server is not None  # only a declarative delete of a missing server has none
        return outcome.server


@dataclass
class ActOutcome:
    """What ``API.act`` did or, as a dry run, would do."""

    server: dict[str, Any] | None  # the server as it now is; None: a declarative delete found none
    changed: bool
    action: str  # the state table's row that ran (``reboot_hard`` for a hard reboot)
    request: ComputeRequest | None = None  # ``defer``: the host's part, for the caller to send
    would_move_to: str | None = None  # a move's dry run: the host the scheduler would choose
    # a move that failed (rolled back, or left in error): why, with its failed steps
    error: str | None = None
    # a snapshot's (``create_image``): the id its image has (chosen when the action started)
    image_id: str | None = None


def _check_lock(ctx: RequestContext, inst: Instance, t: Transition) -> None:
    """Nova's ``check_instance_lock`` and unlock policy.

    A locked server refuses every action that checks the lock (``checks_lock``)
    to every non-admin, its locker included: the lock is a safety catch, lifted
    before acting. A lock made by the server's own project (``owner``) is lifted
    by any member of it; an admin's lock (an admin of another project locked
    it) only by an admin.
    """
    if t.action == "unlock":
        if inst.locked_by == "admin" and not policy.allowed(ctx, "server:lock_override"):
            raise exceptions.InstanceIsLocked(inst.uuid, "locked by an admin")
        return
    if t.checks_lock and inst.locked and not policy.allowed(ctx, "server:lock_override"):
        raise exceptions.InstanceIsLocked(inst.uuid, inst.locked_reason)
