"""ComputeFilter: only hosts whose compute service is enabled and reporting in."""

from __future__ import annotations

import datetime as dt

from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec


class ComputeFilter(BaseFilter):
    name = "ComputeFilter"

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        if not host.has_service:
            return reject("no compute service is registered for this host")
        if host.service_disabled:
            return reject(f"compute service disabled ({host.disabled_reason or 'no reason given'})")
        if host.forced_down:
            return reject("compute service forced down")
        down_after = self.conf.compute.service_down_time
        if host.last_seen_up is None:
            return reject("compute service has never reported in")
        age = (spec.now - host.last_seen_up).total_seconds()
        if age > down_after:
            seen = host.last_seen_up.replace(microsecond=0, tzinfo=dt.UTC).isoformat()
            return reject(
                f"compute service is down: last heartbeat {seen}, {int(age)} s ago (> {down_after} s)"
            )
        return PASS
