"""A guest's power state as a hypervisor reports it (Nova's ``power_state``).

The host side's own vocabulary: drivers report it, the manager puts it in results, and the
controller's state table (``novakit.compute.states``) reads it. It depends on nothing.
"""

from __future__ import annotations

import enum


class PowerState(enum.IntEnum):
    NOSTATE = 0x00
    RUNNING = 0x01
    PAUSED = 0x03
    SHUTDOWN = 0x04  # the VM is powered off
    CRASHED = 0x06
    SUSPENDED = 0x07


POWER_STATE_NAMES = {
    PowerState.NOSTATE: "NOSTATE",
    PowerState.RUNNING: "Running",
    PowerState.PAUSED: "Paused",
    PowerState.SHUTDOWN: "Shutdown",
    PowerState.CRASHED: "Crashed",
    PowerState.SUSPENDED: "Suspended",
}
