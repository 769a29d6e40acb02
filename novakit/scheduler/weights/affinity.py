"""ServerGroupSoftAffinityWeigher: for ``soft-affinity`` groups, prefer hosts with more group members.

A positive multiplier pulls members together; unlike the affinity filter it never
rejects a host.
"""

from __future__ import annotations

from novakit.scheduler.weights.base import ServerGroupWeigher


class ServerGroupSoftAffinityWeigher(ServerGroupWeigher):
    name = "ServerGroupSoftAffinityWeigher"
    multiplier_option = "soft_affinity_weight_multiplier"
    group_policy = "soft-affinity"
