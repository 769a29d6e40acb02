"""How the controller reaches a compute host's compute side.

Every transport takes a ``ComputeRequest`` and returns a ``ComputeResult``; a
host it cannot reach comes back as a result whose ``error`` says so and asks
for a reschedule. Which transport a host uses is recorded when it registers
(``compute_nodes.driver``)::

    {"driver": "fake", "options": {...}, "transport": "local"}
    {"driver": "libvirt", "options": {"uri": "qemu:///system"}, "transport": "ssh",
     "ssh": {"host": "127.0.0.1", "port": 2222, "user": "nk1", "key_filename": "..."}}

``novakit.compute.rpc`` picks and calls them; a transport knows nothing of the database.
"""

from __future__ import annotations

from typing import Any, Protocol

from novakit import exceptions
from novakit.host.messages import ComputeRequest, ComputeResult


class Transport(Protocol):
    def call(self, request: ComputeRequest) -> ComputeResult: ...


def get_transport(host: str, driver_info: dict[str, Any], max_concurrent_builds: int = 10) -> Transport:
    kind = driver_info.get("transport", "local")
    if kind == "local":
        from novakit.transport.local import LocalTransport

        return LocalTransport(host, driver_info, max_concurrent_builds)
    if kind == "ssh":
        from novakit.transport.ssh import SSHTransport

        return SSHTransport(host, driver_info, max_concurrent_builds)
    raise exceptions.ConfigError(
        option=f"compute_nodes[{host}].driver.transport",
        reason=f"unknown transport {kind!r}; known: local, ssh",
    )
