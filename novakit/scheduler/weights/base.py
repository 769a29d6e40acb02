"""The weigher contract: ``weigh(host, spec)`` returns a raw number; the handler does the rest.

As Nova's ``weights.py``: raw values are normalised to 0..1 across the hosts
being weighed (all 0 when they are all equal), multiplied by the weigher's
multiplier and summed. A positive multiplier prefers hosts with larger raw
values (spread, for free-capacity weighers), a negative one prefers smaller
(stack).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from novakit.config import Config
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec


class BaseWeigher:
    name: ClassVar[str] = ""
    # The SchedulerConfig field holding the multiplier.
    multiplier_option: ClassVar[str] = ""
    # Set by weighers whose raw value is the free capacity of this resource class: the candidate
    # query can then return the best hosts by it first (see scheduler.manager.CANDIDATE_POOL).
    resource_class: ClassVar[str | None] = None

    def __init__(self, conf: Config) -> None:
        self.conf = conf

    def multiplier(self) -> float:
        return float(getattr(self.conf.scheduler, self.multiplier_option))

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return True

    def weigh(self, host: HostState, spec: ResolvedSpec) -> float:
        """The raw value; it must depend only on the host's state and the request, because the
        scheduler computes it once per host and again only for a host it placed an instance on.
        A weigher that names a ``resource_class`` weighs its free capacity."""
        if self.resource_class is None:
            raise NotImplementedError
        return host.free(self.resource_class)


class ServerGroupWeigher(BaseWeigher):
    """Weighs the members of the request's server group already on a host, for the groups of one
    ``group_policy`` only; it never rejects a host (the affinity filters do)."""

    group_policy: ClassVar[str] = ""
    # +1: more members weigh more (a positive multiplier gathers the group); -1: fewer members weigh
    # more (a positive multiplier spreads it, as Nova's soft-anti-affinity weigher does).
    member_sign: ClassVar[int] = 1

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return spec.group_policy == self.group_policy

    def weigh(self, host: HostState, spec: ResolvedSpec) -> float:
        return self.member_sign * host.group_members


def normalize(values: Sequence[float]) -> list[float]:
    """Scale to 0..1 by min and max; all zeros when every value is the same (Nova's normalize)."""
    if not values:
        return []
    low, high = min(values), max(values)
    if high == low:
        return [0.0] * len(values)
    span = high - low
    return [(v - low) / span for v in values]
