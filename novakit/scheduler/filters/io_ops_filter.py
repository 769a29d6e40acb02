"""IoOpsFilter: hosts with fewer than ``max_io_ops_per_host`` instances busy in a task (building...)."""

from __future__ import annotations

from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec


class IoOpsFilter(BaseFilter):
    name = "IoOpsFilter"
    per_instance = True

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        limit = self.conf.scheduler.max_io_ops_per_host
        if host.num_io_ops < limit:
            return PASS
        return reject(f"{host.num_io_ops} concurrent I/O-heavy tasks, max_io_ops_per_host is {limit}")
