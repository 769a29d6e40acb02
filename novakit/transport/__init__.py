"""How the controller reaches a compute host's compute side.

Every transport takes a ``ComputeRequest`` and returns a ``ComputeResult``; a
host it cannot reach comes back as a result whose ``error`` says so and asks
for a reschedule. Which transport a host uses is recorded when it registers
(``compute_nodes.driver``)::

    {"driver": "fake", "options": {...}, "transport": "local"}
    {"driver": "libvirt", "options": {"uri": "qemu:///system"}, "transport": "ssh",
     "ssh": {"host": "127.0.0.1", "port": 2222, "user": "nk1", "key_filename": "..."}}

``novakit.compute.rpc`` picks them (``factory.get_transport``) and calls them; a transport
knows nothing of the database.
"""

from __future__ import annotations

from typing import Protocol

from novakit.host.messages import ComputeRequest, ComputeResult


class Transport(Protocol):
    def call(self, request: ComputeRequest) -> ComputeResult: ...
