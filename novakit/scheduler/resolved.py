"""A request spec plus what the scheduler looked up once for it, handed to every filter and weigher.

Filters stay pure functions of (host, spec): anything that needs the database
(where hinted instances run, the time "now") is resolved here, once per request.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field

from novakit.scheduler.request_spec import RequestSpec


@dataclass
class ResolvedSpec:
    request: RequestSpec
    resources: dict[str, int]
    # Hosts of live instances named in same_host / different_host hints.
    instance_hosts: dict[str, str | None] = field(default_factory=dict)
    # Hosts chosen for the earlier instances of this request, in order.
    batch_hosts: list[str] = field(default_factory=list)
    # Server-group members per host: existing members and this request's earlier instances.
    group_hosts: Counter[str] = field(default_factory=Counter)
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC).replace(tzinfo=None))

    @property
    def group_policy(self) -> str | None:
        group = self.request.instance_group
        return group.policy if group else None
