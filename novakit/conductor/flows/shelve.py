"""Nova's shelve, shelve offload and unshelve: a server's root disk kept as an image, its host let go.

**Shelve**: the guest is powered off and its root disk written as the *shelved image*; the
server is ``shelved`` and keeps its host and claim. With ``compute.shelved_offload_time`` 0
(Nova's default) it is offloaded at once; a positive time leaves that to heal.

**Shelve offload**: the guest leaves its host (destroyed there; its ports and the shelved
image are kept), the claim goes, the server has no host: ``shelved_offloaded``.

**Unshelve**: a shelved server is powered on where it is; an offloaded one is scheduled
anew, as a boot is, claimed, and spawned from the shelved image (its ports bound to the new
host). Then the shelved image and its file go. A spawn that fails releases the new claim
and leaves the server offloaded, with the action's error.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.catalog import images
from novakit.cells.registry import in_cell_of
from novakit.compute import actions
from novakit.compute.rpc import instance_spec
from novakit.compute.states import ACTIONS, PowerState, TaskState, VmState
from novakit.conductor.core import Services, ctx_admin
from novakit.conductor.flows.base import Flow
from novakit.conductor.flows.snapshot import drop_queued, queue_image
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import Image
from novakit.fleet import aggregates as fleet_aggregates
from novakit.host.messages import ComputeRequest, ImageSpec, InstanceSpec
from novakit.network import ports
from novakit.placement.allocations import remove_allocations_in_session

LOG = logging.getLogger(__name__)

T = TaskState


class Shelve(Flow):
    """Powered off, its root disk kept as the shelved image; offloaded at once by default."""

    @in_cell_of("uuid")
    def run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]
        with self.db.reader() as session:
            name = db_api.instance_get(session, ctx_admin(ctx), uuid).display_name
        image, host, spec = queue_image(self.services, ctx, uuid, f"{name}-shelved-{uuid[:8]}", "shelved", {})
        self.services.step(ctx, uuid, T.SHELVING, T.SHELVING_IMAGE_PENDING_UPLOAD)
        self.services.step(ctx, uuid, T.SHELVING_IMAGE_PENDING_UPLOAD, T.SHELVING_IMAGE_UPLOADING)
        res = self.services.call(
            ctx,
            host,
            "shelve",
            action,
            spec,
            {"image_id": image, "timeout": self.services.conf.compute.shutdown_timeout},
        )
        offload_now = res.ok and self.services.conf.compute.shelved_offload_time == 0

        def done(session: Session) -> None:
            values: dict[str, Any] = {"task_state": None}
            if res.ok and res.image:
                images.activate(session, image, res.image)
                values.update(vm_state=VmState.SHELVED, power_state=int(PowerState.SHUTDOWN))
                if offload_now:  # the same request goes on to offload: its task stays
                    values = {
                        **values,
                        "task_state": T.SHELVING_OFFLOADING,
                        "task_lease_until": self.services.lease_until(),
                    }
            else:
                drop_queued(session, image)
                if res.power_state is not None:
                    values["power_state"] = res.power_state
            finish = None if offload_now else t.record_as
            actions.end_task(
                session, ctx, uuid, values, [T.SHELVING_IMAGE_UPLOADING], answer=res, finish=finish
            )

        self.db.run_in_transaction(done)
        self.services.notifier.emit(f"instance.shelve.{'end' if res.ok else 'error'}", uuid, host=host)
        if offload_now:
            offload(self.services, ctx, uuid, t.record_as, spec, host)


class ShelveOffload(Flow):
    """A shelved server's guest leaves its host, with its claim."""

    @in_cell_of("uuid")
    def run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        with self.db.reader() as session:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            spec, host = instance_spec(session, inst), str(inst.host)
        offload(self.services, ctx, uuid, ACTIONS[action].record_as, spec, host)


class Unshelve(Flow):
    """A shelved server back: powered on where it is, or scheduled anew when offloaded."""

    @in_cell_of("uuid")
    def run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]
        with self.db.reader() as session:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            shelved = images.shelved_image_of(session, uuid)
            offloaded = inst.vm_state == VmState.SHELVED_OFFLOADED.value
            host = inst.host
        if shelved is None:
            raise exceptions.ImageNotFound(image_id=f"the shelved image of server {uuid}")
        shelved_spec = images.spec(shelved)
        if offloaded:
            try:
                with actions.instance_event(self.db, ctx, uuid, "schedule_instances"):
                    host = self.place(ctx, uuid, shelved_spec)
            except exceptions.NovakitError:
                self.db.run_in_transaction(lambda s: _end_unshelve(s, ctx, uuid, t.record_as, ok=False))
                raise
        self.services.step(ctx, uuid, T.UNSHELVING, T.SPAWNING)
        with self.db.reader() as session:
            spec = instance_spec(session, db_api.instance_get(session, ctx_admin(ctx), uuid))
        assert host is not None
        if offloaded:
            spec.image = shelved_spec
            request = ComputeRequest(
                request_id=ctx.request_id, host=host, operation="build", action="unshelve", instances=[spec]
            )
            result = self.services.rpc.send(request)
            res = next((r for r in result.results if r.uuid == uuid), None)
            ok, events, fault = (res.ok, res.events, res.fault) if res else (False, [], result.error)
            power = res.power_state if res else None
        else:
            started = self.services.call(ctx, host, "start", "unshelve", spec, {})
            ok, events, fault, power = started.ok, started.events, started.fault, started.power_state

        def done(session: Session) -> None:
            _end_unshelve(
                session,
                ctx,
                uuid,
                t.record_as,
                ok=ok,
                events=events,
                fault=fault,
                power=power,
                undo=offloaded,
            )

        self.db.run_in_transaction(done)
        if ok:
            self.delete_image(ctx, shelved)
        self.services.notifier.emit(f"instance.unshelve.{'end' if ok else 'error'}", uuid, host=host)

    def dry_run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> str | None:
        """An offloaded server is scheduled anew; one that kept its host needs none."""
        with self.db.reader() as session:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            shelved = images.shelved_image_of(session, uuid)
        if inst.host is not None or shelved is None:
            return None
        return self.plan(uuid, self.move_spec(ctx, uuid, image=images.spec(shelved)))

    def place(self, ctx: RequestContext, uuid: str, image: ImageSpec) -> str:
        """Scheduled as its boot was (its flavor, group, networks), from the shelved image; the
        claim, the host and the port bindings are written in one transaction."""
        spec = self.move_spec(ctx, uuid, image=image)

        def on_claimed(session: Session, claimed: dict[str, list[Any]]) -> None:
            chosen = claimed[uuid][0]
            db_api.instance_update(
                session,
                uuid,
                fleet_aggregates.with_zone(
                    session,
                    self.services.conf,
                    {
                        "host": chosen.host,
                        "node": chosen.nodename,
                        "task_lease_until": self.services.lease_until(),
                    },
                ),
                expected_task_state=[T.UNSHELVING],
                expected_owner=ctx.request_id,
                fetch=False,
            )
            ports.bind_host(session, [uuid], chosen.host, "BUILD")

        selections = self.services.scheduler.select_destinations(
            spec, [uuid], recheck_quota=False, on_claimed=on_claimed
        )
        return str(selections[0][0].host)

    def delete_image(self, ctx: RequestContext, image: Image) -> None:
        """The shelved image goes: its record, then its file on the host that wrote it."""
        host = (image.properties or {}).get("image_host")

        def write(session: Session) -> None:
            row = session.execute(select(Image).where(Image.uuid == image.uuid)).scalar_one()
            row.status = "deleted"

        self.db.run_in_transaction(write)
        if host:
            request = ComputeRequest(
                request_id=ctx.request_id,
                host=host,
                operation="image_delete",
                options={"image": images.spec(image).model_dump(mode="json")},
            )
            result = self.services.rpc.send(request)
            if result.error is not None:
                LOG.warning("the file of image %s stays on %s: %s", image.uuid, host, result.error.message)


def offload(
    services: Services, ctx: RequestContext, uuid: str, record_as: str, spec: InstanceSpec, host: str
) -> None:
    """The guest leaves ``host``; with it the claim and the port bindings."""
    res = services.call(ctx, host, "shelve_offload", "shelve_offload", spec, {})

    def done(session: Session) -> None:
        values: dict[str, Any] = {"task_state": None}
        if res.ok:
            values.update(vm_state=VmState.SHELVED_OFFLOADED)
            _let_go_of_host(session, uuid, values)
        actions.end_task(session, ctx, uuid, values, [T.SHELVING_OFFLOADING], answer=res, finish=record_as)

    services.db.run_in_transaction(done)
    services.notifier.emit(f"instance.shelve_offload.{'end' if res.ok else 'error'}", uuid, host=host)


def _end_unshelve(
    session: Session,
    ctx: RequestContext,
    uuid: str,
    record_as: str,
    *,
    ok: bool,
    events: list[Any] | None = None,
    fault: Any = None,
    power: int | None = None,
    undo: bool = False,
) -> None:
    values: dict[str, Any] = {"task_state": None}
    if ok:
        values.update(vm_state=VmState.ACTIVE, power_state=power if power is not None else 1)
        ports.set_status(session, [uuid], "ACTIVE")
    elif undo:  # the spawn failed on the new host: the server is offloaded again, claim and all
        _let_go_of_host(session, uuid, values)
    actions.end_task(
        session,
        ctx,
        uuid,
        values,
        [T.UNSHELVING, T.SPAWNING],
        events=events or [],
        fault=fault,
        finish=record_as,
    )


def _let_go_of_host(session: Session, uuid: str, values: dict[str, Any]) -> None:
    """An offloaded server holds no host: no claim, no port bound to one (``values`` say so)."""
    values.update(host=None, node=None)
    remove_allocations_in_session(session, uuid)
    ports.bind_host(session, [uuid], None)
