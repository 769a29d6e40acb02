"""Hypervisor drivers: the base class, the fake driver and the libvirt driver.

Drivers are loaded by name through ``novakit.virt.driver.load_driver`` so that
importing this package never pulls in libvirt-python.

``GUEST_READY_MARKER`` is the line the tiny test guest (``tests/images``) prints
on its serial console once it has read its config drive; the fake driver
prints the same line so that code waiting for a guest works on both.
"""

from __future__ import annotations

GUEST_READY_MARKER = "NOVAKIT-GUEST-READY"


def guest_ready_line(hostname: str, instance_id: str) -> str:
    """The marker line exactly as a guest prints it."""
    return f"{GUEST_READY_MARKER} hostname={hostname} instance-id={instance_id}"


__all__ = ["GUEST_READY_MARKER", "guest_ready_line"]
