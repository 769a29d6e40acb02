"""Moving servers between hosts: Nova's resize, cold migration, confirm, revert, shelve, snapshot.

``novakit.compute.states`` names each move's action (its guards, task states and status
map); the API checks and starts it as every action (``API.act``), and the conductor's
flow of the action's ``flow`` name carries it on (``MoveConductor.run_move``), host step
by host step, each one a ``ComputeRequest`` as every host call. ``migrations`` keeps the
records; ``resize``, ``live`` and ``images`` the flows; ``drain`` empties a host. The
claims: during a move the migration holds the source host's allocations and the instance
the destination's, so both hosts' capacity is right until the move is confirmed or
reverted (Nova's migration-based allocations).
"""

from __future__ import annotations

import logging
from typing import Any

from novakit.compute.messages import InstanceSpec
from novakit.compute.states import ACTIONS
from novakit.context import RequestContext
from novakit.moves import migrations
from novakit.moves.images import ImageFlows
from novakit.moves.live import LiveFlows
from novakit.moves.resize import ResizeFlow

LOG = logging.getLogger(__name__)


class MoveConductor(ResizeFlow, ImageFlows, LiveFlows):
    """The conductor's moves (mixed into ``novakit.conductor.Conductor``)."""

    def run_move(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        """Carry on the move the API has started: the flow its table row names."""
        flow = ACTIONS[action].flow
        if flow is None:
            raise ValueError(f"{action} is no move")
        getattr(self, flow)(ctx, uuid, action, options)

    def release_moves(self, ctx: RequestContext, uuid: str) -> None:
        """A deleted server's moves end with it (Nova confirms a resize before deleting its
        server): the source's kept guest is removed, the migrations' claims go, a finished
        move is confirmed and any other still under way is error."""
        from sqlalchemy import select

        from novakit.db.models import Migration
        from novakit.placement.allocations import remove_allocations_in_session

        with self.db.reader() as session:
            rows = [
                (m.uuid, m.status, m.source_compute)
                for m in session.execute(
                    select(Migration).where(
                        Migration.instance_uuid == uuid,
                        Migration.status.in_([*migrations.IN_PROGRESS, "error"]),
                    )
                ).scalars()
            ]
        for mig, status, source in rows:
            if status == "done":
                continue  # an evacuation: the down source's old guest and claim are heal's to remove
            if source:
                spec = InstanceSpec.model_validate(
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
                res = self._call(ctx, source, "confirm_migration", "delete", spec, {})
                if not res.ok:
                    LOG.warning("the source %s of deleted server %s kept its copy", source, uuid)

            def write(session: Any, mig: str = mig, status: str = status) -> None:
                remove_allocations_in_session(session, mig)
                end = "confirmed" if status in ("finished", "confirming") else "error"
                if status != end:
                    migrations.set_status(session, mig, status, end)

            self.db.run_in_transaction(write)
