"""AggregateInstanceExtraSpecsFilter: flavor extra specs ``aggregate_instance_extra_specs:KEY=REQ``
must match the metadata of one of the host's aggregates (``ssd=true`` on an aggregate of SSD hosts).
"""

from __future__ import annotations

from novakit.scheduler.filters import extra_specs_ops
from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec

SCOPE = "aggregate_instance_extra_specs"


class AggregateInstanceExtraSpecsFilter(BaseFilter):
    name = "AggregateInstanceExtraSpecsFilter"
    needs_aggregates = True

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return bool(spec.request.scoped_extra_specs(SCOPE))

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        for key, requirement in spec.request.scoped_extra_specs(SCOPE).items():
            values = host.aggregate_metadata.get(key)
            if not values:
                return reject(f"no aggregate of this host sets {key} (wanted {requirement!r})")
            if not any(extra_specs_ops.match(v, requirement) for v in values):
                return reject(
                    f"aggregate metadata {key} is {', '.join(sorted(values))}, wanted {requirement!r}"
                )
        return PASS
