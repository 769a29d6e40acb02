"""A service process keeps the tokens it validated (``tokens.TokenCache``) and takes them on one
read of the identity revision; every change that can end a token raises the revision in its own
transaction (``novakit.identity.revision``), so a kept token is checked again in full and
refused at once. On SQLite and PostgreSQL, through the library's own identity writes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.identity import assignments, projects, revision, roles, tokens, users
from novakit.identity.errors import TokenInvalid
from novakit.identity.keys import KeyRepository


@dataclass
class Setup:
    db: Database
    keys: KeyRepository
    token: str


@pytest.fixture
def setup(db: Database, tmp_path: Path) -> Setup:
    keys = KeyRepository(tmp_path / "keys")
    keys.setup()
    with db.writer() as session:
        user = users.create(session, "kept-user", "kept-pw-1")
        project = projects.create(session, "kept-project")
        role, _ = roles.ensure(session, "member")
        assignments.grant(session, user, project, role)
        ids = (user.uuid, project.uuid)
    token, _ = tokens.issue(keys, ids[0], ids[1], ("password",), 3600)
    return Setup(db, keys, token)


@contextlib.contextmanager
def _statements(db: Database) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", count)


def _disable(session: Session) -> None:
    users.set_enabled(users.find(session, "kept-user"), False)  # type: ignore[arg-type]


def _new_password(session: Session) -> None:
    users.set_password(users.find(session, "kept-user"), "kept-pw-2")  # type: ignore[arg-type]


def _take_role(session: Session) -> None:
    user, project = users.find(session, "kept-user"), projects.find(session, "kept-project")
    role = roles.find(session, "member")
    assert user is not None and project is not None and role is not None
    assert assignments.revoke(session, user, project, role)


def _disable_project(session: Session) -> None:
    project = projects.find(session, "kept-project")
    assert project is not None
    project.enabled = False


def _delete_role(session: Session) -> None:
    session.delete(roles.find(session, "member"))


CHANGES: dict[str, Callable[[Session], None]] = {
    "user disabled": _disable,
    "password set": _new_password,
    "role taken away": _take_role,
    "project disabled": _disable_project,
    "role deleted": _delete_role,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_kept_token_is_refused_right_after_an_identity_change(setup: Setup, change: str) -> None:
    cache = tokens.TokenCache()
    first = tokens.validate(setup.db, setup.keys, setup.token, cache)
    with _statements(setup.db) as seen:
        again = tokens.validate(setup.db, setup.keys, setup.token, cache)
    assert again is first  # kept: taken on the revision's one read
    reads = [s for s in seen if s.lstrip().upper().startswith("SELECT")]
    assert len(reads) == 1 and "identity_revision" in reads[0]
    with setup.db.reader() as session:
        before = revision.current(session)
    with setup.db.writer() as session:
        CHANGES[change](session)
        session.flush()
    with setup.db.reader() as session:
        assert revision.current(session) == (before or 0) + 1
    with pytest.raises(TokenInvalid):
        tokens.validate(setup.db, setup.keys, setup.token, cache)


def test_a_revoked_token_is_refused_though_kept(setup: Setup) -> None:
    cache = tokens.TokenCache()
    valid = tokens.validate(setup.db, setup.keys, setup.token, cache)
    tokens.revoke(setup.db, valid)
    with pytest.raises(TokenInvalid) as refused:
        tokens.validate(setup.db, setup.keys, setup.token, cache)
    assert refused.value.reason == "revoked"


def test_other_writes_leave_the_revision_and_the_kept_token(setup: Setup, admin_ctx: RequestContext) -> None:
    """A write outside the identity tables (a flavor, here) does not make every process check
    its tokens again."""
    from novakit.catalog import flavors

    cache = tokens.TokenCache()
    first = tokens.validate(setup.db, setup.keys, setup.token, cache)
    with setup.db.reader() as session:
        before = revision.current(session)
    flavors.create(setup.db, admin_ctx, {"name": "rev.small", "vcpus": 1, "memory_mb": 256, "root_gb": 1})
    with setup.db.reader() as session:
        assert revision.current(session) == before
    assert tokens.validate(setup.db, setup.keys, setup.token, cache) is first
