"""A host's custom traits: the operator's qualitative facts about it (``CUSTOM_SSD``).

A flavor's ``trait:CUSTOM_SSD=required`` (or ``forbidden``) then places as Placement does:
the candidate query keeps (or drops) the hosts whose provider carries it. Only names of
Placement's custom form, ``CUSTOM_[A-Z0-9_]+``, are the operator's to set and remove,
and of those not the capability traits (``virt.driver.CAPABILITY_TRAITS``, such as
``CUSTOM_ADMIN_PASSWORD``): they are kept in step with what the host's driver reports
(``novakit.fleet.hosts.sync_capability_traits``) and ``COMPUTE_STATUS_DISABLED`` with the
host's service, so a hand-made change to them would be undone or would lie. Admin only
(``host:traits``). Re-exported by ``novakit.fleet.hosts``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from novakit import exceptions, policy
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.placement import traits as placement_traits
from novakit.placement.providers import find_provider

#: Placement's rule for the traits an operator makes
CUSTOM_TRAIT = re.compile(r"^CUSTOM_[A-Z0-9_]+$")


def _driver_owned(name: str) -> bool:
    from novakit.virt.driver import CAPABILITY_TRAITS

    return name in CAPABILITY_TRAITS.values() or name == placement_traits.COMPUTE_STATUS_DISABLED


def is_operators(name: str) -> bool:
    """Whether the trait is the operator's to set and remove (a custom trait no driver owns)."""
    return bool(CUSTOM_TRAIT.match(name)) and not _driver_owned(name)


def check_custom_traits(traits: Iterable[str]) -> set[str]:
    """The names, each refused unless it is a custom trait (the field and the rule named)."""
    names = set()
    for name in traits:
        if not isinstance(name, str):
            raise exceptions.ValidationError("trait", f"must be a string, got {name!r}")
        if _driver_owned(name):
            raise exceptions.ValidationError(
                "trait",
                f"{name} is owned by the host's driver (a capability trait); "
                "only the operator's CUSTOM_ traits are set by hand",
            )
        if len(name) > 255 or not CUSTOM_TRAIT.match(name):
            raise exceptions.ValidationError(
                "trait", f"{name!r} must match CUSTOM_[A-Z0-9_]+ (Placement's rule for custom traits)"
            )
        names.add(name)
    return names


def _existing_host(db: Database, host: str) -> None:
    with db.reader() as session:
        if find_provider(session, host) is None:
            raise exceptions.ComputeHostNotFound(host=host)


def custom_traits(db: Database, host: str) -> list[str]:
    """The host's custom traits, sorted."""
    _existing_host(db, host)
    return sorted(t for t in placement_traits.get_traits(db, host) if is_operators(t))


def _change(db: Database, ctx: RequestContext, host: str, traits: Iterable[str], add: bool) -> list[str]:
    policy.authorize(ctx, "host:traits")
    names = check_custom_traits(traits)
    _existing_host(db, host)
    if names:
        (placement_traits.add_traits if add else placement_traits.remove_traits)(db, host, names)
    return custom_traits(db, host)


def set_traits(db: Database, ctx: RequestContext, host: str, traits: Iterable[str]) -> list[str]:
    """Add custom traits to the host (those it has stay); its custom traits after."""
    return _change(db, ctx, host, traits, add=True)


def unset_traits(db: Database, ctx: RequestContext, host: str, traits: Iterable[str]) -> list[str]:
    """Remove custom traits from the host (one it has not is no error); its custom traits after."""
    return _change(db, ctx, host, traits, add=False)
