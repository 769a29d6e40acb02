"""select_destinations: placement's SQL prefilter, filters, weighers, then one claim transaction.

The flow for one request (one or many instances):

1. Resolve names (traits, aggregates, availability zone, server group, hinted
   instances) and validate sizes; bad input fails here with a clear error and
   nothing claimed.
2. Read (no lock): one candidate query, which walks the providers from the most
   free capacity of the dominant weigher's resource class and brings the host
   state of a small pool with it (``CANDIDATE_POOL``; widened to
   ``max_placement_results`` only when that pool cannot place the request),
   filters that do not depend on the batch once, then per instance the
   batch-dependent filters and the weighers; each pick is consumed in memory
   so later instances of the same request see it (anti-affinity across the
   batch, capacity). Result: for each instance a chosen host and alternates.
3. Write, in ONE transaction for the whole request: the per-project quota
   lock and recount (skipped when no finite limit applies), then one
   compare-and-swap claim per instance. If another request took a planned
   host meanwhile, the instance falls back to its
   alternates, then the remaining instances are re-planned inside the
   transaction against what is now committed. Fewer than ``min_count`` placed:
   the transaction rolls back, nothing stays claimed, NoValidHost explains.
   On PostgreSQL a host whose row another claim holds is passed over for the
   next alternate (SKIP LOCKED) and waited for only if no alternate fits, so
   concurrent schedulers that all picked the same best host do not queue.
   On SQLite writers queue on a file lock (``novakit.db.engine.write_gate``).

Why one transaction per request rather than per instance: all-or-nothing and
the quota recheck need it anyway, and it costs one commit (one fsync on SQLite)
for a 100-instance request instead of 100. The price is that a big request
holds its providers' row locks (PostgreSQL) or the write lock (SQLite) for the
duration of its claims, a few milliseconds per instance.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.orm import Session

from novakit import exceptions, quota
from novakit.cells import instances as cell_instances
from novakit.config import Config
from novakit.db.engine import Database
from novakit.db.models import utcnow
from novakit.placement import aggregates as placement_aggregates
from novakit.placement import allocations as placement_allocations
from novakit.placement import candidates as placement_candidates
from novakit.placement import traits as placement_traits
from novakit.placement.providers import find_provider
from novakit.scheduler.explain import Step, summary
from novakit.scheduler.filters.base import BaseFilter
from novakit.scheduler.filters.registry import build_filters, check_filter_names
from novakit.scheduler.host_state import HostState, instance_hosts, load_candidate_hosts
from novakit.scheduler.request_spec import RequestSpec
from novakit.scheduler.resolved import ResolvedSpec
from novakit.scheduler.weights.base import BaseWeigher, normalize
from novakit.scheduler.weights.registry import build_weighers, check_weigher_names

REPLAN_ROUNDS = 3
# Candidates weighed for a one-instance request before widening to max_placement_results. Nova
# weighs whatever placement returned (up to 1,000, in an order it does not rely on). Here the
# candidate query returns the providers with the most free capacity of the dominant weigher's
# resource class first (least free that fits, when that weigher stacks), and every weigher then
# ranks this pool with Nova's normalisation. The pool's cost, not the fleet's, is what a
# decision pays; a host that is best by the other weighers but not among the pool's is missed.
CANDIDATE_POOL = 32
# How long a scheduler trusts its count of the servers on a host of a cell with a database of its
# own (``_load_on_hosts``; what it places itself is counted at once). Nova's scheduler likewise
# keeps each host's instances between its computes' reports instead of asking the cells at every
# decision. Within that time a server another process placed or deleted there is not seen yet:
# NumInstancesFilter's limit is as exact as Nova's (a reader before the claim was not exact
# either against another process placing at the same moment).
LOADS_SECONDS = 2.0


def check_config(conf: Config) -> None:
    """The configured filter and weigher names are known to the registries (ConfigError naming
    the unknown and the known ones). Run at start-up by the front door (``API``) and by
    ``load_config`` (each registry registers its check there when imported; this module imports
    both)."""
    check_filter_names(conf)
    check_weigher_names(conf)


class Selection(BaseModel):
    """One destination: the claimed host (first of a list) or an alternate (not claimed)."""

    host: str
    nodename: str
    provider_uuid: str
    allocations: dict[str, int]
    weight: float = 0
    #: how to reach the host (``compute_nodes.driver``, read with the host's state)
    driver: dict[str, Any] | None = None


@dataclass
class _Prepared:
    spec: ResolvedSpec
    query: placement_candidates.CandidateRequest
    filters: list[BaseFilter]
    weighers: list[BaseWeigher]
    group_hosts: Counter[str]
    # A reason that makes every host fail before any query (unknown required trait).
    hopeless: str = ""
    # Every server on a host is in this database (no cell of its own): one query counts them.
    single_database: bool = True


@dataclass
class _Plan:
    instance_uuid: str
    hosts: list[tuple[HostState, float]]  # chosen first, then alternates


class _Ranker:
    """Nova's weighing, with each weigher's raw value per host computed once per request.

    A weigher's raw value depends on the host's state and the request (the
    contract in ``weights/base.py``); placing an instance changes only the chosen
    host's state, so only that host's raw values are computed again. Normalising
    (to 0..1 across the hosts being weighed), multiplying and summing happen on
    every ``rank``, exactly as Nova's ``weights.py`` does, on plain lists.
    """

    def __init__(self, hosts: list[HostState], spec: ResolvedSpec, weighers: list[BaseWeigher]) -> None:
        self.spec = spec
        self.weighers = weighers
        self.multipliers = [w.multiplier() for w in weighers]
        self.raw: dict[int, list[float]] = {h.provider_id: self._raw(h) for h in hosts}

    def _raw(self, host: HostState) -> list[float]:
        return [w.weigh(host, self.spec) for w in self.weighers]

    def refresh(self, host: HostState, spec: ResolvedSpec) -> None:
        self.spec = spec
        self.raw[host.provider_id] = self._raw(host)

    def rank(self, hosts: list[HostState], best: int) -> list[tuple[HostState, float]]:
        """The ``best`` hosts with their weights, heaviest first, ties by provider id."""
        rows = [self.raw[h.provider_id] for h in hosts]
        totals = [0.0] * len(hosts)
        for n, multiplier in enumerate(self.multipliers):
            weights = normalize([row[n] for row in rows])
            totals = [t + multiplier * w for t, w in zip(totals, weights, strict=True)]
        order = heapq.nsmallest(best, range(len(hosts)), key=lambda i: (-totals[i], hosts[i].provider_id))
        return [(hosts[i], totals[i]) for i in order]


class SchedulerManager:
    def __init__(self, db: Database, conf: Config, clock: Callable[[], dt.datetime] | None = None) -> None:
        self.db = db
        self.conf = conf
        # "Now" for the filters (a heartbeat's age, when heartbeats are on): naive UTC, as the
        # database stores it; tests move it instead of sleeping.
        self.clock = clock or utcnow
        # Unknown names fail here, at start-up, with the known names.
        self.filters = build_filters(conf)
        self.weighers = build_weighers(conf)
        self._trait_ids: dict[str, int] = {}
        # host -> (when read, servers, servers with a task): the other cells' counts kept
        self._loads: dict[str, tuple[float, int, int]] = {}
        self._loads_lock = threading.Lock()

    # --- the entry point ----------------------------------------------------------------

    def select_destinations(
        self,
        spec: RequestSpec,
        instance_uuids: list[str],
        *,
        dry_run: bool = False,
        recheck_quota: bool = True,
        on_claimed: Callable[[Session, dict[str, list[Selection]]], None] | None = None,
    ) -> list[list[Selection]]:
        """For each instance uuid: [claimed host, alternate, ...] (up to max_attempts - 1 alternates).

        All-or-nothing down to ``spec.min_count``: when fewer instances can be
        placed, nothing stays claimed and NoValidHost explains each step. When at
        least ``min_count`` but not all are placed (capacity or quota), the
        unplaced instances get an empty list. ``dry_run`` claims nothing.
        ``recheck_quota``: count the project's usage under the project lock in the
        claim transaction (Nova's recheck); reschedules of an already-counted
        instance may pass False. ``on_claimed(session, {uuid: selections})`` runs in
        the claims' transaction, so what the caller records there commits with them
        (or not at all); it may run again if the transaction is retried.
        """
        wanted = len(instance_uuids)
        needed = _needed(spec, instance_uuids)
        resources = spec.resources()
        placement_allocations.validate_resources(resources)

        with self.db.reader() as session:
            prepared = self._prepare(session, spec, resources)
            if recheck_quota and dry_run:
                # A real run counts quota once, under the project's lock in the claim transaction.
                self._allowed_by_quota(session, spec, resources, instance_uuids, needed, lock=False)
            plans, steps = self._plan(session, prepared, instance_uuids)
        placed = [p for p in plans if p is not None]
        if len(placed) < needed:
            self._raise_no_valid_host(prepared, steps, placed=len(placed), wanted=wanted, needed=needed)
        if dry_run:
            return [self._selections(p, resources) if p else [] for p in plans]

        def _claim(session: Session) -> dict[str, list[Selection]]:
            claimed = self._claim_all(session, prepared, plans, instance_uuids, needed, recheck_quota)
            if on_claimed is not None:
                on_claimed(session, claimed)
            return claimed

        claimed = self.db.run_in_transaction(_claim)
        self._count_placed(claimed)
        return [claimed.get(uuid, []) for uuid in instance_uuids]

    # --- step 1: resolve and validate ---------------------------------------------------

    def _prepare(self, session: Session, spec: RequestSpec, resources: dict[str, int]) -> _Prepared:
        conf = self.conf.scheduler
        required, forbidden = spec.traits()
        for name in required | forbidden:
            placement_traits.validate_trait(name)
        # A disabled compute service carries this trait (Nova's compute_status_filter).
        forbidden.add(placement_traits.COMPUTE_STATUS_DISABLED)
        ids = self._known_trait_ids(session, required | forbidden)
        hopeless = ""
        missing = sorted(required - ids.keys())
        if missing:
            hopeless = f"required trait(s) {', '.join(missing)} are on no provider"
        query = placement_candidates.CandidateRequest(
            resources=resources,
            required_trait_ids=[ids[n] for n in sorted(required) if n in ids],
            forbidden_trait_ids=[ids[n] for n in sorted(forbidden) if n in ids],
            exclude_hosts=list(spec.ignore_hosts),
            # New servers go only to cells that take them (not disabled) and answer.
            excluded=self.db.cells.unusable_hosts(),
            limit=conf.max_placement_results,
            trait_names={v: k for k, v in ids.items()},
        )
        self._where_asked(session, spec, query)

        # Where servers live in cells of their own, what is asked of them is asked of their
        # cells (``novakit.cells.instances``); otherwise of this database, in the same query.
        single = self.db.cells.single_database()
        group_hosts: Counter[str] = Counter()
        if spec.instance_group is not None:
            group_hosts = self._group_hosts(session, spec, single)
        hinted = [*spec.hint_list("same_host"), *spec.hint_list("different_host")]
        resolved = ResolvedSpec(
            request=spec,
            resources=resources,
            instance_hosts=instance_hosts(session, hinted)
            if single
            else cell_instances.hosts_of(self.db, hinted),
            now=self.clock(),
        )
        filters = [f for f in self.filters if f.enabled_for(resolved)]
        weighers = [w for w in self.weighers if w.enabled_for(resolved) and w.multiplier() != 0]
        dominant = self._dominant(resources, weighers)
        if dominant is not None:
            query.order_by, query.descending = dominant.resource_class, dominant.multiplier() > 0
        return _Prepared(resolved, query, filters, weighers, group_hosts, hopeless, single)

    def _known_trait_ids(self, session: Session, names: set[str]) -> dict[str, int]:
        """The ids of the traits that exist among ``names``."""
        unknown = names - self._trait_ids.keys()
        if unknown:
            # Trait ids never change once created (traits are never deleted): remember the found ones.
            self._trait_ids.update(placement_traits.trait_ids(session, unknown))
        return {name: self._trait_ids[name] for name in names if name in self._trait_ids}

    def _where_asked(
        self, session: Session, spec: RequestSpec, query: placement_candidates.CandidateRequest
    ) -> None:
        """The candidates narrowed to what the request names: aggregates (``member_of``), its
        availability zone, a host."""
        for group in spec.member_of:
            agg_ids = []
            for name in group:
                agg = placement_aggregates.find_aggregate(session, name)
                if agg is None:
                    raise exceptions.ValidationError("member_of", f"unknown aggregate {name!r}")
                agg_ids.append(agg.id)
            query.member_of.append(agg_ids)
            query.member_of_names.append(f"aggregate {' or '.join(group)}")
        if spec.availability_zone:
            zone = placement_aggregates.resolve_zone(
                session, spec.availability_zone, self.conf.scheduler.default_availability_zone
            )
            if zone.member_of:
                query.member_of.append(zone.member_of)
                query.member_of_names.append(f"availability zone {zone.zone}")
            else:
                query.not_member_of = zone.not_member_of
                query.not_member_of_name = f"availability zone {zone.zone} (in another zone)"
        if spec.requested_host:
            if find_provider(session, spec.requested_host) is None:
                raise exceptions.ComputeHostNotFound(host=spec.requested_host)
            query.only_hosts = [spec.requested_host]

    def _load_on_hosts(self, hosts: list[str]) -> dict[str, tuple[int, int]]:
        """``{host: (servers, servers with a task)}`` in the cells with a database of their own,
        as kept for ``LOADS_SECONDS``; the hosts not kept (or kept longer) asked of their cells."""
        now = time.monotonic()
        with self._loads_lock:
            kept = {h: self._loads[h] for h in hosts if h in self._loads}
        loads = {h: (n, busy) for h, (read, n, busy) in kept.items() if now - read < LOADS_SECONDS}
        stale = [h for h in hosts if h not in loads]
        if stale:
            asked = cell_instances.load_on_hosts(self.db, stale)
            with self._loads_lock:
                for host in stale:
                    loads[host] = asked.get(host, (0, 0))
                    self._loads[host] = (now, *loads[host])
        return loads

    def _count_placed(self, claimed: dict[str, list[Selection]]) -> None:
        """This scheduler's own placements, counted at once where it keeps a host's count (a
        build is a server with a task until it ends, as Nova counts it)."""
        with self._loads_lock:
            for choices in claimed.values():
                if choices and choices[0].host in self._loads:
                    read, n, busy = self._loads[choices[0].host]
                    self._loads[choices[0].host] = (read, n + 1, busy + 1)

    @staticmethod
    def _dominant(resources: dict[str, int], weighers: list[BaseWeigher]) -> BaseWeigher | None:
        """The weigher the candidate query orders by: the free-capacity weigher of a requested class
        with the largest multiplier (the first configured on a tie), or None (provider id order)."""
        orderable = [w for w in weighers if w.resource_class is not None and w.resource_class in resources]
        return max(orderable, key=lambda w: abs(w.multiplier()), default=None)

    def _group_hosts(self, session: Session, spec: RequestSpec, single: bool) -> Counter[str]:
        """Members per host: the group's live members from the database, and what the spec says."""
        group = spec.instance_group
        assert group is not None
        row = session.execute(
            text("SELECT id FROM instance_groups WHERE uuid = :u AND deleted = 0"), {"u": group.uuid}
        ).first()
        if row is None:
            raise exceptions.ServerGroupNotFound(group_id=group.uuid)
        if single:
            counts: Counter[str] = Counter(
                dict(
                    session.execute(
                        text(
                            "SELECT i.host, COUNT(*) FROM instance_group_member m JOIN instances i "
                            "ON i.uuid = m.instance_uuid WHERE m.group_id = :g AND i.deleted = 0 "
                            "AND i.host IS NOT NULL GROUP BY i.host"
                        ),
                        {"g": row[0]},
                    ).all()
                )
            )
        else:
            members = list(
                session.execute(
                    text("SELECT instance_uuid FROM instance_group_member WHERE group_id = :g"), {"g": row[0]}
                ).scalars()
            )
            counts = Counter(h for h in cell_instances.hosts_of(self.db, members).values() if h)
        for host, count in Counter(group.hosts).items():
            counts[host] = max(counts[host], count)
        return counts

    # --- step 2: plan -------------------------------------------------------------------

    def _plan(
        self,
        session: Session,
        prepared: _Prepared,
        instance_uuids: list[str],
        already_placed: list[str] | None = None,
    ) -> tuple[list[_Plan | None], list[Step]]:
        """Choose a host and alternates for each instance; nothing is written.

        First on a small pool of candidates (the best by the dominant weigher's
        resource class); only when that pool cannot place every instance and more
        candidates exist, once more on ``max_placement_results`` of them, as Nova asks.
        """
        if prepared.hopeless:
            total = placement_candidates.count_providers(session)
            prefilter = Step("placement (SQL prefilter)", hosts_in=total, hosts_out=total)
            prefilter.reason_counts[prepared.hopeless] = total
            prefilter.rejected["*"] = prepared.hopeless
            return [None] * len(instance_uuids), [prefilter]
        limit_all = max(1, self.conf.scheduler.max_placement_results)
        limit = min(limit_all, self._pool_size(len(instance_uuids)))
        while True:
            query = dataclasses.replace(prepared.query, limit=limit)
            plans, steps, rows = self._plan_on_pool(session, prepared, query, instance_uuids, already_placed)
            if all(plans) or rows < limit or limit >= limit_all:
                return plans, steps
            limit = limit_all

    def _pool_size(self, wanted: int) -> int:
        """Candidates to weigh: enough for each instance of the request to get a host and alternates."""
        conf = self.conf.scheduler
        return max(CANDIDATE_POOL, 2 * wanted + conf.max_attempts + conf.host_subset_size)

    def _plan_on_pool(
        self,
        session: Session,
        prepared: _Prepared,
        query: placement_candidates.CandidateRequest,
        instance_uuids: list[str],
        already_placed: list[str] | None,
    ) -> tuple[list[_Plan | None], list[Step], int]:
        cap = self.conf.scheduler.explain_max_hosts
        spec = prepared.spec
        spec.batch_hosts = list(already_placed or [])
        group_hosts = Counter(prepared.group_hosts)
        for placed_host in spec.batch_hosts:
            group_hosts[placed_host] += 1
        spec.group_hosts = group_hosts
        hosts, rows = self._candidates(session, prepared, query, group_hosts)
        # How many providers the prefilter dropped is counted only if "no valid host" needs it.
        prefilter = Step("placement (SQL prefilter)", hosts_in=0)
        prefilter.uncounted_passed = len(hosts)
        steps = [prefilter]
        if not hosts:
            return [None] * len(instance_uuids), steps, rows
        hosts, filtered = _filter(hosts, [f for f in prepared.filters if not f.per_instance], spec, cap)
        steps += filtered

        per_instance = [f for f in prepared.filters if f.per_instance]
        ranker = _Ranker(hosts, spec, prepared.weighers)
        # Hosts that earlier instances of this request filled; the step is cumulative, so the last
        # instance's explanation lists every host that ran out.
        capacity_step = Step("capacity left by earlier instances of this request", hosts_in=len(hosts))
        roomy = hosts
        plans: list[_Plan | None] = []
        last_steps: list[Step] = []
        for uuid in instance_uuids:
            live, last_steps = _filter(roomy, per_instance, spec, cap)
            if spec.batch_hosts:
                last_steps.insert(0, capacity_step)
            if not live:
                plans.append(None)
                break  # later instances would meet the same hosts
            plan = self._pick(ranker, live, uuid)
            plans.append(plan)
            host = plan.hosts[0][0]
            host.consume(spec.resources, uuid)
            spec.batch_hosts.append(host.host)
            group_hosts[host.host] += 1
            ranker.refresh(host, spec)
            reason = host.fits(spec.resources)
            if reason:
                capacity_step.reject(host.host, reason, cap)
                roomy = [h for h in roomy if h is not host]
        plans += [None] * (len(instance_uuids) - len(plans))
        return plans, steps + last_steps, rows

    def _candidates(
        self,
        session: Session,
        prepared: _Prepared,
        query: placement_candidates.CandidateRequest,
        group_hosts: Counter[str],
    ) -> tuple[list[HostState], int]:
        """The candidate hosts, loaded with what the enabled filters and weighers read."""
        return load_candidate_hosts(
            session,
            query,
            with_instances=any(f.name in ("NumInstancesFilter", "IoOpsFilter") for f in prepared.filters)
            or any(w.name == "IoOpsWeigher" for w in prepared.weighers),
            with_aggregates=any(f.needs_aggregates for f in prepared.filters),
            group_hosts=group_hosts,
            instance_counts=None if prepared.single_database else self._load_on_hosts,
        )

    def _pick(self, ranker: _Ranker, live: list[HostState], uuid: str) -> _Plan:
        """One of the ``host_subset_size`` best hosts at random (Nova's spread over equals), and
        the next best as alternates, up to ``max_attempts - 1``."""
        subset = max(1, self.conf.scheduler.host_subset_size)
        alternates_wanted = max(self.conf.scheduler.max_attempts - 1, 0)
        ranked = ranker.rank(live, subset + alternates_wanted)
        pick = random.randrange(min(subset, len(ranked)))
        alternates = [r for i, r in enumerate(ranked) if i != pick][:alternates_wanted]
        return _Plan(uuid, [ranked[pick], *alternates])

    @staticmethod
    def _weigh(
        hosts: list[HostState], spec: ResolvedSpec, weighers: list[BaseWeigher]
    ) -> list[tuple[HostState, float]]:
        """Every host with its weight, best first (Nova's weighing; see _Ranker)."""
        return _Ranker(hosts, spec, weighers).rank(hosts, len(hosts))

    @staticmethod
    def _selections(plan: _Plan, resources: dict[str, int]) -> list[Selection]:
        return [
            Selection(
                host=h.host,
                nodename=h.nodename,
                provider_uuid=h.provider_uuid,
                allocations=dict(resources),
                weight=round(w, 6),
                driver=h.driver,
            )
            for h, w in plan.hosts
        ]

    # --- step 3: claim -------------------------------------------------------------------

    def _claim_all(
        self,
        session: Session,
        prepared: _Prepared,
        plans: list[_Plan | None],
        instance_uuids: list[str],
        needed: int,
        recheck_quota: bool,
    ) -> dict[str, list[Selection]]:
        request = prepared.spec.request
        resources = prepared.spec.resources
        wanted = len(instance_uuids)
        allowed = wanted
        if recheck_quota:
            allowed = self._allowed_by_quota(session, request, resources, instance_uuids, needed, lock=True)
        in_quota = set(instance_uuids[:allowed])
        pending = [p for p in plans if p is not None and p.instance_uuid in in_quota]
        claimed: dict[str, list[Selection]] = {}
        steps: list[Step] = []
        for round_ in range(REPLAN_ROUNDS):
            lost: list[str] = []
            for plan in pending:
                i = self._claim_plan(session, request, resources, plan, prepared.query)
                if i is None:
                    lost.append(plan.instance_uuid)
                    continue
                selections = self._selections(plan, resources)
                claimed[plan.instance_uuid] = [selections[i], *selections[:i], *selections[i + 1 :]]
            if not lost or round_ == REPLAN_ROUNDS - 1:
                break
            # Other requests took our hosts between planning and claiming: plan again on what is
            # committed now (inside this transaction: SQLite holds the write lock, PostgreSQL sees
            # the latest commits and the claims' compare-and-swap guards the rest).
            placed_hosts = [sel[0].host for sel in claimed.values()]
            replans, steps = self._plan(session, prepared, lost, placed_hosts)
            pending = [p for p in replans if p is not None]
            if not pending:
                break
        if len(claimed) < needed:
            self._raise_no_valid_host(
                prepared,
                steps or self._plan(session, prepared, instance_uuids[:1])[1],
                placed=len(claimed),
                wanted=wanted,
                needed=needed,
                session=session,
            )
        return claimed

    def _allowed_by_quota(
        self,
        session: Session,
        spec: RequestSpec,
        resources: dict[str, int],
        instance_uuids: list[str],
        needed: int,
        lock: bool,
    ) -> int:
        """How many of the instances the project's quota allows; fewer than ``needed`` raises
        the quota's error (``lock``: under the project lock, Nova's recheck)."""
        allowed, over = quota.allowed_instances(
            session,
            self.conf,
            spec.project_id,
            quota.per_instance(resources),
            len(instance_uuids),
            exclude_consumers=instance_uuids,
            lock=lock,
        )
        if allowed < needed and over is not None:
            raise over
        return allowed

    def _claim_plan(
        self,
        session: Session,
        request: RequestSpec,
        resources: dict[str, int],
        plan: _Plan,
        where: placement_candidates.CandidateRequest,
    ) -> int | None:
        """Claim one of the plan's hosts; its index, or None when none fits any more.

        First the hosts no concurrent claim is writing to (PostgreSQL; on SQLite all of them),
        best first; then, waiting for their locks, the ones that were busy."""
        retries = self.conf.scheduler.claim_retries
        busy: list[int] = []
        for n, (host, _weight) in enumerate(plan.hosts):
            if len(plan.hosts) > 1 and not placement_allocations.try_lock_provider(session, host.provider_id):
                busy.append(n)
            elif self._claim_first(session, request, resources, plan, [n], retries, where) is not None:
                return n
        return self._claim_first(session, request, resources, plan, busy, retries, where)

    @staticmethod
    def _claim_first(
        session: Session,
        request: RequestSpec,
        resources: dict[str, int],
        plan: _Plan,
        indices: list[int],
        retries: int,
        where: placement_candidates.CandidateRequest,
    ) -> int | None:
        """Claim the first of ``plan.hosts[indices]`` that still fits, and is still in the
        aggregates (zone) asked for; its index, or None."""
        for i in indices:
            if not _still_where_asked(session, where, plan.hosts[i][0].provider_id):
                continue
            outcome = placement_allocations.claim_in_session(
                session,
                plan.instance_uuid,
                plan.hosts[i][0].provider_id,
                resources,
                request.project_id,
                request.user_id,
                retries=retries,
            )
            if outcome.claimed:
                return i
        return None

    # --- failure ---------------------------------------------------------------------------

    def _raise_no_valid_host(
        self,
        prepared: _Prepared,
        steps: list[Step],
        *,
        placed: int,
        wanted: int,
        needed: int,
        session: Session | None = None,
    ) -> None:
        if session is None:
            with self.db.reader() as own:
                self._explain_prefilter(own, prepared, steps)
        else:
            self._explain_prefilter(session, prepared, steps)
        explanation: dict[str, Any] = {
            "request_id": prepared.spec.request.request_id,
            "instances_requested": wanted,
            "min_count": needed,
            "placed": placed,
            "resources": prepared.spec.resources,
            "steps": [s.as_dict() for s in steps],
        }
        raise exceptions.NoValidHost(
            reason=summary(steps, placed=placed, wanted=wanted, needed=needed), explanation=explanation
        )

    def _explain_prefilter(self, session: Session, prepared: _Prepared, steps: list[Step]) -> None:
        """Only now, on the failure path, count the providers and ask the database why each was dropped."""
        cap = self.conf.scheduler.explain_max_hosts
        prefilter = steps[0]
        if prefilter.uncounted_passed is not None:
            total = placement_candidates.count_providers(session)
            prefilter.hosts_in, prefilter.hosts_out = total, total - prefilter.uncounted_passed
            prefilter.uncounted_passed = None
        if prefilter.hosts_out and not prefilter.rejected:
            reasons, _examined = placement_candidates.explain(session, prepared.query)
            prefilter.hosts_out = 0
            # Providers that fit were not dropped by the prefilter (a later step or the candidate
            # limit kept them out); hosts_out counts only those a condition of the query rejected.
            for host, reason in reasons.items():
                if reason.startswith("fits now"):
                    continue
                prefilter.reject(host, reason, cap)


def _still_where_asked(
    session: Session, where: placement_candidates.CandidateRequest, provider_id: int
) -> bool:
    """Whether the provider is still in the aggregates (the zone) the request asked for, read
    under its row's lock: a host moved to another zone after the plan was made is not claimed.
    Every change of a host's aggregates swaps its provider's generation (``novakit.fleet.
    aggregates``), so it either committed before this read or waits for this claim."""
    if not where.member_of and not where.not_member_of:
        return True
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT id FROM resource_providers WHERE id = :id FOR NO KEY UPDATE"), {"id": provider_id}
        )
    member_of = set(
        session.execute(
            text("SELECT aggregate_id FROM resource_provider_aggregates WHERE resource_provider_id = :p"),
            {"p": provider_id},
        ).scalars()
    )
    return all(member_of & set(group) for group in where.member_of) and not member_of & set(
        where.not_member_of
    )


def _needed(spec: RequestSpec, instance_uuids: list[str]) -> int:
    """How many of the instances must be placed for the request to succeed (``min_count``);
    a request for none, with duplicates, or needing none is refused."""
    wanted = len(instance_uuids)
    needed = min(spec.effective_min_count, wanted)
    if wanted == 0:
        raise exceptions.ValidationError("instance_uuids", "at least one instance is required")
    if len(set(instance_uuids)) != wanted:
        raise exceptions.ValidationError("instance_uuids", "must not contain duplicates")
    if needed < 1:
        raise exceptions.ValidationError("min_count", f"must be at least 1, got {spec.min_count}")
    return needed


def _filter(
    hosts: list[HostState], filters: list[BaseFilter], spec: ResolvedSpec, cap: int
) -> tuple[list[HostState], list[Step]]:
    """The hosts every filter passes, in turn, and each filter's step (who it dropped, why)."""
    steps = []
    for flt in filters:
        step = Step(flt.name, hosts_in=len(hosts))
        kept = []
        for host in hosts:
            result = flt.host_passes(host, spec)
            if result:
                kept.append(host)
            else:
                step.reject(host.host, result.reason, cap)
        hosts = kept
        steps.append(step)
    return hosts, steps
