"""Hypervisor drivers: the base class, the fake driver and the libvirt driver.

Drivers are loaded by name through ``novakit.virt.driver.load_driver`` so that
importing this package never pulls in libvirt-python.

``GUEST_READY_MARKER`` is the line the tiny test guest (``tests/images``) prints
on its serial console once it has read its config drive; the fake driver
prints the same line so that code waiting for a guest works on both. A guest
that found an admin password hash in its user data says so first with
``ADMIN_PASSWORD_MARKER`` and the sha256 of the hash string: proof of what it
got that shows neither the password nor its hash. A guest that found an SSH public key
(the server's key pair) ends its marker with ``key=`` and the key's fingerprint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

GUEST_READY_MARKER = "NOVAKIT-GUEST-READY"
ADMIN_PASSWORD_MARKER = "NOVAKIT-GUEST-ADMIN-PASSWORD"


def guest_ready_line(
    hostname: str, instance_id: str, addresses: Sequence[str] = (), key_fingerprint: str | None = None
) -> str:
    """The marker line exactly as a guest prints it.

    ``addresses``: the static ones (``IP/prefix``) the guest applied from its config drive's
    network-config, comma-separated after the old form, which stays a prefix of the line so
    that a wait for it still matches. ``key_fingerprint``: the fingerprint (Nova's, MD5
    colon-hex) of the SSH public key the guest found on its config drive, last.
    """
    line = f"{GUEST_READY_MARKER} hostname={hostname} instance-id={instance_id}"
    if addresses:
        line = f"{line} addresses={','.join(addresses)}"
    return f"{line} key={key_fingerprint}" if key_fingerprint else line


def admin_password_line(password_hash: str) -> str:
    """The line a guest prints for the admin password hash (``$6$...``) it received."""
    return f"{ADMIN_PASSWORD_MARKER} sha256={hashlib.sha256(password_hash.encode()).hexdigest()}"


__all__ = ["ADMIN_PASSWORD_MARKER", "GUEST_READY_MARKER", "admin_password_line", "guest_ready_line"]
