"""ServerGroupAntiAffinityFilter: at most ``max_server_per_host`` members of an anti-affinity group per host.

The rule defaults to 1, as in Nova. Instances of this request placed before this
one count, so a multi-create spreads across hosts.
"""

from __future__ import annotations

from novakit.scheduler.filters.base import PASS, FilterResult, ServerGroupFilter, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.request_spec import InstanceGroupSpec
from novakit.scheduler.resolved import ResolvedSpec


class ServerGroupAntiAffinityFilter(ServerGroupFilter):
    name = "ServerGroupAntiAffinityFilter"
    group_policy = "anti-affinity"

    def group_passes(self, host: HostState, spec: ResolvedSpec, group: InstanceGroupSpec) -> FilterResult:
        limit = group.max_server_per_host
        if host.group_members + 1 <= limit:
            return PASS
        return reject(
            f"server group {group.uuid} (anti-affinity) already has {host.group_members} member(s) here, "
            f"max_server_per_host {limit}"
        )
