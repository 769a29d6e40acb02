"""What every flow is (``Flow``: ``run``, ``dry_run``), and the steps the moves share.

A flow is one move type: the API has started its action (the first task state of the table's
row, its owner and lease, the instance action); ``run`` carries it on, host step by host step,
each one a ``ComputeRequest`` as every host call; ``dry_run`` says where it would go, as check
mode answers (the scheduler's choice with nothing claimed, or NoValidHost with its
explanation; None: the move needs no new host). The claims: during a move the migration holds
the source host's allocations and the instance the destination's, so both hosts' capacity is
right until the move is confirmed or reverted (Nova's migration-based allocations).

Recovering an interrupted move is heal's (``novakit.heal.moves``), read from the same records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.catalog import flavors
from novakit.cells.registry import in_cell_of, locate
from novakit.compute import actions
from novakit.compute.rpc import instance_spec
from novakit.compute.states import ACTIONS, TaskState, Transition, VmState
from novakit.conductor.core import Services, ctx_admin
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import RequestSpec
from novakit.host.messages import InstanceSpec
from novakit.moves import migrations
from novakit.placement.allocations import move_allocations_in_session, remove_allocations_in_session
from novakit.scheduler.request_spec import RequestSpec as SchedSpec

LOG = logging.getLogger(__name__)

T = TaskState


@dataclass(frozen=True)
class Choice:
    """How a move's destination is chosen and recorded: the action ``event`` that records it,
    the ``task`` state it expects, the migration's ``statuses`` before and after, and the
    ``migration_type`` a move off its host records (``claim_elsewhere``)."""

    event: str
    task: TaskState
    statuses: tuple[str, str]
    migration_type: str = "migration"


class Flow:
    """One move type, found by the name the state table's row gives it (``flows.FLOWS``)."""

    #: how a move's destination is chosen and recorded (``choose_destination``, ``claim_elsewhere``)
    choice = Choice("conductor_migrate_server", T.RESIZE_PREP, ("pre-migrating", "migrating"))

    def __init__(self, services: Services) -> None:
        self.services = services
        self.db = services.db

    def run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        raise NotImplementedError

    def dry_run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> str | None:
        """Where the move would go; None: it needs no new host."""
        return None

    # --- the steps the moves share ------------------------------------------------------

    def move_spec(
        self,
        ctx: RequestContext,
        uuid: str,
        *,
        flavor: dict[str, Any] | None = None,
        image: Any = None,
        host: str | None = None,
        source: str | None = None,
    ) -> SchedSpec:
        """What the scheduler is asked for a server that moves (or comes back from shelved): its
        boot's request (server group, networks, hints) with the flavor or image it moves with,
        for one server, never back onto ``source`` and never into another cell (a move keeps its
        records in their cell)."""
        with self.db.reader() as session:
            row = session.execute(select(RequestSpec).where(RequestSpec.instance_uuid == uuid)).scalar_one()
        spec = SchedSpec.model_validate(row.spec)
        spec.request_id = ctx.request_id
        if flavor is not None:
            spec.flavor = flavors.spec(flavor)
        if image is not None:
            spec.image = image
        spec.num_instances, spec.min_count = 1, None
        spec.new_root_volume_gb, spec.boot_volume = None, None
        spec.requested_host = host
        cell = locate(self.db.cells, ctx_admin(ctx), uuid)
        spec.ignore_hosts = sorted(
            {*([source] if source else []), *migrations.hosts_outside_cell(self.db, cell.id)}
        )
        return spec

    def plan(self, uuid: str, spec: SchedSpec) -> str:
        """The scheduler's choice for ``spec``, nothing claimed (a dry run)."""
        choice = self.services.scheduler.select_destinations(spec, [uuid], dry_run=True, recheck_quota=False)
        return str(choice[0][0].host)

    def plan_elsewhere(self, ctx: RequestContext, uuid: str, options: dict[str, Any]) -> str:
        """The dry run of a move to another host, with the flavor it asks for or its own."""
        with self.db.reader() as session:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            source, flavor = inst.host, dict(inst.flavor or {})
        spec = self.move_spec(
            ctx, uuid, flavor=options.get("flavor") or flavor, host=options.get("host"), source=source
        )
        return self.plan(uuid, spec)

    def spec_of(self, ctx: RequestContext, uuid: str) -> InstanceSpec:
        """The server as its hosts are sent it, read now."""
        with self.db.reader() as session:
            return instance_spec(session, db_api.instance_get(session, ctx_admin(ctx), uuid))

    def choose_destination(
        self,
        ctx: RequestContext,
        uuid: str,
        t: Transition,
        mig: str,
        flavor: dict[str, Any],
        host: str | None,
        source: str,
    ) -> str:
        """Scheduled as a boot is, with ``flavor``, away from ``source`` and in the server's
        cell, recorded as the action's ``choice.event``; the claim is the instance's, and the
        migration learns its destination with it (its status goes ``choice.statuses[0]`` ->
        ``[1]``; the task ``choice.task`` is expected). With no destination, the move rolls back
        (nothing has moved yet) and the error is raised."""
        before, after = self.choice.statuses

        def on_claimed(session: Session, claimed: dict[str, list[Any]]) -> None:
            chosen = claimed[uuid][0].host
            migrations.set_status(session, mig, before, after, dest_compute=chosen)
            db_api.instance_update(
                session,
                uuid,
                {"task_lease_until": self.services.lease_until()},
                expected_task_state=[self.choice.task],
                expected_owner=ctx.request_id,
                fetch=False,
            )

        try:
            with actions.instance_event(self.db, ctx, uuid, self.choice.event):
                spec = self.move_spec(ctx, uuid, flavor=flavor, host=host, source=source)
                selections = self.services.scheduler.select_destinations(
                    spec, [uuid], recheck_quota=False, on_claimed=on_claimed
                )
        except exceptions.NovakitError as exc:
            LOG.info("%s of %s: no destination: %s", t.action, uuid, exc.format_message())
            self.roll_back(ctx, uuid, t, mig, events=[], fault=None)
            raise
        return str(selections[0][0].host)

    def claim_elsewhere(
        self, ctx: RequestContext, uuid: str, t: Transition, options: dict[str, Any]
    ) -> tuple[str, str, str]:
        """A move of the server with its own flavor: the migration (``choice.migration_type``,
        status ``choice.statuses[0]``) recorded and handed the instance's claim on its host, in one
        transaction, then its destination chosen (``choose_destination``, ``options``' host if
        named). Returns the migration, the source and the destination."""
        kind, status = self.choice.migration_type, self.choice.statuses[0]

        def write(session: Session) -> tuple[str, str, dict[str, Any]]:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            m = migrations.create(session, ctx, inst, kind, dict(inst.flavor or {}), status=status)
            move_allocations_in_session(session, uuid, m.uuid)
            return m.uuid, str(inst.host), dict(inst.flavor or {})

        mig, source, flavor = self.db.run_in_transaction(write)
        return mig, source, self.choose_destination(ctx, uuid, t, mig, flavor, options.get("host"), source)

    def roll_back(
        self,
        ctx: RequestContext,
        uuid: str,
        t: Transition,
        mig: str,
        *,
        events: list[Any],
        fault: Any,
        error: bool = False,
        migration_status: str = "error",
        also: Callable[[Session], None] | None = None,
    ) -> None:
        """The move undone: the destination's claim (if any) goes, the source's returns to the
        instance, the migration is ``migration_status`` (error; an aborted one cancelled), the
        server where it was (``error``: in error); ``also`` writes in the same transaction."""

        def write(session: Session) -> None:
            remove_allocations_in_session(session, uuid)
            move_allocations_in_session(session, mig, uuid)
            migrations.set_status(session, mig, migrations.IN_PROGRESS, migration_status)
            if also is not None:
                also(session)
            values: dict[str, Any] = {"task_state": None}
            if error:
                values["vm_state"] = VmState.ERROR
            actions.end_task(
                session, ctx, uuid, values, list(t.passes), events=events, fault=fault, finish=t.record_as
            )

        self.db.run_in_transaction(write)
        self.services.notifier.emit(f"instance.{t.notify_as}.error", uuid)


class OffItsHost(Flow):
    """A move of a server, with its own flavor, to a host the scheduler chooses (live migration,
    evacuation): claimed and placed by ``claim_elsewhere``, then carried on by the flow's
    ``move``; its dry run is ``plan_elsewhere``."""

    @in_cell_of("uuid")
    def run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]
        mig, source, dest = self.claim_elsewhere(ctx, uuid, t, options)
        self.move(ctx, uuid, t, mig, source, dest)

    def move(self, ctx: RequestContext, uuid: str, t: Transition, mig: str, source: str, dest: str) -> None:
        raise NotImplementedError

    def dry_run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> str | None:
        return self.plan_elsewhere(ctx, uuid, options)
