"""ComputeCapabilitiesFilter: flavor extra specs ``capabilities:KEY=REQ`` against what the host reports.

KEY names a host attribute (``hypervisor_type``, ``hypervisor_version``, ``cpu_arch``) or,
with ``:`` separators, a path into the compute node's ``cpu_info`` / ``stats``
(``capabilities:cpu_info:features=<all-in> avx2``).
"""

from __future__ import annotations

from typing import Any

from novakit.scheduler.filters import extra_specs_ops
from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec

_MISSING = object()


def _lookup(host: HostState, key: str) -> Any:
    first, *rest = key.split(":")
    value: Any = getattr(host, first, _MISSING) if first in _ATTRS else _MISSING
    if value is _MISSING:
        return _MISSING
    for part in rest:
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


_ATTRS = {"hypervisor_type", "hypervisor_version", "cpu_arch", "cpu_info", "stats", "num_instances"}


class ComputeCapabilitiesFilter(BaseFilter):
    name = "ComputeCapabilitiesFilter"

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return bool(spec.request.scoped_extra_specs("capabilities"))

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        for key, requirement in spec.request.scoped_extra_specs("capabilities").items():
            value = _lookup(host, key)
            if value is _MISSING:
                return reject(f"host does not report capability {key} (wanted {requirement!r})")
            if not extra_specs_ops.match(value, requirement):
                return reject(f"capability {key} is {value!r}, wanted {requirement!r}")
        return PASS
