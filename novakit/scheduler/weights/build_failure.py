"""BuildFailureWeigher: recent failed builds (``compute_nodes.stats["failed_builds"]``, reset on a success).

As in Nova the configured multiplier is a penalty: it is applied negated, so the
large default (1,000,000) pushes a failing host below every healthy one without
filtering it out.
"""

from __future__ import annotations

from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec
from novakit.scheduler.weights.base import BaseWeigher


class BuildFailureWeigher(BaseWeigher):
    name = "BuildFailureWeigher"
    multiplier_option = "build_failure_weight_multiplier"

    def multiplier(self) -> float:
        return -super().multiplier()

    def weigh(self, host: HostState, spec: ResolvedSpec) -> float:
        return host.failed_builds
