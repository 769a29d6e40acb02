"""NumInstancesFilter: hosts with fewer than ``max_instances_per_host`` live instances.

Instances of this request placed earlier count, so the filter runs per instance.
"""

from __future__ import annotations

from novakit.scheduler.filters.base import HostLimitFilter
from novakit.scheduler.host_state import HostState


class NumInstancesFilter(HostLimitFilter):
    name = "NumInstancesFilter"
    limit_option = "max_instances_per_host"
    what = "instances"

    def counted(self, host: HostState) -> int:
        return host.num_instances
