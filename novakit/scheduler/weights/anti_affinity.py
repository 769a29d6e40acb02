"""ServerGroupSoftAntiAffinityWeigher: for ``soft-anti-affinity`` groups, prefer hosts with fewer members.

The raw value is the negated member count, so a positive multiplier spreads the
group (as Nova's weigher does); it never rejects a host.
"""

from __future__ import annotations

from novakit.scheduler.weights.base import ServerGroupWeigher


class ServerGroupSoftAntiAffinityWeigher(ServerGroupWeigher):
    name = "ServerGroupSoftAntiAffinityWeigher"
    multiplier_option = "soft_anti_affinity_weight_multiplier"
    group_policy = "soft-anti-affinity"
    member_sign = -1
