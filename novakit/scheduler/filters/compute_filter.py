"""ComputeFilter: only hosts whose compute service is enabled and up."""

from __future__ import annotations

from novakit.fleet import hosts
from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec


class ComputeFilter(BaseFilter):
    """Up or down is ``novakit.fleet.hosts.is_up``'s to say (Nova's filter asks its servicegroup
    API the same way): a failed last contact, an admin's force-down, and, only with
    ``compute.heartbeats`` on, a heartbeat older than ``service_down_time``. Idle time alone
    never drops a host."""

    name = "ComputeFilter"

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        if not host.has_service:
            return reject("no compute service is registered for this host")
        state = hosts.takes_work(host.service_disabled, host.disabled_reason, host, self.conf, spec.now)
        return PASS if state else reject(state.reason)
