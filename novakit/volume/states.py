"""Cinder's volume statuses, the one table of the steps between them, and its guarded write.

Every change of a volume's status is a step of ``STEPS``: the statuses it may start from and
the one it ends in. ``set_status`` writes it compare-and-swap (``UPDATE ... WHERE status IN
(from)``), so of two callers racing for one volume (two attaches, an attach and a delete)
exactly one wins; the other gets InvalidVolume naming the status it found, and nothing changes.

A volume has no owner or lease of its own: the caller that put it in a ``TRANSITIONAL`` status
moves it on within ``compute.build_timeout`` (the bound of an instance task's lease), or it is
gone. ``abandoned`` is that decision, made here only; ``novakit.heal.volumes`` then settles the
volume as Cinder's volume manager does at start-up.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass

from sqlalchemy import DateTime, bindparam, text
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.db.models import utcnow


class VolumeStatus(enum.StrEnum):
    CREATING = "creating"
    AVAILABLE = "available"
    RESERVED = "reserved"
    ATTACHING = "attaching"
    IN_USE = "in-use"
    DETACHING = "detaching"
    DELETING = "deleting"
    ERROR = "error"
    ERROR_DELETING = "error_deleting"


S = VolumeStatus


@dataclass(frozen=True)
class Step:
    """One row of the table: ``name`` goes from any of ``from_`` to ``to``."""

    name: str
    from_: frozenset[VolumeStatus]
    to: VolumeStatus
    notes: str = ""


STEPS: dict[str, Step] = {
    s.name: s
    for s in (
        Step("created", frozenset({S.CREATING}), S.AVAILABLE, "the host made it"),
        Step("create_failed", frozenset({S.CREATING}), S.ERROR, "the host could not; its claim is freed"),
        Step(
            "create_interrupted",
            frozenset({S.CREATING}),
            S.ERROR,
            "its creator is gone (heal, Cinder's init_host); the claim stays until it is deleted, "
            "since the host may hold part of it",
        ),
        Step("reserve", frozenset({S.AVAILABLE}), S.RESERVED, "an attach took it (Cinder's reserve)"),
        Step(
            "unreserve",
            frozenset({S.RESERVED}),
            S.AVAILABLE,
            "the server refused the attach, or the attach never started (heal)",
        ),
        Step("attach", frozenset({S.RESERVED}), S.ATTACHING, "the host is attaching it"),
        Step("attached", frozenset({S.ATTACHING}), S.IN_USE, "the host attached it"),
        Step("attach_failed", frozenset({S.ATTACHING}), S.AVAILABLE, "the host could not"),
        Step(
            "booted",
            frozenset({S.CREATING, S.RESERVED}),
            S.IN_USE,
            "a server booted from it (its root disk, ``novakit.volume.boot``)",
        ),
        Step("detach", frozenset({S.IN_USE}), S.DETACHING, "the host is detaching it"),
        Step("detached", frozenset({S.DETACHING}), S.AVAILABLE, "the host detached it"),
        Step("detach_failed", frozenset({S.DETACHING}), S.IN_USE, "the host could not"),
        Step(
            "released",
            # creating: a new root volume whose server was deleted while it built (``boot``).
            frozenset({S.CREATING, S.RESERVED, S.ATTACHING, S.IN_USE, S.DETACHING}),
            S.AVAILABLE,
            "its server is gone (a server's delete, heal)",
        ),
        Step(
            "delete",
            frozenset({S.AVAILABLE, S.ERROR, S.ERROR_DELETING}),
            S.DELETING,
            "never while attached or reserved",
        ),
        Step("delete_failed", frozenset({S.DELETING}), S.ERROR_DELETING, "the host could not remove it"),
    )
}

#: the statuses in which a volume is (being) attached to a server
ATTACHED = frozenset({S.RESERVED, S.ATTACHING, S.IN_USE, S.DETACHING})
#: the statuses a caller leaves a volume in while it works on it, each moved on by that caller
#: (``error_deleting`` is not one: a failed delete waits for the user to delete again)
TRANSITIONAL = frozenset({S.CREATING, S.RESERVED, S.ATTACHING, S.DETACHING, S.DELETING})


def abandoned(status: str, changed_at: dt.datetime, now: dt.datetime, timeout: float) -> bool:
    """Whether the caller that left a volume in ``status`` at ``changed_at`` (its ``updated_at``,
    else ``created_at``) is gone: a transitional status unchanged for longer than ``timeout``
    seconds (``compute.build_timeout``, which bounds every caller's host call as it bounds an
    instance task's lease). The one place this is decided."""
    return status in TRANSITIONAL and changed_at < now - dt.timedelta(seconds=timeout)


_SET = (
    "UPDATE volumes SET status = :to, status_reason = :reason, updated_at = :now "
    "WHERE id = :id AND deleted = 0 AND status IN :from_"
)
_SET_ANY = text(_SET).bindparams(bindparam("from_", expanding=True), bindparam("now", type_=DateTime()))
# Only over the volume as read: a caller that decided on what it read (heal) writes over nothing else.
_SET_UNCHANGED = text(_SET + " AND COALESCE(updated_at, created_at) = :since").bindparams(
    bindparam("from_", expanding=True),
    bindparam("now", type_=DateTime()),
    bindparam("since", type_=DateTime()),
)
_STATUS = text("SELECT status FROM volumes WHERE id = :id AND deleted = 0")


def set_status(
    session: Session,
    volume_id: int,
    step: str,
    *,
    name: str = "",
    reason: str | None = None,
    unchanged_since: dt.datetime | None = None,
) -> None:
    """Take ``step`` on the volume, guarded by the statuses it may start from.

    Raises InvalidVolume (and writes nothing) when the volume is in none of them, because
    another caller moved it first. ``reason``: why it ends in an error status (kept on the row).
    ``unchanged_since``: also only if its last change (``updated_at``, else ``created_at``) is
    still the one read, so that a volume moved on and back meanwhile is not taken for the same.
    """
    s = STEPS[step]
    params = {"id": volume_id, "to": s.to.value, "reason": reason, "now": utcnow(), "from_": sorted(s.from_)}
    stmt = _SET_ANY
    if unchanged_since is not None:
        stmt, params["since"] = _SET_UNCHANGED, unchanged_since
    if session.execute(stmt, params).rowcount == 1:  # type: ignore[attr-defined]
        return
    actual = session.execute(_STATUS, {"id": volume_id}).scalar_one_or_none()
    if actual in s.from_:
        raise exceptions.InvalidVolume(
            reason=f"volume {name or volume_id} changed meanwhile (it is {actual} again); "
            f"not {step.replace('_', ' ')}"
        )
    raise exceptions.InvalidVolume(
        reason=(
            f"volume {name or volume_id} is {actual or 'deleted'}; to {step.replace('_', ' ')} "
            f"it must be {' or '.join(sorted(s.from_))}"
        )
    )


def step_table_markdown() -> str:
    """The table as Markdown, for the docs."""
    lines = ["| step | from | to | notes |", "| --- | --- | --- | --- |"]
    for s in STEPS.values():
        lines.append(f"| {s.name} | {', '.join(sorted(s.from_))} | {s.to.value} | {s.notes} |")
    return "\n".join(lines)
