"""The identity tables' revision: one number that every change to them raises.

Token validation reads users, projects, roles, assignments, application credentials and
revocations (``novakit.identity.tokens.check``). A service answers many requests with one token,
and between two of them those rows almost never change; yet when they do (a user disabled, a
password set, a role taken away, a token revoked), the token must stop working at once, in every
worker process. So every transaction that changes an identity table also raises
``identity_revision.revision``, in the same transaction, and a process may take a token it
validated before as still valid only while the number is the one it validated it at
(``tokens.TokenCache``): one small read instead of the whole check.

The number is raised here, by the session's own events, not by each function that writes:

- ``before_flush``: any identity row added, changed or deleted through the unit of work;
- ``do_orm_execute``: an ORM-enabled ``UPDATE`` or ``DELETE`` of an identity table
  (``delete(IdentityRoleAssignment)...``).

A write that bypasses the session (raw SQL on a connection) would not raise it; the library
makes none. A database without the row (made from the models, not migrated) has no revision:
every token is then checked in full.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, text
from sqlalchemy.orm import ORMExecuteState, Session

from novakit.db import models

#: the tables whose rows decide whether a token still stands
IDENTITY_TABLES = frozenset(
    {
        models.IdentityUser.__tablename__,
        models.IdentityProject.__tablename__,
        models.IdentityRole.__tablename__,
        models.IdentityRoleAssignment.__tablename__,
        models.IdentityRevokedToken.__tablename__,
        models.IdentityApplicationCredential.__tablename__,
        models.IdentityApplicationCredentialRole.__tablename__,
    }
)
_BUMP = text("UPDATE identity_revision SET revision = revision + 1 WHERE id = 1")
_READ = text("SELECT revision FROM identity_revision WHERE id = 1")
_RAISED = "novakit_identity_revision_raised"


def current(session: Session) -> int | None:
    """The revision now, or None when the database has no revision row."""
    value = session.execute(_READ).scalar_one_or_none()
    return None if value is None else int(value)


def _is_identity(obj: Any) -> bool:
    table = getattr(obj, "__tablename__", None)
    return table in IDENTITY_TABLES


def _raise(session: Session) -> None:
    # Once per transaction is enough: readers compare, they do not count.
    if session.info.get(_RAISED):
        return
    session.connection().execute(_BUMP)
    session.info[_RAISED] = True


@event.listens_for(Session, "before_flush")
def _on_flush(session: Session, _context: Any, _instances: Any) -> None:
    if any(_is_identity(o) for o in (*session.new, *session.dirty, *session.deleted)):
        _raise(session)


@event.listens_for(Session, "do_orm_execute")
def _on_execute(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete):
        return
    table = getattr(state.statement, "table", None)
    if getattr(table, "name", None) in IDENTITY_TABLES:
        _raise(state.session)


@event.listens_for(Session, "after_transaction_end")
def _on_end(session: Session, _transaction: Any) -> None:
    # Any end, a savepoint's too (its rollback takes the raise with it): the next change raises
    # it again, at worst twice in one transaction.
    session.info.pop(_RAISED, None)
