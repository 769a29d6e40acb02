"""The interface the conductor, the compute registration and the scheduler use: the functions of
placement's modules, in one namespace (``from novakit.placement import api as placement``)."""

from __future__ import annotations

from novakit.placement.aggregates import (
    add_provider_to_aggregate,
    ensure_aggregate,
    get_provider_aggregates,
    list_availability_zones,
    remove_provider_from_aggregate,
)
from novakit.placement.allocations import (
    claim_resources,
    get_allocations_for_consumer,
    get_usages,
    remove_allocations,
)
from novakit.placement.inventories import (
    InventoryInUse,
    InventorySpec,
    default_inventories,
    get_inventory,
    set_inventory,
)
from novakit.placement.providers import ProviderView, delete_provider, ensure_provider, get_provider
from novakit.placement.traits import get_traits, set_provider_disabled, set_traits

__all__ = [
    "InventoryInUse",
    "InventorySpec",
    "ProviderView",
    "add_provider_to_aggregate",
    "claim_resources",
    "default_inventories",
    "delete_provider",
    "ensure_aggregate",
    "ensure_provider",
    "get_allocations_for_consumer",
    "get_inventory",
    "get_provider",
    "get_provider_aggregates",
    "get_traits",
    "get_usages",
    "list_availability_zones",
    "remove_allocations",
    "remove_provider_from_aggregate",
    "set_inventory",
    "set_provider_disabled",
    "set_traits",
]
