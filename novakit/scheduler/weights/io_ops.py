"""IoOpsWeigher: instances busy in a task on the host. The default multiplier -1.0 prefers quiet hosts;
a positive one would stack busy hosts.
"""

from __future__ import annotations

from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec
from novakit.scheduler.weights.base import BaseWeigher


class IoOpsWeigher(BaseWeigher):
    name = "IoOpsWeigher"
    multiplier_option = "io_ops_weight_multiplier"

    def weigh(self, host: HostState, spec: ResolvedSpec) -> float:
        return host.num_io_ops
