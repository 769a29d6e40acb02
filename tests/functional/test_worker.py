"""The background worker of ``wait: false`` (novakit.worker): a detached process finishes what
the API started, and wait_for tells a settled server from a timeout or a worker that ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from novakit import worker
from novakit.compute import schemas
from tests.functional.cloud import Cloud, boot

pytestmark = pytest.mark.postgres


def job_for(cloud: Cloud, server: str, **fields: object) -> worker.Job:
    return worker.Job.for_context(cloud.admin, server, db_url=cloud.db.url, **fields)


def test_a_detached_worker_builds_then_stops_a_recorded_server(cloud: Cloud) -> None:
    api, ctx = cloud.api, cloud.admin
    (server,) = api.create(
        ctx,
        schemas.parse(schemas.ServerCreate, {"name": "bg", "flavor": "m1.small", "image": "tiny"}),
        build=False,
    )
    assert server["status"] == "BUILD"
    job = job_for(cloud, server["id"], build=[server["id"]], then=[worker.Step(action="stop")])
    proc, log = worker.start(cloud.conf, job)
    done, why = worker.wait_for(
        lambda: api.get(ctx, server["id"]),
        lambda s: s is not None and s["vm_state"] in ("stopped", "error") and s["task_state"] is None,
        timeout=60,
        proc=proc,
    )
    assert why is None and done is not None and done["status"] == "SHUTOFF", (done, log.read_text())
    assert proc.wait(timeout=30) == 0
    assert log.parent == cloud.conf.state_dir / "workers" and f"done: {server['id']}" in log.read_text()
    assert [a["action"] for a in api.list_actions(ctx, server["id"])] == ["create", "stop"]


def test_a_deferred_action_is_sent_and_recorded_by_the_job(cloud: Cloud) -> None:
    api, ctx = cloud.api, cloud.admin
    server = boot(cloud, ctx, "deferred")
    request = api.act(ctx, server["id"], "reboot", {"reboot_type": "HARD"}, defer=True).request
    assert api.get(ctx, server["id"])["status"] == "HARD_REBOOT"
    worker.run(job_for(cloud, server["id"], request=request.to_wire()))
    after = api.get(ctx, server["id"])
    assert (after["status"], after["task_state"]) == ("ACTIVE", None)
    reboot = api.list_actions(ctx, server["id"])[-1]
    assert reboot["action"] == "reboot" and reboot["finish_time"] is not None
    assert reboot["events"] and reboot["events"][-1]["result"] == "Success"


def test_wait_for_tells_a_timeout_from_a_worker_that_ended() -> None:
    busy = {"status": "BUILD", "task_state": "spawning"}
    never = lambda s: False  # noqa: E731
    view, why = worker.wait_for(lambda: busy, never, timeout=0.3)
    assert (view, why) == (busy, "timeout")
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert worker.wait_for(lambda: busy, never, timeout=30, proc=ended) == (busy, "worker ended")
    assert worker.wait_for(lambda: None, lambda s: s is None, timeout=0) == (None, None)


def test_the_job_holds_no_secret_in_its_log(cloud: Cloud, tmp_path: Path) -> None:
    api, ctx = cloud.api, cloud.admin
    server = boot(cloud, ctx, "secretive")
    request = api.act(
        ctx, server["id"], "rebuild", {"image": "tiny-2", "user_data": "dWQtc2VjcmV0LTQ0"}, defer=True
    ).request
    proc, log = worker.start(cloud.conf, job_for(cloud, server["id"], request=request.to_wire()))
    assert proc.wait(timeout=60) == 0, log.read_text()
    assert api.get(ctx, server["id"])["status"] == "ACTIVE"
    assert "dWQtc2VjcmV0LTQ0" not in log.read_text() and "rebuild" in log.read_text()
