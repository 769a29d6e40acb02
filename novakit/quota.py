"""Project quotas (instances, cores, ram), counted from placement as Nova's count_usage_from_placement,
and Cinder's (volumes, gigabytes), counted from the live volumes.

Usage: consumers holding VCPU or MEMORY_MB are instances, their VCPU is cores, their
MEMORY_MB is ram (a volume's claim holds DISK_GB only, so it counts as no instance);
live volume rows are volumes and their sizes gigabytes. Limits: a row in ``quotas`` for the project, else the
configured default (``QuotaConfig``); -1 means unlimited.

Two checks, as in Nova: ``check_quota`` before anything is created (a cheap early
"no"), and the recheck inside the scheduler's claim transaction. The recheck is
what makes concurrent requests unable to exceed a quota together: it takes a
per-project lock (PostgreSQL: ``pg_advisory_xact_lock`` on a hash of the project
id; SQLite: the ``BEGIN IMMEDIATE`` writer lock already serialises writers), so
the count it reads includes every claim committed before it and none can
commit between its count and its own claims. A volume is rechecked the same way, in the
transaction that inserts its row (``recheck``): the count includes the new row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database

RESOURCES = (
    "instances",
    "cores",
    "ram",
    "volumes",
    "gigabytes",
    "security_groups",
    "security_group_rules",
    "key_pairs",
)
#: the resources counted from the volumes table rather than from placement
VOLUME_RESOURCES = ("volumes", "gigabytes")
#: Neutron's, counted from the security group tables (``novakit.network.security_groups``)
SECURITY_GROUP_RESOURCES = ("security_groups", "security_group_rules")
#: Nova's per-user resources, counted for one user (``check_user_count``), not per project
USER_RESOURCES = ("key_pairs",)
UNLIMITED = -1


def per_instance(resources: dict[str, int]) -> dict[str, int]:
    """What one instance claiming ``resources`` (placement classes) counts against a quota."""
    return {"instances": 1, "cores": resources.get("VCPU", 0), "ram": resources.get("MEMORY_MB", 0)}


def _session_of(db_or_session: Database | Session) -> tuple[Any, bool]:
    if isinstance(db_or_session, Database):
        return db_or_session.reader(), True
    return db_or_session, False


def is_postgresql(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def lock_project(session: Session, project_id: str) -> None:
    """Serialise quota-counted claims of one project until this transaction ends."""
    if is_postgresql(session):
        key = int.from_bytes(hashlib.sha256(project_id.encode()).digest()[:8], "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
    # SQLite: the writer transaction began with BEGIN IMMEDIATE and holds the database write lock.


_LIMITS = text("SELECT resource, hard_limit FROM quotas WHERE project_id = :p")


def get_limits(session: Session, conf: Config, project_id: str) -> dict[str, int]:
    limits = default_limits(conf)
    for resource, limit in session.execute(_LIMITS, {"p": project_id}):
        if resource in limits:
            limits[resource] = int(limit)
    return limits


# A migration holding its source host's claim during a move (``novakit.moves``) is no second
# server: it counts for cores and RAM (both hosts' claims are real, as in Nova during a resize)
# but not as an instance.
_USAGE = (
    "SELECT COUNT(DISTINCT CASE WHEN resource_class IN ('VCPU', 'MEMORY_MB') "
    "AND consumer_id NOT IN (SELECT uuid FROM migrations) THEN consumer_id END), "
    "COALESCE(SUM(CASE WHEN resource_class = 'VCPU' THEN used ELSE 0 END), 0), "
    "COALESCE(SUM(CASE WHEN resource_class = 'MEMORY_MB' THEN used ELSE 0 END), 0) "
    "FROM allocations WHERE project_id = :p"
)


_VOLUME_USAGE = text(
    "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM volumes WHERE project_id = :p AND deleted = 0"
)


_SECURITY_GROUP_USAGE = text(
    "SELECT (SELECT COUNT(*) FROM security_groups WHERE project_id = :p), "
    "(SELECT COUNT(*) FROM security_group_rules WHERE project_id = :p)"
)


def count_usage(
    session: Session,
    project_id: str,
    exclude_consumers: Iterable[str] = (),
    *,
    volumes: bool = False,
    security_groups: bool = False,
) -> dict[str, int]:
    """What the project holds now; ``exclude_consumers`` are being (re)claimed and counted by the caller.

    ``volumes``: count volumes and gigabytes too (0 otherwise: an instance's claim does not need them);
    ``security_groups``: the project's groups and rules likewise.
    """
    counted = {"volumes": 0, "gigabytes": 0, "security_groups": 0, "security_group_rules": 0}
    if volumes:
        row = session.execute(_VOLUME_USAGE, {"p": project_id}).one()
        counted.update(volumes=int(row[0]), gigabytes=int(row[1]))
    if security_groups:
        row = session.execute(_SECURITY_GROUP_USAGE, {"p": project_id}).one()
        counted.update(security_groups=int(row[0]), security_group_rules=int(row[1]))
    excluded = list(exclude_consumers)
    if excluded:
        stmt = text(_USAGE + " AND consumer_id NOT IN :ex").bindparams(bindparam("ex", expanding=True))
        row = session.execute(stmt, {"p": project_id, "ex": excluded}).one()
    else:
        row = session.execute(text(_USAGE), {"p": project_id}).one()
    return {"instances": int(row[0]), "cores": int(row[1]), "ram": int(row[2]), **counted}


def _validate_deltas(deltas: dict[str, int]) -> None:
    for name, amount in deltas.items():
        if name not in RESOURCES:
            raise exceptions.ValidationError(
                "quota resource", f"{name!r} is not one of {', '.join(RESOURCES)}"
            )
        if amount < 0:
            raise exceptions.ValidationError(f"quota delta {name}", f"must not be negative, got {amount}")


def allowed_instances(
    session: Session,
    conf: Config,
    project_id: str,
    per_instance: dict[str, int],
    wanted: int,
    *,
    exclude_consumers: Iterable[str] = (),
    lock: bool = False,
) -> tuple[int, exceptions.OverQuota | None]:
    """How many of ``wanted`` instances (each ``per_instance``) fit the quota, and the error if not all do.

    ``lock``: take the project lock (``lock_project``) before counting, as the recheck in the
    claim transaction must. When no finite limit applies to what is asked for, nothing can be
    exceeded: neither the count (which grows with the project's allocations) nor the lock (which
    would serialise all of the project's claims) is taken.
    """
    limits = get_limits(session, conf, project_id)
    if all(limits[name] == UNLIMITED or not per_instance.get(name, 0) for name in RESOURCES):
        return wanted, None
    if lock:
        lock_project(session, project_id)
    used = count_usage(session, project_id, exclude_consumers)
    allowed = wanted
    error = None
    for name in RESOURCES:
        each = per_instance.get(name, 0)
        if limits[name] == UNLIMITED or each == 0:
            continue
        room = max(limits[name] - used[name], 0) // each
        if room < allowed:
            allowed = room
            error = exceptions.OverQuota(
                resource=name,
                project_id=project_id,
                requested=each * wanted,
                used=used[name],
                limit=limits[name],
            )
    return allowed, error


def check_quota(
    db_or_session: Database | Session, conf: Config, project_id: str, deltas: dict[str, int]
) -> None:
    """Raise OverQuota naming the resource, requested amount, usage and limit if ``deltas`` do not fit."""
    _validate_deltas(deltas)
    ctx, own = _session_of(db_or_session)
    if own:
        with ctx as session:
            _check(session, conf, project_id, deltas)
    else:
        _check(ctx, conf, project_id, deltas)


def _check(session: Session, conf: Config, project_id: str, deltas: dict[str, int]) -> None:
    limits = get_limits(session, conf, project_id)
    if all(limits[name] == UNLIMITED or not deltas.get(name, 0) for name in RESOURCES):
        return  # nothing asked for has a finite limit: no need to count the project's usage
    used = count_usage(
        session,
        project_id,
        volumes=any(deltas.get(n) for n in VOLUME_RESOURCES),
        security_groups=any(deltas.get(n) for n in SECURITY_GROUP_RESOURCES),
    )
    for name in RESOURCES:
        want = deltas.get(name, 0)
        if want and limits[name] != UNLIMITED and used[name] + want > limits[name]:
            raise exceptions.OverQuota(
                resource=name, project_id=project_id, requested=want, used=used[name], limit=limits[name]
            )


def recheck(session: Session, conf: Config, project_id: str, deltas: dict[str, int]) -> None:
    """Nova's recheck, inside the transaction that has just written ``deltas`` (a volume's row):
    raise OverQuota, rolling the transaction back, if the project now holds more than its limits.
    Takes the project lock first, so two creates cannot both pass on the same count."""
    _validate_deltas(deltas)
    limits = get_limits(session, conf, project_id)
    if all(limits[name] == UNLIMITED or not deltas[name] for name in deltas):
        return
    lock_project(session, project_id)
    used = count_usage(
        session,
        project_id,
        volumes=any(n in VOLUME_RESOURCES for n in deltas),
        security_groups=any(n in SECURITY_GROUP_RESOURCES for n in deltas),
    )
    for name, want in deltas.items():
        if want and limits[name] != UNLIMITED and used[name] > limits[name]:
            raise exceptions.OverQuota(
                resource=name,
                project_id=project_id,
                requested=want,
                used=used[name] - want,
                limit=limits[name],
            )


_USER_USAGE = {"key_pairs": text("SELECT COUNT(*) FROM key_pairs WHERE user_id = :u")}


def check_user_count(
    session: Session,
    conf: Config,
    project_id: str,
    user_id: str,
    resource: str,
    adding: int,
    *,
    lock: bool = False,
) -> None:
    """Raise OverQuota if ``user_id`` would hold more than its project's limit of ``resource``
    (``USER_RESOURCES``: Nova's key pairs are counted per user) with ``adding`` more.

    ``lock``: the recheck, in the transaction that has just written the new rows (``adding`` 0):
    takes a lock for the user first, so two creates cannot both pass on the same count.
    """
    limit = get_limits(session, conf, project_id)[resource]
    if limit == UNLIMITED:
        return
    if lock:
        lock_project(session, f"user:{user_id}")
    used = int(session.execute(_USER_USAGE[resource], {"u": user_id}).scalar_one())
    if used + adding > limit:
        # The recheck counts the new row: it was asked for one on top of the others.
        raise exceptions.OverQuota(
            resource=resource,
            project_id=project_id,
            requested=max(adding, 1),
            used=used if adding else used - 1,
            limit=limit,
        )


#: Nova's bound for a quota limit (its database's integer column)
MAX_LIMIT = 2147483647


def check_project_id(project_id: str) -> None:
    """A project named by a caller: 1 to 255 printable characters, nothing around them (an empty
    or multi-line name would make a quota, or a record, that no caller can ever name again)."""
    if not isinstance(project_id, str) or not 1 <= len(project_id) <= 255:
        raise exceptions.ValidationError("project", "must be 1 to 255 characters long")
    if project_id != project_id.strip() or not project_id.isprintable():
        raise exceptions.ValidationError(
            "project", "must be printable, with no control characters and no surrounding whitespace"
        )


def _check_limit(resource: str, limit: Any) -> None:
    if resource not in RESOURCES:
        raise exceptions.ValidationError(
            "quota resource", f"{resource!r} is not one of {', '.join(RESOURCES)}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not UNLIMITED <= limit <= MAX_LIMIT:
        raise exceptions.ValidationError(
            f"quota {resource}", f"must be -1 (unlimited) or 0 to {MAX_LIMIT}, got {limit!r}"
        )


def _upsert(session: Session, project_id: str, resource: str, limit: int) -> None:
    from novakit.db.models import utcnow

    updated = session.execute(
        text("UPDATE quotas SET hard_limit = :l, updated_at = :now WHERE project_id = :p AND resource = :r"),
        {"l": limit, "p": project_id, "r": resource, "now": utcnow()},
    ).rowcount  # type: ignore[attr-defined]
    if not updated:
        session.execute(
            text(
                "INSERT INTO quotas (project_id, resource, hard_limit, created_at) VALUES (:p, :r, :l, :now)"
            ),
            {"l": limit, "p": project_id, "r": resource, "now": utcnow()},
        )


def set_quota(db: Database, project_id: str, resource: str, limit: int, *, dry_run: bool = False) -> None:
    """Set a project's hard limit for one resource (-1: unlimited); idempotent. ``dry_run``: the
    same checks, nothing written (check mode)."""
    _check_limit(resource, limit)
    check_project_id(project_id)
    if dry_run:
        return
    db.run_in_transaction(lambda session: _upsert(session, project_id, resource, limit))


def check_known_project(
    project_id: str, known_project: Callable[[str], bool] | None, field: str = "project_id"
) -> None:
    """Nova's ``verify_project_id``: where an identity service keeps the projects, a project id it
    does not know is refused (400) before anything is written. The operator path has none (its
    projects are the names its callers give), and checks nothing."""
    if known_project is not None and not known_project(project_id):
        raise exceptions.ValidationError(field, "is not a project of the identity service")


def _check_update(
    ctx: RequestContext,
    project_id: str,
    limits: Mapping[str, Any],
    known_project: Callable[[str], bool] | None,
) -> None:
    """What a quota update checks before it reads anything: the policy, each limit, the project."""
    policy.authorize(ctx, "quota:update")
    for resource, limit in limits.items():
        _check_limit(resource, limit)
    check_project_id(project_id)
    check_known_project(project_id, known_project)


def _projects_of_identity(db: Database, ctx: RequestContext) -> Callable[[str], bool] | None:
    """Whether a project id is the identity's, when the caller is a project of the identity's (a
    token's caller, in ``novakit serve``); None on the operator path, whose projects are the
    names its callers give and which the identity does not keep."""
    from novakit.identity import projects

    if not ctx.project_id or not projects.exists(db, ctx.project_id):
        return None
    return lambda project_id: projects.exists(db, project_id)


def apply(
    db: Database,
    conf: Config,
    ctx: RequestContext,
    project: str | None,
    limits: Mapping[str, Any],
    *,
    force: bool = False,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Make some of a project's limits ``limits`` (the caller's own project when ``project`` is
    None): the quota module's task, ``novakit quota set``, and the quota sets of the Compute,
    Network and Block Storage APIs.

    The checks (policy ``quota:update``, each limit, the project's name, a
    project the identity does not know when the caller is the identity's, a limit below the
    project's use unless ``force``, checked for every limit given as Nova checks them), then
    the limits that differ are written, all in one transaction. ``dry_run``: every check, in a
    read, and nothing written (check mode).

    Answers ``{"project", "changed", "before", "after", "quota"}``: the project, whether a limit
    changed, every limit before and after (``{resource: limit}``), and what ``get_quota_usage``
    answers after (in a dry run, as it would).
    """
    project_id = ctx.project_id if project is None else project
    _check_update(ctx, project_id, limits, _projects_of_identity(db, ctx))

    def write(session: Session) -> dict[str, Any]:
        now = get_limits(session, conf, project_id)
        changes = {r: v for r, v in limits.items() if now[r] != v}
        if not force:  # every limit given, as Nova's quota driver checks them (not only the changed)
            _check_not_below_usage(session, project_id, limits)
        if not dry_run:
            for resource, limit in changes.items():
                _upsert(session, project_id, resource, limit)
        after = {**now, **changes}
        return {
            "project": project_id,
            "changed": bool(changes),
            "before": now,
            "after": after,
            "quota": _usage(session, project_id, after),
        }

    return db.run_or_dry_run(write, dry_run=dry_run)


def _check_not_below_usage(session: Session, project_id: str, limits: Mapping[str, Any]) -> None:
    finite = {r: v for r, v in limits.items() if v != UNLIMITED and r not in USER_RESOURCES}
    if not finite:
        return
    used = count_usage(
        session,
        project_id,
        volumes=any(r in VOLUME_RESOURCES for r in finite),
        security_groups=any(r in SECURITY_GROUP_RESOURCES for r in finite),
    )
    for resource, limit in finite.items():
        if limit < used.get(resource, 0):
            raise exceptions.ValidationError(
                f"quota {resource}",
                f"must be at least the project's use, {used[resource]}, unless forced (force)",
            )


def default_limits(conf: Config) -> dict[str, int]:
    """The limits of a project that has none of its own (the configuration's)."""
    return {name: int(getattr(conf.quota, name)) for name in RESOURCES}


def show_quota(
    db: Database, conf: Config, ctx: RequestContext, project_id: str | None = None
) -> dict[str, dict[str, int]]:
    """``get_quota_usage`` for a caller: its own project's (``project_id`` None), or any
    project's for a caller allowed ``project:any`` (Nova lets a project's members and the admins
    read its quota)."""
    if project_id is None:
        project_id = ctx.project_id
    if project_id != ctx.project_id:
        policy.authorize(ctx, "project:any")
    check_project_id(project_id)
    return get_quota_usage(db, conf, project_id)


def get_quota_usage(db: Database, conf: Config, project_id: str) -> dict[str, dict[str, int]]:
    """``{resource: {"limit": n, "in_use": n}}`` for the project."""
    with db.reader() as session:
        return _usage(session, project_id, get_limits(session, conf, project_id))


def _usage(session: Session, project_id: str, limits: Mapping[str, int]) -> dict[str, dict[str, int]]:
    used = count_usage(session, project_id, volumes=True, security_groups=True)
    return {name: {"limit": limits[name], "in_use": used.get(name, 0)} for name in RESOURCES}
