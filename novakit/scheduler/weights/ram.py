"""RAMWeigher: free memory (MB). Positive multiplier spreads instances, negative stacks them."""

from __future__ import annotations

from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec
from novakit.scheduler.weights.base import BaseWeigher


class RAMWeigher(BaseWeigher):
    name = "RAMWeigher"
    multiplier_option = "ram_weight_multiplier"
    resource_class = "MEMORY_MB"

    def weigh(self, host: HostState, spec: ResolvedSpec) -> float:
        return host.free("MEMORY_MB")
