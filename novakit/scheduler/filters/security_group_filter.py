"""SecurityGroupFilter: a server whose ports carry security groups lands where they are enforced.

Nova left enforcement to Neutron's agent on every host; here the host's own driver filters each
port (libvirt's nwfilter), and a driver that cannot (a session daemon has no nwfilter) would
run the server open to its whole network. Such a host is refused, with the reason, unless its
operator set the driver option ``security_groups: none``: then the host reports ``none`` and
servers run there unfiltered, knowingly. A host that never said (registered before hosts
reported it) counts as one that cannot filter: register it again.
"""

from __future__ import annotations

from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec

#: what a host reports (``HostResources.security_groups``) that lets a server with groups in
ACCEPTED = ("enforced", "none")


class SecurityGroupFilter(BaseFilter):
    name = "SecurityGroupFilter"

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return bool(spec.request.security_groups)

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        mode = host.stats.get("security_groups")
        if mode in ACCEPTED:
            return PASS
        said = "cannot filter ports" if mode == "unsupported" else "has not said whether it filters ports"
        return reject(
            f"host {host.host} {said}, and the request asks for security groups "
            f"{', '.join(spec.request.security_groups)} (an operator may mark the host security_groups: none)"
        )
