"""ServerGroupAffinityFilter: members of an ``affinity`` group all go to one host.

The group's existing members, and the instances of this request placed before
this one, pin the host; the first instance of a new group may go anywhere.
"""

from __future__ import annotations

from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec


class ServerGroupAffinityFilter(BaseFilter):
    name = "ServerGroupAffinityFilter"
    per_instance = True

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return spec.group_policy == "affinity"

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        group = spec.request.instance_group
        assert group is not None
        pinned = {h for h, members in spec.group_hosts.items() if members} | set(spec.batch_hosts)
        if not pinned or host.host in pinned:
            return PASS
        return reject(f"server group {group.uuid} (affinity) already runs on {', '.join(sorted(pinned))}")
