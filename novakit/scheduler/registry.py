"""What the filter and weigher registries share: the check that a configured name is one of theirs."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from novakit import exceptions


def check_names(
    option: str, names: Iterable[str], known: Collection[str], noun: str, *, listed: Sequence[str] = ()
) -> None:
    """ConfigError naming the unknown ``names`` of ``option`` and listing the known ones (after the
    words ``listed`` first, such as "all"), so a typo cannot silently switch a ``noun`` off."""
    unknown = [name for name in names if name not in known]
    if unknown:
        listing = ", ".join([*listed, *sorted(known)])
        raise exceptions.ConfigError(
            option=option, reason=f"unknown {noun}(s) {', '.join(unknown)}; known {noun}s: {listing}"
        )
