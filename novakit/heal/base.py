"""What every part of heal shares: its report, the rows it read, and the writes it guards."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from novakit import exceptions, notifications
from novakit.compute.rpc import ComputeRPC
from novakit.compute.states import POWER_STATE_NAMES, PowerState
from novakit.conductor import Conductor
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.engine import Database
from novakit.db.models import Instance, utcnow

LOG = logging.getLogger(__name__)

SYNC_EVENT = "compute_sync_power_state"
BUILD_TIMEOUT_EVENT = "conductor_check_instance_build_time"
BUILD_ADOPTED_EVENT = "conductor_heal_adopt_build"
RECOVER_EVENT = "conductor_heal_interrupted_task"

Kind = Literal[
    "power_state",
    "stopped",
    "vanished",
    "task_recovered",
    "build_timeout",
    "build_adopted",
    "abandoned_action",
    "orphan_allocation",
    "orphan_guest",
    "imported_guest",
]

_OFF = (PowerState.SHUTDOWN, PowerState.CRASHED)


class Correction(BaseModel):
    """One thing heal found, and whether it changed it."""

    kind: Kind
    instance: str
    host: str | None = None
    before: str = ""
    after: str = ""
    detail: str = ""
    applied: bool = False
    error: str | None = None


class HealReport(BaseModel):
    request_id: str
    dry_run: bool
    hosts: list[str] = Field(default_factory=list)  # hosts whose guests were compared
    unreachable: dict[str, str] = Field(default_factory=dict)  # host -> why
    corrections: list[Correction] = Field(default_factory=list)


def _power(value: int | None) -> str:
    try:
        return POWER_STATE_NAMES[PowerState(value or 0)]
    except ValueError:
        return str(value)


def _power_state(value: int) -> PowerState:
    return PowerState(value) if value in PowerState._value2member_map_ else PowerState.NOSTATE


class _Seen:
    """An instance row as read before the hosts were asked."""

    def __init__(self, inst: Instance) -> None:
        self.uuid = inst.uuid
        self.host = inst.host
        self.vm_state = inst.vm_state
        self.task_state = inst.task_state
        self.power_state = int(inst.power_state or 0)
        self.project_id = inst.project_id
        self.created_at = inst.created_at
        self.updated_at = inst.updated_at
        self.changed_at = inst.updated_at or inst.created_at
        self.task_owner = inst.task_owner
        self.task_lease_until = inst.task_lease_until

    @property
    def state(self) -> str:
        return f"{self.vm_state}/{_power(self.power_state)}"


class HealerBase:
    """Heal's caller, database, transport and clock, and its guarded writes."""

    def __init__(
        self,
        db: Database,
        conf: Config,
        ctx: RequestContext | None = None,
        rpc: ComputeRPC | None = None,
        clock: Callable[[], dt.datetime] | None = None,
    ) -> None:
        self.db = db
        self.conf = conf
        base = ctx or RequestContext.admin()
        # Heal acts for the system, as Nova's periodic tasks use an admin context.
        self.ctx = RequestContext("admin", "admin", ["admin"], base.request_id)
        # Servers heal imports belong to the caller's project (or the one asked for), by its user.
        self._import_as = (base.user_id, ["admin"], base.request_id)
        self.import_project_default = base.project_id
        self.rpc = rpc or ComputeRPC(db, conf)
        self.clock = clock or utcnow
        self._conductor: Conductor | None = None
        self.notifier = notifications.Notifier(conf, publisher_id="novakit-heal")

    @property
    def conductor(self) -> Conductor:
        """Finishing a task heal took over is the conductor's, as any owner's (on heal's clock and
        rpc); built only then: a heal with no interrupted task to finish needs none."""
        if self._conductor is None:
            self._conductor = Conductor(self.db, self.conf, clock=self.clock)
            self._conductor.rpc = self.rpc
        return self._conductor

    def _owner_gone(self, s: _Seen) -> bool:
        now = self.clock()
        return db_api.owner_gone(s, now, now - dt.timedelta(seconds=self.conf.compute.build_timeout))

    def _guarded(self, s: _Seen, values: dict[str, Any], session: Session) -> None:
        db_api.instance_update(
            session, s.uuid, values, expected_task_state=[None], expected_vm_state=[s.vm_state]
        )

    def _write(self, c: Correction, fn: Any) -> bool:
        try:
            self.db.run_in_transaction(fn)
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound) as exc:
            c.error = f"skipped: the instance changed meanwhile ({exc.format_message()})"
            return False
        return True
