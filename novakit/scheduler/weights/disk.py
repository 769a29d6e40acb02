"""DiskWeigher: free local disk (GB). Positive multiplier spreads, negative stacks."""

from __future__ import annotations

from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec
from novakit.scheduler.weights.base import BaseWeigher


class DiskWeigher(BaseWeigher):
    name = "DiskWeigher"
    multiplier_option = "disk_weight_multiplier"
    resource_class = "DISK_GB"

    def weigh(self, host: HostState, spec: ResolvedSpec) -> float:
        return host.free("DISK_GB")
