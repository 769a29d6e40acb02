"""One libvirt domain: its power state in Nova's terms, and the operations that change it.

libvirt's states do not map one to one onto Nova's power states: a BLOCKED
guest is running (it waits on I/O), a SHUTOFF domain with a managed-save image
is SUSPENDED (its memory is on disk and ``create`` restores it), and NOSTATE
is not RUNNING. The table is Nova's ``LIBVIRT_POWER_STATE``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from novakit import exceptions
from novakit.host.power import PowerState
from novakit.virt.driver import power_change_needed

# libvirt's virDomainState values (stable ABI), so that this table needs no import.
VIR_DOMAIN_NOSTATE = 0
VIR_DOMAIN_RUNNING = 1
VIR_DOMAIN_BLOCKED = 2
VIR_DOMAIN_PAUSED = 3
VIR_DOMAIN_SHUTDOWN = 4
VIR_DOMAIN_SHUTOFF = 5
VIR_DOMAIN_CRASHED = 6
VIR_DOMAIN_PMSUSPENDED = 7

LIBVIRT_POWER_STATE: dict[int, PowerState] = {
    VIR_DOMAIN_NOSTATE: PowerState.NOSTATE,
    VIR_DOMAIN_RUNNING: PowerState.RUNNING,
    VIR_DOMAIN_BLOCKED: PowerState.RUNNING,
    VIR_DOMAIN_PAUSED: PowerState.PAUSED,
    # "being shut down": Nova reports it as SHUTDOWN already.
    VIR_DOMAIN_SHUTDOWN: PowerState.SHUTDOWN,
    VIR_DOMAIN_SHUTOFF: PowerState.SHUTDOWN,
    VIR_DOMAIN_CRASHED: PowerState.CRASHED,
    VIR_DOMAIN_PMSUSPENDED: PowerState.SUSPENDED,
}

#: how often a graceful shutdown looks at the guest
POLL_INTERVAL = 0.25


def undefine(lv: Any, dom: Any) -> None:
    """Remove a domain's definition with its saved memory and NVRAM (it may still run, transient)."""
    # Not every driver knows every flag (the test driver refuses NVRAM); fall back step by step.
    for flags in (
        lv.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | lv.VIR_DOMAIN_UNDEFINE_NVRAM,
        lv.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE,
    ):
        try:
            dom.undefineFlags(flags)
            return
        except lv.libvirtError as exc:
            if exc.get_error_code() not in (lv.VIR_ERR_INVALID_ARG, lv.VIR_ERR_NO_SUPPORT):
                raise
    dom.undefine()


def power_state(libvirt_state: int, has_managed_save: bool) -> PowerState:
    if libvirt_state == VIR_DOMAIN_SHUTOFF and has_managed_save:
        return PowerState.SUSPENDED
    return LIBVIRT_POWER_STATE.get(libvirt_state, PowerState.NOSTATE)


class Guest:
    """A thin wrapper: the domain object plus the instance uuid it belongs to."""

    def __init__(self, domain: Any, instance_uuid: str, sleep: Callable[[float], None] = time.sleep) -> None:
        self.domain = domain
        self.uuid = instance_uuid
        self._sleep = sleep

    def get_power_state(self) -> PowerState:
        state = self.domain.state()[0]
        saved = state == VIR_DOMAIN_SHUTOFF and bool(self.domain.hasManagedSaveImage(0))
        return power_state(state, saved)

    def is_active(self) -> bool:
        return bool(self.domain.isActive())

    def start(self) -> None:
        """Boot the domain, or restore it from its managed-save image if it has one."""
        self.domain.create()

    def force_off(self) -> None:
        if self.is_active():
            self.domain.destroy()

    def shutdown_gracefully(self, timeout: float, retry_interval: float) -> bool:
        """Ask the guest (ACPI or agent) to power off; True if it did within ``timeout`` seconds.

        The request is repeated every ``retry_interval`` seconds, because a guest
        that is still booting ignores a power-button press (Nova's _clean_shutdown).
        """
        if timeout <= 0:
            return False
        deadline = time.monotonic() + timeout
        next_request = 0.0
        while True:
            now = time.monotonic()
            if not self.is_active():
                return True
            if now >= deadline:
                return False
            if now >= next_request:
                # A refused request is retried; the deadline still holds.
                with contextlib.suppress(Exception):
                    self.domain.shutdown()
                next_request = now + max(retry_interval, POLL_INTERVAL)
            self._sleep(POLL_INTERVAL)

    def discard_saved_memory(self) -> None:
        if self.domain.hasManagedSaveImage(0):
            self.domain.managedSaveRemove(0)

    # --- the driver's power operations: each reaches its post-condition or raises ----------

    def power_off(self, timeout: float, retry_interval: float) -> None:
        """SHUTDOWN: asked first, forced after ``timeout``; a suspended guest loses its saved memory."""
        state = self.get_power_state()
        if state == PowerState.SUSPENDED:
            self.discard_saved_memory()
            return
        if state == PowerState.RUNNING and self.shutdown_gracefully(timeout, retry_interval):
            return
        self.force_off()
        if self.is_active():
            raise exceptions.InstancePowerOffFailure(instance_uuid=self.uuid, reason="still running")

    def power_on(self) -> None:
        state = self.get_power_state()
        if state == PowerState.RUNNING:
            return
        if state == PowerState.PAUSED:
            self.domain.resume()
            return
        self.force_off()  # a crashed guest may still be "active"
        self.start()

    def reboot(self, soft: bool, timeout: float) -> None:
        state = self.get_power_state()
        # Shut down and start (rather than virDomainReboot) so the guest really
        # went down: Nova's _soft_reboot. A guest that ignores ACPI gets a hard reboot.
        if soft and state == PowerState.RUNNING and self.shutdown_gracefully(timeout, retry_interval=5):
            self.start()
            return
        self.discard_saved_memory()
        self.force_off()
        self.start()

    def change_power(self, action: str) -> None:
        """``POWER_CHANGES[action]`` on this domain. SUSPENDED is the memory saved by libvirt
        (managed save), restored by ``start``."""
        if not power_change_needed(action, self.uuid, self.get_power_state()):
            return
        steps: dict[str, Callable[[], object]] = {
            "pause": self.domain.suspend,
            "unpause": self.domain.resume,
            "suspend": lambda: self.domain.managedSave(0),
            "resume": self.start,
        }
        steps[action]()
