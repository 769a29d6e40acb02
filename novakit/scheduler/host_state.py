"""What filters and weighers know about one candidate host.

Loaded only for the candidates placement returns, in the same statement as the
candidate query (compute node, service, instance counts when a plugin reads
them; aggregate metadata in a second query when a filter needs it), never for
the whole fleet. ``consume`` updates the in-memory view after the scheduler picks a
host for one instance of a multi-create, so that the next instance sees it
(capacity, instance count, server-group members), as Nova's
``consume_from_request`` does.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from novakit.placement import candidates as placement_candidates
from novakit.placement.candidates import CandidateRequest

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
    # What novakit.fleet.hosts.is_up decides "up" from (the service's liveness columns).
    forced_down: bool = False
    down_reason: str | None = None
    last_seen_up: dt.datetime | None = None
    last_contact_at: dt.datetime | None = None
    num_instances: int = 0
    num_io_ops: int = 0
    # The libvirt networks and bridges the host reported (NetworkFilter); None: every network.
    networks: frozenset[str] | None = None
    # How to reach the host (its driver and transport, as registered), handed to the conductor
    # with the host's selection so that the round to it needs no second read.
    driver: dict[str, Any] | None = None
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


def _datetime(value: Any) -> dt.datetime | None:
    """SQLite returns raw text for a DateTime column read through text()."""
    return dt.datetime.fromisoformat(value) if isinstance(value, str) else value


def _in(sql: str, name: str) -> Any:
    return text(sql).bindparams(bindparam(name, expanding=True))


# What filters and weighers read about a host, joined to the candidate query ``c`` so that one round
# trip brings the pool: compute node, service, and (only when a plugin reads them) instance counts.
_HOST_COLUMNS = (
    "cn.id AS cn_id, cn.hypervisor_hostname, cn.hypervisor_type, cn.hypervisor_version, cn.cpu_arch, "
    "cn.cpu_info, cn.cached_images, cn.stats, cn.networks, cn.driver, "
    "s.id AS s_id, s.disabled, s.disabled_reason, s.forced_down, s.down_reason, s.last_seen_up, "
    "s.last_contact_at"
)
_HOST_WIDTH = 17  # the columns above
_NODE = "SELECT * FROM compute_nodes WHERE host = c.rp_name AND deleted = 0"
_SERVICE = "SELECT * FROM services WHERE host = c.rp_name AND \"binary\" = 'novakit-compute' AND deleted = 0"
# SQLite always joins a few dozen rows by nested loops over the indexes. PostgreSQL's planner,
# costing random reads at four sequential ones, prefers hashing all of ``services`` (10,000 rows:
# 11 ms) to 64 index lookups (0.2 ms); LATERAL makes the lookup per candidate explicit.
_HOST_JOINS = {
    "sqlite": (
        "LEFT JOIN compute_nodes cn ON cn.host = c.rp_name AND cn.deleted = 0 "
        "LEFT JOIN services s ON s.host = c.rp_name AND s.\"binary\" = 'novakit-compute' AND s.deleted = 0"
    ),
    "postgresql": (
        f"LEFT JOIN LATERAL ({_NODE} ORDER BY id LIMIT 1) cn ON true "
        f"LEFT JOIN LATERAL ({_SERVICE} LIMIT 1) s ON true"
    ),
}
# Correlated per candidate through ix_instances_host_deleted: the pool is small, the fleet is not.
_COUNT_COLUMNS = (
    ", (SELECT COUNT(*) FROM instances i WHERE i.host = c.rp_name AND i.deleted = 0) AS n_instances"
    ", (SELECT COUNT(*) FROM instances i WHERE i.host = c.rp_name AND i.deleted = 0 "
    "AND i.task_state IS NOT NULL) AS n_io_ops"
)
_AGG_METADATA = _in(
    "SELECT rpa.resource_provider_id, pa.metadata FROM resource_provider_aggregates rpa "
    "JOIN placement_aggregates pa ON pa.id = rpa.aggregate_id WHERE rpa.resource_provider_id IN :ids",
    "ids",
)
_INSTANCE_HOSTS = _in("SELECT uuid, host FROM instances WHERE deleted = 0 AND uuid IN :uuids", "uuids")


def load_candidate_hosts(
    session: Session,
    query: CandidateRequest,
    *,
    with_instances: bool = True,
    with_aggregates: bool = False,
    group_hosts: Counter[str] | None = None,
    instance_counts: Callable[[list[str]], dict[str, tuple[int, int]]] | None = None,
) -> tuple[list[HostState], int]:
    """HostStates for the candidates of ``query`` and how many candidate rows the query returned.

    One statement: placement's candidate query as a subquery, joined to what the
    enabled filters and weighers read. JSON columns are decoded only when not empty.
    The servers on each host are counted in the same statement, among this database's instances
    (the API database's: its own cell's servers, and those that wait to move into another
    cell); ``instance_counts`` adds those of the cells with a database of their own,
    ``host -> (servers, servers with a task)`` asked of those cells for the candidates.
    """
    sql, params, classes = placement_candidates.build_query(query)
    width = 4 + placement_candidates.WIDTH * len(classes)
    counts = _COUNT_COLUMNS if with_instances else ""
    joins = _HOST_JOINS["postgresql" if session.get_bind().dialect.name == "postgresql" else "sqlite"]
    full = f"SELECT c.*, {_HOST_COLUMNS}{counts} FROM ({sql}) c {joins}"
    states: dict[int, HostState] = {}
    rows = 0
    for row in session.execute(placement_candidates.statement(full, params), params).all():
        rows += 1
        cand = placement_candidates.candidate_from_row(row, classes)
        if cand.provider_id in states:
            continue  # a second compute node row for one host: the first one stands
        st = _host_state(cand, row[width : width + _HOST_WIDTH])
        if with_instances:
            st.num_instances = int(row[width + _HOST_WIDTH])
            st.num_io_ops = int(row[width + _HOST_WIDTH + 1] or 0)
        if group_hosts:
            st.group_members = group_hosts.get(cand.name, 0)
        states[cand.provider_id] = st
    if with_instances and instance_counts is not None and states:
        loads = instance_counts([st.host for st in states.values()])
        for st in states.values():
            servers, busy = loads.get(st.host, (0, 0))
            st.num_instances += servers
            st.num_io_ops += busy
    if with_aggregates and states:
        _load_aggregate_metadata(session, states)
    return list(states.values()), rows


def _host_state(cand: Any, host_columns: Any) -> HostState:
    """A candidate's HostState, with its compute node's and its service's columns when it has
    them."""
    (cn_id, nodename, hv_type, hv_ver, arch, cpu_info, cached, stats, nets, driver, s_id, disabled,
     reason, forced_down, down_reason, last_seen, last_contact) = host_columns  # fmt: skip
    st = HostState(
        host=cand.name,
        nodename=nodename or cand.name,
        provider_uuid=cand.uuid,
        provider_id=cand.provider_id,
        capacity=cand.capacity,
        used=cand.used,
        max_unit=cand.max_unit,
    )
    if cn_id is not None:
        st.hypervisor_type, st.hypervisor_version, st.cpu_arch = hv_type, hv_ver, arch
        st.cpu_info = _json(cpu_info, {})
        st.cached_images = frozenset(_json(cached, []))
        st.stats = _json(stats, {})
        # "[]" is a host with no network, unlike NULL (every network): decoded, not skipped.
        reported = json.loads(nets) if isinstance(nets, str) else nets
        st.networks = frozenset(reported) if reported is not None else None
        st.driver = _json(driver, None)
        st.has_compute_node = True
    if s_id is not None:
        st.has_service, st.service_disabled, st.disabled_reason = True, bool(disabled), reason
        st.forced_down, st.down_reason = bool(forced_down), down_reason
        st.last_seen_up, st.last_contact_at = _datetime(last_seen), _datetime(last_contact)
    return st


def _load_aggregate_metadata(session: Session, states: dict[int, HostState]) -> None:
    """Each host's aggregates' metadata, every value a key has across them."""
    for rp_id, metadata in session.execute(_AGG_METADATA, {"ids": list(states)}):
        for key, value in _json(metadata, {}).items():
            states[rp_id].aggregate_metadata.setdefault(key, set()).add(str(value))


def instance_hosts(session: Session, uuids: list[str]) -> dict[str, str | None]:
    """``{instance uuid: host}`` for live instances (same_host / different_host hints, group members)."""
    if not uuids:
        return {}
    return dict(session.execute(_INSTANCE_HOSTS, {"uuids": uuids}).all())
