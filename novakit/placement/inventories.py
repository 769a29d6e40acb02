"""Inventories: how much of each resource class a provider offers.

capacity = int((total - reserved) * allocation_ratio), as in Placement. Writing
inventories compares and swaps the provider generation, like every other write
that changes what a provider can give.

Shrinking below current usage: allowed, as Placement allows it (a host that lost
memory must be able to say so); the provider then simply takes no new claims of
that class until usage drops. Removing a resource class that still has
allocations is refused with InventoryInUse, as Placement refuses it.
"""

from __future__ import annotations

import datetime as dt
import logging
import re

from pydantic import BaseModel, ConfigDict, model_validator
from sqlalchemy import text
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.config import PlacementConfig
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import utcnow
from novakit.placement.providers import ProviderView, lookup_provider, provider_by_uuid

LOG = logging.getLogger(__name__)

STANDARD_CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")
_CUSTOM = re.compile(r"^CUSTOM_[A-Z0-9_]+$")


# Kept importable from here: it lived in this module before it moved to novakit.exceptions.
InventoryInUse = exceptions.InventoryInUse


def validate_resource_class(name: str) -> None:
    if name not in STANDARD_CLASSES and not _CUSTOM.match(name):
        raise exceptions.ValidationError(
            "resource class", f"{name!r} is neither one of {', '.join(STANDARD_CLASSES)} nor CUSTOM_*"
        )


class InventorySpec(BaseModel):
    """One resource class of one provider; ``max_unit`` defaults to ``total``."""

    model_config = ConfigDict(extra="forbid")

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int | None = None
    step_size: int = 1
    allocation_ratio: float = 1.0

    @model_validator(mode="after")
    def _check(self) -> InventorySpec:
        if self.total < 0:
            raise ValueError(f"total must be >= 0, got {self.total}")
        if self.reserved < 0:
            raise ValueError(f"reserved must be >= 0, got {self.reserved}")
        if self.min_unit < 1 or self.step_size < 1:
            raise ValueError("min_unit and step_size must be >= 1")
        if self.max_unit is None:
            self.max_unit = max(self.total, 1)
        if self.max_unit < self.min_unit:
            raise ValueError(f"max_unit {self.max_unit} is below min_unit {self.min_unit}")
        if self.allocation_ratio <= 0:
            raise ValueError(f"allocation_ratio must be > 0, got {self.allocation_ratio}")
        return self

    @property
    def capacity(self) -> int:
        return int((self.total - self.reserved) * self.allocation_ratio)


def default_inventories(
    conf: PlacementConfig, *, vcpus: int, memory_mb: int, disk_gb: int
) -> dict[str, InventorySpec]:
    """The inventories a host registers with, from what its driver reports and the config.

    Defaults are Nova's: CPU ratio 4.0, RAM 1.0, disk 1.0, 512 MB of host memory reserved.
    """
    inv = {
        "VCPU": InventorySpec(
            total=vcpus,
            reserved=conf.reserved_host_cpus,
            max_unit=vcpus,
            allocation_ratio=conf.cpu_allocation_ratio,
        ),
        "MEMORY_MB": InventorySpec(
            total=memory_mb,
            reserved=min(conf.reserved_host_memory_mb, memory_mb),
            max_unit=memory_mb,
            allocation_ratio=conf.ram_allocation_ratio,
        ),
    }
    if disk_gb > 0:
        reserved_gb = -(-conf.reserved_host_disk_mb // 1024)  # Nova rounds reserved disk up
        inv["DISK_GB"] = InventorySpec(
            total=disk_gb,
            reserved=min(reserved_gb, disk_gb),
            max_unit=disk_gb,
            allocation_ratio=conf.disk_allocation_ratio,
        )
    return inv


_READ = text(
    "SELECT resource_class, total, reserved, min_unit, max_unit, step_size, allocation_ratio "
    "FROM inventories WHERE resource_provider_id = :id"
)


def read_inventory(session: Session, provider_id: int) -> dict[str, InventorySpec]:
    return {
        row[0]: InventorySpec(
            total=row[1],
            reserved=row[2],
            min_unit=row[3],
            max_unit=row[4],
            step_size=row[5],
            allocation_ratio=row[6],
        )
        for row in session.execute(_READ, {"id": provider_id})
    }


def get_inventory(db: Database, provider_name: str) -> dict[str, InventorySpec]:
    with db.reader() as session:
        return read_inventory(session, lookup_provider(session, provider_name).id)


def provider_inventories(
    db: Database, ctx: RequestContext, uuid: str
) -> tuple[ProviderView, dict[str, InventorySpec]]:
    """The provider of ``uuid`` and its inventories, read together (one generation for both)."""
    policy.authorize(ctx, "placement:read")
    with db.reader() as session:
        provider = provider_by_uuid(session, uuid)
        return provider, read_inventory(session, provider.id)


def bump_generation(session: Session, provider_id: int, expected: int) -> bool:
    """The compare-and-swap every provider write ends with: False if someone else wrote first."""
    result = session.execute(
        text(
            "UPDATE resource_providers SET generation = generation + 1, updated_at = :now "
            "WHERE id = :id AND generation = :gen"
        ),
        {"id": provider_id, "gen": expected, "now": utcnow()},
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def set_inventory(
    db: Database,
    provider_name: str,
    inventories: dict[str, InventorySpec],
    *,
    generation: int | None = None,
) -> ProviderView:
    """Replace the provider's inventories (Placement's PUT) and bump its generation.

    ``generation``: when given, the write fails with ConcurrentUpdateDetected if
    the provider changed since the caller read it; when omitted, the current
    generation is read and swapped in the same transaction (retried on a race).
    """
    for rc in inventories:
        validate_resource_class(rc)

    def _write(session: Session) -> ProviderView | None:
        provider = lookup_provider(session, provider_name)
        if generation is not None and provider.generation != generation:
            raise exceptions.ConcurrentUpdateDetected(
                attempts=1,
                what=f"provider {provider_name} (generation {provider.generation}, not {generation})",
            )
        usage = _usage(session, provider.id)
        current = read_inventory(session, provider.id)
        for rc in current.keys() - inventories.keys():
            if usage.get(rc):
                raise InventoryInUse(resource_class=rc, provider=provider_name, used=usage[rc])
        now = utcnow()
        for rc, spec in inventories.items():
            if usage.get(rc, 0) > spec.capacity:
                LOG.warning(
                    "%s on %s: usage %s exceeds the new capacity %s; no new claims until it drops",
                    rc,
                    provider_name,
                    usage[rc],
                    spec.capacity,
                )
            _put_inventory(session, provider.id, rc, spec, now, exists=rc in current, used=usage.get(rc, 0))
        for rc in current.keys() - inventories.keys():
            session.execute(
                text("DELETE FROM inventories WHERE resource_provider_id = :id AND resource_class = :rc"),
                {"id": provider.id, "rc": rc},
            )
        if not bump_generation(session, provider.id, provider.generation):
            return None  # lost a race: roll back and try again
        return provider.model_copy(update={"generation": provider.generation + 1})

    from novakit.placement.allocations import retry_on_conflict

    return retry_on_conflict(db, _write, what=f"inventory of provider {provider_name}")


def _usage(session: Session, provider_id: int) -> dict[str, int]:
    """What the provider's allocations use, by resource class."""
    return dict(
        session.execute(  # type: ignore[arg-type]
            text(
                "SELECT resource_class, SUM(used) FROM allocations WHERE resource_provider_id = :id "
                "GROUP BY resource_class"
            ),
            {"id": provider_id},
        ).all()
    )


def _put_inventory(
    session: Session,
    provider_id: int,
    rc: str,
    spec: InventorySpec,
    now: dt.datetime,
    *,
    exists: bool,
    used: int,
) -> None:
    """One resource class's inventory written (updated if it ``exists``, else inserted).

    ``free`` is capacity - used (the triggers on allocations keep ``used``); the capacity is
    computed here because SQL would round int((total - reserved) * ratio) differently."""
    params = {"id": provider_id, "rc": rc, "now": now, "capacity": spec.capacity, **spec.model_dump()}
    if exists:
        session.execute(
            text(
                "UPDATE inventories SET total = :total, reserved = :reserved, min_unit = :min_unit, "
                "max_unit = :max_unit, step_size = :step_size, allocation_ratio = :allocation_ratio, "
                "free = :capacity - used, updated_at = :now "
                "WHERE resource_provider_id = :id AND resource_class = :rc"
            ),
            params,
        )
    else:
        session.execute(
            text(
                "INSERT INTO inventories (resource_provider_id, resource_class, total, reserved, "
                "min_unit, max_unit, step_size, allocation_ratio, used, free, created_at) "
                "VALUES (:id, :rc, :total, :reserved, :min_unit, :max_unit, :step_size, "
                ":allocation_ratio, :used, :capacity - :used, :now)"
            ),
            {**params, "used": used},
        )
