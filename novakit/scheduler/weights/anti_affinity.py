"""ServerGroupSoftAntiAffinityWeigher: for ``soft-anti-affinity`` groups, prefer hosts with fewer members.

The raw value is the negated member count, so a positive multiplier spreads the
group (as Nova's weigher does); it never rejects a host.
"""

from __future__ import annotations

from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec
from novakit.scheduler.weights.base import BaseWeigher


class ServerGroupSoftAntiAffinityWeigher(BaseWeigher):
    name = "ServerGroupSoftAntiAffinityWeigher"
    multiplier_option = "soft_anti_affinity_weight_multiplier"

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return spec.group_policy == "soft-anti-affinity"

    def weigh(self, host: HostState, spec: ResolvedSpec) -> float:
        return -host.group_members
