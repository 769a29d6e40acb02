"""Compute hosts: registration, reports, status and liveness, as Nova's services.

A host registers from what its driver reports (``HostResources``): one
``services`` row (status: enabled/disabled with a reason; state: up/down,
below), one ``compute_nodes`` row (the hypervisor and how to reach it), and
one resource provider named after the host whose inventories are the driver's
totals with reserved amounts and allocation ratios from configuration (or
per-host overrides). Every answer a host gives afterwards is a report about it
(``report``/``record_report``): a contact, its image cache, its failed builds.

Liveness without agents. Nova's services send heartbeats every few seconds and
are down when they stop; nothing runs on a novakit compute host between
requests, so silence means nothing and a host is down only when there is
evidence (``is_up``, the one rule; the ComputeFilter and ``list_hosts`` ask it):

* its last contact failed: the host could not be reached or its driver would
  not start (an ``unusable`` answer, an unreachable host in a playbook, a heal
  or heartbeat that got no answer); ``down_reason`` says why and
  ``last_contact_at`` when. The next successful contact clears it;
* an admin forced it down (``set_forced_down``, Nova's ``os-services
  force-down``), until an admin brings it up again;
* with ``compute.heartbeats`` on, its last successful contact
  (``last_seen_up``, Nova's name) is older than ``compute.service_down_time``:
  the operator runs ``novakit host heartbeat`` or ``playbooks/heartbeat.yml``
  on a schedule, so silence means something again.

Contacts are written here only (``record_contact``): a successful one sets
``last_seen_up`` and ``last_contact_at`` and clears ``down_reason``; a failed one
sets ``last_contact_at`` and ``down_reason``. A forced down host keeps the admin's
reason whatever its contacts say.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pydantic
from sqlalchemy import JSON, Integer, delete, func, null, select, text, update
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.cells.scatter import scatter
from novakit.config import Config, PlacementConfig
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import (
    Allocation,
    ComputeNode,
    HostMapping,
    Instance,
    ResourceProvider,
    Service,
    utcnow,
)
from novakit.fleet.traits import custom_traits as custom_traits
from novakit.fleet.traits import is_operators
from novakit.fleet.traits import set_traits as set_traits
from novakit.fleet.traits import unset_traits as unset_traits
from novakit.host.messages import ComputeResult, HostResources, InstanceResult

if TYPE_CHECKING:
    from novakit.compute.rpc import ComputeRPC

BINARY = "novakit-compute"
RATIO_KEYS = (
    "cpu_allocation_ratio",
    "ram_allocation_ratio",
    "disk_allocation_ratio",
    "reserved_host_memory_mb",
    "reserved_host_cpus",
    "reserved_host_disk_mb",
)


# RFC 1123 host names: dot-separated labels of letters, digits and hyphens, 1 to 63 characters
# each, that neither begin nor end with a hyphen; 253 characters at most in all.
_HOST_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
MAX_HOST_NAME = 253


def check_host_name(host: Any, field: str = "host") -> str:
    """Refuse a host name that breaks the hostname rules (RFC 1123): a host's name is its
    inventory hostname, its resource provider's name and a file name on the controller."""
    if not isinstance(host, str) or not host:
        raise exceptions.ValidationError(field, "must be a host name (RFC 1123), got nothing")
    rule = (
        "must be a host name (RFC 1123): dot-separated labels of letters, digits and hyphens, "
        f"1 to 63 characters each, not beginning or ending with a hyphen, {MAX_HOST_NAME} characters "
        f"at most; got {host!r}"
    )
    if len(host) > MAX_HOST_NAME or not all(_HOST_LABEL.match(label) for label in host.split(".")):
        raise exceptions.ValidationError(field, rule)
    return host


def check_register(ctx: RequestContext | None, host: str) -> None:
    """What ``register_host`` refuses before anything is done: a caller that may not register
    hosts, a bad host name. Entry points that start the host's driver first (which makes its
    state) call it before they do."""
    if ctx is not None:
        policy.authorize(ctx, "host:register")
    check_host_name(host)


def register_host(
    db: Database,
    conf: Config,
    host: str,
    resources: HostResources,
    driver_info: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    *,
    now: dt.datetime | None = None,
    ctx: RequestContext | None = None,
    cell: str | None = None,
) -> dict[str, Any]:
    """Create or refresh a host's service, compute node and resource provider. Idempotent.

    The host has just reported its resources: that is a successful contact (``now``, UTC).
    ``ctx``, the caller, must be an admin (``host:register``); None is the library's own
    caller (Python code holding the database: an operator). ``cell``: the cell (name or
    uuid) the host's servers live in; without it a mapped host keeps its cell and a new one
    goes to the default cell (``novakit.cells.registry.default_cell``). A host lives in
    one cell: naming another than its own is refused (``HostMappedElsewhere``).
    """
    check_register(ctx, host)
    from novakit.cells import mappings
    from novakit.placement import api as placement
    from novakit.placement import traits as placement_traits

    settings = _host_settings(conf, overrides)
    check_resources(resources)
    chosen = _host_cell(db, host, cell)

    def write(session: Session) -> ComputeNode:
        if chosen is not None and chosen.id is not None:
            mappings.map_host(session, host, chosen.id, chosen.name)
        known = session.execute(
            select(Service.id).where(Service.host == host, Service.binary == BINARY, Service.deleted == 0)
        ).first()
        if known is None:
            session.add(Service(uuid=str(uuidlib.uuid4()), host=host, binary=BINARY, report_count=0))
            session.flush()
        record_contact(session, host, now=now)
        node = session.execute(
            select(ComputeNode).where(ComputeNode.host == host, ComputeNode.deleted == 0)
        ).scalar_one_or_none()
        if node is None:
            node = ComputeNode(uuid=str(uuidlib.uuid4()), host=host)
            session.add(node)
        _refresh_node(node, resources, driver_info, settings)
        # The trait every scheduling request forbids exists from the first host on, so the
        # scheduler finds (and remembers) its id instead of looking for it on every request.
        placement_traits.ensure_traits(session, {placement_traits.COMPUTE_STATUS_DISABLED})
        session.flush()
        return node

    node = db.run_in_transaction(write)
    provider = placement.ensure_provider(db, host, uuid=node.uuid)
    placement.set_inventory(db, host, inventories_for(node))
    sync_capability_traits(db, host, resources.traits)
    return {"host": host, "uuid": node.uuid, "provider_uuid": str(getattr(provider, "uuid", node.uuid))}


def _host_settings(conf: Config, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """A host's ratios and reservations: the configuration's [placement], with the host's own
    ``overrides``, which follow the same rules."""
    overrides = dict(overrides or {})
    unknown = set(overrides) - set(RATIO_KEYS)
    if unknown:
        raise exceptions.ValidationError(
            "overrides", f"unknown keys {sorted(unknown)}; known: {', '.join(RATIO_KEYS)}"
        )
    try:
        placement_conf = PlacementConfig.model_validate({**conf.placement.model_dump(), **overrides})
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        raise exceptions.ValidationError(
            ".".join(str(p) for p in err["loc"]), err["msg"].removeprefix("Value error, ")
        ) from None
    return {k: getattr(placement_conf, k) for k in RATIO_KEYS}


def _host_cell(db: Database, host: str, cell: str | None) -> Any:
    """The cell to map the host to: the one named (never cell0), else the default cell for a
    host not mapped yet; None: it keeps its own."""
    from novakit.cells.registry import default_cell

    chosen = db.cells.get(cell) if cell is not None else None
    if chosen is not None and chosen.is_cell0:
        raise exceptions.ValidationError(
            "cell", "cell0 holds servers that could not be scheduled, never hosts"
        )
    if chosen is None and db.cells.of_host(host) is None:
        chosen = default_cell(db.cells)
    return chosen


def _refresh_node(
    node: ComputeNode, resources: HostResources, driver_info: dict[str, Any] | None, settings: dict[str, Any]
) -> None:
    """The compute node as the host reports it now, with its ratios and reservations."""
    node.hypervisor_hostname = resources.hypervisor_hostname
    node.hypervisor_type = resources.hypervisor_type
    node.hypervisor_version = resources.hypervisor_version
    node.cpu_arch = resources.cpu_arch
    node.cpu_info = {"arch": resources.cpu_arch, "features": resources.cpu_features}
    node.vcpus = resources.vcpus
    node.memory_mb = resources.memory_mb
    node.local_gb = resources.local_gb
    node.cached_images = list(resources.cached_images)
    node.networks = _reported_networks(resources)
    if resources.security_groups is not None:  # SecurityGroupFilter reads it
        node.stats = {**(node.stats or {}), "security_groups": resources.security_groups}
    if driver_info is not None:
        node.driver = driver_info
    for key, value in settings.items():
        setattr(node, key, value)


def capability_traits(reported: Iterable[str]) -> list[str]:
    """The traits among ``reported`` that novakit keeps in step with a host's driver
    (``CAPABILITY_TRAITS``); any other is left to the operator."""
    from novakit.virt.driver import CAPABILITY_TRAITS

    return sorted(set(reported) & set(CAPABILITY_TRAITS.values()))


def registered_capability_traits(db: Database, host: str) -> list[str]:
    """The capability traits the host's provider carries now."""
    from novakit.placement import traits as placement_traits

    return capability_traits(placement_traits.get_traits(db, host))


def sync_capability_traits(db: Database, host: str, reported: Iterable[str]) -> None:
    """The host's provider carries the capability traits its driver reports, and no other.

    Only the traits of ``CAPABILITY_TRAITS`` are touched: an operator's own traits
    (``CUSTOM_SSD``) stay. Nova's compute service does the same with its driver's
    capabilities on every resource update.
    """
    from novakit.placement import traits as placement_traits

    wanted = set(capability_traits(reported))
    have = set(registered_capability_traits(db, host))
    if wanted - have:
        placement_traits.add_traits(db, host, wanted - have)
    if have - wanted:
        placement_traits.remove_traits(db, host, have - wanted)


#: the most of one resource a host may report (Nova's integer columns)
MAX_RESOURCE = 2147483647


def check_resources(resources: HostResources) -> None:
    """Refuse, naming the field, a host inventory placement could not hold: before anything of
    the host is written, so that a bad report leaves no service, node or provider behind."""
    for field, least in (("vcpus", 1), ("memory_mb", 1), ("local_gb", 1)):
        value = getattr(resources, field)
        if not least <= value <= MAX_RESOURCE:
            raise exceptions.ValidationError(field, f"must be from {least} to {MAX_RESOURCE}, got {value}")


def inventories_for(node: ComputeNode) -> dict[str, Any]:
    from novakit.placement.inventories import InventorySpec

    return {
        "VCPU": InventorySpec(
            total=node.vcpus,
            reserved=node.reserved_host_cpus,
            max_unit=node.vcpus,
            allocation_ratio=node.cpu_allocation_ratio,
        ),
        "MEMORY_MB": InventorySpec(
            total=node.memory_mb,
            reserved=min(node.reserved_host_memory_mb, node.memory_mb),
            max_unit=node.memory_mb,
            allocation_ratio=node.ram_allocation_ratio,
        ),
        "DISK_GB": InventorySpec(
            total=node.local_gb,
            reserved=min(math.ceil(node.reserved_host_disk_mb / 1024), node.local_gb),
            max_unit=node.local_gb,
            allocation_ratio=node.disk_allocation_ratio,
        ),
    }


def report(
    db: Database,
    host: str,
    result: ComputeResult,
    builds: list[InstanceResult] | None = None,
    *,
    now: dt.datetime | None = None,
) -> None:
    """``record_report`` in a transaction of its own."""
    db.run_in_transaction(lambda session: record_report(session, host, result, builds, now=now))


def record_report(
    session: Session,
    host: str,
    result: ComputeResult,
    builds: list[InstanceResult] | None = None,
    *,
    now: dt.datetime | None = None,
) -> None:
    """What a host's answer tells about the host, in the caller's transaction.

    Every answer is a contact (``record_contact``): successful without a host-level
    error, failed with one (the host could not be reached, its driver would not
    start: ``novakit.compute.rpc.unusable``). An answer with resources refreshes the
    host's image cache list (ImageLocalityWeigher); ``builds``, the answer's build
    results, refresh its count of failed builds since the last success
    (BuildFailureWeigher), even when the host itself failed.
    """
    record_contact(session, host, failed=result.error.message if result.error else None, now=now)
    if result.resources is None and not builds:
        return
    node = session.execute(_NODE_REPORT_STATE, {"host": host}).first()
    if node is None:
        return
    values: dict[str, Any] = {}
    if result.resources is not None and sorted(node.cached_images or []) != sorted(
        result.resources.cached_images
    ):
        values["cached_images"] = sorted(result.resources.cached_images)
    reported = result.resources.networks if result.resources is not None else None
    if result.resources is not None and node.networks != (
        sorted(set(reported)) if reported is not None else None
    ):
        # A network added to or removed from the host since it registered (NetworkFilter).
        values["networks"] = _reported_networks(result.resources)
    if builds:
        failed = sum(1 for r in builds if not r.ok)
        stats = dict(node.stats or {})
        previous = int(stats.get("failed_builds", 0))
        stats["failed_builds"] = 0 if failed < len(builds) else previous + failed
        if stats != (node.stats or {}):
            values["stats"] = stats
    if values:
        session.execute(
            update(ComputeNode)
            .where(ComputeNode.id == node.id)
            .values(**values)
            .execution_options(synchronize_session=False)
        )


def record_contact(
    session: Session, host: str, *, failed: str | None = None, now: dt.datetime | None = None
) -> None:
    """The one write of a host's liveness: novakit reached it (``failed`` None) or could not (why).

    One UPDATE, so that the boot's hot path pays no more than a statement inside the
    transaction it already has. A forced down host keeps the admin's reason.
    """
    params = {"host": host, "now": now or utcnow()}
    if failed is None:
        session.execute(_CONTACT_OK, params)
    else:
        session.execute(_CONTACT_FAILED, {**params, "reason": failed[:REASON_MAX]})


def record_contacts(
    db: Database,
    results: Iterable[ComputeResult],
    failed: Mapping[str, str] | None = None,
    *,
    now: dt.datetime | None = None,
) -> None:
    """Several hosts' answers (``results``) and hosts that gave none (``failed``: host -> why),
    in one transaction: a heartbeat round, a heal's guest lists."""
    answers = list(results)
    failures = dict(failed or {})
    if not answers and not failures:
        return

    def write(session: Session) -> None:
        for result in answers:
            record_report(session, result.host, result, now=now)
        for host, reason in failures.items():
            record_contact(session, host, failed=reason, now=now)

    db.run_in_transaction(write)


REASON_MAX = 255  # services.down_reason
# The statements of every answer, built once (building a statement costs more than running it).
_CONTACT_OK = text(
    "UPDATE services SET last_seen_up = :now, last_contact_at = :now, "
    "down_reason = CASE WHEN forced_down THEN down_reason ELSE NULL END, "
    "report_count = COALESCE(report_count, 0) + 1, updated_at = :now WHERE host = :host AND deleted = 0"
)
_CONTACT_FAILED = text(
    "UPDATE services SET last_contact_at = :now, "
    "down_reason = CASE WHEN forced_down THEN down_reason ELSE :reason END, "
    "updated_at = :now WHERE host = :host AND deleted = 0"
)
_NODE_REPORT_STATE = text(
    "SELECT id, cached_images, stats, networks FROM compute_nodes WHERE host = :host AND deleted = 0"
).columns(id=Integer, cached_images=JSON, stats=JSON, networks=JSON)


def _reported_networks(resources: HostResources) -> Any:
    """The host's networks as stored: sorted names, or SQL NULL (every network) for None.

    NULL, not JSON ``null``, so that "every network" reads the same in SQL and in Python.
    """
    return null() if resources.networks is None else sorted(set(resources.networks))


def set_disabled(
    db: Database,
    ctx: RequestContext,
    host: str,
    disabled: bool,
    reason: str | None = None,
    *,
    keep_reason: bool = False,
) -> None:
    """Enable or disable ``host``. ``keep_reason``: a host disabled already keeps the reason it
    was disabled for (a drain or evacuation of a host an operator took out says nothing new)."""
    policy.authorize(ctx, "host:disable")
    if reason is not None and len(reason) > 255:
        raise exceptions.ValidationError("reason", "must be at most 255 characters")

    def write(session: Session) -> None:
        svc = service_in(session, host)
        if keep_reason and svc.disabled and svc.disabled_reason and disabled:
            return
        svc.disabled = disabled
        svc.disabled_reason = reason if disabled else None

    from novakit.placement import api as placement

    db.run_in_transaction(write)
    # As Nova does, a disabled host's provider carries COMPUTE_STATUS_DISABLED, so
    # the candidate query leaves it out without a filter having to look.
    placement.set_provider_disabled(db, host, disabled)


def delete_host(db: Database, ctx: RequestContext, host: str) -> dict[str, Any]:
    """Remove a host: its service, compute node and resource provider, in one transaction.

    Refused (HostInUse, nothing changed) while any server that is not deleted is on
    it or any claim holds its resources: those would lose their host or their claim.
    Safe against a boot claiming on it meanwhile: the provider's generation is
    swapped before the checks (``placement.providers.delete_provider_in_session``),
    so a claim that lands first makes the delete fail, and one that comes after
    finds no provider. Nova's ``openstack compute service delete``.
    """
    policy.authorize(ctx, "host:delete")
    from novakit.cells.registry import UNSCHEDULED
    from novakit.placement import providers

    def write(session: Session) -> dict[str, Any]:
        node = node_in(session, host)
        servers = session.execute(
            select(func.count(Instance.id)).where(Instance.host == host, Instance.deleted == 0)
        ).scalar_one()
        session.execute(delete(HostMapping).where(HostMapping.host == host))
        if servers:
            raise exceptions.HostInUse(
                host=host,
                reason=f"{servers} server(s) are on it; delete them first "
                f"(novakit server list --host {host} --all-projects)",
            )
        # The claims are the guard against a boot in flight (its server has no host yet).
        try:
            removed = providers.delete_provider_in_session(session, host)
        except exceptions.Conflict as exc:
            raise exceptions.HostInUse(host=host, reason=exc.kwargs.get("reason", str(exc))) from None
        now = utcnow()
        session.execute(
            update(ComputeNode)
            .where(ComputeNode.host == host, ComputeNode.deleted == 0)
            .values(deleted=ComputeNode.id, deleted_at=now)
        )
        session.execute(
            update(Service)
            .where(Service.host == host, Service.binary == BINARY, Service.deleted == 0)
            .values(deleted=Service.id, deleted_at=now)
        )
        return {"host": host, "uuid": node.uuid, "provider_deleted": removed}

    # The servers on it are in its cell's database (a host never mapped: the API database's).
    with db.target_cell(db.cells.of_host(host) or UNSCHEDULED):
        return db.run_in_transaction(write)


def service_in(session: Session, host: str) -> Service:
    svc = session.execute(
        select(Service).where(Service.host == host, Service.binary == BINARY, Service.deleted == 0)
    ).scalar_one_or_none()
    if svc is None:
        raise exceptions.ComputeHostNotFound(host=host)
    return svc


def node_in(session: Session, host: str) -> ComputeNode:
    node = session.execute(
        select(ComputeNode).where(ComputeNode.host == host, ComputeNode.deleted == 0)
    ).scalar_one_or_none()
    if node is None:
        raise exceptions.ComputeHostNotFound(host=host)
    return node


def get_node(db: Database, host: str) -> ComputeNode:
    with db.reader() as session:
        return node_in(session, host)


class Contact(Protocol):
    """What liveness is decided from: a ``Service`` row, or the scheduler's ``HostState``."""

    @property
    def forced_down(self) -> bool: ...
    @property
    def down_reason(self) -> str | None: ...
    @property
    def last_seen_up(self) -> dt.datetime | None: ...
    @property
    def last_contact_at(self) -> dt.datetime | None: ...


@dataclass(frozen=True, slots=True)
class Liveness:
    """Whether a host is up; when it is not, why, in words a person can act on."""

    up: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.up


UP = Liveness(True)


def is_up(service: Contact, conf: Config, now: dt.datetime | None = None) -> Liveness:
    """The liveness rule (see the module docstring); ``now`` is UTC, default the clock's."""
    if service.forced_down:
        why = f": {service.down_reason}" if service.down_reason else ""
        return Liveness(False, f"forced down by an admin{why}")
    if service.down_reason is not None:
        when = f" at {_iso(service.last_contact_at)}" if service.last_contact_at else ""
        return Liveness(False, f"last contact failed{when}: {service.down_reason}")
    if service.last_seen_up is None:
        return Liveness(False, "it has never reported in")
    if conf.compute.heartbeats:
        age = int(((now or utcnow()) - service.last_seen_up).total_seconds())
        limit = conf.compute.service_down_time
        if age > limit:
            return Liveness(
                False,
                f"no heartbeat for {age} s, since {_iso(service.last_seen_up)} "
                f"(heartbeats are on; service_down_time is {limit} s)",
            )
    return UP


def takes_work(
    disabled: bool,
    disabled_reason: str | None,
    service: Contact,
    conf: Config,
    now: dt.datetime | None = None,
) -> Liveness:
    """Whether a host may be given new work (a server, a volume): its compute service is enabled
    and up (``is_up``). The reason names which of the two it is not."""
    if disabled:
        return Liveness(False, f"compute service disabled ({disabled_reason or 'no reason given'})")
    state = is_up(service, conf, now)
    return state if state else Liveness(False, f"compute service is down: {state.reason}")


def _iso(when: dt.datetime | None) -> str:
    return when.replace(microsecond=0, tzinfo=dt.UTC).isoformat() if when else "-"


def set_forced_down(
    db: Database, ctx: RequestContext, host: str, forced_down: bool, reason: str | None = None
) -> None:
    """An admin says a host is down (Nova's ``os-services force-down``), or up again.

    Down holds whatever the host's contacts say, until an admin lifts it. Up lifts
    it and also clears a failed contact's mark: the admin vouches for the host, and
    its next contact tells again.
    """
    policy.authorize(ctx, "host:force_down")
    if reason is not None and len(reason) > REASON_MAX:
        raise exceptions.ValidationError("reason", f"must be at most {REASON_MAX} characters")

    def write(session: Session) -> None:
        svc = service_in(session, host)
        svc.forced_down = forced_down
        svc.down_reason = (reason or None) if forced_down else None

    db.run_in_transaction(write)


def heartbeat(
    db: Database,
    conf: Config,
    hosts: Iterable[str] | None = None,
    *,
    rpc: ComputeRPC | None = None,
    ctx: RequestContext | None = None,
    now: dt.datetime | None = None,
) -> list[dict[str, Any]]:
    """Ask each registered host (or ``hosts``) for its resources and record each contact.

    What ``novakit host heartbeat`` runs; with ``compute.heartbeats`` on, something
    must run it (or ``playbooks/heartbeat.yml``) more often than ``service_down_time``.
    Returns, per host, whether it answered and its state now (``is_up``): a host that
    answered stays down when an admin forced it down. ``ctx`` as for ``register_host``.
    """
    if ctx is not None:
        policy.authorize(ctx, "host:heartbeat")
    from novakit.compute.rpc import ComputeRPC
    from novakit.host.messages import ComputeRequest

    rpc = rpc or ComputeRPC(db, conf)
    with db.reader() as session:
        known = set(
            session.execute(
                select(Service.host).where(Service.binary == BINARY, Service.deleted == 0)
            ).scalars()
        )
    wanted = sorted(set(hosts)) if hosts else sorted(known)
    unknown = [h for h in wanted if h not in known]
    if unknown:
        raise exceptions.ComputeHostNotFound(host=", ".join(unknown))
    request_id = (ctx or RequestContext.admin()).request_id
    requests = [
        ComputeRequest(request_id=request_id, host=host, operation="get_available_resource")
        for host in wanted
    ]
    results = rpc.send_all(requests)
    now = now or utcnow()
    record_contacts(db, results, now=now)
    with db.reader() as session:
        rows = session.execute(
            select(Service).where(Service.host.in_(wanted), Service.binary == BINARY, Service.deleted == 0)
        ).scalars()
        services = {svc.host: svc for svc in rows}
    out = []
    for r in results:
        state = is_up(services[r.host], conf, now)
        out.append(
            {
                "host": r.host,
                "answered": r.error is None,
                "state": "up" if state else "down",
                "down_reason": state.reason or None,
            }
        )
    return out


def list_hosts(
    db: Database, conf: Config, now: dt.datetime | None = None, *, ctx: RequestContext | None = None
) -> list[dict[str, Any]]:
    """Every host with its status, state (and why it is down), last contact, capacity and usage
    (for `novakit host list`). Admin only (``host:list``): usage tells of every project."""
    if ctx is not None:
        policy.authorize(ctx, "host:list")
    now = now or utcnow()
    with db.reader() as session:
        nodes = list(
            session.execute(
                select(ComputeNode).where(ComputeNode.deleted == 0).order_by(ComputeNode.host)
            ).scalars()
        )
        services = {
            s.host: s
            for s in session.execute(
                select(Service).where(Service.deleted == 0, Service.binary == BINARY)
            ).scalars()
        }
        usage = _usage_by_host(session)
        cell_of = {host: cell.name for host, cell in db.cells.host_cells().items()}
    counts: dict[str, int] = {}
    for per_cell in scatter(db, _servers_per_host).results.values():
        for host_name, count in per_cell.items():
            counts[host_name] = counts.get(host_name, 0) + count
    out = []
    for node in nodes:
        svc = services.get(node.host)
        state = is_up(svc, conf, now) if svc is not None else Liveness(False, "no compute service")
        capacity = _capacity(node)
        out.append(
            {
                "host": node.host,
                # Nova's os-hypervisors and os-services name them by these (``novakit serve``)
                "node_uuid": node.uuid,
                "service_uuid": svc.uuid if svc else None,
                "hypervisor_hostname": node.hypervisor_hostname,
                "hypervisor_version": node.hypervisor_version,
                "cpu_info": dict(node.cpu_info or {}),
                "hypervisor_type": node.hypervisor_type,
                "status": "disabled" if svc is None or svc.disabled else "enabled",
                "disabled_reason": svc.disabled_reason if svc else None,
                "state": "up" if state else "down",
                "down_reason": state.reason or None,
                "forced_down": bool(svc.forced_down) if svc else False,
                "last_contact_at": svc.last_contact_at if svc else None,
                "last_seen_up": svc.last_seen_up if svc else None,
                "instances": int(counts.get(node.host, 0)),
                "capacity": capacity,
                "used": {rc: usage.get((node.host, rc), 0) for rc in capacity},
                "cached_images": list(node.cached_images or []),
                "driver": node.driver.get("driver") if node.driver else None,
                "cell": cell_of.get(node.host),
                # enforced / none (the operator's word) / unsupported: SecurityGroupFilter reads it
                "security_groups": (node.stats or {}).get("security_groups", "unsupported"),
            }
        )
    return out


def show_host(db: Database, conf: Config, host: str, *, ctx: RequestContext | None = None) -> dict[str, Any]:
    """One host as ``list_hosts`` shows it, with its traits (the driver's and the operator's
    custom ones), its aggregates and its availability zone (``novakit host show``)."""
    from novakit.placement import aggregates as placement_aggregates
    from novakit.placement import traits as placement_traits

    row = next((r for r in list_hosts(db, conf, ctx=ctx) if r["host"] == host), None)
    if row is None:
        raise exceptions.ComputeHostNotFound(host=host)
    traits = placement_traits.get_traits(db, host)
    with db.reader() as session:
        zone = placement_aggregates.zone_of_provider(session, host, conf.scheduler.default_availability_zone)
    return {
        **row,
        "availability_zone": zone,
        "aggregates": [a.name for a in placement_aggregates.get_provider_aggregates(db, host)],
        "traits": sorted(t for t in traits if t != placement_traits.COMPUTE_STATUS_DISABLED),
        "custom_traits": sorted(t for t in traits if is_operators(t)),
    }


def _usage_by_host(session: Session) -> dict[tuple[str, str], int]:
    """What the allocations use, by (host, resource class)."""
    rows = session.execute(
        select(ResourceProvider.name, Allocation.resource_class, func.sum(Allocation.used))
        .join(Allocation, Allocation.resource_provider_id == ResourceProvider.id)
        .group_by(ResourceProvider.name, Allocation.resource_class)
    )
    return {(name, rc): int(used or 0) for name, rc, used in rows}


def _capacity(node: ComputeNode) -> dict[str, int]:
    """What the node offers per resource class, its reservations taken and its ratios applied."""
    return {
        "VCPU": int((node.vcpus - node.reserved_host_cpus) * node.cpu_allocation_ratio),
        "MEMORY_MB": int(
            (node.memory_mb - min(node.reserved_host_memory_mb, node.memory_mb)) * node.ram_allocation_ratio
        ),
        "DISK_GB": int(
            (node.local_gb - math.ceil(node.reserved_host_disk_mb / 1024)) * node.disk_allocation_ratio
        ),
    }


def _servers_per_host(_cell: Any, session: Session) -> dict[str, int]:
    """Live servers per host in one cell (``list_hosts`` adds the cells up)."""
    rows = session.execute(
        select(Instance.host, func.count(Instance.id))
        .where(Instance.deleted == 0, Instance.host.isnot(None))
        .group_by(Instance.host)
    ).all()
    return {str(host): int(count) for host, count in rows}
