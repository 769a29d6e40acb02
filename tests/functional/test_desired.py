"""novakit.desired: a server brought where a caller declares it, its dry run refusing as the real run does.

The work goes on in real detached workers (novakit.worker), as it does under the modules.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from novakit import desired, exceptions
from novakit.catalog import flavors, images
from novakit.context import RequestContext
from novakit.virt.fake import failure_env_var
from tests.functional.cloud import HOSTS, Cloud, boot

ALICE = RequestContext("project-a", "alice", ["member"])
BOB = RequestContext("project-a", "bob", ["member"])
NEW = {"flavor": "m1.small", "image": "tiny"}


def waiting(cloud: Cloud, timeout: float = 60, **fields: Any) -> desired.Background:
    return desired.Background(wait=True, timeout=timeout, db_url=cloud.db.url, **fields)


def trail(cloud: Cloud, ref: str) -> list[str]:
    return [a["action"] for a in cloud.api.list_actions(cloud.admin, ref)]


def same_answer(cloud: Cloud, call: Callable[..., desired.Outcome]) -> tuple[str, Any]:
    """What ``call(dry_run=True)`` says, having changed nothing, which the real call then does.

    ``("refused", message)``, the same error in both; or ``("done", actions)``.
    """
    before = cloud.snapshot()
    try:
        dry: Any = call(dry_run=True)
    except exceptions.NovakitError as exc:
        dry = exc
    assert cloud.snapshot() == before, "a dry run changed something"
    try:
        real: Any = call(dry_run=False)
    except exceptions.NovakitError as exc:
        real = exc
    if isinstance(dry, exceptions.NovakitError):
        assert isinstance(real, type(dry)) and type(real) is type(dry), (dry, real)
        assert cloud.snapshot() == before, "a refused request changed something"
        assert real.format_message() == dry.format_message()
        return "refused", real.format_message()
    assert not isinstance(real, exceptions.NovakitError), (dry, real)
    assert (dry.changed, dry.actions) == (real.changed, real.actions)
    return "done", real.actions


def same_refusal(cloud: Cloud, call: Callable[..., Any]) -> str:
    """The refusal of ``call(dry_run=True)``, which must change nothing and be the real call's too."""
    answer, message = same_answer(cloud, call)
    assert answer == "refused", message
    return str(message)


def test_a_new_server_is_built_in_the_background_and_a_second_run_changes_nothing(cloud: Cloud) -> None:
    api, ctx = cloud.api, cloud.admin
    plan = desired.ensure(api, ctx, "web", create=NEW, dry_run=True)
    assert plan.result() == {"changed": True, "actions": ["create"], "would_schedule_to": "compute-3"}
    assert api.list(ctx) == []

    made = desired.ensure(api, ctx, "web", create=NEW, background=waiting(cloud))
    assert made.changed and made.actions == ["create"] and made.worker_log
    assert made.server is not None and (made.server["status"], made.server["host"]) == ("ACTIVE", "compute-3")
    assert f"done: {made.server['id']}" in Path(made.worker_log).read_text()

    again = desired.ensure(api, ctx, "web", create=NEW, background=waiting(cloud))
    assert (again.changed, again.actions, again.worker_log) == (False, [], None)
    assert again.diff()[0] == again.diff()[1]


def test_a_power_state_is_reached_through_the_state_table(cloud: Cloud) -> None:
    api, ctx = cloud.api, cloud.admin
    server = boot(cloud, ctx, "pow")
    api.pause(ctx, "pow")
    assert desired.actions_to(api.get(ctx, "pow"), "stopped") == ["unpause", "stop"]
    dry = desired.ensure(api, ctx, "pow", "stopped", dry_run=True)
    assert (dry.changed, dry.actions, dry.server["status"]) == (True, ["unpause", "stop"], "PAUSED")

    out = desired.ensure(api, ctx, "pow", "stopped", options={"timeout": 5}, background=waiting(cloud))
    assert out.server is not None and out.server["status"] == "SHUTOFF"
    assert trail(cloud, server["id"]) == ["create", "pause", "unpause", "stop"]
    assert desired.ensure(api, ctx, "pow", "stopped").changed is False
    # present leaves the power state as it is.
    assert desired.ensure(api, ctx, "pow").actions == []

    # A new server that should be suspended: built, then suspended, by one worker.
    new = desired.ensure(api, ctx, "sus", "suspended", create=NEW, background=waiting(cloud))
    assert new.actions == ["create", "suspend"] and new.server["status"] == "SUSPENDED"


def test_a_server_in_error_or_busy_is_refused_with_the_reason(cloud: Cloud, monkeypatch: Any) -> None:
    api, ctx = cloud.api, cloud.admin
    for host in HOSTS:
        monkeypatch.setenv(failure_env_var(host), "abort_spawn")
    with pytest.raises(exceptions.ServerFailed) as failed:
        desired.ensure(api, ctx, "doomed", create=NEW, background=waiting(cloud))
    assert failed.value.changed and failed.value.server["status"] == "ERROR"
    assert failed.value.format_message().startswith("server doomed is ERROR: ")
    assert "abort" in failed.value.format_message()

    refused = same_refusal(
        cloud, lambda dry_run: desired.ensure(api, ctx, "doomed", "stopped", dry_run=dry_run)
    )
    assert refused.startswith(
        "server doomed is ERROR (task_state: none); it cannot be brought to state stopped"
    )
    assert "abort" in refused and "hard-reboot or rebuild it" in refused

    busy = {**api.get(ctx, "doomed"), "vm_state": "active", "task_state": "rebooting", "status": "REBOOT"}
    with pytest.raises(exceptions.StateUnreachable, match="wait for its task to end"):
        desired.actions_to(busy, "stopped")
    assert desired.actions_to(busy, "started") == []

    # Deleting it works, and waits until it is gone.
    assert desired.actions_to(api.get(ctx, "doomed"), "absent") == ["delete"]
    gone = desired.ensure(api, ctx, "doomed", "absent", background=waiting(cloud))
    assert (gone.changed, gone.actions, gone.server) == (True, ["delete"], None)
    assert desired.ensure(api, ctx, "doomed", "absent").result() == {"changed": False, "actions": []}


def test_dry_runs_refuse_as_the_real_runs_do(cloud: Cloud) -> None:
    api = cloud.api
    flavors.create(api.db, cloud.admin, {"name": "m1.tiny", "vcpus": 1, "memory_mb": 256})
    images.create(api.db, cloud.admin, {"name": "hungry", "min_ram": 2048})

    def create(data: dict[str, Any]) -> Callable[..., Any]:
        return lambda dry_run: desired.ensure(api, ALICE, "x", create=data, dry_run=dry_run)

    assert same_refusal(cloud, create({"flavor": "m1.tiny", "image": "hungry"})) == (
        "Invalid flavor: image hungry needs at least 2048 MB of RAM"
    )
    unknown = "7b0c2f3e-9f4d-4a51-8f5e-3d2c1b0a9e8f"
    hints = {**NEW, "scheduler_hints": {"same_host": [unknown]}}
    assert same_refusal(cloud, create(hints)) == f"Instance {unknown} could not be found."
    assert "flavor and an image are needed" in same_refusal(cloud, create({"image": "tiny"}))

    # Alice locks her server. Bob's stop and delete are refused; whatever the lock does to Alice's
    # own stop, the dry run says it first.
    boot(cloud, ALICE, "locked")
    desired.perform(api, ALICE, "locked", "lock", {"reason": "mine"})
    for state in ("stopped", "absent"):
        refused = same_refusal(
            cloud, lambda dry_run, s=state: desired.ensure(api, BOB, "locked", s, dry_run=dry_run)
        )
        assert "is locked (mine)" in refused
    own = same_answer(
        cloud,
        lambda dry_run: desired.ensure(
            api, ALICE, "locked", "stopped", dry_run=dry_run, background=waiting(cloud)
        ),
    )
    assert own[0] == "refused" and "is locked (mine)" in own[1] or own == ("done", ["stop"])

    # A declared flavor or image other than the server's is refused, dry or not.
    other = same_refusal(
        cloud,
        lambda dry_run: desired.ensure(api, ALICE, "locked", create={"flavor": "m1.large"}, dry_run=dry_run),
    )
    assert other == (
        "Server locked exists with flavor m1.small, not m1.large; resizing is not supported: "
        "delete it and create it again, or use another name"
    )
    with pytest.raises(exceptions.ServerDiffers, match="rebuild it"):
        desired.ensure(api, ALICE, "locked", create={"image": "tiny-2"})


def test_perform_is_declarative_and_waits_for_the_host(cloud: Cloud) -> None:
    api, ctx = cloud.api, cloud.admin
    server = boot(cloud, ctx, "act")
    options = {"reason": "window", "reboot_type": "hard", "image": None, "name": None}
    lock = desired.perform(api, ctx, "act", "lock", options)
    assert (lock.changed, lock.actions, lock.server["locked_reason"]) == (True, ["lock"], "window")
    assert desired.perform(api, ctx, "act", "lock", options, dry_run=True).changed is False
    assert desired.perform(api, ctx, "act", "lock", options).result()["actions"] == []

    dry = desired.perform(api, ctx, "act", "reboot", options, dry_run=True)
    assert (dry.changed, dry.server["status"]) == (True, "ACTIVE")
    reboot = desired.perform(api, ctx, "act", "reboot", options, background=waiting(cloud))
    assert reboot.server["status"] == "ACTIVE" and reboot.worker_log
    assert trail(cloud, server["id"]) == ["create", "lock", "reboot"]
    assert reboot.diff()[0]["status"] == "ACTIVE"

    later = desired.perform(
        api,
        ctx,
        "act",
        "rebuild",
        {"image": "tiny-2"},
        background=desired.Background(wait=False, db_url=cloud.db.url),
    )
    assert later.server["status"] == "REBUILD" and later.worker_log
    done = desired.wait_until(api, ctx, later.server, desired.steady, "steady", waiting(cloud))
    assert done is not None and done["status"] == "ACTIVE" and done["image"] != server["image"]


def test_a_wait_ends_with_the_server_as_last_seen(cloud: Cloud, monkeypatch: Any, tmp_path: Path) -> None:
    api, ctx = cloud.api, cloud.admin
    for host in HOSTS:
        monkeypatch.setenv(failure_env_var(host), "slow_spawn")
    with pytest.raises(exceptions.WaitTimeout) as timeout:
        desired.ensure(api, ctx, "slow", create=NEW, background=waiting(cloud, timeout=0.5))
    message = timeout.value.format_message()
    assert message.startswith("timed out after 0.5 s waiting for server slow to be ACTIVE: it is BUILD")
    assert "the work goes on in the background (log: " in message and timeout.value.changed

    # The next run waits for the build first (a busy server), and then has nothing to do.
    settled = desired.ensure(api, ctx, "slow", create=NEW, background=waiting(cloud))
    assert (settled.changed, settled.server["status"]) == (False, "ACTIVE")

    # A worker that cannot start its job ends, and the wait says so rather than waiting on.
    broken = waiting(cloud, config=str(tmp_path / "missing.toml"))
    with pytest.raises(exceptions.WorkerEnded) as ended:
        desired.ensure(api, ctx, "stuck", create=NEW, background=broken)
    assert ended.value.format_message().startswith(
        "server stuck is not ACTIVE and its background worker has ended: "
        "it is BUILD (task_state: scheduling); see "
    )
