"""NetworkFilter: hosts that have every network the request's ports are on.

A network is a libvirt network or a bridge by name on the hosts; a host that
lacks one could not plug the server in. A host whose driver reported no list
(``compute_nodes.networks`` NULL: the fake driver, a host not yet asked) is
taken to have every network, as Nova trusts a host that reported nothing.
"""

from __future__ import annotations

from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec


class NetworkFilter(BaseFilter):
    name = "NetworkFilter"

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return bool(spec.request.networks)

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        if host.networks is None:
            return PASS
        missing = [n for n in spec.request.networks if n not in host.networks]
        if not missing:
            return PASS
        return reject(f"host {host.host} has no network {', '.join(missing)}")
