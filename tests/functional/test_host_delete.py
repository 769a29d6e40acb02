"""Deleting a host against a boot that claims on it: the claim and the delete cannot both win."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import pytest

from novakit import exceptions
from novakit.db.engine import Database
from novakit.fleet import hosts
from novakit.placement import allocations, providers
from tests.functional.cloud import Cloud

SMALL = {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}


def _host_rows(db: Database, host: str) -> dict[str, int]:
    from sqlalchemy import text

    with db.reader() as session:
        return {
            table: session.execute(
                text(f"SELECT COUNT(*) FROM {table} WHERE {column} = :h{live}"), {"h": host}
            ).scalar_one()
            for table, column, live in (
                ("compute_nodes", "host", " AND deleted = 0"),
                ("services", "host", " AND deleted = 0"),
                ("resource_providers", "name", ""),
            )
        }


def test_a_claim_without_a_server_on_the_host_yet_keeps_it(cloud: Cloud) -> None:
    """A boot in flight: its claim is written, its server not yet on the host."""
    provider = providers.get_provider(cloud.db, "compute-1")
    consumer = str(uuidlib.uuid4())
    assert allocations.claim_resources(cloud.db, consumer, provider.uuid, SMALL, "p", "u")
    with pytest.raises(
        exceptions.HostInUse,
        match="compute-1 cannot be deleted: provider compute-1 still holds 3 allocation rows",
    ):
        hosts.delete_host(cloud.db, cloud.admin, "compute-1")
    assert _host_rows(cloud.db, "compute-1") == {"compute_nodes": 1, "services": 1, "resource_providers": 1}
    allocations.remove_allocations(cloud.db, consumer)
    hosts.delete_host(cloud.db, cloud.admin, "compute-1")
    assert _host_rows(cloud.db, "compute-1") == {"compute_nodes": 0, "services": 0, "resource_providers": 0}


def test_a_claim_after_the_delete_finds_no_provider(cloud: Cloud) -> None:
    provider = providers.get_provider(cloud.db, "compute-2")
    hosts.delete_host(cloud.db, cloud.admin, "compute-2")
    with pytest.raises(exceptions.ResourceProviderNotFound):
        allocations.claim_resources(cloud.db, str(uuidlib.uuid4()), provider.uuid, SMALL, "p", "u")
    with cloud.db.writer() as session:  # a claim that had looked the provider up before the delete
        assert not allocations.claim_in_session(
            session, str(uuidlib.uuid4()), provider.id, SMALL, "p", "u"
        ).claimed


def test_a_claim_between_the_deletes_read_and_its_swap_wins(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL only: SQLite's writer holds the write lock from its first read, so a claim
    cannot land inside the delete's transaction there."""
    if cloud.db.is_sqlite:
        pytest.skip("SQLite serialises writers: this interleaving cannot happen")
    read = providers.find_provider
    claimed: list[str] = []

    def read_then_a_boot_claims(session: Any, name: str) -> Any:
        seen = read(session, name)
        if not claimed:  # another scheduler's claim commits now, after the delete read the provider
            claimed.append(str(uuidlib.uuid4()))
            assert allocations.claim_resources(cloud.db, claimed[0], seen.uuid, SMALL, "p", "u")
        return seen

    monkeypatch.setattr(providers, "find_provider", read_then_a_boot_claims)
    with pytest.raises(exceptions.HostInUse, match="changed while it was being deleted"):
        hosts.delete_host(cloud.db, cloud.admin, "compute-3")
    assert _host_rows(cloud.db, "compute-3") == {"compute_nodes": 1, "services": 1, "resource_providers": 1}
    assert allocations.get_allocations_for_consumer(cloud.db, claimed[0])  # the claim stands
