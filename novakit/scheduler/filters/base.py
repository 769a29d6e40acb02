"""The filter contract: ``host_passes(host, spec)`` answers, and a rejection carries its reason.

The reason is what "no valid host" shows the caller, so it should say what the
host has and what the request wanted. ``per_instance`` filters depend on where
earlier instances of the same multi-create landed (server groups, instance
counts) and run again for every instance; the others run once per request.
"""

from __future__ import annotations

from typing import ClassVar

from novakit.config import Config
from novakit.scheduler.host_state import HostState
from novakit.scheduler.request_spec import InstanceGroupSpec
from novakit.scheduler.resolved import ResolvedSpec


class FilterResult:
    __slots__ = ("passed", "reason")

    def __init__(self, passed: bool, reason: str = "") -> None:
        self.passed = passed
        self.reason = reason

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return "PASS" if self.passed else f"reject({self.reason!r})"


PASS = FilterResult(True)


def reject(reason: str) -> FilterResult:
    return FilterResult(False, reason)


class BaseFilter:
    name: ClassVar[str] = ""
    per_instance: ClassVar[bool] = False
    # Reads HostState.aggregate_metadata (one more query when enabled).
    needs_aggregates: ClassVar[bool] = False

    def __init__(self, conf: Config) -> None:
        self.conf = conf

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        """False when the request gives this filter nothing to check: cheaper than passing every host."""
        return True

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        raise NotImplementedError


class HostLimitFilter(BaseFilter):
    """A host passes while a count it holds is below a configured maximum. Instances of this request
    placed earlier count, so the filter runs per instance."""

    per_instance = True
    # The SchedulerConfig field holding the maximum, and what ``counted`` counts (for the reason).
    limit_option: ClassVar[str] = ""
    what: ClassVar[str] = ""

    def counted(self, host: HostState) -> int:
        raise NotImplementedError

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        limit = getattr(self.conf.scheduler, self.limit_option)
        count = self.counted(host)
        if count < limit:
            return PASS
        return reject(f"{count} {self.what}, {self.limit_option} is {limit}")


class ServerGroupFilter(BaseFilter):
    """Enabled for requests whose server group has ``group_policy``; ``group_passes`` decides with
    that group. Where earlier instances of this request landed counts, so it runs per instance."""

    per_instance = True
    group_policy: ClassVar[str] = ""

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return spec.group_policy == self.group_policy

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        group = spec.request.instance_group
        assert group is not None  # a group policy implies a group
        return self.group_passes(host, spec, group)

    def group_passes(self, host: HostState, spec: ResolvedSpec, group: InstanceGroupSpec) -> FilterResult:
        raise NotImplementedError
