"""PostgreSQL's pool: no ping on every checkout; a connection that sat idle is pinged, and one
the server closed meanwhile is replaced without the caller seeing it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from novakit.db import engine as engine_module
from novakit.db.engine import Database
from tests.conftest import PG_URL, need_real


@pytest.fixture
def pg() -> Any:
    if not PG_URL:
        need_real("NOVAKIT_TEST_PG_URL is not set")
    db = Database(PG_URL, auto_upgrade=False)
    yield db
    db.dispose()


def _pid(db: Database) -> int:
    with db.reader() as session:
        return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_in_use_is_not_pinged_an_idle_one_is_and_is_replaced_if_closed(
    pg: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    pings: list[int] = []
    real_ping = pg.engine.dialect.do_ping

    def counted(dbapi_conn: Any) -> bool:
        pings.append(1)
        return real_ping(dbapi_conn)

    monkeypatch.setattr(pg.engine.dialect, "do_ping", counted)
    first = _pid(pg)
    for _ in range(5):
        assert _pid(pg) == first
    assert pings == []
    # The server closes the pooled connection while it sits idle.
    killer = Database(PG_URL, auto_upgrade=False)
    with killer.engine.connect() as other:
        other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": first})
    killer.dispose()
    monkeypatch.setattr(engine_module, "IDLE_PING_SECONDS", 0.0)
    again = _pid(pg)
    assert pings and again != first
