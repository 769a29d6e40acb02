"""Compute hosts: registration, heartbeats, status and state, as Nova's services.

A host registers from what its driver reports (``HostResources``): one
``services`` row (status: enabled/disabled with a reason; state: up/down
from its last heartbeat), one ``compute_nodes`` row (the hypervisor and how
to reach it), and one resource provider named after the host whose
inventories are the driver's totals with reserved amounts and allocation
ratios from configuration (or per-host overrides).
"""

from __future__ import annotations

import datetime as dt
import math
import uuid as uuidlib
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.compute.messages import HostResources
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Allocation, ComputeNode, Instance, ResourceProvider, Service, utcnow

BINARY = "novakit-compute"
RATIO_KEYS = (
    "cpu_allocation_ratio",
    "ram_allocation_ratio",
    "disk_allocation_ratio",
    "reserved_host_memory_mb",
    "reserved_host_cpus",
    "reserved_host_disk_mb",
)


def register_host(
    db: Database,
    conf: Config,
    host: str,
    resources: HostResources,
    driver_info: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create or refresh a host's service, compute node and resource provider. Idempotent."""
    from novakit import placement
    from novakit.placement import traits as placement_traits

    overrides = dict(overrides or {})
    unknown = set(overrides) - set(RATIO_KEYS)
    if unknown:
        raise exceptions.ValidationError(
            "overrides", f"unknown keys {sorted(unknown)}; known: {', '.join(RATIO_KEYS)}"
        )
    settings = {k: overrides.get(k, getattr(conf.placement, k)) for k in RATIO_KEYS}
    for key, value in settings.items():
        if value is None or float(value) < 0:
            raise exceptions.ValidationError(key, "must be zero or more")

    def write(session: Session) -> ComputeNode:
        now = utcnow()
        svc = session.execute(
            select(Service).where(Service.host == host, Service.binary == BINARY, Service.deleted == 0)
        ).scalar_one_or_none()
        if svc is None:
            svc = Service(uuid=str(uuidlib.uuid4()), host=host, binary=BINARY)
            session.add(svc)
        svc.last_seen_up = now
        svc.report_count = (svc.report_count or 0) + 1
        node = session.execute(
            select(ComputeNode).where(ComputeNode.host == host, ComputeNode.deleted == 0)
        ).scalar_one_or_none()
        if node is None:
            node = ComputeNode(uuid=str(uuidlib.uuid4()), host=host)
            session.add(node)
        node.hypervisor_hostname = resources.hypervisor_hostname
        node.hypervisor_type = resources.hypervisor_type
        node.hypervisor_version = resources.hypervisor_version
        node.cpu_arch = resources.cpu_arch
        node.cpu_info = {"arch": resources.cpu_arch, "features": resources.cpu_features}
        node.vcpus = resources.vcpus
        node.memory_mb = resources.memory_mb
        node.local_gb = resources.local_gb
        node.cached_images = list(resources.cached_images)
        if driver_info is not None:
            node.driver = driver_info
        for key, value in settings.items():
            setattr(node, key, value)
        # The trait every scheduling request forbids exists from the first host on, so the
        # scheduler finds (and remembers) its id instead of looking for it on every request.
        placement_traits.ensure_traits(session, {placement_traits.COMPUTE_STATUS_DISABLED})
        session.flush()
        return node

    node = db.run_in_transaction(write)
    provider = placement.ensure_provider(db, host, uuid=node.uuid)
    placement.set_inventory(db, host, inventories_for(node))
    return {"host": host, "uuid": node.uuid, "provider_uuid": str(getattr(provider, "uuid", node.uuid))}


def inventories_for(node: ComputeNode) -> dict[str, Any]:
    from novakit.placement import InventorySpec

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


def heartbeat(db: Database, host: str, cached_images: list[str] | None = None) -> None:
    def write(session: Session) -> None:
        svc = _service(session, host)
        svc.last_seen_up = utcnow()
        svc.report_count = (svc.report_count or 0) + 1
        if cached_images is not None:
            node = _node(session, host)
            node.cached_images = sorted(set(cached_images))

    db.run_in_transaction(write)


def set_disabled(
    db: Database, ctx: RequestContext, host: str, disabled: bool, reason: str | None = None
) -> None:
    if not ctx.is_admin:
        raise exceptions.PolicyNotAuthorized(action="host disable/enable")
    if reason is not None and len(reason) > 255:
        raise exceptions.ValidationError("reason", "must be at most 255 characters")

    def write(session: Session) -> None:
        svc = _service(session, host)
        svc.disabled = disabled
        svc.disabled_reason = reason if disabled else None

    from novakit import placement

    db.run_in_transaction(write)
    # As Nova does, a disabled host's provider carries COMPUTE_STATUS_DISABLED, so
    # the candidate query leaves it out without a filter having to look.
    placement.set_provider_disabled(db, host, disabled)


def _service(session: Session, host: str) -> Service:
    svc = session.execute(
        select(Service).where(Service.host == host, Service.binary == BINARY, Service.deleted == 0)
    ).scalar_one_or_none()
    if svc is None:
        raise exceptions.ComputeHostNotFound(host=host)
    return svc


def _node(session: Session, host: str) -> ComputeNode:
    node = session.execute(
        select(ComputeNode).where(ComputeNode.host == host, ComputeNode.deleted == 0)
    ).scalar_one_or_none()
    if node is None:
        raise exceptions.ComputeHostNotFound(host=host)
    return node


def get_node(db: Database, host: str) -> ComputeNode:
    with db.reader() as session:
        return _node(session, host)


def service_is_up(svc: Service, conf: Config, now: dt.datetime | None = None) -> bool:
    if svc.forced_down or svc.last_seen_up is None:
        return False
    now = now or utcnow()
    return (now - svc.last_seen_up).total_seconds() <= conf.compute.service_down_time


def list_hosts(db: Database, conf: Config) -> list[dict[str, Any]]:
    """Every host with its status, state, capacity and usage (for `novakit host list`)."""
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
        usage: dict[tuple[str, str], int] = {}
        rows = session.execute(
            select(ResourceProvider.name, Allocation.resource_class, func.sum(Allocation.used))
            .join(Allocation, Allocation.resource_provider_id == ResourceProvider.id)
            .group_by(ResourceProvider.name, Allocation.resource_class)
        )
        for name, rc, used in rows:
            usage[(name, rc)] = int(used or 0)
        counts = dict(
            session.execute(
                select(Instance.host, func.count(Instance.id))
                .where(Instance.deleted == 0, Instance.host.isnot(None))
                .group_by(Instance.host)
            ).all()
        )
        out = []
        for node in nodes:
            svc = services.get(node.host)
            capacity = {
                "VCPU": int((node.vcpus - node.reserved_host_cpus) * node.cpu_allocation_ratio),
                "MEMORY_MB": int(
                    (node.memory_mb - min(node.reserved_host_memory_mb, node.memory_mb))
                    * node.ram_allocation_ratio
                ),
                "DISK_GB": int(
                    (node.local_gb - math.ceil(node.reserved_host_disk_mb / 1024))
                    * node.disk_allocation_ratio
                ),
            }
            out.append(
                {
                    "host": node.host,
                    "hypervisor_type": node.hypervisor_type,
                    "status": "disabled" if svc is None or svc.disabled else "enabled",
                    "disabled_reason": svc.disabled_reason if svc else None,
                    "state": "up" if svc is not None and service_is_up(svc, conf) else "down",
                    "last_seen_up": svc.last_seen_up if svc else None,
                    "instances": int(counts.get(node.host, 0)),
                    "capacity": capacity,
                    "used": {rc: usage.get((node.host, rc), 0) for rc in capacity},
                    "cached_images": list(node.cached_images or []),
                    "driver": node.driver.get("driver") if node.driver else None,
                }
            )
        return out
