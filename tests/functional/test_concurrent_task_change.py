"""delete, lock, unlock and rename do not fail when another action of the server commits while they
are checked (issue 25, item 8): Nova's do not look at the task state, so a change of it between the
read and the guarded write is read again, and the action goes on from what it then finds.

Only PostgreSQL lets two writers interleave so (SQLite runs one writer at a time, behind a gate).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from novakit.compute import prepare
from novakit.context import RequestContext
from tests.functional.cloud import Cloud, boot


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext("p1", "u1")


def _stop_commits_meanwhile(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch, action: str, ref: str = "web"
) -> None:
    """A stop of "web" is under way; it ends (its final write committed by another thread) after
    ``action`` has read the server and before its guarded write."""
    request = cloud.api.act(ctx, ref, "stop", defer=True).request
    assert request is not None
    real = prepare.step_for
    fired: list[str] = []

    def step_for(name: str) -> Any:
        step = real(name)

        def racing(*args: Any, **kwargs: Any) -> Any:
            if name == action and not fired:
                fired.append(name)
                other = threading.Thread(target=cloud.api.conductor.run_action, args=(ctx, request))
                other.start()
                other.join()
            return step(*args, **kwargs)

        return racing

    monkeypatch.setattr(prepare, "step_for", step_for)


def _postgresql_only(cloud: Cloud) -> None:
    if cloud.db.engine.dialect.name == "sqlite":
        pytest.skip("SQLite runs one writer at a time: the read and the write cannot be interleaved")


@pytest.mark.parametrize("action", ["lock", "rename", "delete"])
def test_an_action_that_ignores_the_task_state_is_not_refused_when_another_commits_meanwhile(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    _postgresql_only(cloud)
    server = boot(cloud, ctx, "web")
    _stop_commits_meanwhile(cloud, ctx, monkeypatch, action)
    options = {"name": "www"} if action == "rename" else None

    out = cloud.api.act(ctx, "web", action, options)

    assert out.changed
    if action == "delete":
        assert cloud.api.list(cloud.admin) == []
        return
    shown = cloud.api.get(ctx, server["id"])
    assert shown["status"] == "SHUTOFF"  # the stop's end stands
    assert (shown["locked"], shown["name"]) == ((True, "web") if action == "lock" else (False, "www"))


def test_unlock_is_not_refused_when_another_action_commits_meanwhile(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    _postgresql_only(cloud)
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "lock")
    _stop_commits_meanwhile(
        cloud, cloud.admin, monkeypatch, "unlock", server["id"]
    )  # an admin may stop it locked

    out = cloud.api.act(ctx, "web", "unlock")

    assert out.changed
    shown = cloud.api.get(ctx, server["id"])
    assert (shown["status"], shown["locked"]) == ("SHUTOFF", False)
