"""Flavors: the sizes servers are booted with. Only admins may change them."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from sqlalchemy import bindparam, or_, select
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.compute import schemas
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Flavor
from novakit.host.messages import FlavorSpec


def view(f: Flavor) -> dict[str, Any]:
    return {
        "id": f.flavorid,
        "name": f.name,
        "vcpus": f.vcpus,
        "ram": f.memory_mb,
        "disk": f.root_gb,
        "ephemeral": f.ephemeral_gb,
        "swap": f.swap,
        "extra_specs": dict(f.extra_specs or {}),
        "is_public": f.is_public,
        "description": f.description,
    }


# Built once: every boot looks its flavor up, and building the query costs more than running it.
_BY_REF = select(Flavor).where(
    or_(Flavor.flavorid == bindparam("ref"), Flavor.name == bindparam("ref")), Flavor.disabled.is_(False)
)


def get(session: Session, ref: str) -> Flavor:
    row = session.execute(_BY_REF, {"ref": ref}).scalar_one_or_none()
    if row is None:
        raise exceptions.FlavorNotFound(flavor_id=ref)
    return row


def create(
    db: Database, ctx: RequestContext, data: dict[str, Any], *, dry_run: bool = False
) -> dict[str, Any]:
    """Create a flavor. ``dry_run`` (check mode): every check, in a read, nothing written; the
    flavor is returned as it would be made (its id, when not given, is only an example)."""
    policy.authorize(ctx, "flavor:create")
    req = schemas.parse(schemas.FlavorCreate, data)

    def write(session: Session) -> dict[str, Any]:
        flavorid = req.flavorid or str(uuidlib.uuid4())
        clash = session.execute(
            select(Flavor).where(or_(Flavor.name == req.name, Flavor.flavorid == flavorid))
        ).scalar_one_or_none()
        if clash is not None:
            raise exceptions.Conflict(reason=f"a flavor named {req.name!r} or with id {flavorid!r} exists")
        row = Flavor(flavorid=flavorid, **req.model_dump(exclude={"flavorid"}))
        if dry_run:
            return view(row)
        session.add(row)
        session.flush()
        return view(row)

    return db.run_or_dry_run(write, dry_run=dry_run)


def list_flavors(
    db: Database,
    ctx: RequestContext | None = None,
    *,
    which: str = "all",
    min_ram: int = 0,
    min_disk: int = 0,
    limit: int | None = None,
    marker: str | None = None,
) -> list[dict[str, Any]]:
    """The flavors, as Nova's ``GET /flavors`` with ``is_public``: ``public``, ``private`` or
    ``all``. Asked for a caller (``ctx``), private flavors are listed only to those allowed
    ``flavor:list_private`` (no flavor access lists here: a member sees the public ones); the
    library's own look-ups (no ``ctx``) see every flavor.

    Nova's ``minRam``/``minDisk`` (at least that much memory, root disk) and pages: at most
    ``limit`` flavors after the one whose id is ``marker`` (``MarkerNotFound`` when it is not
    listed), in the listing's order (memory, then id)."""
    if which not in ("public", "private", "all"):
        raise exceptions.ValidationError("is_public", f"{which!r} is not one of public, private, all")
    if which != "public" and ctx is not None:
        policy.authorize(ctx, "flavor:list_private")
    stmt = select(Flavor).where(
        Flavor.disabled.is_(False), Flavor.memory_mb >= min_ram, Flavor.root_gb >= min_disk
    )
    if which != "all":
        stmt = stmt.where(Flavor.is_public.is_(which == "public"))
    with db.reader() as session:
        rows = [view(f) for f in session.execute(stmt.order_by(Flavor.memory_mb, Flavor.flavorid)).scalars()]
    if marker is not None:
        at = next((i for i, f in enumerate(rows) if f["id"] == marker), None)
        if at is None:
            raise exceptions.MarkerNotFound(f"Invalid marker: {marker} is not a flavor of this listing")
        rows = rows[at + 1 :]
    return rows if limit is None else rows[:limit]


def show(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any]:
    """One flavor by name or id; a private one looks like no flavor to a caller not allowed
    ``flavor:list_private``."""
    with db.reader() as session:
        row = get(session, ref)
        if not row.is_public and not policy.allowed(ctx, "flavor:list_private"):
            raise exceptions.FlavorNotFound(flavor_id=ref)
        return view(row)


def delete(db: Database, ctx: RequestContext, ref: str, *, dry_run: bool = False) -> None:
    """Delete a flavor; servers keep their own copy of it, as in Nova. ``dry_run``: the checks only."""
    policy.authorize(ctx, "flavor:delete")

    def write(session: Session) -> None:
        row = get(session, ref)
        if not dry_run:
            session.delete(row)

    db.run_or_dry_run(write, dry_run=dry_run)


def snapshot(f: Flavor) -> dict[str, Any]:
    """What an instance keeps of its flavor."""
    return {
        "flavorid": f.flavorid,
        "name": f.name,
        "vcpus": f.vcpus,
        "memory_mb": f.memory_mb,
        "root_gb": f.root_gb,
        "ephemeral_gb": f.ephemeral_gb,
        "swap": f.swap,
        "extra_specs": dict(f.extra_specs or {}),
    }


def spec(snap: dict[str, Any], defaults: dict[str, int] | None = None) -> FlavorSpec:
    """The flavor a compute host and the scheduler are handed, from an instance's snapshot.

    ``defaults``: what an older record lacks in its snapshot (its instance's own columns)."""
    have = {**(defaults or {}), **{k: v for k, v in snap.items() if v is not None}}
    return FlavorSpec(
        name=str(have.get("name", "")),
        vcpus=int(have.get("vcpus", 0)),
        memory_mb=int(have.get("memory_mb", 0)),
        root_gb=int(have.get("root_gb", 0)),
        ephemeral_gb=int(have.get("ephemeral_gb", 0)),
        swap=int(have.get("swap", 0)),
        extra_specs={k: str(v) for k, v in (have.get("extra_specs") or {}).items()},
    )
