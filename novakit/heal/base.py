"""What every part of heal shares: its report, the rows it read, and the writes it guards."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions, notifications
from novakit.cells.registry import Cell
from novakit.cells.scatter import scatter
from novakit.compute import actions
from novakit.compute.rpc import ComputeRPC
from novakit.compute.states import POWER_STATE_NAMES, PowerState
from novakit.conductor.manager import Conductor
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.engine import Database
from novakit.db.models import Instance, InstanceMapping, utcnow
from novakit.host.messages import Event, FlavorSpec, ImageSpec, InstanceSpec

LOG = logging.getLogger(__name__)

T = TypeVar("T")

SYNC_EVENT = "compute_sync_power_state"
BUILD_TIMEOUT_EVENT = "conductor_check_instance_build_time"
BUILD_ADOPTED_EVENT = "conductor_heal_adopt_build"
RECOVER_EVENT = "conductor_heal_interrupted_task"

Kind = Literal[
    "power_state",
    "stopped",
    "resumed_after_host_boot",
    "vanished",
    "task_recovered",
    "build_timeout",
    "build_adopted",
    "abandoned_action",
    "orphan_allocation",
    "orphan_guest",
    "imported_guest",
    "stray_copy",
    "orphan_attachment",
    "orphan_port",
    "interface_recovered",
    "volume_recovered",
    "evacuated_guest",
    "resize_confirmed",
    "shelved_offloaded",
    "port_filter",
    "upload_recovered",
]

_OFF = (PowerState.SHUTDOWN, PowerState.CRASHED)

#: What a guarded write raises when another writer got there first: a racing heal (two heals
#: at once find the same things to correct) or a user's request. The loser of such a write
#: records the correction as skipped and goes on with the rest of its run.
LOST_RACE: tuple[type[exceptions.NovakitError], ...] = (
    exceptions.Conflict,
    exceptions.NotFound,
    exceptions.InvalidVolume,
)


def recover_event(
    details: str | None, ok: bool, host: str | None = None, event: str = RECOVER_EVENT
) -> Event:
    """An event heal records for what it ended: it starts and finishes now."""
    return actions.instant_event(event, ok, host=host, details=details)


def bare_spec(uuid: str, name: str | None = None, hostname: str | None = None) -> InstanceSpec:
    """A server as its host needs it to find its guest, known by uuid alone (heal asks a host
    about a guest whose record is gone or not read); ``name`` and ``hostname`` default to it."""
    return InstanceSpec(
        uuid=uuid,
        name=name or uuid,
        hostname=hostname or uuid,
        project_id="",
        user_id="",
        flavor=FlavorSpec(name="", vcpus=0, memory_mb=0, root_gb=0),
        image=ImageSpec(id=""),
    )


def skipped(c: Correction, exc: exceptions.NovakitError) -> None:
    """Record on ``c`` that its write lost a race (nothing changed by it)."""
    c.error = f"skipped: it changed meanwhile ({exc.format_message()})"


def apply(c: Correction, dry_run: bool, fix: Callable[[], object]) -> Correction:
    """Make correction ``c`` with ``fix`` unless a dry run: applied, or skipped when ``fix``
    lost a race (a racing heal made it first)."""
    if not dry_run:
        try:
            fix()
            c.applied = True
        except LOST_RACE as exc:
            skipped(c, exc)
    return c


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

    @classmethod
    def of(cls, s: _Seen, host: str | None, kind: Kind, after: str, detail: str) -> Correction:
        """A correction of server ``s`` on ``host``, from the state it was read in."""
        return cls(kind=kind, instance=s.uuid, host=host, before=s.state, after=after, detail=detail)


class HealReport(BaseModel):
    request_id: str
    dry_run: bool
    hosts: list[str] = Field(default_factory=list)  # hosts whose guests were compared
    unreachable: dict[str, str] = Field(default_factory=dict)  # host -> why
    # cell -> why its database did not answer: its servers and the hosts mapped to it were left alone
    down_cells: dict[str, str] = Field(default_factory=dict)
    # Availability zones none of whose hosts is enabled and up: nothing can be placed there
    zones_without_enabled_host: list[str] = Field(default_factory=list)
    corrections: list[Correction] = Field(default_factory=list)


def _power(value: int | None) -> str:
    try:
        return POWER_STATE_NAMES[PowerState(value or 0)]
    except ValueError:
        return str(value)


def _power_state(value: int) -> PowerState:
    return PowerState(value) if value in PowerState._value2member_map_ else PowerState.NOSTATE


class _Seen:
    """An instance row as read before the hosts were asked, and the cell it was read in (where
    every correction of it is written)."""

    def __init__(self, inst: Instance, cell: Cell) -> None:
        self.cell = cell
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
        # The cells whose database did not answer (cell -> why): nothing in them, and nothing on
        # the hosts mapped to them, is changed. Filled as heal meets them.
        self.down: dict[Cell, str] = {}
        self._host_cells: dict[str, Cell] | None = None
        # Live instance -> the id of the cell its mapping names (None: not scheduled yet).
        self._mapped: dict[str, int | None] = {}
        # The live rows read in a cell their mapping does not point at (``_is_copy``).
        self._copies: list[_Seen] = []

    @property
    def conductor(self) -> Conductor:
        """Finishing a task heal took over is the conductor's, as any owner's (on heal's clock and
        rpc); built only then: a heal with no interrupted task to finish needs none."""
        if self._conductor is None:
            self._conductor = Conductor(self.db, self.conf, clock=self.clock)
            self._conductor.rpc = self.rpc
        return self._conductor

    # ------------------------------------------------------------------ cells

    def _gather(self, fn: Callable[[Cell, Session], T]) -> list[tuple[Cell, T]]:
        """``fn(cell, session)`` in every listed cell not known to be down (side by side); a cell
        whose database does not answer is recorded down instead of failing the heal."""
        gathered = scatter(self.db, fn, [c for c in self.db.cells.listed() if c not in self.down])
        self.down.update(gathered.down)
        return list(gathered.results.items())

    def _in_cell(self, cell: Cell, fn: Callable[..., T], *args: Any) -> T | None:
        """``fn(*args)`` with ``cell`` targeted: what heal reads and writes of an instance is in its
        cell. A cell down (before or meanwhile) is recorded and its work skipped: None."""
        if cell in self.down:
            return None
        with self.db.target_cell(cell):
            try:
                return fn(*args)
            except exceptions.CellDown as exc:
                self.down[cell] = str(exc.kwargs.get("reason") or exc.format_message())
                return None
            except LOST_RACE as exc:
                # Another writer (a racing heal) changed it between heal's read and its write,
                # outside the guarded write that would have said so: left to that writer.
                LOG.warning("heal skipped %s: %s", getattr(fn, "__name__", fn), exc.format_message())
                return None

    def _host_down(self, host: str | None) -> bool:
        """Whether ``host`` is mapped to a cell found down: heal changes nothing of its servers,
        and cannot tell which of its guests they own."""
        if host is None or not self.down:
            return False
        if self._host_cells is None:
            self._host_cells = self.db.cells.host_cells()
        cell = self._host_cells.get(host)
        return cell is not None and cell in self.down

    def _read_mappings(self) -> None:
        with self.db.reader() as session:
            rows = session.execute(
                select(InstanceMapping.instance_uuid, InstanceMapping.cell_id).where(
                    InstanceMapping.deleted == 0
                )
            ).all()
        self._mapped = {uuid: cell_id for uuid, cell_id in rows}

    def _is_copy(self, cell: Cell, uuid: str) -> bool:
        """Whether the row of ``uuid`` read in ``cell`` is a copy its mapping does not point at.

        A move into a cell copies the records first and then points the mapping at them
        (``novakit.cells.moves``): until then, or for good if the move was cut off in between,
        the cell holds a copy while the server is the mapped database's row. Heal corrects the
        server, never its copy. The mappings are read once per heal: a server moved since
        counts as a copy in its new cell, and is left to the next heal.
        """
        if uuid not in self._mapped:
            return False  # mapped since the mappings were read, or its mapping is deleted
        home = self.db.cells.by_id(self._mapped[uuid])
        return home != cell and self.db.cells.url_of(home) != self.db.cells.url_of(cell)

    # ------------------------------------------------------------------ guarded writes

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
        except LOST_RACE as exc:
            skipped(c, exc)
            return False
        return True

    def _tolerant(self, step: Callable[..., list[Correction]], *args: Any) -> list[Correction]:
        """Run one of heal's steps; one that lost a race outside a correction's own guarded write
        (a racing heal changed what it read) is logged and the run goes on with the next step.
        Each step's corrections catch their own lost races (``_write``, ``skipped``): this is the
        net under them, so that a second heal never ends a run half done."""
        try:
            return step(*args)
        except LOST_RACE as exc:
            LOG.warning("heal step %s lost a race and was cut short: %s", step.__name__, exc.format_message())
            return []
