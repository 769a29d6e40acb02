"""ServerGroupAntiAffinityFilter: at most ``max_server_per_host`` members of an anti-affinity group per host.

The rule defaults to 1, as in Nova. Instances of this request placed before this
one count, so a multi-create spreads across hosts.
"""

from __future__ import annotations

from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec


class ServerGroupAntiAffinityFilter(BaseFilter):
    name = "ServerGroupAntiAffinityFilter"
    per_instance = True

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return spec.group_policy == "anti-affinity"

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        group = spec.request.instance_group
        assert group is not None
        limit = group.max_server_per_host
        if host.group_members + 1 <= limit:
            return PASS
        return reject(
            f"server group {group.uuid} (anti-affinity) already has {host.group_members} member(s) here, "
            f"max_server_per_host {limit}"
        )
