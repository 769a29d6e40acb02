"""How a create request's servers are named, and what a wanted count of them means.

One rule for one or many, used by ``API.create_servers`` (the CLI's ``server
create --count``, the ``server`` module, the boot playbook): a request with a
count names its servers ``NAME-1`` ... ``NAME-N`` for any N, 1 included; a
request without one makes exactly one server named ``NAME``. So ``count: 1``
and ``count: 2`` are the same family, and scaling from one to two adds
``NAME-2`` beside ``NAME-1`` instead of renaming anything.

A count is declarative where a caller asks for it to be (``plan``): it is the
wanted number of servers of that name. The numbers 1..N that are missing are
created (the lowest first, gaps filled) and the servers numbered above N are
deleted, the highest first. A server named plain ``NAME``, or ``NAME-x`` with
x not a number, is no member of the family and is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


def names_for(name: str, count: int | None) -> list[str]:
    """The servers' names: ``name`` without a count, ``name-1`` ... ``name-N`` with one."""
    if count is None:
        return [name]
    return [f"{name}-{i}" for i in range(1, count + 1)]


def number_of(name: str, candidate: str) -> int | None:
    """``candidate``'s number in ``name``'s family (``web-3`` of ``web``: 3), None if it is none.

    ``web-03`` and ``web-0`` are not members: no name of the rule looks like them.
    """
    match = re.fullmatch(re.escape(name) + r"-([1-9][0-9]*)", candidate)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class ScalePlan:
    """What it takes to have exactly ``count`` servers of a name."""

    wanted: list[str]  # name-1 .. name-N, in order
    missing: list[str]  # of those, the ones to create, lowest first
    extra: list[str]  # the live members numbered above N, to delete, highest first

    @property
    def existing(self) -> list[str]:
        return [n for n in self.wanted if n not in self.missing]


def plan(name: str, count: int, live: Iterable[str]) -> ScalePlan:
    """From the live servers' names, what to create and delete so that ``count`` of ``name`` exist."""
    members = {n: k for n in live if (k := number_of(name, n)) is not None}
    wanted = names_for(name, count)
    missing = [n for n in wanted if n not in members]
    extra = sorted((n for n, k in members.items() if k > count), key=lambda n: -members[n])
    return ScalePlan(wanted=wanted, missing=missing, extra=extra)


def count_of(req: Any) -> int | None:
    """The count a create request (``schemas.ServerCreate``) asked for; None when it asked for none.

    ``max_count`` is the count; Nova's ``min_count`` alone asks for that many too.
    """
    given = req.model_fields_set
    if "max_count" in given and req.max_count is not None:
        return int(req.max_count)
    if "min_count" in given:
        return int(req.min_count)
    return None


def hostname_for(name: str) -> str:
    """An RFC 952 hostname from a display name, as Nova sanitizes it."""
    host = re.sub(r"[^\w.-]+", "-", name.lower().replace("_", "-"))
    host = re.sub(r"[.-]{2,}", "-", host).strip(".-")
    return host[:63] or "server"
