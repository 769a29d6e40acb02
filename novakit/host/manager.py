"""The compute side: builds and lifecycle operations on one host, through its driver.

This is what runs on a compute host, reached in-process, over SSH
(``python -m novakit.host``) or by the Ansible ``compute`` module. It takes
a ``ComputeRequest`` and returns a ``ComputeResult``: what happened to each
instance, with events and their times, the power state it ended in, and a
fault if it failed. It never opens the database (a test checks its imports):
the conductor on the controller records the result.

A build is one event (``compute__do_build_and_run_instance``, as Nova's) and
logs "Took N seconds to spawn / to build" as Nova does; its timings travel in
the result.
At most ``max_concurrent_builds`` builds run at once on a host, counted across
every process that drives it (``BuildSlots``). The other operations of a batch
(``handle_all``, or one request for several instances) run side by side too, at
most that many at once in this process: stopping five guests costs one guest's
shutdown, not five in a row. Two requests for the same instance still run one
after the other, in the order given.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from novakit import exceptions, files
from novakit.compute import states
from novakit.host.messages import (
    ComputeRequest,
    ComputeResult,
    Event,
    Fault,
    ImageSpec,
    InstanceResult,
    InstanceSpec,
    PortFilterSpec,
    VolumeSpec,
)
from novakit.host.power import PowerState
from novakit.network.filter_rules import rules_from_json, rules_to_json
from novakit.virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _fault(exc: BaseException, host: str) -> Fault:
    # Imported here: actions.py is the one place faults are shaped, but it
    # imports the database layer, which the compute side must not load.
    from novakit.host.faults import fault_from_exception

    return fault_from_exception(exc, host)


class _Recorder:
    """Collects the events of one instance's operation as the host saw them."""

    def __init__(self, host: str, uuid: str) -> None:
        self.result = InstanceResult(uuid=uuid, ok=False)
        self.host = host

    @contextmanager
    def event(self, name: str) -> Iterator[None]:
        ev = Event(event=name, start_time=_now(), host=self.host)
        self.result.events.append(ev)
        try:
            yield
        except BaseException as exc:
            ev.finish_time = _now()
            ev.result = "Error"
            fault = _fault(exc, self.host)
            if fault.details and fault.details.startswith("Traceback"):
                ev.traceback = fault.details
            self.result.fault = fault
            raise
        ev.finish_time = _now()
        ev.result = "Success"

    def ran(self, name: str, work: Callable[[], object]) -> bool:
        """Run ``work`` as the event ``name``: whether it worked (then ``result.ok``; when it
        raised, the event and the fault say why)."""
        try:
            with self.event(name):
                work()
        except Exception:
            return False
        self.result.ok = True
        return True


# The lifecycle operations (stop, start, reboot, pause, ...) are the state table's: each row
# names its operation and the driver call that runs it (``states.host_calls``).


# attach/detach, on one server: operation -> (event name as Nova records it, driver call)
_VOLUME_OPS: dict[str, tuple[str, Callable[[ComputeDriver, InstanceSpec, VolumeSpec], None]]] = {
    "attach_volume": ("compute_attach_volume", lambda d, i, v: d.attach_volume(i, v)),
    "detach_volume": ("compute_detach_volume", lambda d, i, v: d.detach_volume(i, v)),
}


# a move's steps (``novakit.moves``): operation -> (event name as Nova records it, driver call);
# a call returns what the next host needs of this one (the source's disk_info) or None
_MOVE_OPS: dict[
    str, tuple[str, Callable[[ComputeDriver, InstanceSpec, dict[str, Any]], dict[str, Any] | None]]
] = {
    "migrate_disk_and_power_off": (
        "compute_resize_instance",
        lambda d, i, o: d.migrate_disk_and_power_off(i, str(o["dest_host"]), i.flavor),
    ),
    "finish_migration": (
        "compute_finish_resize",
        lambda d, i, o: d.finish_migration(i, dict(o.get("disk_info") or {}), bool(o.get("power_on", True))),
    ),
    "confirm_migration": ("compute_confirm_resize", lambda d, i, o: d.confirm_migration(i)),
    # the destination's part of a revert: its guest goes (Nova's revert_resize destroys it)
    "revert_migration": ("compute_revert_resize", lambda d, i, o: d.destroy(i)),
    "pre_live_migration": ("compute_pre_live_migration", lambda d, i, o: d.pre_live_migration(i)),
    "live_migration": (
        "compute_live_migration",
        lambda d, i, o: d.live_migration(i, str(o["dest_host"]), dict(o.get("dest_info") or {})),
    ),
    "post_live_migration_at_destination": (
        "compute_post_live_migration_at_destination",
        lambda d, i, o: d.post_live_migration_at_destination(i, dict(o.get("disk_info") or {})),
    ),
    "rollback_live_migration_at_destination": (
        "compute_rollback_live_migration_at_destination",
        lambda d, i, o: d.rollback_live_migration_at_destination(i),
    ),
    "snapshot": ("compute_snapshot_instance", lambda d, i, o: {"image": d.snapshot(i, str(o["image_id"]))}),
    # Nova's shelve: a clean power-off, then the snapshot
    "shelve": ("compute_shelve_instance", lambda d, i, o: _shelve(d, i, o)),
    "shelve_offload": ("compute_shelve_offload_instance", lambda d, i, o: d.destroy(i)),
    "rescue": (
        "compute_rescue_instance",
        lambda d, i, o: d.rescue(i, ImageSpec.model_validate(o["rescue_image"])),
    ),
    "unrescue": ("compute_unrescue_instance", lambda d, i, o: d.unrescue(i)),
    "finish_revert_migration": (
        "compute_finish_revert_resize",
        lambda d, i, o: d.finish_revert_migration(i, bool(o.get("power_on", True))),
    ),
}


#: steps after which the instance's guest is no longer here (or no longer its instance's)
_GONE_AFTER = (
    "migrate_disk_and_power_off",
    "confirm_migration",
    "revert_migration",
    "shelve_offload",
    "pre_live_migration",
    "live_migration",
    "rollback_live_migration_at_destination",
)


def _shelve(driver: ComputeDriver, instance: InstanceSpec, options: dict[str, Any]) -> dict[str, Any]:
    driver.power_off(instance, timeout=float(options.get("timeout", 60)))
    return {"image": driver.snapshot(instance, str(options["image_id"]))}


def _event_name(operation: str) -> str:
    """The event an operation is recorded under on the host (Nova's names)."""
    names = {
        "rebuild": "compute_rebuild_instance",
        "destroy": "compute_terminate_instance",
        "adopt": "compute_import_instance",
        **{op: name for op, (name, _) in _VOLUME_OPS.items()},
        **{op: name for op, (name, _) in _MOVE_OPS.items()},
    }
    if operation in names:
        return names[operation]
    return states.host_calls()[operation].event


class BuildSlots:
    """At most ``count`` builds at once on one host, across every process that drives it.

    Over SSH each request runs its own ``python -m novakit.host``, so a semaphore
    in one process cannot see the builds of another. A slot is a lock file in the
    driver's lock directory; a build holds one with ``flock``, and the kernel frees it
    when the holder ends, however it ends, so a killed build never keeps its slot.
    Separate opens conflict even within one process, so threads are counted too.
    """

    def __init__(self, directory: Path, host: str, count: int, poll: float = 0.02) -> None:
        self.directory = directory
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", host)
        self.paths = [directory / f"build-slot-{stem}-{i}.lock" for i in range(max(1, count))]
        self.poll = poll

    @contextmanager
    def hold(self) -> Iterator[int]:
        """Wait for a free slot and hold it for the block; yields the slot's number."""
        files.private_dir(self.directory)
        while True:
            for number, path in enumerate(self.paths):
                fd = files.create_private(path, os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                try:
                    yield number
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
                return
            time.sleep(self.poll)


class InstanceLocks:
    """One operation at a time per instance on this host, in the order their actions started.

    Nova serialises an instance's operations on its compute host (``synchronized(instance.uuid)``)
    and its RPC keeps them in order. Here two controllers' requests can reach a host in either
    order (a pause and a hard reboot sent a moment apart), so each instance has a lock file in
    the driver's lock directory, held with ``flock`` for the whole operation (across processes,
    freed by the kernel if the holder dies), and holding the start time of the last action
    run: a request whose action started before that one is refused rather than run after it,
    which would leave the guest as the older action left it while the records say the newer.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @contextmanager
    def hold(self, uuid: str, issued_at: dt.datetime | None = None) -> Iterator[None]:
        files.private_dir(self.directory)
        stem = re.sub(r"[^A-Za-z0-9-]", "_", uuid)
        fd = files.create_private(self.directory / f"instance-{stem}.lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if issued_at is not None:
                last_text = os.pread(fd, 64, 0).decode(errors="replace").strip()
                last = dt.datetime.fromisoformat(last_text) if last_text else None
                if last is not None and issued_at < last:
                    raise exceptions.ActionSuperseded(
                        instance_uuid=uuid, later=last.isoformat(), started=issued_at.isoformat()
                    )
                os.ftruncate(fd, 0)
                os.pwrite(fd, issued_at.isoformat().encode(), 0)
            yield
        finally:
            os.close(fd)  # closing the descriptor drops the flock


class ComputeManager:
    """One host's compute service; stateless between requests except the driver."""

    def __init__(self, host: str, driver: ComputeDriver, max_concurrent_builds: int = 10) -> None:
        self.host = host
        self.driver = driver
        self.max_concurrent_builds = max(1, max_concurrent_builds)
        # Threads of this process queue on the semaphore; the slots count the other processes.
        self._build_threads = threading.BoundedSemaphore(self.max_concurrent_builds)
        # Every other per-instance operation, in whatever batch or request it came.
        self._operation_threads = threading.BoundedSemaphore(self.max_concurrent_builds)
        self._build_slots = BuildSlots(driver.lock_dir(), host, self.max_concurrent_builds)
        self._instance_locks = InstanceLocks(driver.lock_dir())
        self.driver.init_host()

    # --- entry point ------------------------------------------------------------

    def handle_all(self, requests: list[ComputeRequest]) -> list[ComputeResult]:
        """Run a host's batch of requests side by side; the results in the requests' order.

        A request that shares an instance with an earlier one waits for it: the earlier
        action runs first, as it would one after the other (run after the later one,
        ``InstanceLocks`` would refuse it as superseded). Workers take requests in
        order, so a waiting request only ever waits for one already running.
        """
        if len(requests) <= 1:
            return [self.handle(r) for r in requests]
        last: dict[str, Future[ComputeResult]] = {}
        futures: list[Future[ComputeResult]] = []
        with ThreadPoolExecutor(max_workers=min(len(requests), self.max_concurrent_builds)) as pool:
            for request in requests:
                uuids = {i.uuid for i in request.instances}
                before = {id(f): f for u in uuids if (f := last.get(u)) is not None}
                future = pool.submit(self._after, list(before.values()), request)
                last.update(dict.fromkeys(uuids, future))
                futures.append(future)
        return [f.result() for f in futures]

    def _after(self, earlier: list[Future[ComputeResult]], request: ComputeRequest) -> ComputeResult:
        wait(earlier)
        return self.handle(request)

    def handle(self, request: ComputeRequest) -> ComputeResult:
        """Run one request; never raises for a per-instance failure."""
        result = ComputeResult(request_id=request.request_id, host=self.host, operation=request.operation)
        op = request.operation
        try:
            if op == "build":
                result.results = self._side_by_side(
                    request.instances, lambda i: self.build_and_run_instance(i, request.options)
                )
                result.resources = self.driver.get_available_resource()
            elif op == "rebuild":
                result.results = self._each(request, lambda i: self.rebuild_instance(i, request.options))
                result.resources = self.driver.get_available_resource()
            elif op == "destroy":
                result.results = self._each(request, self.terminate_instance)
            elif op in states.host_calls():
                result.results = self._each(request, lambda i: self.lifecycle(op, i, request.options))
            elif op == "adopt":
                result.results = self._each(request, self.adopt_instance)
            elif op in _VOLUME_OPS:
                result.results = self._each(request, lambda i: self.volume_action(op, i, request.volumes))
            elif op in _MOVE_OPS:
                result.results = self._each(request, lambda i: self.move_step(op, i, request.options))
            elif op == "live_migration_abort":
                # Not ``_each``: the instance's lock is held by the migration it stops.
                result.results = [self.live_migration_abort(i) for i in request.instances]
            elif op == "image_delete":
                image = ImageSpec.model_validate(request.options["image"])
                self.driver.delete_image(image)
                result.results = [InstanceResult(uuid=image.id, ok=True)]
            elif op in ("volume_create", "volume_delete"):
                result.results = [self.manage_volume(op, v) for v in request.volumes]
            elif op == "apply_port_filters":
                result.results = [self.apply_port_filter(p) for p in request.port_filters]
            elif op == "list_port_filters":
                result.port_filters = self.list_port_filters()
            elif op == "list_unmanaged":
                result.unmanaged = self.driver.list_unmanaged()
            elif op == "get_info":
                result.results = [self.get_info(i) for i in request.instances]
            elif op == "list_instances":
                result.instances_on_host = {k: int(v) for k, v in self.driver.list_instances().items()}
                result.host_boot_id = self.driver.host_boot_id()
                result.port_filters = self.list_port_filters()  # heal compares them too
            elif op == "get_available_resource":
                result.resources = self.driver.get_available_resource()
                result.instances_on_host = {k: int(v) for k, v in self.driver.list_instances().items()}
            elif op == "console_output":
                result.results = [
                    InstanceResult(uuid=i.uuid, ok=True, console=self.driver.get_console_output(i))
                    for i in request.instances
                ]
        except Exception as exc:  # the host itself is unusable (driver down, ...)
            LOG.exception("request %s failed on %s", request.request_id, self.host)
            self._host_failed(request, result, exc)
        return result

    def _host_failed(self, request: ComputeRequest, result: ComputeResult, exc: Exception) -> None:
        """Record in ``result`` that the host could not finish ``request``: its error, and each
        instance not done fails with it; both ask for a reschedule (another host may do it)."""
        fault = _fault(exc, self.host)
        fault.reschedule = True
        result.error = fault
        done = {r.uuid for r in result.results if r.ok}
        result.results = [r for r in result.results if r.ok] + [
            InstanceResult(uuid=i.uuid, ok=False, fault=fault)
            for i in request.instances
            if i.uuid not in done
        ]

    def _side_by_side(
        self, instances: list[InstanceSpec], fn: Callable[[InstanceSpec], InstanceResult]
    ) -> list[InstanceResult]:
        """``fn`` on each instance, side by side; the results in the instances' order."""
        if len(instances) <= 1:
            return [fn(i) for i in instances]
        with ThreadPoolExecutor(max_workers=min(len(instances), self.max_concurrent_builds)) as pool:
            return list(pool.map(fn, instances))

    def _each(
        self, request: ComputeRequest, fn: Callable[[InstanceSpec], InstanceResult]
    ) -> list[InstanceResult]:
        """``fn`` on each instance of ``request`` under ``_in_order``, side by side."""
        return self._side_by_side(request.instances, lambda i: self._in_order(request, i, fn))

    def _in_order(
        self, request: ComputeRequest, instance: InstanceSpec, fn: Callable[[InstanceSpec], InstanceResult]
    ) -> InstanceResult:
        """``fn`` on ``instance`` under its lock, in an operation slot; refused (an event in error)
        if a later action ran."""
        rec = _Recorder(self.host, instance.uuid)
        try:
            with (
                rec.event(_event_name(request.operation)),
                self._instance_locks.hold(instance.uuid, request.issued_at),
                self._operation_threads,
            ):
                return fn(instance)
        except exceptions.ActionSuperseded:
            LOG.info("%s of %s not run on %s: superseded", request.operation, instance.uuid, self.host)
            return rec.result

    # --- builds -----------------------------------------------------------------

    def build_and_run_instance(
        self, instance: InstanceSpec, options: dict[str, Any] | None = None
    ) -> InstanceResult:
        rec = _Recorder(self.host, instance.uuid)
        start = time.monotonic()
        with self._instance_locks.hold(instance.uuid), self._build_threads, self._build_slots.hold():
            try:
                with rec.event("compute__do_build_and_run_instance"):
                    self.driver.check_instance_supported(instance)
                    spawn_start = time.monotonic()
                    self._spawn_with_root_volume(instance)
                    rec.result.timings["spawn"] = round(time.monotonic() - spawn_start, 3)
                    LOG.info(
                        "Took %.2f seconds to spawn the instance on the hypervisor.",
                        rec.result.timings["spawn"],
                    )
            except Exception as exc:
                LOG.info("Build of %s failed on %s: %s", instance.uuid, self.host, exc.__class__.__name__)
                return rec.result
        rec.result.timings["build"] = round(time.monotonic() - start, 3)
        LOG.info("Took %.2f seconds to build instance.", rec.result.timings["build"])
        rec.result.ok = True
        self._observe(instance, rec.result)
        return rec.result

    def _spawn_with_root_volume(self, instance: InstanceSpec) -> None:
        """Spawn; a server booted from a new volume (its root volume comes with its image: the
        controller sends the image only while the volume is being made) gets it made first,
        and removed again if the spawn fails (Nova's _prep_block_device / _cleanup_volumes)."""
        new_root = next((v for v in instance.volumes if v.boot_index == 0 and v.image is not None), None)
        if new_root is None:
            self.driver.spawn(instance)
            return
        self.driver.create_volume(new_root)
        try:
            self.driver.spawn(instance)
        except BaseException:
            try:
                self.driver.delete_volume(new_root)
            except Exception:
                LOG.exception("root volume %s of %s not removed on %s", new_root.id, instance.uuid, self.host)
            raise

    def rebuild_instance(self, instance: InstanceSpec, options: dict[str, Any]) -> InstanceResult:
        def rebuild() -> None:
            # Before the destroy: a rebuild this host cannot do leaves the guest as it was.
            self.driver.check_instance_supported(instance)
            self.driver.destroy(instance)
            self.driver.spawn(instance)
            if instance.preserve_power_off:
                self.driver.power_off(instance, timeout=0)

        rec = _Recorder(self.host, instance.uuid)
        if rec.ran("compute_rebuild_instance", rebuild):
            self._observe(instance, rec.result)
        return rec.result

    # --- lifecycle ----------------------------------------------------------------

    def lifecycle(self, op: str, instance: InstanceSpec, options: dict[str, Any]) -> InstanceResult:
        run = states.host_calls()[op]
        rec = _Recorder(self.host, instance.uuid)
        ok = rec.ran(run.event, lambda: run.call(self.driver, instance, options))
        self._observe(instance, rec.result, quiet=not ok)
        return rec.result

    def terminate_instance(self, instance: InstanceSpec) -> InstanceResult:
        rec = _Recorder(self.host, instance.uuid)
        if rec.ran("compute_terminate_instance", lambda: self.driver.destroy(instance)):
            rec.result.power_state = int(PowerState.NOSTATE)
        return rec.result

    def adopt_instance(self, instance: InstanceSpec) -> InstanceResult:
        """Make a guest novakit did not create ``instance``'s (a brownfield import)."""
        rec = _Recorder(self.host, instance.uuid)
        if rec.ran("compute_import_instance", lambda: self.driver.adopt(instance)):
            self._observe(instance, rec.result, quiet=True)
        return rec.result

    # --- moves ------------------------------------------------------------------------

    def move_step(self, op: str, instance: InstanceSpec, options: dict[str, Any]) -> InstanceResult:
        """One host's step of a move; what the source hands over comes back as ``disk_info``."""
        event_name, call = _MOVE_OPS[op]
        rec = _Recorder(self.host, instance.uuid)
        try:
            with rec.event(event_name):
                handed = call(self.driver, instance, options)
                if handed is not None and "image" in handed:
                    rec.result.image = handed["image"]
                else:
                    rec.result.disk_info = handed
        except Exception:
            self._observe(instance, rec.result, quiet=True)
            return rec.result
        rec.result.ok = True
        # The source's guest is off and no longer its instance's; the others say how it is.
        self._observe(instance, rec.result, quiet=op in _GONE_AFTER)
        return rec.result

    def live_migration_abort(self, instance: InstanceSpec) -> InstanceResult:
        """Stop the live migration of ``instance`` running from here (Nova's
        ``live_migration_abort``): its ``live_migration`` step then fails and the flow rolls back."""
        rec = _Recorder(self.host, instance.uuid)
        rec.ran("compute_live_migration_abort", lambda: self.driver.abort_live_migration(instance))
        return rec.result

    # --- volumes --------------------------------------------------------------------

    def volume_action(self, op: str, instance: InstanceSpec, volumes: list[VolumeSpec]) -> InstanceResult:
        """Attach or detach ``volumes`` to or from ``instance``; one event for all of them."""
        event_name, call = _VOLUME_OPS[op]

        def each() -> None:
            for volume in volumes:
                call(self.driver, instance, volume)

        rec = _Recorder(self.host, instance.uuid)
        rec.ran(event_name, each)
        self._observe(instance, rec.result, quiet=True)
        return rec.result

    def manage_volume(self, op: str, volume: VolumeSpec) -> InstanceResult:
        """Make or remove one volume in its pool. The result is keyed by the volume's id (no
        server is involved): ``ok``, and the fault that says why when not."""
        rec = _Recorder(self.host, volume.id)
        call = self.driver.create_volume if op == "volume_create" else self.driver.delete_volume
        if not rec.ran(op, lambda: call(volume)):
            LOG.info("%s of volume %s failed on %s", op, volume.id, self.host)
        return rec.result

    # --- security groups --------------------------------------------------------------

    def apply_port_filter(self, port: PortFilterSpec) -> InstanceResult:
        """Set (or, for ``rules`` None, remove) one port's filter. Keyed by the port's id; a host
        that does not filter (``none``, ``unsupported``) has nothing to do and says ok."""

        def apply() -> None:
            if self.driver.port_filter_mode() == "enforced":
                if port.rules is None:
                    self.driver.remove_port_filter(port.port_id)
                else:
                    self.driver.apply_port_filter(port, rules_from_json(port.rules))

        rec = _Recorder(self.host, port.port_id)
        if not rec.ran("compute_apply_port_filter", apply):
            LOG.info("filter of port %s not applied on %s", port.port_id, self.host)
        return rec.result

    def list_port_filters(self) -> dict[str, list[dict[str, Any]]] | None:
        if self.driver.port_filter_mode() != "enforced":
            return None
        return {port: rules_to_json(rules) for port, rules in self.driver.list_port_filters().items()}

    def get_info(self, instance: InstanceSpec) -> InstanceResult:
        res = InstanceResult(uuid=instance.uuid, ok=True)
        try:
            info = self.driver.get_info(instance)
            res.power_state = int(info.state)
            res.volumes = list(info.volumes) if info.volumes is not None else None
        except exceptions.InstanceNotFound as exc:
            res.ok = False
            res.power_state = int(PowerState.NOSTATE)
            res.fault = _fault(exc, self.host)
        return res

    def _observe(self, instance: InstanceSpec, res: InstanceResult, quiet: bool = False) -> None:
        """Record what the hypervisor now says about the guest."""
        try:
            res.power_state = int(self.driver.get_info(instance).state)
            res.addresses = self.driver.get_interface_addresses(instance)
        except Exception:
            if not quiet:
                raise
