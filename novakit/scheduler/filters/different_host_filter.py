"""DifferentHostFilter: the ``different_host`` hint lists instances the new one must not share a host with."""

from __future__ import annotations

from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec


class DifferentHostFilter(BaseFilter):
    name = "DifferentHostFilter"

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return bool(spec.request.hint_list("different_host"))

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        here = [
            u for u in spec.request.hint_list("different_host") if spec.instance_hosts.get(u) == host.host
        ]
        if here:
            return reject(f"different_host instance(s) {', '.join(here)} run here")
        return PASS
