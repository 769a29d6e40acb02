"""Flavors: the sizes servers are booted with. Only admins may change them.

A flavor is public (every project lists, shows and boots it) or private: then only the callers
allowed ``flavor:list_private`` (the admins) and the projects given access to it (Nova's flavor
access, ``add_access``) see it; to anyone else it looks like no flavor at all. ``usable`` is
that rule for a boot or a resize, ``show`` and ``list_flavors`` for the reads.

Extra specs are a flavor's free-form ``key: value`` hints to the scheduler and the hosts, kept
as Nova keeps them: keys of 1 to 255 letters, digits, ``-_:.`` and spaces, values strings of at
most 255 characters (a number given is kept as its text).
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from sqlalchemy import bindparam, exists, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.compute import schemas
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Flavor, FlavorProject
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


def get(session: Session, ref: str, *, lock: bool = False) -> Flavor:
    """A flavor by id or name, whoever asks (the library's own look-ups). ``lock``: the row is
    held until the transaction ends (a read-modify-write of its extra specs or access)."""
    stmt = _BY_REF.with_for_update() if lock else _BY_REF
    row = session.execute(stmt, {"ref": ref}).scalar_one_or_none()
    if row is None:
        raise exceptions.FlavorNotFound(flavor_id=ref)
    return row


def _has_access(project_id: str) -> Any:
    """The condition "``project_id`` was given access to the flavor" (a private flavor's rows)."""
    return exists().where(FlavorProject.flavor_id == Flavor.id, FlavorProject.project_id == project_id)


def usable(session: Session, ctx: RequestContext, ref: str) -> Flavor:
    """The flavor ``ctx`` may see and boot (or resize to): a public one, or a private one its
    project was given access to, or any for a caller allowed ``flavor:list_private``; any
    other looks like no flavor (``FlavorNotFound``), as Nova looks a boot's flavor up."""
    row = get(session, ref)
    if row.is_public or policy.allowed(ctx, "flavor:list_private"):
        return row
    given = select(FlavorProject.id).where(
        FlavorProject.flavor_id == row.id, FlavorProject.project_id == ctx.project_id
    )
    if not ctx.project_id or session.execute(given).first() is None:
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
    ``all``. Asked for a caller (``ctx``), ``public`` lists the public flavors and the private
    ones the caller's project was given access to (Nova's default listing), and only callers
    allowed ``flavor:list_private`` may ask for the others; the library's own look-ups (no
    ``ctx``) see every flavor.

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
    if which == "public" and ctx is not None and ctx.project_id:
        stmt = stmt.where(or_(Flavor.is_public.is_(True), _has_access(ctx.project_id)))
    elif which != "all":
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
    """One flavor by name or id, if ``ctx`` may see it (``usable``)."""
    with db.reader() as session:
        return view(usable(session, ctx, ref))


# ---------------------------------------------------------------- extra specs

#: Nova's extra spec key (its API's pattern)
_SPEC_KEY = re.compile(r"[A-Za-z0-9_:. -]{1,255}")
MAX_SPEC_VALUE = 255


def check_extra_specs(specs: Any) -> dict[str, str]:
    """``specs`` as Nova takes them: an object of keys (``_SPEC_KEY``) to strings or numbers of
    at most ``MAX_SPEC_VALUE`` characters; the values as the text they are kept as."""
    if not isinstance(specs, dict):
        raise exceptions.ValidationError("extra_specs", "must be an object of keys to values")
    checked: dict[str, str] = {}
    for key, value in specs.items():
        if not isinstance(key, str) or _SPEC_KEY.fullmatch(key) is None:
            raise exceptions.ValidationError(
                "extra_specs", "a key is 1 to 255 letters, digits, spaces and the characters -_:."
            )
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise exceptions.ValidationError(f"extra_specs.{key}", "must be a string or a number")
        text = str(value)
        if len(text) > MAX_SPEC_VALUE:
            raise exceptions.ValidationError(
                f"extra_specs.{key}", f"must be at most {MAX_SPEC_VALUE} characters long"
            )
        checked[key] = text
    return checked


def set_extra_specs(
    db: Database, ctx: RequestContext, ref: str, specs: Any, *, dry_run: bool = False
) -> dict[str, str]:
    """Set some of a flavor's extra specs (others are kept); the flavor's specs after it.
    Servers keep the specs they were built with. ``dry_run``: the checks only."""
    policy.authorize(ctx, "flavor:extra_specs")
    checked = check_extra_specs(specs)

    def write(session: Session) -> dict[str, str]:
        row = get(session, ref, lock=not dry_run)
        merged = {**(row.extra_specs or {}), **checked}
        if not dry_run:
            row.extra_specs = merged
        return merged

    return db.run_or_dry_run(write, dry_run=dry_run)


def unset_extra_spec(db: Database, ctx: RequestContext, ref: str, key: str, *, dry_run: bool = False) -> None:
    """Remove one of a flavor's extra specs (``FlavorExtraSpecsNotFound`` when it has none of
    that key). ``dry_run``: the checks only."""
    policy.authorize(ctx, "flavor:extra_specs")

    def write(session: Session) -> None:
        row = get(session, ref, lock=not dry_run)
        specs = dict(row.extra_specs or {})
        if key not in specs:
            raise exceptions.FlavorExtraSpecsNotFound(flavor_id=ref, key=key)
        del specs[key]
        if not dry_run:
            row.extra_specs = specs

    db.run_or_dry_run(write, dry_run=dry_run)


def show_extra_spec(db: Database, ctx: RequestContext, ref: str, key: str) -> str:
    """One extra spec of a flavor ``ctx`` may see."""
    found = show(db, ctx, ref)["extra_specs"]
    if key not in found:
        raise exceptions.FlavorExtraSpecsNotFound(flavor_id=ref, key=key)
    return str(found[key])


# ---------------------------------------------------------------- access to private flavors


def _access(session: Session, row: Flavor) -> list[dict[str, str]]:
    found = session.execute(
        select(FlavorProject.project_id).where(FlavorProject.flavor_id == row.id).order_by(FlavorProject.id)
    ).scalars()
    return [{"flavor_id": row.flavorid, "project_id": p} for p in found]


def list_access(db: Database, ctx: RequestContext, ref: str) -> list[dict[str, str]]:
    """The projects given access to a private flavor (``flavor_id``, ``project_id`` each); a
    public flavor has no such list (every project has access): ``NotFound``, as Nova answers."""
    policy.authorize(ctx, "flavor:access")
    with db.reader() as session:
        row = get(session, ref)
        if row.is_public:
            raise exceptions.NotFound(f"Flavor {ref} is public: every project has access, there is no list.")
        return _access(session, row)


def add_access(
    db: Database,
    ctx: RequestContext,
    ref: str,
    project_id: str,
    *,
    dry_run: bool = False,
    known_project: Callable[[str], bool] | None = None,
) -> list[dict[str, str]]:
    """Give ``project_id`` access to a private flavor (``FlavorAccessExists`` when it has it; a
    public flavor takes none: ``Conflict``); the flavor's access list after it. ``known_project``:
    as ``quota.apply``'s (a project the identity service does not know is refused)."""
    from novakit.quota import check_known_project, check_project_id

    policy.authorize(ctx, "flavor:access")
    check_project_id(project_id)
    check_known_project(project_id, known_project, "tenant")

    def write(session: Session) -> list[dict[str, str]]:
        row = get(session, ref, lock=not dry_run)
        if row.is_public:
            raise exceptions.Conflict(
                reason=f"flavor {ref} is public: access is given to private flavors only"
            )
        listed = _access(session, row)
        if any(a["project_id"] == project_id for a in listed):
            raise exceptions.FlavorAccessExists(flavor_id=ref, project_id=project_id)
        if dry_run:
            return [*listed, {"flavor_id": row.flavorid, "project_id": project_id}]
        session.add(FlavorProject(flavor_id=row.id, project_id=project_id))
        session.flush()
        return _access(session, row)

    try:
        return db.run_or_dry_run(write, dry_run=dry_run)
    except IntegrityError:  # given by another call between the check and the insert
        raise exceptions.FlavorAccessExists(flavor_id=ref, project_id=project_id) from None


def remove_access(
    db: Database, ctx: RequestContext, ref: str, project_id: str, *, dry_run: bool = False
) -> list[dict[str, str]]:
    """Take ``project_id``'s access to a flavor away (``FlavorAccessNotFound`` when it has none
    given); the flavor's access list after it. Its servers keep their copy of the flavor."""
    policy.authorize(ctx, "flavor:access")

    def write(session: Session) -> list[dict[str, str]]:
        row = get(session, ref, lock=not dry_run)
        given = session.execute(
            select(FlavorProject).where(
                FlavorProject.flavor_id == row.id, FlavorProject.project_id == project_id
            )
        ).scalar_one_or_none()
        if given is None:
            raise exceptions.FlavorAccessNotFound(flavor_id=ref, project_id=project_id)
        if dry_run:
            return [a for a in _access(session, row) if a["project_id"] != project_id]
        session.delete(given)
        session.flush()
        return _access(session, row)

    return db.run_or_dry_run(write, dry_run=dry_run)


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
