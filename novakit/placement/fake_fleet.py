"""Register a fleet of fake compute hosts in bulk: providers, inventories, compute nodes, services.

For tests and benchmarks (as Nova ships its fake driver): 100,000 hosts one
``ensure_provider`` + ``set_inventory`` at a time would take minutes, while a
few ``executemany`` statements take seconds. Rows look exactly like those the
real registration writes, so the scheduler cannot tell the difference.
"""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select

from novakit.db.engine import Database
from novakit.db.models import ComputeNode, Inventory, ResourceProvider, Service, utcnow


@dataclass
class FakeHost:
    name: str
    vcpus: int = 16
    memory_mb: int = 65536
    disk_gb: int = 1000
    cpu_allocation_ratio: float = 4.0
    ram_allocation_ratio: float = 1.0
    disk_allocation_ratio: float = 1.0
    reserved_memory_mb: int = 512
    hypervisor_type: str = "kvm"
    cpu_arch: str = "x86_64"
    cpu_info: dict[str, Any] = field(default_factory=dict)
    cached_images: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    disabled: bool = False
    up: bool = True


def register_fleet(db: Database, hosts: Iterable[FakeHost], *, batch: int = 5000) -> int:
    """Insert the hosts; returns how many. Hosts must not exist yet."""
    count = 0
    pending: list[FakeHost] = []
    for host in hosts:
        pending.append(host)
        if len(pending) >= batch:
            count += _insert(db, pending)
            pending = []
    if pending:
        count += _insert(db, pending)
    return count


def _insert(db: Database, hosts: list[FakeHost]) -> int:
    now = utcnow()
    with db.writer() as session:
        session.execute(
            insert(ResourceProvider),
            [
                {"uuid": str(uuidlib.uuid4()), "name": h.name, "generation": 1, "created_at": now}
                for h in hosts
            ],
        )
        providers = {
            name: (rp_id, rp_uuid)
            for name, rp_id, rp_uuid in session.execute(
                select(ResourceProvider.name, ResourceProvider.id, ResourceProvider.uuid).where(
                    ResourceProvider.name.in_([h.name for h in hosts])
                )
            ).all()
        }
        session.execute(
            insert(Inventory), [row for h in hosts for row in _inventory_rows(h, providers[h.name][0], now)]
        )
        session.execute(insert(ComputeNode), [_compute_node_row(h, providers[h.name][1], now) for h in hosts])
        session.execute(insert(Service), [_service_row(h, now) for h in hosts])
    return len(hosts)


def _inventory_rows(h: FakeHost, provider_id: int, now: dt.datetime) -> list[dict[str, Any]]:
    """The host's VCPU, MEMORY_MB and DISK_GB inventories, unused."""
    return [
        {
            "resource_provider_id": provider_id,
            "resource_class": rc,
            "total": total,
            "reserved": reserved,
            "min_unit": 1,
            "max_unit": total,
            "step_size": 1,
            "allocation_ratio": ratio,
            "used": 0,
            "free": int((total - reserved) * ratio),
            "created_at": now,
        }
        for rc, total, reserved, ratio in (
            ("VCPU", h.vcpus, 0, h.cpu_allocation_ratio),
            ("MEMORY_MB", h.memory_mb, h.reserved_memory_mb, h.ram_allocation_ratio),
            ("DISK_GB", h.disk_gb, 0, h.disk_allocation_ratio),
        )
    ]


def _compute_node_row(h: FakeHost, provider_uuid: str, now: dt.datetime) -> dict[str, Any]:
    """The host's compute node, as the fake driver would report it (its provider's uuid)."""
    return {
        "uuid": provider_uuid,
        "host": h.name,
        "hypervisor_hostname": h.name,
        "hypervisor_type": h.hypervisor_type,
        "hypervisor_version": 8000000,
        "cpu_arch": h.cpu_arch,
        "cpu_info": h.cpu_info,
        "vcpus": h.vcpus,
        "memory_mb": h.memory_mb,
        "local_gb": h.disk_gb,
        "cpu_allocation_ratio": h.cpu_allocation_ratio,
        "ram_allocation_ratio": h.ram_allocation_ratio,
        "disk_allocation_ratio": h.disk_allocation_ratio,
        "reserved_host_memory_mb": h.reserved_memory_mb,
        "reserved_host_cpus": 0,
        "reserved_host_disk_mb": 0,
        "cached_images": h.cached_images,
        "driver": {"driver": "fake"},
        "stats": h.stats,
        "created_at": now,
        "deleted": 0,
    }


def _service_row(h: FakeHost, now: dt.datetime) -> dict[str, Any]:
    """The host's compute service, up (seen now) unless ``h.up`` is false."""
    return {
        "uuid": str(uuidlib.uuid4()),
        "host": h.name,
        "binary": "novakit-compute",
        "topic": "compute",
        "report_count": 1,
        "disabled": h.disabled,
        "forced_down": False,
        "version": 1,
        "last_seen_up": now if h.up else None,
        "created_at": now,
        "deleted": 0,
    }
