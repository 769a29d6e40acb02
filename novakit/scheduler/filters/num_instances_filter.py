"""NumInstancesFilter: hosts with fewer than ``max_instances_per_host`` live instances.

Instances of this request placed earlier count, so the filter runs per instance.
"""

from __future__ import annotations

from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec


class NumInstancesFilter(BaseFilter):
    name = "NumInstancesFilter"
    per_instance = True

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        limit = self.conf.scheduler.max_instances_per_host
        if host.num_instances < limit:
            return PASS
        return reject(f"{host.num_instances} instances, max_instances_per_host is {limit}")
