"""Nova's instance state machine: vm_state, task_state, power_state.

The strings and integers are Nova's exactly, so that anyone who knows Nova
reads novakit's records without a dictionary. Three things live here:

* the enums;
* ``STATUS_MAP``: (vm_state, task_state) -> the API status users see
  (Nova's ``nova/api/openstack/common.py``);
* ``ACTIONS``: the one transition table. For every action it says from which
  vm_states and task_states it may start, the task_states it passes through,
  where it ends, the host's operation for it, what failure does, how "already
  in effect" looks, and the rule heal applies to an interrupted one. The API
  checks it, the conductor and the host's manager follow it, heal recovers by
  it, the CLI and the docs are generated from it (``novakit states``). A new
  action is a new row (``register`` adds one at run time, as a test does).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, Field

from novakit import exceptions
from novakit.compute import schemas
from novakit.host.power import POWER_STATE_NAMES, PowerState

if TYPE_CHECKING:
    from novakit.host.messages import InstanceSpec, NetworkSpec
    from novakit.virt.driver import ComputeDriver


class VmState(enum.StrEnum):
    ACTIVE = "active"
    BUILDING = "building"
    PAUSED = "paused"
    SUSPENDED = "suspended"
    STOPPED = "stopped"
    RESCUED = "rescued"
    RESIZED = "resized"
    SOFT_DELETED = "soft-delete"
    DELETED = "deleted"
    ERROR = "error"
    SHELVED = "shelved"
    SHELVED_OFFLOADED = "shelved_offloaded"


class TaskState(enum.StrEnum):
    SCHEDULING = "scheduling"
    BLOCK_DEVICE_MAPPING = "block_device_mapping"
    NETWORKING = "networking"
    SPAWNING = "spawning"
    IMAGE_SNAPSHOT = "image_snapshot"
    UPDATING_PASSWORD = "updating_password"
    IMAGE_SNAPSHOT_PENDING = "image_snapshot_pending"
    IMAGE_PENDING_UPLOAD = "image_pending_upload"
    IMAGE_UPLOADING = "image_uploading"
    RESIZE_PREP = "resize_prep"
    RESIZE_MIGRATING = "resize_migrating"
    RESIZE_MIGRATED = "resize_migrated"
    RESIZE_FINISH = "resize_finish"
    RESIZE_REVERTING = "resize_reverting"
    REBOOTING = "rebooting"
    REBOOT_PENDING = "reboot_pending"
    REBOOT_STARTED = "reboot_started"
    REBOOTING_HARD = "rebooting_hard"
    REBOOT_PENDING_HARD = "reboot_pending_hard"
    REBOOT_STARTED_HARD = "reboot_started_hard"
    PAUSING = "pausing"
    UNPAUSING = "unpausing"
    SUSPENDING = "suspending"
    RESUMING = "resuming"
    POWERING_OFF = "powering-off"
    POWERING_ON = "powering-on"
    RESCUING = "rescuing"
    UNRESCUING = "unrescuing"
    REBUILDING = "rebuilding"
    REBUILD_BLOCK_DEVICE_MAPPING = "rebuild_block_device_mapping"
    REBUILD_SPAWNING = "rebuild_spawning"
    MIGRATING = "migrating"
    DELETING = "deleting"
    SOFT_DELETING = "soft-deleting"
    RESTORING = "restoring"
    SHELVING = "shelving"
    SHELVING_IMAGE_PENDING_UPLOAD = "shelving_image_pending_upload"
    SHELVING_IMAGE_UPLOADING = "shelving_image_uploading"
    SHELVING_OFFLOADING = "shelving_offloading"
    UNSHELVING = "unshelving"


V, T = VmState, TaskState

# (vm_state) -> {task_state or "default": status}; Nova's _STATE_MAP.
_REBUILD: dict[TaskState | str, str] = {
    T.REBUILDING: "REBUILD",
    T.REBUILD_BLOCK_DEVICE_MAPPING: "REBUILD",
    T.REBUILD_SPAWNING: "REBUILD",
}
_RESIZE: dict[TaskState | str, str] = {
    T.RESIZE_PREP: "RESIZE",
    T.RESIZE_MIGRATING: "RESIZE",
    T.RESIZE_MIGRATED: "RESIZE",
    T.RESIZE_FINISH: "RESIZE",
}
STATUS_MAP: dict[VmState, dict[TaskState | str, str]] = {
    V.ACTIVE: {
        "default": "ACTIVE",
        T.REBOOTING: "REBOOT",
        T.REBOOT_PENDING: "REBOOT",
        T.REBOOT_STARTED: "REBOOT",
        T.REBOOTING_HARD: "HARD_REBOOT",
        T.REBOOT_PENDING_HARD: "HARD_REBOOT",
        T.REBOOT_STARTED_HARD: "HARD_REBOOT",
        T.UPDATING_PASSWORD: "PASSWORD",
        T.MIGRATING: "MIGRATING",
        **_RESIZE,
        **_REBUILD,
    },
    V.BUILDING: {"default": "BUILD"},
    V.STOPPED: {"default": "SHUTOFF", **_RESIZE, **_REBUILD},
    V.RESIZED: {"default": "VERIFY_RESIZE", T.RESIZE_REVERTING: "REVERT_RESIZE"},
    V.PAUSED: {"default": "PAUSED", T.MIGRATING: "MIGRATING"},
    V.SUSPENDED: {"default": "SUSPENDED"},
    V.RESCUED: {"default": "RESCUE"},
    V.ERROR: {"default": "ERROR", **_REBUILD},
    V.DELETED: {"default": "DELETED"},
    V.SOFT_DELETED: {"default": "SOFT_DELETED"},
    V.SHELVED: {"default": "SHELVED"},
    V.SHELVED_OFFLOADED: {"default": "SHELVED_OFFLOADED"},
}


#: STATUS_MAP by the vm_state's text, as rows hold it
_STATUS_BY_VM_STATE: dict[str, dict[TaskState | str, str]] = {v.value: m for v, m in STATUS_MAP.items()}


def status_from_state(vm_state: str, task_state: str | None = None) -> str:
    """The status a user sees, as Nova's API computes it."""
    # Looked up by the row's text first: the enum's constructor costs more than the rest of a
    # listing's view of a server. It still decides what the text alone does not know.
    task_map = _STATUS_BY_VM_STATE.get(vm_state)
    if task_map is None:
        task_map = STATUS_MAP.get(VmState(vm_state), {"default": "UNKNOWN"})
    if task_state is not None and task_state in task_map:
        return task_map[TaskState(task_state)]
    return task_map["default"]


#: every status a server can show, as ``server list --status`` accepts them
STATUSES: tuple[str, ...] = tuple(sorted({s for m in STATUS_MAP.values() for s in m.values()}))


def states_for_status(status: str) -> list[tuple[str, str | None, tuple[str, ...]]]:
    """The (vm_state, task_state, other task states) that show ``status``: the reverse of
    ``status_from_state``, for a listing that filters by status in its query.

    ``task_state`` None is the vm_state's default: any task state but the ``other`` ones, which
    show a status of their own. Raises ValidationError for a status no server can show.
    """
    wanted = status.upper()
    if wanted not in STATUSES:
        from novakit import exceptions

        raise exceptions.ValidationError("status", f"{status!r} is not one of {', '.join(STATUSES)}")
    out: list[tuple[str, str | None, tuple[str, ...]]] = []
    for vm_state, task_map in STATUS_MAP.items():
        own = tuple(sorted(str(k) for k in task_map if k != "default"))
        for key, shown in task_map.items():
            if shown == wanted:
                out.append((vm_state.value, None if key == "default" else str(key), own))
    return out


# Marker for "any vm_state" / "any task_state" in the table.
ANY: frozenset[str] = frozenset({"*"})


InEffect = Callable[[Any, Mapping[str, Any], Any], bool]


def _vm_state_is(vm_state: VmState) -> InEffect:
    def in_effect(inst: Any, options: Mapping[str, Any], ctx: Any) -> bool:
        return bool(inst.vm_state == vm_state.value and inst.task_state is None)

    return in_effect


def _unlocked(inst: Any, options: Mapping[str, Any], ctx: Any) -> bool:
    return not inst.locked


def _locked_by_its_project(inst: Any, options: Mapping[str, Any], ctx: Any) -> bool:
    """Nova's lock: a lock already there stays as it is, unless an admin of another project
    locks it (which makes it an admin's lock)."""
    return bool(inst.locked) and ctx.project_id == inst.project_id


def _named(inst: Any, options: Mapping[str, Any], ctx: Any) -> bool:
    return bool(inst.display_name == options.get("name"))


def _deleting(inst: Any, options: Mapping[str, Any], ctx: Any) -> bool:
    return bool(inst.task_state == TaskState.DELETING.value)


@dataclass(frozen=True)
class HostCall:
    """What a host's manager runs for an action's ``operation``: its driver call, recorded as an
    event of Nova's name. ``call(driver, instance, options)`` raises when the operation failed."""

    event: str
    call: Callable[[ComputeDriver, InstanceSpec, dict[str, Any]], None]


# What heal does with an interrupted task (``novakit.heal.recovery``):
#   finish     the action happened: record where it ends, with the guest's power state
#   retry      run the action's operation on the host again and record its result
#   retry_hard a soft reboot becomes a hard one (the task state too)
#   roll_back  it did not happen: the task is cleared, the vm_state stays
#   error      the instance goes to error with a fault
Step = Literal["finish", "retry", "retry_hard", "roll_back", "error"]


@dataclass(frozen=True)
class Recovery:
    """Heal's rule for one task state of an action whose owner is gone (Nova's
    ``_init_instance``): the step for the guest's power state as its host reports it
    (``None``: the host has no guest for it), ``otherwise`` for any other. A guest that is not
    there and has no step of its own leaves the server in error (it vanished)."""

    by_power: Mapping[PowerState | None, Step]
    otherwise: Step


@dataclass(frozen=True)
class Transition:
    """One row of the state table: everything the code needs to know about one action.

    ``vm_states`` / ``task_states``: where the action may start (``ANY`` for
    no restriction; ``None`` inside ``task_states`` means "no task running").
    ``passes``: the task_states it sets, in order (the first is set by the API
    with a guarded write). ``end_vm_state``: where it ends (``None``: the
    vm_state does not change). ``end_power_state``: the power state a
    successful run leaves.

    ``operation``: the compute operation a host runs for it (``None``: no host
    acts, the API finishes it). ``record_as``: the instance action it is
    recorded under (Nova records both reboots as ``reboot``); ``notify_as``:
    the name of its ``instance.<name>.start/end`` notifications.
    ``on_failure``: the vm_state a failed run leaves (``None``: where it was,
    as Nova's ``reverts_task_state``). ``in_effect(instance, options, ctx)``: whether
    a declarative caller (a module, a playbook) finds it done already; ``None``
    for actions that always act. ``options``: the schema of its options.
    ``power_path``: a step a declarative caller may take to reach a power
    state (``path``). ``keeps_stopped``: a stopped instance ends stopped
    (Nova's rebuild of a stopped server). ``checks_lock``: a locked instance
    refuses it to every non-admin (Nova's ``check_instance_lock``; lock, unlock
    and rename do not check it). ``needs_host``: an instance no host holds (its
    build never got one) refuses it (Nova's ``check_instance_host``).
    ``idempotent``: ``in_effect`` applies to every caller, not only declarative
    ones (Nova's lock of a server its own project locked already). ``flow``: the
    action takes more than one host, or a host and the scheduler (a resize, a
    migration): the conductor's move of that name carries it out
    (``novakit.moves``), and ``passes`` lists its task states in the order the
    move sets them.

    ``host_call``: what the host's manager runs for ``operation`` (the manager's dispatch
    reads it here; operations with a path of their own in the manager, a build, a rebuild,
    a delete, a move's steps, have none). ``recovery``: heal's rule for each of ``passes``
    when the request that owns it is gone (``Recovery``; a task state without one is cleared,
    the power state recorded). ``retry_options(conf)``: the host options heal runs the
    operation again with.
    """

    action: str
    vm_states: frozenset[str]
    task_states: frozenset[str | None]
    passes: tuple[TaskState, ...] = ()
    end_vm_state: VmState | None = None
    end_power_state: PowerState | None = None
    operation: str | None = None
    record_as: str = ""
    notify_as: str = ""
    on_failure: VmState | None = None
    in_effect: InEffect | None = None
    options: type[BaseModel] | None = None
    power_path: bool = False
    keeps_stopped: bool = False
    checks_lock: bool = True
    needs_host: bool = False
    host_up: bool = False
    must_have_launched: bool = True
    idempotent: bool = False
    flow: str | None = None
    host_call: HostCall | None = None
    recovery: Mapping[str, Recovery] = field(default_factory=dict)
    retry_options: Callable[[Any], dict[str, Any]] | None = None
    notes: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "record_as", self.record_as or self.action)
        object.__setattr__(self, "notify_as", self.notify_as or self.record_as)

    @property
    def compute(self) -> bool:
        """Whether a compute host must act."""
        return self.operation is not None or self.flow is not None

    def allows(self, vm_state: str, task_state: str | None) -> bool:
        vm_ok = self.vm_states is ANY or vm_state in self.vm_states
        task_ok = self.task_states is ANY or task_state in self.task_states
        return vm_ok and task_ok


_IDLE: frozenset[str | None] = frozenset({None})
_ANY_TASK: frozenset[str | None] = ANY  # type: ignore[assignment]

# Nova's task_states.ALLOW_REBOOT: a hard reboot may interrupt these.
ALLOW_REBOOT: frozenset[str | None] = frozenset(
    {
        None,
        T.REBOOTING,
        T.REBOOT_PENDING,
        T.REBOOT_STARTED,
        T.RESUMING,
        T.REBOOTING_HARD,
        T.UNPAUSING,
        T.PAUSING,
        T.SUSPENDING,
    }
)
ALLOW_SOFT_REBOOT = frozenset({V.ACTIVE})
ALLOW_HARD_REBOOT = ALLOW_SOFT_REBOOT | {V.STOPPED, V.PAUSED, V.SUSPENDED, V.ERROR}

_LIVE = frozenset(set(VmState) - {V.DELETED, V.SOFT_DELETED})

P = PowerState
#: both reboots: one operation, the reboot type in its options
_REBOOT = HostCall("compute_reboot_instance", lambda d, i, o: d.reboot(i, str(o.get("reboot_type", "SOFT"))))
#: an interrupted rebuild leaves the server in error, whatever its guest shows (Nova's)
_IN_ERROR = Recovery({}, "error")

_ON = frozenset({V.ACTIVE})

# Nova attaches and detaches volumes in active, paused, stopped, resized, shelved and
# shelved_offloaded. Not offloaded here: a volume lives in one host's storage pool, and an
# offloaded server has no host (its unshelve may choose another), so there is nowhere to attach it.
_VOLUME_STATES = frozenset({V.ACTIVE, V.PAUSED, V.STOPPED, V.RESIZED, V.SHELVED})

# Nova attaches and detaches interfaces in active, paused and stopped (its API's
# check_instance_state), with no task running.
_INTERFACE_STATES = frozenset({V.ACTIVE, V.PAUSED, V.STOPPED})


class InterfaceAction(schemas._Request):
    """attach_interface / detach_interface: the port, and its NIC as the guest gets it (its
    network, MAC, fixed IPs and filter rules), which ``novakit.compute.interfaces`` reads
    from the records once it has bound the port to the server (or before it unbinds it)."""

    port_id: str = Field(min_length=1, max_length=255)
    nic: dict[str, Any]


def _nic(options: Mapping[str, Any]) -> NetworkSpec:
    from novakit.host.messages import NetworkSpec

    return NetworkSpec.model_validate(options["nic"])


ACTIONS: dict[str, Transition] = {
    t.action: t
    for t in (
        Transition(
            "create",
            vm_states=frozenset(),
            task_states=frozenset(),
            passes=(T.SCHEDULING, T.NETWORKING, T.BLOCK_DEVICE_MAPPING, T.SPAWNING),
            end_vm_state=V.ACTIVE,
            end_power_state=PowerState.RUNNING,
            operation="build",
            on_failure=V.ERROR,
            notes="new instances start in building/scheduling",
        ),
        Transition(
            "delete",
            vm_states=ANY,
            task_states=_ANY_TASK,
            passes=(T.DELETING,),
            end_vm_state=V.DELETED,
            end_power_state=PowerState.NOSTATE,
            operation="destroy",
            on_failure=V.ERROR,
            in_effect=_deleting,
            options=schemas.NoOptions,
            must_have_launched=False,
            notes="allowed in any state, as Nova's delete; a failed delete leaves error",
            recovery={T.DELETING: Recovery({None: "finish"}, "retry")},
        ),
        Transition(
            "stop",
            vm_states=frozenset({V.ACTIVE, V.ERROR}),
            task_states=_IDLE,
            passes=(T.POWERING_OFF,),
            end_vm_state=V.STOPPED,
            end_power_state=PowerState.SHUTDOWN,
            operation="stop",
            needs_host=True,
            notify_as="power_off",
            in_effect=_vm_state_is(V.STOPPED),
            options=schemas.Stop,
            power_path=True,
            host_call=HostCall(
                "compute_stop_instance", lambda d, i, o: d.power_off(i, timeout=float(o.get("timeout", 60)))
            ),
            recovery={T.POWERING_OFF: Recovery({P.SHUTDOWN: "finish", P.CRASHED: "finish"}, "retry")},
            retry_options=lambda conf: {"timeout": conf.compute.shutdown_timeout},
        ),
        Transition(
            "start",
            vm_states=frozenset({V.STOPPED}),
            task_states=_IDLE,
            passes=(T.POWERING_ON,),
            end_vm_state=V.ACTIVE,
            end_power_state=PowerState.RUNNING,
            operation="start",
            needs_host=True,
            notify_as="power_on",
            in_effect=_vm_state_is(V.ACTIVE),
            options=schemas.NoOptions,
            power_path=True,
            host_call=HostCall("compute_start_instance", lambda d, i, o: d.power_on(i)),
            recovery={T.POWERING_ON: Recovery({P.RUNNING: "finish"}, "retry")},
        ),
        Transition(
            "reboot",
            vm_states=frozenset(ALLOW_SOFT_REBOOT),
            task_states=_IDLE,
            passes=(T.REBOOTING, T.REBOOT_STARTED),
            end_vm_state=V.ACTIVE,
            end_power_state=PowerState.RUNNING,
            operation="reboot",
            needs_host=True,
            options=schemas.Reboot,
            notes="soft: only from active with no task running; a failed one leaves it where it was",
            host_call=_REBOOT,
            recovery={
                T.REBOOTING: Recovery({P.RUNNING: "retry"}, "retry_hard"),
                T.REBOOT_STARTED: Recovery({P.RUNNING: "finish"}, "retry_hard"),
            },
            retry_options=lambda conf: {"reboot_type": "SOFT"},
        ),
        Transition(
            "reboot_hard",
            vm_states=frozenset(ALLOW_HARD_REBOOT),
            task_states=ALLOW_REBOOT,
            passes=(T.REBOOTING_HARD, T.REBOOT_STARTED_HARD),
            end_vm_state=V.ACTIVE,
            end_power_state=PowerState.RUNNING,
            operation="reboot",
            needs_host=True,
            record_as="reboot",
            on_failure=V.ERROR,
            options=schemas.Reboot,
            notes="reboot with reboot_type HARD: also from stopped, paused, suspended, error, and over "
            "a running reboot; a failed one leaves error",
            host_call=_REBOOT,
            recovery={
                T.REBOOTING_HARD: Recovery({}, "retry"),
                T.REBOOT_STARTED_HARD: Recovery({P.RUNNING: "finish"}, "retry"),
            },
            retry_options=lambda conf: {"reboot_type": "HARD"},
        ),
        Transition(
            "pause",
            vm_states=_ON,
            task_states=_IDLE,
            passes=(T.PAUSING,),
            end_vm_state=V.PAUSED,
            end_power_state=PowerState.PAUSED,
            operation="pause",
            needs_host=True,
            in_effect=_vm_state_is(V.PAUSED),
            options=schemas.NoOptions,
            power_path=True,
            host_call=HostCall("compute_pause_instance", lambda d, i, o: d.pause(i)),
            recovery={T.PAUSING: Recovery({P.PAUSED: "finish"}, "roll_back")},
        ),
        Transition(
            "unpause",
            vm_states=frozenset({V.PAUSED}),
            task_states=_IDLE,
            passes=(T.UNPAUSING,),
            end_vm_state=V.ACTIVE,
            end_power_state=PowerState.RUNNING,
            operation="unpause",
            needs_host=True,
            in_effect=_vm_state_is(V.ACTIVE),
            options=schemas.NoOptions,
            power_path=True,
            host_call=HostCall("compute_unpause_instance", lambda d, i, o: d.unpause(i)),
            recovery={T.UNPAUSING: Recovery({P.RUNNING: "finish", P.PAUSED: "retry"}, "roll_back")},
        ),
        Transition(
            "suspend",
            vm_states=_ON,
            task_states=_IDLE,
            passes=(T.SUSPENDING,),
            end_vm_state=V.SUSPENDED,
            end_power_state=PowerState.SUSPENDED,
            operation="suspend",
            needs_host=True,
            in_effect=_vm_state_is(V.SUSPENDED),
            options=schemas.NoOptions,
            power_path=True,
            host_call=HostCall("compute_suspend_instance", lambda d, i, o: d.suspend(i)),
            recovery={T.SUSPENDING: Recovery({P.SUSPENDED: "finish"}, "roll_back")},
        ),
        Transition(
            "resume",
            vm_states=frozenset({V.SUSPENDED}),
            task_states=_IDLE,
            passes=(T.RESUMING,),
            end_vm_state=V.ACTIVE,
            end_power_state=PowerState.RUNNING,
            operation="resume",
            needs_host=True,
            in_effect=_vm_state_is(V.ACTIVE),
            options=schemas.NoOptions,
            power_path=True,
            host_call=HostCall("compute_resume_instance", lambda d, i, o: d.resume(i)),
            recovery={T.RESUMING: Recovery({P.RUNNING: "finish", P.SUSPENDED: "retry"}, "roll_back")},
        ),
        Transition(
            "rebuild",
            vm_states=frozenset({V.ACTIVE, V.STOPPED, V.ERROR}),
            task_states=_IDLE,
            passes=(T.REBUILDING, T.REBUILD_BLOCK_DEVICE_MAPPING, T.REBUILD_SPAWNING),
            end_vm_state=V.ACTIVE,
            end_power_state=PowerState.RUNNING,
            operation="rebuild",
            needs_host=True,
            on_failure=V.ERROR,
            keeps_stopped=True,
            options=schemas.Rebuild,
            notes="a stopped instance ends stopped again, as in Nova; a failed one leaves error",
            recovery=dict.fromkeys(
                (T.REBUILDING, T.REBUILD_BLOCK_DEVICE_MAPPING, T.REBUILD_SPAWNING), _IN_ERROR
            ),
        ),
        Transition(
            "resize",
            vm_states=frozenset({V.ACTIVE, V.STOPPED}),
            task_states=_IDLE,
            passes=(T.RESIZE_PREP, T.RESIZE_MIGRATING, T.RESIZE_MIGRATED, T.RESIZE_FINISH),
            end_vm_state=V.RESIZED,
            needs_host=True,
            host_up=True,
            flow="resize",
            options=schemas.Resize,
            notes="scheduled like a boot with the new flavor, away from its host; ends in resized "
            "(VERIFY_RESIZE) on the new host, the old one still holding its disks and claim (the "
            "migration's) until confirm or revert; a failure rolls back to the old host with a fault",
        ),
        Transition(
            "migrate",
            vm_states=frozenset({V.ACTIVE, V.STOPPED}),
            task_states=_IDLE,
            passes=(T.RESIZE_PREP, T.RESIZE_MIGRATING, T.RESIZE_MIGRATED, T.RESIZE_FINISH),
            end_vm_state=V.RESIZED,
            needs_host=True,
            host_up=True,
            flow="resize",
            notify_as="resize",
            options=schemas.Migrate,
            notes="a cold migration: a resize to the same flavor on another host (admin only)",
        ),
        Transition(
            "confirm_resize",
            vm_states=frozenset({V.RESIZED}),
            task_states=_IDLE,
            needs_host=True,
            flow="confirm_resize",
            record_as="confirmResize",
            notify_as="resize_confirm",
            options=schemas.NoOptions,
            notes="as Nova's: no task state of its own, the migration's status (finished -> "
            "confirming -> confirmed) guards it; the old host's disks and claim go; active, or "
            "stopped for a server that was stopped",
        ),
        Transition(
            "revert_resize",
            vm_states=frozenset({V.RESIZED}),
            task_states=_IDLE,
            passes=(T.RESIZE_REVERTING,),
            needs_host=True,
            flow="revert_resize",
            record_as="revertResize",
            notify_as="resize_revert",
            options=schemas.NoOptions,
            notes="the new host's guest and claim go; the server runs again on its old host with "
            "its old flavor, active or stopped as it was",
        ),
        Transition(
            "live_migrate",
            vm_states=frozenset({V.ACTIVE, V.PAUSED}),
            task_states=_IDLE,
            passes=(T.MIGRATING,),
            needs_host=True,
            flow="live_migrate",
            record_as="live-migration",
            notify_as="live_migration",
            options=schemas.Migrate,
            notes="the guest keeps running while it moves (admin only); a failure leaves it running "
            "on its host, the server as it was, with the action's error",
        ),
        Transition(
            "evacuate",
            vm_states=frozenset({V.ACTIVE, V.STOPPED, V.ERROR}),
            task_states=_ANY_TASK,
            passes=(T.REBUILDING, T.REBUILD_SPAWNING),
            end_vm_state=V.ACTIVE,
            needs_host=True,
            keeps_stopped=True,
            flow="evacuate",
            options=schemas.Migrate,
            notes="only when its host is down, whatever task was running there (Nova checks no task "
            "state): rebuilt on another host from its image, ports kept (admin only); the old guest "
            "goes when heal finds its host back",
        ),
        Transition(
            "create_image",
            vm_states=frozenset({V.ACTIVE, V.STOPPED, V.PAUSED, V.SUSPENDED}),
            task_states=_IDLE,
            passes=(T.IMAGE_SNAPSHOT_PENDING, T.IMAGE_PENDING_UPLOAD, T.IMAGE_UPLOADING),
            needs_host=True,
            flow="create_image",
            checks_lock=False,
            record_as="createImage",
            notify_as="snapshot",
            options=schemas.CreateImage,
            notes="the root disk written into the host's image store and registered with its sha256; "
            "a running guest is paused for the copy; the server ends as it was; a locked server "
            "may be snapshotted (Nova's snapshot checks no lock)",
        ),
        Transition(
            "shelve",
            vm_states=frozenset({V.ACTIVE, V.STOPPED, V.PAUSED, V.SUSPENDED}),
            task_states=_IDLE,
            passes=(
                T.SHELVING,
                T.SHELVING_IMAGE_PENDING_UPLOAD,
                T.SHELVING_IMAGE_UPLOADING,
                T.SHELVING_OFFLOADING,
            ),
            end_vm_state=V.SHELVED,
            end_power_state=PowerState.SHUTDOWN,
            needs_host=True,
            flow="shelve",
            options=schemas.NoOptions,
            notes="powered off and snapshotted (the shelved image); offloaded at once when "
            "compute.shelved_offload_time is 0, as Nova's",
        ),
        Transition(
            "shelve_offload",
            vm_states=frozenset({V.SHELVED}),
            task_states=_IDLE,
            passes=(T.SHELVING_OFFLOADING,),
            end_vm_state=V.SHELVED_OFFLOADED,
            end_power_state=PowerState.SHUTDOWN,
            needs_host=True,
            flow="shelve_offload",
            record_as="shelveOffload",
            notify_as="shelve_offload",
            options=schemas.NoOptions,
            notes="the guest leaves its host, and so does its claim: no host, ports unbound",
        ),
        Transition(
            "unshelve",
            vm_states=frozenset({V.SHELVED, V.SHELVED_OFFLOADED}),
            task_states=_IDLE,
            passes=(T.UNSHELVING, T.SPAWNING),
            end_vm_state=V.ACTIVE,
            end_power_state=PowerState.RUNNING,
            flow="unshelve",
            options=schemas.NoOptions,
            notes="shelved: powered on where it is; offloaded: scheduled anew and spawned from the "
            "shelved image; the shelved image is then deleted",
        ),
        Transition(
            "rescue",
            vm_states=frozenset({V.ACTIVE, V.STOPPED, V.ERROR}),
            task_states=_IDLE,
            passes=(T.RESCUING,),
            end_vm_state=V.RESCUED,
            end_power_state=PowerState.RUNNING,
            operation="rescue",
            needs_host=True,
            options=schemas.Rescue,
            notes="boots a rescue image (the server's own by default) with its root disk as the second",
        ),
        Transition(
            "unrescue",
            vm_states=frozenset({V.RESCUED}),
            task_states=_IDLE,
            passes=(T.UNRESCUING,),
            end_vm_state=V.ACTIVE,
            end_power_state=PowerState.RUNNING,
            operation="unrescue",
            needs_host=True,
            options=schemas.NoOptions,
        ),
        Transition(
            "attach_volume",
            vm_states=_VOLUME_STATES,
            task_states=_IDLE,
            operation="attach_volume",
            needs_host=True,
            options=schemas.VolumeAction,
            notes="as Nova's: no task state of its own, the volume's status (reserved -> attaching -> "
            "in-use) guards it; starts only on a volume reserved for the server (``server add volume``); "
            "hot-plugged into a running guest, into the definition of a stopped one",
        ),
        Transition(
            "detach_volume",
            vm_states=_VOLUME_STATES,
            task_states=_IDLE,
            operation="detach_volume",
            needs_host=True,
            options=schemas.VolumeAction,
            notes="in-use -> detaching -> available, starting only on a volume marked detaching "
            "(``server remove volume``); a root volume (boot index 0) is never detached",
        ),
        Transition(
            "attach_interface",
            vm_states=_INTERFACE_STATES,
            task_states=_IDLE,
            operation="attach_interface",
            needs_host=True,
            options=InterfaceAction,
            notes="as Nova's: no task state of its own, the port's binding guards it; starts only "
            "from ``server add port`` / ``server add network`` (``novakit.compute.interfaces``), "
            "which binds the port first; hot-plugged into a running guest, into the definition "
            "of a stopped one",
            host_call=HostCall("compute_attach_interface", lambda d, i, o: d.attach_interface(i, _nic(o))),
        ),
        Transition(
            "detach_interface",
            vm_states=_INTERFACE_STATES,
            task_states=_IDLE,
            operation="detach_interface",
            needs_host=True,
            options=InterfaceAction,
            notes="``server remove port`` / ``server remove network``: the guest's NIC goes first, "
            "then the port is unbound (deleted when the attach or the boot made it)",
            host_call=HostCall("compute_detach_interface", lambda d, i, o: d.detach_interface(i, _nic(o))),
        ),
        Transition(
            "lock",
            vm_states=ANY,
            task_states=_ANY_TASK,
            in_effect=_locked_by_its_project,
            idempotent=True,
            checks_lock=False,
            options=schemas.Lock,
            must_have_launched=False,
            notes="any state; records locked_by owner/admin",
        ),
        Transition(
            "unlock",
            vm_states=ANY,
            task_states=_ANY_TASK,
            in_effect=_unlocked,
            checks_lock=False,
            options=schemas.NoOptions,
            must_have_launched=False,
            notes="an admin's lock is lifted only by an admin",
        ),
        Transition(
            "rename",
            vm_states=_LIVE,
            task_states=_ANY_TASK,
            in_effect=_named,
            checks_lock=False,
            options=schemas.Rename,
            must_have_launched=False,
            notes="any live state",
        ),
    )
}

#: asked for through ``novakit.volume.attachments`` (``server add volume``), which checks and
#: reserves the volume before the action starts; their step refuses a volume not reserved so
#: (``attachments.check_reserved``); offered by no generic action module
VOLUME_ACTIONS: tuple[str, ...] = ("attach_volume", "detach_volume")
#: asked for through ``novakit.compute.interfaces`` (``server add port``), which checks and binds
#: the port and reads its NIC before the action starts; offered by no generic action module
INTERFACE_ACTIONS: tuple[str, ...] = ("attach_interface", "detach_interface")


def _requestable() -> tuple[str, ...]:
    return tuple(a for a in ACTIONS if a != "create")


def _action_names() -> tuple[str, ...]:
    return tuple(
        a
        for a in _requestable()
        if a != "reboot_hard" and a not in VOLUME_ACTIONS and a not in INTERFACE_ACTIONS
    )


#: the actions a caller may ask for by name (``create`` has an API of its own)
REQUESTABLE: tuple[str, ...] = _requestable()
#: the names callers use: a hard reboot is ``reboot`` with reboot_type HARD
ACTION_NAMES: tuple[str, ...] = _action_names()
#: the actions of ``server_action``: the power states and delete are the ``server`` module's
#: ``state`` (its choices are literal for ansible-doc; a test keeps them equal to this)
MODULE_ACTIONS: tuple[str, ...] = tuple(
    a for a in ACTION_NAMES if a != "delete" and not ACTIONS[a].power_path
)


def register(t: Transition) -> None:
    """Add ``t`` to the table: every face (the API, the CLI's ``server action``, the conductor,
    the host's manager, heal) takes it from here. Refused with the rule when the row does not
    hold together: a name taken, a recovery rule for a task state it does not pass through or
    that another action's rule holds already."""
    global REQUESTABLE, ACTION_NAMES
    if t.action in ACTIONS:
        raise exceptions.ValidationError("action", f"{t.action!r} is an action of the table already")
    _check_row(t)
    ACTIONS[t.action] = t
    REQUESTABLE, ACTION_NAMES = _requestable(), _action_names()


def unregister(action: str) -> None:
    """Take a row ``register`` added out of the table again."""
    global REQUESTABLE, ACTION_NAMES
    ACTIONS.pop(action, None)
    REQUESTABLE, ACTION_NAMES = _requestable(), _action_names()


def _check_row(t: Transition) -> None:
    for task in t.recovery:
        if task not in t.passes:
            raise exceptions.ValidationError(
                "recovery", f"{str(task)!r} is not a task state {t.action} passes through"
            )
        held = recovery_rule(task)
        if held is not None:
            raise exceptions.ValidationError(
                "recovery", f"{str(task)!r} is recovered by {held[0].action}'s rule already"
            )


def host_calls() -> dict[str, HostCall]:
    """operation -> what a host runs for it, from the rows: the host's manager's dispatch."""
    return {t.operation: t.host_call for t in ACTIONS.values() if t.operation and t.host_call}


def recovery_rule(task_state: str) -> tuple[Transition, Recovery] | None:
    """The action an interrupted ``task_state`` belongs to and heal's rule for it (None: no row
    has one; a move's task states are its flow's to recover)."""
    for t in ACTIONS.values():
        rule = t.recovery.get(task_state)
        if rule is not None:
            return t, rule
    return None


class _RecoveryRules(Mapping[str, tuple[str, Recovery]]):
    """task state -> (action, heal's rule): a view of the rows' ``recovery``, not a copy."""

    def __getitem__(self, task_state: str) -> tuple[str, Recovery]:
        found = recovery_rule(task_state)
        if found is None:
            raise KeyError(task_state)
        return found[0].action, found[1]

    def __iter__(self) -> Iterator[str]:
        return (task for t in ACTIONS.values() for task in t.recovery)

    def __len__(self) -> int:
        return sum(len(t.recovery) for t in ACTIONS.values())


RECOVERY_RULES: Mapping[str, tuple[str, Recovery]] = _RecoveryRules()


def resolve(action: str, options: Mapping[str, Any] | None = None) -> tuple[Transition, dict[str, Any]]:
    """The table's row for ``action`` asked with ``options``, and the options validated.

    An unknown action, an option the action does not take, or a bad value is a
    ValidationError that names the field and the rule.
    """
    if action not in REQUESTABLE:
        raise exceptions.ValidationError("action", f"{action!r} is not one of {', '.join(ACTION_NAMES)}")
    t = ACTIONS[action]
    given = {k: v for k, v in (options or {}).items() if v is not None}
    parsed = schemas.parse(t.options or schemas.NoOptions, given, prefix="options")
    values = parsed.model_dump()
    if t.action == "reboot" and values.get("reboot_type") == "HARD":
        t = ACTIONS["reboot_hard"]
    return t, values


class Liveness(Protocol):
    """A host's liveness as ``novakit.fleet.hosts.is_up`` answers it."""

    @property
    def up(self) -> bool: ...
    @property
    def reason(self) -> str: ...


def check(t: Transition, inst: Any, liveness: Callable[[str], Liveness]) -> None:
    """Whether ``inst`` may start ``t`` now, by its row: the decision the API makes (its lock
    aside) and every dry run repeats. Raises, in Nova's order: the vm_state and task_state
    (``InstanceInvalidState``), a host (``InstanceNotReady``; told after the state, so an
    offloaded server hears about its state), a launch (``InstanceNeverLaunched``), and the
    host's compute service up (``InstanceHostDown``; ``liveness(host)`` is asked only then).
    """
    if not t.allows(inst.vm_state, inst.task_state):
        raise exceptions.InstanceInvalidState(
            action=t.action, instance_uuid=inst.uuid, vm_state=inst.vm_state, task_state=inst.task_state
        )
    if t.needs_host and not inst.host:
        raise exceptions.InstanceNotReady(instance_uuid=inst.uuid, action=t.action)
    if t.must_have_launched and inst.host and inst.launched_at is None:
        raise exceptions.InstanceNeverLaunched(action=t.action, instance_uuid=inst.uuid)
    if t.host_up and inst.host:
        state = liveness(inst.host)
        if not state.up:
            raise exceptions.InstanceHostDown(
                action=t.action, instance_uuid=inst.uuid, host=inst.host, reason=state.reason
            )


def path(vm_state: str, wanted: VmState) -> list[str] | None:
    """The power actions that take an idle instance from ``vm_state`` to ``wanted`` (None: none do).

    What a declarative caller (``state: stopped``) runs, found in the table
    rather than written down a second time.
    """
    steps = [a for a in ACTIONS.values() if a.power_path]
    frontier: list[tuple[str, list[str]]] = [(vm_state, [])]
    seen = {vm_state}
    while frontier:
        here, taken = frontier.pop(0)
        if here == wanted.value:
            return taken
        for t in steps:
            if t.end_vm_state is not None and t.allows(here, None) and t.end_vm_state.value not in seen:
                seen.add(t.end_vm_state.value)
                frontier.append((t.end_vm_state.value, [*taken, t.action]))
    return None


def state_table_markdown() -> str:
    """The transition table as Markdown, for the docs (``novakit states``; README's table)."""

    def fmt(values: frozenset[str] | frozenset[str | None]) -> str:
        if values is ANY:
            return "any"
        if not values:
            return "(new)"
        return ", ".join(sorted("none" if v is None else str(v) for v in values))

    lines = [
        "| action | from vm_state | from task_state | passes through | ends in | power | host runs "
        "| on failure | options | checks |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for t in ACTIONS.values():
        end = t.end_vm_state.value if t.end_vm_state else "(unchanged)"
        if t.keeps_stopped:
            end += " (stopped stays stopped)"
        power = POWER_STATE_NAMES[t.end_power_state] if t.end_power_state is not None else "-"
        passes = " -> ".join(str(p) for p in t.passes) or "-"
        failure = t.on_failure.value if t.on_failure else ("where it was" if t.compute else "-")
        options = ", ".join(t.options.model_fields) if t.options is not None else "-"
        checks = ", ".join(
            c
            for c, on in (
                ("lock", t.checks_lock and t.action != "create"),
                ("host", t.needs_host),
                ("host up", t.host_up),
                ("launched", t.must_have_launched and t.action != "create"),
            )
            if on
        )
        lines.append(
            f"| {t.action} | {fmt(t.vm_states)} | {fmt(t.task_states)} | {passes} | {end} | {power} "
            f"| {t.operation or '-'} | {failure} | {options or '-'} | {checks or '-'} |"
        )
    return "\n".join(lines)
