"""ServerGroupAffinityFilter: members of an ``affinity`` group all go to one host.

The group's existing members, and the instances of this request placed before
this one, pin the host; the first instance of a new group may go anywhere.
"""

from __future__ import annotations

from novakit.scheduler.filters.base import PASS, FilterResult, ServerGroupFilter, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.request_spec import InstanceGroupSpec
from novakit.scheduler.resolved import ResolvedSpec


class ServerGroupAffinityFilter(ServerGroupFilter):
    name = "ServerGroupAffinityFilter"
    group_policy = "affinity"

    def group_passes(self, host: HostState, spec: ResolvedSpec, group: InstanceGroupSpec) -> FilterResult:
        pinned = {h for h, members in spec.group_hosts.items() if members} | set(spec.batch_hosts)
        if not pinned or host.host in pinned:
            return PASS
        return reject(f"server group {group.uuid} (affinity) already runs on {', '.join(sorted(pinned))}")
