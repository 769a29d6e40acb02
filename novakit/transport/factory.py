"""Which transport a host uses, from what it recorded when it registered."""

from __future__ import annotations

from typing import Any

from novakit import exceptions
from novakit.transport import Transport


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
