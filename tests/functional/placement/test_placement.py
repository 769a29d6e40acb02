"""Placement on both back ends: providers, inventories, claims with compare-and-swap, traits, aggregates."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.db.engine import Database
from novakit.placement import allocations
from novakit.placement import api as placement
from novakit.placement.candidates import CandidateRequest, get_allocation_candidates
from novakit.placement.inventories import InventorySpec


def host(db: Database, name: str, vcpus: int = 4, memory_mb: int = 2048, ratio: float = 1.0) -> str:
    provider = placement.ensure_provider(db, name)
    placement.set_inventory(
        db,
        name,
        {
            "VCPU": InventorySpec(total=vcpus, allocation_ratio=ratio),
            "MEMORY_MB": InventorySpec(total=memory_mb, reserved=512),
        },
    )
    return provider.uuid


@pytest.fixture
def no_injection() -> Iterator[None]:
    yield
    allocations.conflict_injector = None


def test_ensure_provider_is_idempotent_and_refuses_a_second_identity(db: Database) -> None:
    first = placement.ensure_provider(db, "c1", uuid="11111111-1111-1111-1111-111111111111")
    assert placement.ensure_provider(db, "c1") == first
    with pytest.raises(exceptions.Conflict):
        placement.ensure_provider(db, "c1", uuid="22222222-2222-2222-2222-222222222222")
    with pytest.raises(exceptions.ResourceProviderNotFound):
        placement.get_provider(db, "nope")


def test_set_inventory_bumps_generation_and_checks_the_callers_generation(db: Database) -> None:
    placement.ensure_provider(db, "c1")
    view = placement.set_inventory(db, "c1", {"VCPU": InventorySpec(total=8)})
    assert view.generation == 1
    assert placement.get_inventory(db, "c1")["VCPU"].max_unit == 8
    with pytest.raises(exceptions.ConcurrentUpdateDetected):
        placement.set_inventory(db, "c1", {"VCPU": InventorySpec(total=4)}, generation=0)
    assert placement.get_inventory(db, "c1")["VCPU"].total == 8


def test_default_inventories_follow_novas_defaults(conf) -> None:  # type: ignore[no-untyped-def]
    inv = placement.default_inventories(conf.placement, vcpus=8, memory_mb=16384, disk_gb=100)
    assert inv["VCPU"].capacity == 32
    assert inv["MEMORY_MB"].capacity == 16384 - 512
    assert inv["DISK_GB"].capacity == 100


def test_bad_inventory_and_bad_class_are_refused(db: Database) -> None:
    placement.ensure_provider(db, "c1")
    with pytest.raises(ValueError):
        InventorySpec(total=4, allocation_ratio=0)
    with pytest.raises(exceptions.ValidationError) as err:
        placement.set_inventory(db, "c1", {"GPU": InventorySpec(total=1)})
    assert "CUSTOM_" in str(err.value)


def test_claim_fits_exactly_to_capacity_and_no_further(db: Database) -> None:
    uuid = host(db, "c1", vcpus=2, memory_mb=4608, ratio=2.0)  # 4 VCPU, 4096 MB
    assert placement.claim_resources(db, "a", uuid, {"VCPU": 2, "MEMORY_MB": 2048}, "p", "u")
    assert placement.claim_resources(db, "b", uuid, {"VCPU": 2, "MEMORY_MB": 2048}, "p", "u")
    assert not placement.claim_resources(db, "c", uuid, {"VCPU": 1, "MEMORY_MB": 1}, "p", "u")
    assert placement.get_usages(db, "c1") == {"VCPU": 4, "MEMORY_MB": 4096}
    assert placement.get_provider(db, "c1").generation == 1 + 2  # inventory + two claims


def test_claiming_again_replaces_and_moves_allocations(db: Database) -> None:
    one, two = host(db, "c1"), host(db, "c2")
    assert placement.claim_resources(db, "a", one, {"VCPU": 2}, "p", "u")
    assert placement.claim_resources(db, "a", one, {"VCPU": 3}, "p", "u")
    assert placement.get_usages(db, "c1")["VCPU"] == 3
    assert placement.claim_resources(db, "a", two, {"VCPU": 1}, "p", "u")
    assert placement.get_allocations_for_consumer(db, "a") == {two: {"VCPU": 1}}
    assert placement.get_usages(db, "c1")["VCPU"] == 0


def test_remove_allocations_is_idempotent(db: Database) -> None:
    uuid = host(db, "c1")
    placement.claim_resources(db, "a", uuid, {"VCPU": 1, "MEMORY_MB": 10}, "p", "u")
    assert placement.remove_allocations(db, "a") == 2
    assert placement.remove_allocations(db, "a") == 0
    assert placement.get_allocations_for_consumer(db, "a") == {}


@pytest.mark.parametrize("resources", [{"VCPU": 0}, {"VCPU": -1}, {}, {"BOGUS": 1}])
def test_zero_negative_empty_or_unknown_amounts_are_refused(db: Database, resources: dict[str, int]) -> None:
    uuid = host(db, "c1")
    with pytest.raises(exceptions.ValidationError):
        placement.claim_resources(db, "a", uuid, resources, "p", "u")
    assert placement.get_allocations_for_consumer(db, "a") == {}


def test_removing_a_class_in_use_is_refused_but_shrinking_is_allowed(db: Database) -> None:
    uuid = host(db, "c1", vcpus=4)
    placement.claim_resources(db, "a", uuid, {"VCPU": 3, "MEMORY_MB": 100}, "p", "u")
    with pytest.raises(placement.InventoryInUse) as err:
        placement.set_inventory(db, "c1", {"VCPU": InventorySpec(total=4)})
    assert "MEMORY_MB" in str(err.value)
    placement.set_inventory(
        db, "c1", {"VCPU": InventorySpec(total=2), "MEMORY_MB": InventorySpec(total=2048, reserved=512)}
    )
    assert not placement.claim_resources(db, "b", uuid, {"VCPU": 1}, "p", "u")


def test_injected_generation_conflicts_are_retried_then_succeed(db: Database, no_injection: None) -> None:
    uuid = host(db, "c1")
    injected = []

    def conflict_twice(session: Session, provider_id: int) -> None:
        if len(injected) < 2:
            injected.append(provider_id)
            session.execute(
                text("UPDATE resource_providers SET generation = generation + 1 WHERE id = :id"),
                {"id": provider_id},
            )

    allocations.conflict_injector = conflict_twice
    assert placement.claim_resources(db, "a", uuid, {"VCPU": 1}, "p", "u")
    assert len(injected) == 2
    assert placement.get_usages(db, "c1")["VCPU"] == 1


def test_a_conflict_that_never_clears_ends_in_concurrent_update_detected(
    db: Database, no_injection: None
) -> None:
    uuid = host(db, "c1")
    before = placement.get_provider(db, "c1").generation

    def always(session: Session, provider_id: int) -> None:
        session.execute(
            text("UPDATE resource_providers SET generation = generation + 1 WHERE id = :id"),
            {"id": provider_id},
        )

    allocations.conflict_injector = always
    with pytest.raises(exceptions.ConcurrentUpdateDetected) as err:
        placement.claim_resources(db, "a", uuid, {"VCPU": 1}, "p", "u", retries=3)
    assert "4 attempts" in str(err.value)
    allocations.conflict_injector = None
    assert placement.get_allocations_for_consumer(db, "a") == {}
    assert placement.get_provider(db, "c1").generation == before  # the whole transaction rolled back


def test_candidates_honour_capacity_traits_aggregates_exclusions_and_limit(db: Database) -> None:
    for n in range(5):
        host(db, f"c{n}")
    placement.set_traits(db, "c1", ["CUSTOM_SSD"])
    placement.set_traits(db, "c2", ["CUSTOM_SSD", "CUSTOM_SLOW"])
    agg = placement.ensure_aggregate(db, "rack1", metadata={"ssd": "true"})
    placement.add_provider_to_aggregate(db, "c2", "rack1")
    placement.add_provider_to_aggregate(db, "c3", "rack1")
    placement.claim_resources(db, "big", placement.get_provider(db, "c0").uuid, {"VCPU": 4}, "p", "u")

    with db.reader() as session:
        ids = {r[0]: r[1] for r in session.execute(text("SELECT name, id FROM traits"))}

        def names(**kw: object) -> list[str]:
            return [c.name for c in get_allocation_candidates(session, CandidateRequest(**kw))]  # type: ignore[arg-type]

        assert names(resources={"VCPU": 1}) == ["c1", "c2", "c3", "c4"]  # c0 is full
        assert names(resources={"VCPU": 1}, limit=2) == ["c1", "c2"]
        assert names(resources={"VCPU": 1}, required_trait_ids=[ids["CUSTOM_SSD"]]) == ["c1", "c2"]
        assert names(
            resources={"VCPU": 1},
            required_trait_ids=[ids["CUSTOM_SSD"]],
            forbidden_trait_ids=[ids["CUSTOM_SLOW"]],
        ) == ["c1"]
        assert names(resources={"VCPU": 1}, member_of=[[agg.id]]) == ["c2", "c3"]
        assert names(resources={"VCPU": 1}, not_member_of=[agg.id], exclude_hosts=["c4"]) == ["c1"]
        assert names(resources={"VCPU": 5}) == []  # larger than max_unit everywhere


def test_a_host_is_in_one_availability_zone_only(db: Database) -> None:
    host(db, "c1")
    placement.ensure_aggregate(db, "az-a", availability_zone="zone-a")
    placement.ensure_aggregate(db, "az-b", availability_zone="zone-b")
    placement.add_provider_to_aggregate(db, "c1", "az-a")
    placement.add_provider_to_aggregate(db, "c1", "az-a")  # idempotent
    with pytest.raises(exceptions.Conflict):
        placement.add_provider_to_aggregate(db, "c1", "az-b")
    assert placement.list_availability_zones(db) == ["zone-a", "zone-b"]
    assert [a.name for a in placement.get_provider_aggregates(db, "c1")] == ["az-a"]


def usage_cache_drift(db: Database) -> list[tuple[str, str, int, int, int, int]]:
    """Inventory rows whose cached ``used``/``free`` disagree with SUM(allocations) and the capacity."""
    with db.reader() as session:
        rows = session.execute(
            text(
                "SELECT rp.name, i.resource_class, i.used, i.free, i.total, i.reserved, i.allocation_ratio, "
                "(SELECT COALESCE(SUM(a.used), 0) FROM allocations a WHERE a.resource_provider_id = "
                "i.resource_provider_id AND a.resource_class = i.resource_class) "
                "FROM inventories i JOIN resource_providers rp ON rp.id = i.resource_provider_id"
            )
        ).all()
    return [
        (name, rc, used, free, real, int((total - reserved) * ratio) - real)
        for name, rc, used, free, total, reserved, ratio, real in rows
        if used != real or free != int((total - reserved) * ratio) - real
    ]


def test_usage_cache_follows_every_writer_of_allocations_and_inventories(db: Database) -> None:
    c1, c2 = host(db, "c1", vcpus=8), host(db, "c2", vcpus=8)
    placement.claim_resources(db, "a", c1, {"VCPU": 3, "MEMORY_MB": 256}, "p", "u")
    placement.claim_resources(db, "b", c1, {"VCPU": 2}, "p", "u")
    placement.claim_resources(db, "a", c2, {"VCPU": 1}, "p", "u")  # moves "a": c1 frees 3 VCPU, 256 MB
    placement.set_inventory(
        db, "c1", {"VCPU": InventorySpec(total=6, reserved=1), "MEMORY_MB": InventorySpec(total=1024)}
    )
    assert placement.remove_allocations(db, "b") == 1
    placement.claim_resources(db, "c", c1, {"VCPU": 5}, "p", "u")
    # A row written around placement's functions is counted too: the triggers see every write.
    with db.writer() as session:
        provider_id = session.execute(
            text("SELECT id FROM resource_providers WHERE name = 'c2'")
        ).scalar_one()
        session.execute(
            text(
                "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class, used, "
                "created_at) "
                "VALUES (:p, 'raw', 'MEMORY_MB', 100, CURRENT_TIMESTAMP)"
            ),
            {"p": provider_id},
        )
        session.execute(text("UPDATE allocations SET used = 300 WHERE consumer_id = 'raw'"))
    assert usage_cache_drift(db) == []
    with db.reader() as session:
        cached = dict(
            session.execute(
                text(
                    "SELECT i.resource_class, i.free FROM inventories i JOIN resource_providers rp "
                    "ON rp.id = i.resource_provider_id WHERE rp.name = 'c1'"
                )
            ).all()
        )
    assert cached == {"VCPU": 0, "MEMORY_MB": 1024}  # (6 - 1) * 1.0 - 5, and nothing of MEMORY_MB used
    assert not placement.claim_resources(db, "d", c1, {"VCPU": 1}, "p", "u")


def test_candidates_ordered_by_free_capacity_walk_from_most_or_least_free(db: Database) -> None:
    for n in range(5):
        host(db, f"c{n}", vcpus=8)
    for n, used in enumerate([2, 7, 0, 5, 8]):  # free VCPU: 6, 1, 8, 3, 0
        if used:
            placement.claim_resources(
                db, f"x{n}", placement.get_provider(db, f"c{n}").uuid, {"VCPU": used}, "p", "u"
            )
    with db.reader() as session:

        def names(**kw: object) -> list[str]:
            req = CandidateRequest(resources={"VCPU": 2}, order_by="VCPU", **kw)  # type: ignore[arg-type]
            return [c.name for c in get_allocation_candidates(session, req)]

        assert names() == ["c2", "c0", "c3"]  # spread: most free first; c1 and c4 cannot take 2
        assert names(descending=False) == ["c3", "c0", "c2"]  # stack: least free that still fits
        assert names(limit=1) == ["c2"]
        assert names(descending=False, exclude_hosts=["c3"], limit=1) == ["c0"]
