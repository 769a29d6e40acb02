"""Instance records and their guarded state writes.

Every state change goes through ``instance_update``, which says what it
expects (``expected_task_state`` and optionally ``expected_vm_state``) and
turns that into the WHERE clause of one UPDATE. If another process changed
the row first, the UPDATE matches nothing, nothing is written, and
``UnexpectedTaskStateError`` names what we expected and what is there.
That single statement is atomic on SQLite and on PostgreSQL alike, so no
lock is held between reading a state and acting on it.

A running task has an owner (``task_owner``: the request that started it)
and a lease (``task_lease_until``) that the owner renews while it waits on a
host. A write that ends a task (``task_state`` None) clears both; a write
may also expect an owner (``expected_owner``) or an expired lease
(``lease_expired_at``), which is how heal takes over only work whose owner
is gone, and how an owner learns that someone else took its work over.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import Select, and_, bindparam, false, func, or_, select, text, update
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.cells import mappings
from novakit.compute.states import TaskState, VmState
from novakit.context import RequestContext
from novakit.db.models import Instance, InstanceAction, RequestSpec, utcnow

#: For a text statement on the instance tables: bound to the targeted cell as they are.
ON_INSTANCES: dict[str, Any] = {"mapper": Instance.__mapper__}

# Sentinel: "do not check this column".
UNSET: Any = object()


def scoped(ctx: RequestContext, stmt: Select[Any], include_deleted: bool = False) -> Select[Any]:
    """``stmt`` limited to what ``ctx`` may see: live instances (unless ``include_deleted``) and,
    for anyone but an admin, its own project's."""
    if not include_deleted:
        stmt = stmt.where(Instance.deleted == 0)
    return policy.scope(ctx, stmt, Instance.project_id)


def instance_get(
    session: Session, ctx: RequestContext, uuid: str, *, include_deleted: bool = False
) -> Instance:
    """The instance, if the caller may see it; another project's looks not found."""
    stmt = scoped(ctx, select(Instance).where(Instance.uuid == uuid), include_deleted)
    inst = session.execute(stmt).scalar_one_or_none()
    if inst is None:
        raise exceptions.InstanceNotFound(instance_id=uuid)
    return inst


def instance_get_by_name_or_uuid(
    session: Session,
    ctx: RequestContext,
    ref: str,
    *,
    include_deleted: bool = False,
    deleted: bool = False,
) -> Instance:
    """By uuid or by name (names are unique per project among live servers).

    ``include_deleted``: a deleted server is found by its uuid too. ``deleted``: only deleted
    servers, by uuid or by name; of several deleted servers of one name, the one deleted last.
    A name that matches no live server but a deleted one says so, and how to reach it.
    """
    if deleted:
        by_ref = or_(Instance.uuid == ref, Instance.display_name == ref)
        stmt = select(Instance).where(Instance.deleted != 0, by_ref)
        stmt = policy.scope(ctx, stmt, Instance.project_id)
        # A uuid match first; then the most recently deleted of the name.
        stmt = stmt.order_by((Instance.uuid == ref).desc(), Instance.deleted_at.desc(), Instance.id.desc())
        found_deleted = session.execute(stmt.limit(1)).scalar_one_or_none()
        if found_deleted is None:
            raise exceptions.InstanceNotFound(instance_id=f"{ref} (among deleted servers)")
        return found_deleted
    if include_deleted:
        stmt = scoped(ctx, select(Instance).where(Instance.uuid == ref), include_deleted=True)
        found = session.execute(stmt).scalar_one_or_none()
        if found is not None:
            return found
    stmt = scoped(ctx, select(Instance).where(or_(Instance.uuid == ref, Instance.display_name == ref)))
    matches = list(session.execute(stmt.limit(2)).scalars())
    if not matches:
        gone = scoped(
            ctx, select(Instance.id).where(Instance.display_name == ref, Instance.deleted != 0), True
        )
        if session.execute(gone.limit(1)).first() is not None:
            raise exceptions.InstanceNotFound(
                instance_id=ref,
                message=f"Instance {ref} could not be found among live servers; a deleted server "
                "of that name exists (novakit server show --deleted; deleted=True in Python).",
            )
        raise exceptions.InstanceNotFound(instance_id=ref)
    if len(matches) > 1:
        uuid_match = [i for i in matches if i.uuid == ref]
        if uuid_match:
            return uuid_match[0]
        raise exceptions.Invalid(reason=f"more than one server is named {ref!r} (use its uuid)")
    return matches[0]


#: the orders a listing may ask for: name -> column (none of them is ever NULL, so a marker's
#: position in the order is always defined)
SORT_KEYS: dict[str, Any] = {
    "created_at": Instance.created_at,
    "name": Instance.display_name,
    "display_name": Instance.display_name,
    "vm_state": Instance.vm_state,
    "uuid": Instance.uuid,
}


def _listing(
    ctx: RequestContext,
    *,
    host: str | None = None,
    vm_states: Iterable[str] | None = None,
    uuids: Sequence[str] | None = None,
    include_deleted: bool = False,
    project_id: str | None = None,
    only_deleted: bool = False,
    states: Sequence[tuple[str, str | None, tuple[str, ...]]] | None = None,
    name_regex: str | None = None,
    instance_type_id: int | None = None,
    image_ref: str | None = None,
    user_id: str | None = None,
    changes_since: dt.datetime | None = None,
    changes_before: dt.datetime | None = None,
    reservation_id: str | None = None,
    locked: bool | None = None,
    **_order: Any,
) -> Select[Any]:
    stmt = scoped(ctx, select(Instance), include_deleted or only_deleted)
    if only_deleted:
        stmt = stmt.where(Instance.deleted != 0)
    if project_id is not None:
        stmt = stmt.where(Instance.project_id == project_id)
    if host is not None:
        stmt = stmt.where(Instance.host == host)
    if vm_states is not None:
        stmt = stmt.where(Instance.vm_state.in_(list(vm_states)))
    if uuids is not None:
        stmt = stmt.where(one_of(Instance.uuid, uuids))
    if states is not None:
        clauses = []
        for vm_state, task_state, others in states:
            if task_state is not None:
                clauses.append(and_(Instance.vm_state == vm_state, Instance.task_state == task_state))
            elif others:
                not_other = or_(Instance.task_state.is_(None), Instance.task_state.not_in(list(others)))
                clauses.append(and_(Instance.vm_state == vm_state, not_other))
            else:
                clauses.append(Instance.vm_state == vm_state)
        stmt = stmt.where(or_(*clauses) if clauses else false())
    if name_regex is not None:
        prefix = literal_prefix(name_regex)
        if prefix:
            # What every match starts with, compared by the database itself: on SQLite the regular
            # expression is a Python function, called only for the rows that pass this.
            stmt = stmt.where(func.substr(Instance.display_name, 1, len(prefix)) == prefix)
        stmt = stmt.where(Instance.display_name.regexp_match(name_regex))
    if instance_type_id is not None:
        stmt = stmt.where(Instance.instance_type_id == instance_type_id)
    if image_ref is not None:
        stmt = stmt.where(Instance.image_ref == image_ref)
    if user_id is not None:
        stmt = stmt.where(Instance.user_id == user_id)
    if reservation_id is not None:
        stmt = stmt.where(Instance.reservation_id == reservation_id)
    if locked is not None:
        stmt = stmt.where(Instance.locked.is_(locked))
    if changes_since is not None:
        # Nova's changes-since: changed at or after it, the deleted among them (a deletion is a change).
        changed = func.coalesce(Instance.updated_at, Instance.created_at)
        stmt = stmt.where(changed >= changes_since)
    if changes_before is not None:
        changed = func.coalesce(Instance.updated_at, Instance.created_at)
        stmt = stmt.where(changed <= changes_before)
    return stmt


_REGEX_SPECIAL = frozenset("\\.^$*+?{}[]|()")


def literal_prefix(regex: str) -> str:
    """The text every name ``regex`` matches must start with: the literal characters after a
    leading ``^`` (none for a pattern with an alternative, a group or a flag, or without ``^``);
    a character a quantifier makes optional is not part of it."""
    if not regex.startswith("^") or "|" in regex:
        return ""
    prefix = ""
    for char in regex[1:]:
        if char in _REGEX_SPECIAL:
            if char in "*?{":
                prefix = prefix[:-1]
            break
        prefix += char
    return prefix


def marker_position(
    session: Session, ctx: RequestContext, marker: str, filters: dict[str, Any]
) -> tuple[Any, int]:
    """Where the marker stands in a listing: (its sort value, its row id). The marker must be a
    row of this very listing (same scope and filters), as in Nova."""
    column = SORT_KEYS[filters.get("sort_key", "created_at")]
    row = session.execute(
        _listing(ctx, **filters).with_only_columns(column, Instance.id).where(Instance.uuid == marker)
    ).first()
    if row is None:
        raise exceptions.MarkerNotFound(marker=marker)
    return row[0], row[1]


@dataclass(slots=True)
class ListedServer:
    """A server as a listing reads it: what its view reads (``compute.views.server_view``) and
    ``id`` for the listing's order, as plain attributes, not an ORM object (10,000 servers listed:
    a third of the time). ``LISTED`` is its columns."""

    id: int
    uuid: str
    display_name: str
    hostname: str | None
    vm_state: str
    task_state: str | None
    power_state: int
    host: str | None
    node: str | None
    availability_zone: str | None
    flavor: dict[str, Any] | None
    image_ref: str | None
    networks: list[dict[str, Any]] | None
    addresses: list[str] | None
    instance_metadata: dict[str, Any] | None
    key_name: str | None
    locked: bool
    locked_reason: str | None
    project_id: str
    user_id: str | None
    reservation_id: str | None
    created_at: dt.datetime | None
    updated_at: dt.datetime | None
    launched_at: dt.datetime | None
    terminated_at: dt.datetime | None


LISTED: tuple[Any, ...] = tuple(getattr(Instance, f.name) for f in fields(ListedServer))


def instance_get_all(
    session: Session,
    ctx: RequestContext,
    *,
    marker: str | None = None,
    after: tuple[Any, int | None] | None = None,
    limit: int | None = None,
    sort_key: str = "created_at",
    sort_dir: str = "asc",
    listed: bool = False,
    **filters: Any,
) -> list[Any]:
    """The instances ``ctx`` may see that match every filter given, in one query.

    Filters (``_listing``): ``host``, ``vm_states``, ``uuids``, ``include_deleted``,
    ``project_id``, ``only_deleted``, ``states``: (vm_state, task_state, other task states)
    triples as ``states.states_for_status`` gives them, ``name_regex``: a regular expression
    searched in the name (Nova's ``name`` filter), ``instance_type_id``, ``image_ref``,
    ``user_id``, ``changes_since`` (changed at or after it: Nova's ``changes-since``),
    ``changes_before`` (changed at or before it: Nova's 2.66 ``changes-before``),
    ``reservation_id`` (the servers of one create request), ``locked``.
    ``marker``: the uuid of the last instance of the previous page (MarkerNotFound if it is
    not one of this listing's); ``after``: a position instead, (sort value, row id) to start
    after, row id None for rows past the value only, -1 for rows at the value too (another
    cell's marker, ``novakit.cells.instances``); ``limit``: at most this many. The order is
    ``sort_key`` (``SORT_KEYS``) then the row id, ``sort_dir`` asc or desc. ``listed``: each
    server as a ``ListedServer`` (what its view reads), not an ORM object, except the servers in
    error, which come whole with their faults (their view shows the last one).
    """
    stmt = _listing(ctx, **filters)
    column = SORT_KEYS[sort_key]
    descending = sort_dir == "desc"
    if marker is not None:
        after = marker_position(session, ctx, marker, {**filters, "sort_key": sort_key})
    if after is not None:
        value, row_id = after
        past = column < value if descending else column > value
        if row_id is None:
            stmt = stmt.where(past)
        elif row_id == -1:
            stmt = stmt.where(or_(past, column == value))
        else:
            tie = Instance.id < row_id if descending else Instance.id > row_id
            stmt = stmt.where(or_(past, and_(column == value, tie)))
    order = (column.desc(), Instance.id.desc()) if descending else (column, Instance.id)
    stmt = stmt.order_by(*order)
    if limit is not None:
        stmt = stmt.limit(limit)
    if listed:
        return _listed(session, stmt)
    rows = list(session.execute(stmt).scalars())
    for inst in rows:
        if inst.vm_state == "error":
            inst.faults  # noqa: B018 - loaded here: a view of a server in error shows its fault
    return rows


def _listed(session: Session, stmt: Select[Any]) -> list[ListedServer | Instance]:
    """``stmt``'s servers as ``ListedServer``s; those in error as whole instances with their faults."""
    rows = [ListedServer(*row) for row in session.execute(stmt.with_only_columns(*LISTED))]
    failed = [row.uuid for row in rows if row.vm_state == "error"]
    if not failed:
        return list(rows)
    whole = {
        inst.uuid: inst
        for inst in session.execute(select(Instance).where(Instance.uuid.in_(failed))).scalars()
    }
    for inst in whole.values():
        inst.faults  # noqa: B018 - loaded here: a view of a server in error shows its fault
    return [whole.get(row.uuid, row) if row.vm_state == "error" else row for row in rows]


def one_of(column: Any, values: Sequence[Any]) -> Any:
    """``column IN values``, as a plain comparison when there is one value: the usual case on the
    hot paths, and SQLAlchemy re-renders an IN list on every execution while ``=`` compiles once."""
    values = list(values)
    return column == values[0] if len(values) == 1 else column.in_(values)


def _state_clause(column: Any, expected: Any) -> Any:
    values = list(expected) if isinstance(expected, list | tuple | set | frozenset) else [expected]
    values = [v.value if isinstance(v, TaskState) else v for v in values]
    not_null = [v for v in values if v is not None]
    clauses: list[Any] = []
    # Plain comparisons, not IN: an IN list is re-rendered on every execution, these compile once.
    clauses.extend(column == v for v in not_null)
    if None in values:
        clauses.append(column.is_(None))
    return or_(*clauses) if clauses else false()


def _expected_key(expected: Any) -> tuple[Any, ...] | None:
    if expected is UNSET:
        return None
    values = list(expected) if isinstance(expected, list | tuple | set | frozenset) else [expected]
    return tuple(sorted({v.value if isinstance(v, TaskState | VmState) else v for v in values}, key=str))


# Guarded UPDATE statements, one per (columns written, expected task states, expected vm states):
# a handful of shapes in all, each built once. Building a statement costs more than running it.
_GUARDED: dict[tuple[Any, ...], Any] = {}


def _guarded_update(
    columns: tuple[str, ...],
    task_states: tuple[Any, ...] | None,
    vm_states: tuple[Any, ...] | None,
    lock: tuple[bool, str | None] | None = None,
    owner: tuple[Any, ...] | None = None,
    lease_expired: bool = False,
) -> Any:
    key = (columns, task_states, vm_states, lock, owner, lease_expired)
    stmt = _GUARDED.get(key)
    if stmt is None:
        conditions = [Instance.uuid == bindparam("w_uuid"), Instance.deleted == 0]
        if task_states is not None:
            conditions.append(_state_clause(Instance.task_state, list(task_states)))
        if vm_states is not None:
            conditions.append(_state_clause(Instance.vm_state, list(vm_states)))
        if owner is not None:
            # The owner is a value, not a shape: one statement serves every owner.
            by_owner = Instance.task_owner == bindparam("w_owner")
            conditions.append(Instance.task_owner.is_(None) if owner == (None,) else by_owner)
        if lease_expired:
            conditions.append(
                or_(Instance.task_lease_until.is_(None), Instance.task_lease_until < bindparam("w_now"))
            )
        if lock is not None:
            locked, locked_by = lock
            conditions.append(Instance.locked.is_(True) if locked else Instance.locked.is_(False))
            conditions.append(_state_clause(Instance.locked_by, [locked_by]))
        table = Instance.__table__
        mapper = Instance.__mapper__
        targets = {name: mapper.attrs[name].columns[0] for name in columns}  # type: ignore[union-attr]
        stmt = (
            update(table)  # type: ignore[arg-type]
            .where(and_(*conditions))
            .values({col.name: bindparam(f"v_{name}", type_=col.type) for name, col in targets.items()})
        )
        _GUARDED[key] = stmt
    return stmt


def instance_update(
    session: Session,
    uuid: str,
    values: dict[str, Any],
    *,
    expected_task_state: Any = UNSET,
    expected_vm_state: Any = UNSET,
    expected_lock: tuple[bool, str | None] | None = None,
    expected_owner: Any = UNSET,
    lease_expired_at: dt.datetime | None = None,
    fetch: bool = True,
) -> Instance:
    """Write ``values`` only if the row still has the expected states.

    Raises UnexpectedTaskStateError (UnexpectedDeletingTaskStateError when the
    instance is being deleted) and changes nothing if it does not.
    ``expected_lock``: the (locked, locked_by) the caller's lock check read;
    when another caller changed the lock since, InstanceIsLocked (or, for a
    lock lifted meanwhile, UnexpectedTaskStateError) and nothing is written:
    the lock check holds at the moment of the write, on every back end.
    ``expected_owner``: the task's owner (``task_owner``) the writer expects;
    ``lease_expired_at``: write only if the task's lease ran out before this
    time (or it has none). A write that ends the task (``task_state`` None)
    also clears its owner and lease.
    """
    values = _column_values(values)
    owner_key = None if expected_owner is UNSET else ((None,) if expected_owner is None else ("owner",))
    stmt = _guarded_update(
        tuple(sorted(values)),
        _expected_key(expected_task_state),
        _expected_key(expected_vm_state),
        expected_lock,
        owner_key,
        lease_expired_at is not None,
    )
    params = {"w_uuid": uuid, **{f"v_{k}": v for k, v in values.items()}}
    if owner_key == ("owner",):
        params["w_owner"] = expected_owner
    if lease_expired_at is not None:
        params["w_now"] = lease_expired_at
    result = session.execute(stmt, params)
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise _not_written(
            session,
            uuid,
            expected_task_state,
            expected_vm_state,
            expected_lock,
            expected_owner,
            lease_expired_at,
        )
    if "display_name" in values:
        # The name is the project's across every cell: the mapping's unique key holds it.
        mappings.rename(session, uuid, values["display_name"])
    if not fetch:
        return None  # type: ignore[return-value]
    stmt = select(Instance).where(Instance.uuid == uuid).execution_options(populate_existing=True)
    return session.execute(stmt).scalar_one()


def _column_values(values: dict[str, Any]) -> dict[str, Any]:
    """What ``instance_update`` writes: enums as their values, ``updated_at`` now, and a task's
    owner and lease cleared with the task."""
    values = {
        k: (v.value if hasattr(v, "value") and not isinstance(v, int) else v) for k, v in values.items()
    }
    values.setdefault("updated_at", utcnow())
    if "task_state" in values and values["task_state"] is None:
        values.setdefault("task_owner", None)
        values.setdefault("task_lease_until", None)
    return values


def _not_written(
    session: Session,
    uuid: str,
    expected_task_state: Any,
    expected_vm_state: Any,
    expected_lock: tuple[bool, str | None] | None,
    expected_owner: Any,
    lease_expired_at: dt.datetime | None,
) -> exceptions.NovakitError:
    """Why a guarded write changed nothing, from the row as it is now: the error to raise."""
    # Read afresh: the session may hold the row as it was before the other writer's commit.
    current = session.execute(
        select(Instance)
        .where(Instance.uuid == uuid, Instance.deleted == 0)
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()
    if current is None:
        return exceptions.InstanceNotFound(instance_id=uuid)
    if expected_lock is not None and (bool(current.locked), current.locked_by) != expected_lock:
        if current.locked:
            return exceptions.InstanceIsLocked(uuid, current.locked_reason)
        expected_desc_lock = "locked" if expected_lock[0] else "unlocked"
        return exceptions.UnexpectedTaskStateError(
            instance_uuid=uuid, expected=expected_desc_lock, actual="its lock changed meanwhile"
        )
    expected_desc = []
    if expected_task_state is not UNSET:
        expected_desc.append(f"task_state={_describe(expected_task_state)}")
    if expected_vm_state is not UNSET:
        expected_desc.append(f"vm_state={_describe(expected_vm_state)}")
    actual = f"vm_state={current.vm_state}, task_state={current.task_state}"
    if expected_owner is not UNSET and current.task_owner != expected_owner:
        expected_desc.append(f"task owner {expected_owner or 'none'}")
        actual += f", task owner {current.task_owner or 'none'}"
    elif lease_expired_at is not None and current.task_lease_until is not None:
        expected_desc.append("an expired task lease")
        actual += f", task lease until {current.task_lease_until.isoformat(sep=' ')}"
    cls = (
        exceptions.UnexpectedDeletingTaskStateError
        if current.task_state == TaskState.DELETING.value
        else exceptions.UnexpectedTaskStateError
    )
    return cls(instance_uuid=uuid, expected=", ".join(expected_desc), actual=actual)


def _describe(expected: Any) -> str:
    values = list(expected) if isinstance(expected, list | tuple | set | frozenset) else [expected]
    return "/".join("none" if v is None else str(getattr(v, "value", v)) for v in values)


def instance_soft_delete(
    session: Session, uuid: str, *, expected_task_state: Any = UNSET, expected_owner: Any = UNSET
) -> Instance:
    """Mark the row deleted (``deleted`` = its id, so the name can be reused)."""
    inst = instance_update(
        session,
        uuid,
        {"vm_state": "deleted", "task_state": None, "power_state": 0, "terminated_at": utcnow()},
        expected_task_state=expected_task_state,
        expected_owner=expected_owner,
    )
    session.execute(
        update(Instance)
        .where(Instance.uuid == uuid, Instance.deleted == 0)
        .values(deleted=Instance.id, deleted_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    mappings.soft_delete(session, uuid)
    session.refresh(inst)
    return inst


def stuck_builds(session: Session, now: dt.datetime, older_than: dt.datetime) -> list[Instance]:
    """Builds whose owner is gone (``owner_gone``): their lease ran out before ``now``, or they
    have none and were created before ``older_than``."""
    stmt = select(Instance).where(
        Instance.deleted == 0,
        Instance.vm_state == "building",
        or_(
            Instance.task_lease_until < now,
            and_(Instance.task_lease_until.is_(None), Instance.created_at < older_than),
        ),
    )
    return list(session.execute(stmt).scalars())


def owner_gone(inst: Any, now: dt.datetime, older_than: dt.datetime) -> bool:
    """Whether ``inst``'s running task has no owner left to finish it.

    Its lease ran out before ``now``; a task without a lease (written before
    leases existed, or by hand) counts as abandoned once its row is older than
    ``older_than``. An instance with no task running has nothing to own.
    """
    if inst.task_state is None and inst.vm_state != "building":
        return False
    if inst.task_lease_until is not None:
        return bool(inst.task_lease_until < now)
    return bool((inst.updated_at or inst.created_at) < older_than)


_RENEW = (
    "UPDATE instances SET task_lease_until = :until WHERE task_owner = :owner AND deleted = 0 "
    "AND (task_state IS NOT NULL OR vm_state = 'building') AND uuid IN :uuids RETURNING uuid"
)
_RENEW_STMT = text(_RENEW).bindparams(bindparam("uuids", expanding=True))


def renew_leases(session: Session, uuids: Sequence[str], owner: str, until: dt.datetime) -> list[str]:
    """Extend the lease of the tasks ``owner`` still owns on ``uuids``; the uuids it still owns."""
    if not uuids:
        return []
    rows = session.execute(
        _RENEW_STMT,
        {"until": until, "owner": owner, "uuids": list(uuids)},
        bind_arguments=ON_INSTANCES,
    ).all()
    return [r[0] for r in rows]


def create_request_ids(session: Session, uuids: Sequence[str]) -> dict[str, str]:
    """The request that recorded each instance (its ``create`` action's), by uuid; in the
    targeted cell. An instance without a ``create`` action is not in the answer."""
    if not uuids:
        return {}
    rows = session.execute(
        select(InstanceAction.instance_uuid, InstanceAction.request_id)
        .where(one_of(InstanceAction.instance_uuid, uuids), InstanceAction.action == "create")
        .order_by(InstanceAction.id)
    ).all()
    return {uuid: request_id for uuid, request_id in rows}


def alternate_hosts(session: Session, uuids: Sequence[str]) -> set[str]:
    """The hosts the scheduler kept as alternates for a reschedule of ``uuids`` (their request specs)."""
    if not uuids:
        return set()
    found = session.scalars(select(RequestSpec.alternates).where(one_of(RequestSpec.instance_uuid, uuids)))
    return {a["host"] for alternates in found for a in alternates or []}
