"""What filters and weighers know about one candidate host.

Loaded only for the candidates placement returned, with a few ``IN (...)``
queries (compute node, service, instance counts, aggregates), never for the
whole fleet. ``consume`` updates the in-memory view after the scheduler picks a
host for one instance of a multi-create, so that the next instance sees it
(capacity, instance count, server-group members), as Nova's
``consume_from_request`` does.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from novakit.placement.candidates import Candidate

_EMPTY_JSON = {"", "[]", "{}", "null"}


def _json(value: Any, default: Any) -> Any:
    """Decode a JSON column read through text(); most hosts hold empty ones, skipped without a parse."""
    if value is None or (isinstance(value, str) and value in _EMPTY_JSON):
        return default
    return json.loads(value) if isinstance(value, str) else value


@dataclass(slots=True)
class HostState:
    host: str
    nodename: str
    provider_uuid: str
    provider_id: int
    capacity: dict[str, int]
    used: dict[str, int]
    max_unit: dict[str, int]
    hypervisor_type: str = ""
    hypervisor_version: int = 0
    cpu_arch: str = ""
    cpu_info: dict[str, Any] = field(default_factory=dict)
    cached_images: frozenset[str] = frozenset()
    stats: dict[str, Any] = field(default_factory=dict)
    has_compute_node: bool = False
    has_service: bool = False
    service_disabled: bool = False
    disabled_reason: str | None = None
    forced_down: bool = False
    last_seen_up: dt.datetime | None = None
    num_instances: int = 0
    num_io_ops: int = 0
    # Aggregate metadata values by key (AggregateInstanceExtraSpecsFilter).
    aggregate_metadata: dict[str, set[str]] = field(default_factory=dict)
    # Server-group members on this host, including those placed earlier in this request.
    group_members: int = 0
    # Instances of this request placed here so far.
    placed: list[str] = field(default_factory=list)

    def free(self, rc: str) -> int:
        return self.capacity.get(rc, 0) - self.used.get(rc, 0)

    def fits(self, resources: dict[str, int]) -> str:
        """Empty if ``resources`` still fit after this request's earlier placements, else why not."""
        for rc, amount in resources.items():
            if amount > self.free(rc):
                return (
                    f"{rc} taken by earlier instances of this request (free {self.free(rc)}, needs {amount})"
                )
        return ""

    def consume(self, resources: dict[str, int], instance_uuid: str) -> None:
        for rc, amount in resources.items():
            self.used[rc] = self.used.get(rc, 0) + amount
        self.num_instances += 1
        self.num_io_ops += 1  # a build is an I/O-heavy task until it finishes, as Nova counts it
        self.group_members += 1
        self.placed.append(instance_uuid)

    @property
    def failed_builds(self) -> int:
        try:
            return int(self.stats.get("failed_builds", 0))
        except (TypeError, ValueError):
            return 0


def _in(sql: str, name: str = "hosts") -> Any:
    return text(sql).bindparams(bindparam(name, expanding=True))


_NODES = _in(
    "SELECT host, hypervisor_hostname, hypervisor_type, hypervisor_version, cpu_arch, cpu_info, "
    "cached_images, stats FROM compute_nodes WHERE deleted = 0 AND host IN :hosts"
)
_SERVICES = _in(
    "SELECT host, disabled, disabled_reason, forced_down, last_seen_up FROM services "
    "WHERE deleted = 0 AND \"binary\" = 'novakit-compute' AND host IN :hosts"
)
_COUNTS = _in(
    "SELECT host, COUNT(*), SUM(CASE WHEN task_state IS NULL THEN 0 ELSE 1 END) FROM instances "
    "WHERE deleted = 0 AND host IN :hosts GROUP BY host"
)
_AGG_METADATA = _in(
    "SELECT rpa.resource_provider_id, pa.metadata FROM resource_provider_aggregates rpa "
    "JOIN placement_aggregates pa ON pa.id = rpa.aggregate_id WHERE rpa.resource_provider_id IN :ids",
    "ids",
)
_INSTANCE_HOSTS = _in("SELECT uuid, host FROM instances WHERE deleted = 0 AND uuid IN :uuids", "uuids")


def load_host_states(
    session: Session,
    candidates: list[Candidate],
    *,
    with_instances: bool = True,
    with_aggregates: bool = False,
    group_hosts: Counter[str] | None = None,
) -> list[HostState]:
    """HostStates for exactly the candidates; extra queries only for what enabled plugins read."""
    states = {
        c.name: HostState(
            host=c.name,
            nodename=c.name,
            provider_uuid=c.uuid,
            provider_id=c.provider_id,
            capacity=c.capacity,
            used=dict(c.used),
            max_unit=c.max_unit,
        )
        for c in candidates
    }
    if not states:
        return []
    hosts = list(states)
    for host, hhost, hv_type, hv_ver, arch, cpu_info, cached, stats in session.execute(
        _NODES, {"hosts": hosts}
    ):
        st = states[host]
        st.nodename, st.hypervisor_type, st.hypervisor_version, st.cpu_arch = hhost, hv_type, hv_ver, arch
        st.cpu_info = _json(cpu_info, {})
        st.cached_images = frozenset(_json(cached, []))
        st.stats = _json(stats, {})
        st.has_compute_node = True
    for host, disabled, reason, forced_down, last_seen in session.execute(_SERVICES, {"hosts": hosts}):
        st = states[host]
        st.has_service, st.service_disabled, st.disabled_reason = True, bool(disabled), reason
        if isinstance(last_seen, str):  # SQLite returns raw text through text() queries
            last_seen = dt.datetime.fromisoformat(last_seen)
        st.forced_down, st.last_seen_up = bool(forced_down), last_seen
    if with_instances:
        for host, count, io_ops in session.execute(_COUNTS, {"hosts": hosts}):
            states[host].num_instances, states[host].num_io_ops = int(count), int(io_ops or 0)
    if with_aggregates:
        by_id = {st.provider_id: st for st in states.values()}
        for rp_id, metadata in session.execute(_AGG_METADATA, {"ids": list(by_id)}):
            for key, value in _json(metadata, {}).items():
                by_id[rp_id].aggregate_metadata.setdefault(key, set()).add(str(value))
    if group_hosts:
        for host, count in group_hosts.items():
            if host in states:
                states[host].group_members = count
    return list(states.values())


def instance_hosts(session: Session, uuids: list[str]) -> dict[str, str | None]:
    """``{instance uuid: host}`` for live instances (same_host / different_host hints, group members)."""
    if not uuids:
        return {}
    return dict(session.execute(_INSTANCE_HOSTS, {"uuids": uuids}).all())
