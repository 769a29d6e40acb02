"""SameHostFilter: the ``same_host`` hint lists instances; the new one must share a host with one of them."""

from __future__ import annotations

from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec


class SameHostFilter(BaseFilter):
    name = "SameHostFilter"

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return bool(spec.request.hint_list("same_host"))

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        wanted = spec.request.hint_list("same_host")
        if any(spec.instance_hosts.get(uuid) == host.host for uuid in wanted):
            return PASS
        return reject(f"none of the same_host instances {', '.join(wanted)} runs here")
