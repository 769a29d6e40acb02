"""Snapshot: an image made of a server's root disk (Nova's createImage).

**Snapshot** (``create_image``): the image is recorded first, ``queued`` (Nova creates the
Glance record before the upload), the host writes the root disk into its image store
(``image_pending_upload`` -> ``image_uploading``), and the image becomes ``active`` with its
location, size and sha256: bootable like any other. A failure removes the queued record and
leaves the server as it was, with the action's error.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit.catalog import images
from novakit.cells.registry import in_cell_of
from novakit.compute import actions
from novakit.compute.rpc import instance_spec
from novakit.compute.states import ACTIONS, TaskState
from novakit.conductor.core import Services, ctx_admin
from novakit.conductor.flows.base import Flow
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import Image
from novakit.host.messages import InstanceSpec

T = TaskState


class Snapshot(Flow):
    """A server's root disk written as a new image (the ``create_image`` row)."""

    @in_cell_of("uuid")
    def run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]
        image, host, spec = queue_image(
            self.services,
            ctx,
            uuid,
            options["name"],
            "snapshot",
            options["metadata"],
            options.get("image_id"),
        )
        self.services.step(ctx, uuid, T.IMAGE_SNAPSHOT_PENDING, T.IMAGE_PENDING_UPLOAD)
        self.services.step(ctx, uuid, T.IMAGE_PENDING_UPLOAD, T.IMAGE_UPLOADING)
        res = self.services.call(ctx, host, "snapshot", action, spec, {"image_id": image})

        def done(session: Session) -> None:
            if res.ok and res.image:
                images.activate(session, image, res.image)
            else:
                drop_queued(session, image)
            db_api.instance_update(
                session,
                uuid,
                {"task_state": None},
                expected_task_state=[T.IMAGE_UPLOADING],
                expected_owner=ctx.request_id,
                fetch=False,
            )
            actions.record_outcome(session, ctx, uuid, answer=res, finish=t.record_as)

        self.db.run_in_transaction(done)
        self.services.notifier.emit(f"instance.snapshot.{'end' if res.ok else 'error'}", uuid, host=host)


def queue_image(
    services: Services,
    ctx: RequestContext,
    uuid: str,
    name: str,
    kind: str,
    metadata: dict[str, Any],
    image_id: str | None = None,
) -> tuple[str, str, InstanceSpec]:
    """The image recorded ``queued`` (Nova creates the Glance record before the upload): its
    uuid (``image_id`` when the request chose it), the server's host, and the server as the
    host needs it."""

    def write(session: Session) -> tuple[str, str, InstanceSpec]:
        inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
        # As Nova's snapshots: the image the server was booted from lends its properties (a
        # direct kernel boot's kernel_id, ramdisk_id, os_command_line: without them the
        # snapshot boots nothing); the user's metadata and the snapshot's own come over them.
        base = images.by_uuid(session, inst.image_ref or "")
        inherited = dict(base.properties or {}) if base is not None else {}
        row = images.add_snapshot(
            session, name, inst, str(inst.host), kind, {**inherited, **metadata}, image_id
        )
        return row.uuid, str(inst.host), instance_spec(session, inst)

    result: tuple[str, str, InstanceSpec] = services.db.run_in_transaction(write)
    return result


def drop_queued(session: Session, image: str) -> None:
    """A snapshot that was never written is no image."""
    row = session.execute(
        select(Image).where(Image.uuid == image, Image.status == "queued")
    ).scalar_one_or_none()
    if row is not None:
        session.delete(row)
