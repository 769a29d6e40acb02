"""A deleted server's moves end with it (Nova confirms a resize before deleting its server).

The delete removed the guest on the server's recorded host. A move under way may have left a
guest elsewhere: the source keeps its copy until a confirm, and a destination may have built
one before the move's owner was gone (a resize interrupted after ``finish_migration``, a live
migration after the guest moved). Each goes, on every host of the move the delete did not reach;
the migrations' claims go; a finished move is confirmed and any other still under way is error.
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit.conductor.core import Services, ctx_admin
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import Migration
from novakit.host.messages import InstanceSpec
from novakit.moves import migrations
from novakit.placement.allocations import remove_allocations_in_session

LOG = logging.getLogger(__name__)

#: the host step that removes what a move left there: the source's kept copy, a destination's guest
_REMOVE = {"source": "confirm_migration", "dest": "revert_migration"}


def release_moves(services: Services, ctx: RequestContext, uuid: str) -> None:
    """End the moves of the deleted server ``uuid``: their guests off every host, their claims."""
    with services.db.reader() as session:
        deleted_on = db_api.instance_get(session, ctx_admin(ctx), uuid, include_deleted=True).host
        rows = [
            (m.uuid, m.status, m.source_compute, m.dest_compute)
            for m in session.execute(
                select(Migration).where(
                    Migration.instance_uuid == uuid,
                    Migration.status.in_([*migrations.IN_PROGRESS, "error"]),
                )
            ).scalars()
        ]
    for mig, status, source, dest in rows:
        if status == "done":
            continue  # an evacuation: the down source's old guest and claim are heal's to remove
        for role, host in (("source", source), ("dest", dest)):
            if host and not (role == "dest" and host == deleted_on):
                res = services.call(ctx, host, _REMOVE[role], "delete", _bare_spec(uuid), {})
                if not res.ok:
                    LOG.warning("the %s %s of deleted server %s kept its copy", role, host, uuid)

        def write(session: Session, mig: str = mig, status: str = status) -> None:
            remove_allocations_in_session(session, mig)
            end = "confirmed" if status in ("finished", "confirming") else "error"
            if status != end:
                migrations.set_status(session, mig, status, end)

        services.db.run_in_transaction(write)


def _bare_spec(uuid: str) -> InstanceSpec:
    """Enough of the server for a host to find its guest."""
    return InstanceSpec.model_validate(
        {
            "uuid": uuid,
            "name": uuid,
            "hostname": uuid,
            "project_id": "",
            "user_id": "",
            "flavor": {"name": "", "vcpus": 0, "memory_mb": 0, "root_gb": 0},
            "image": {"id": ""},
        }
    )
