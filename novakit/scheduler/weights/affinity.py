"""ServerGroupSoftAffinityWeigher: for ``soft-affinity`` groups, prefer hosts with more group members.

A positive multiplier pulls members together; unlike the affinity filter it never
rejects a host.
"""

from __future__ import annotations

from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec
from novakit.scheduler.weights.base import BaseWeigher


class ServerGroupSoftAffinityWeigher(BaseWeigher):
    name = "ServerGroupSoftAffinityWeigher"
    multiplier_option = "soft_affinity_weight_multiplier"

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return spec.group_policy == "soft-affinity"

    def weigh(self, host: HostState, spec: ResolvedSpec) -> float:
        return host.group_members
