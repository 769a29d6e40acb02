"""IoOpsFilter: hosts with fewer than ``max_io_ops_per_host`` instances busy in a task (building...)."""

from __future__ import annotations

from novakit.scheduler.filters.base import HostLimitFilter
from novakit.scheduler.host_state import HostState


class IoOpsFilter(HostLimitFilter):
    name = "IoOpsFilter"
    limit_option = "max_io_ops_per_host"
    what = "concurrent I/O-heavy tasks"

    def counted(self, host: HostState) -> int:
        return host.num_io_ops
