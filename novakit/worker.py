"""Carry a request on after its caller has gone: the background half of ``wait: false``.

The ``server`` and ``server_action`` modules (through ``novakit.desired``)
record a request and start it in their own process - ``API.create_servers`` or
``API.act(..., defer=True)`` - so that validation, quota, locks and the state table answer
while the caller waits, and a refused request changes nothing. The part that
takes time (scheduling and building, a host running an action, the next step
of a path such as build-then-stop) is a :class:`Job` handed to a worker
process started here (``python -m novakit.worker``). The worker runs in a
session of its own, so it outlives the Ansible module that started it; it
writes its log under ``<state_dir>/workers/`` (0600, in a 0700 directory:
``novakit.files``). With ``wait: true`` the module polls the database
(:func:`wait_for`, the one polling loop, which ``desired.wait_until`` drives)
until the server has settled or the timeout has passed; on a timeout the work
goes on.

The job travels on the worker's stdin, never on its command line, because a
deferred rebuild request carries user data; nothing of the job is logged but
uuids, action names and hosts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from novakit import exceptions, files
from novakit.config import Config, load_config
from novakit.context import RequestContext

LOG = logging.getLogger("novakit.worker")


class Step(BaseModel):
    """A lifecycle action to run in direct mode once the work before it has finished."""

    action: str
    options: dict[str, Any] = Field(default_factory=dict)


class Job(BaseModel):
    """What a worker carries on with, in order: build, send the deferred request, the later steps."""

    server: str  # uuid of the server the job is about
    project_id: str
    user_id: str
    roles: list[str]
    request_id: str
    config: str | None = None
    db_url: str | None = None
    build: list[str] = Field(default_factory=list)
    request: dict[str, Any] | None = None  # a deferred action's ComputeRequest, as ``to_wire()`` wrote it
    then: list[Step] = Field(default_factory=list)

    @classmethod
    def for_context(cls, ctx: RequestContext, server: str, **fields: Any) -> Job:
        return cls(
            server=server,
            project_id=ctx.project_id,
            user_id=ctx.user_id,
            roles=list(ctx.roles),
            request_id=ctx.request_id,
            **fields,
        )

    def context(self) -> RequestContext:
        return RequestContext(self.project_id, self.user_id, list(self.roles), self.request_id)


def log_dir(conf: Config) -> Path:
    return Path(conf.state_dir) / "workers"


def start(conf: Config, job: Job) -> tuple[subprocess.Popen[bytes], Path]:
    """Start a detached worker for ``job``; returns the process and its log file."""
    import novakit

    logs = files.private_dir(log_dir(conf))
    log_path = logs / f"{job.request_id}-{job.server}.log"
    env = dict(os.environ)
    # The worker imports the same novakit as its caller, wherever that was installed.
    package_root = str(Path(novakit.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    with files.open_private(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "novakit.worker"],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(logs),
            env=env,
            start_new_session=True,
        )
    assert proc.stdin is not None
    proc.stdin.write(job.model_dump_json().encode())
    proc.stdin.close()
    return proc, log_path


def run(job: Job) -> None:
    """The job, in this process: what the worker does (and what a test may call directly)."""
    from novakit.compute import rounds
    from novakit.compute.api import API
    from novakit.db.engine import Database
    from novakit.host.messages import ComputeRequest

    conf = load_config(Path(job.config) if job.config else None, db_url=job.db_url)
    api = API(Database.from_config(conf), conf)
    conductor = api.conductor
    ctx = job.context()
    if job.build:
        # The request's lease is renewed first: work heal has taken over (the worker started
        # too late) or that was deleted meanwhile is not this worker's any more.
        build = conductor.renew_leases(ctx, job.build)
        LOG.info("building %s (request %s)", ", ".join(build) or "nothing", ctx.request_id)
        if build:
            # Scheduled here, then delivered and recorded round after round as every build is.
            rounds.run(conductor.rpc, conductor, ctx, conductor.schedule_instances(ctx, build))
    if job.request is not None:
        request = ComputeRequest.model_validate(job.request)
        owned = conductor.renew_leases(
            ctx, [i.uuid for i in request.instances], request.options.get("timeout") or 0
        )
        if not owned:
            LOG.warning(
                "%s of %s: no longer this request's to run (taken over or deleted)",
                request.action,
                job.server,
            )
            return
        LOG.info("%s of %s on host %s", request.operation, job.server, request.host)
        # Sent through the conductor's rpc and recorded by it; no scheduler is built for this.
        rounds.run(conductor.rpc, conductor, ctx, [request])
    for step in job.then:
        server = api.get(ctx, job.server)
        if server["vm_state"] == "error":
            LOG.warning("server %s is in error; %s not attempted", job.server, step.action)
            return
        LOG.info("%s of %s", step.action, job.server)
        api.act(ctx, job.server, step.action, step.options, declarative=True)
    LOG.info("done: %s", job.server)


def steady(server: dict[str, Any] | None) -> bool:
    """Nothing in progress: deleted, or no task running and not building (what ``wait_for``'s
    callers wait for when they wait for nothing in particular)."""
    return server is None or (server["task_state"] is None and server["vm_state"] != "building")


def wait_for(
    read: Callable[[], dict[str, Any] | None],
    settled: Callable[[dict[str, Any] | None], bool],
    timeout: float,
    proc: subprocess.Popen[bytes] | None = None,
    interval: float = 0.2,
) -> tuple[dict[str, Any] | None, str | None]:
    """Poll ``read()`` (a server view, None once deleted) until ``settled`` says so.

    Returns the last view and, when it did not settle, why: ``"timeout"`` or
    ``"worker ended"`` (the worker exited and the server is still not there).
    Once the server has settled, the worker ``proc`` is given what is left of
    the timeout to end: its last writes (the instance action's finish, the
    host's usage) follow the server's, and a caller that returns should leave
    nothing still moving.
    """
    deadline = time.monotonic() + timeout
    while True:
        server = read()
        if settled(server):
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                server = read()
            return server, None
        if proc is not None and proc.poll() is not None:
            server = read()  # it may have settled just before the worker exited
            return server, None if settled(server) else "worker ended"
        if time.monotonic() >= deadline:
            return server, "timeout"
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def main() -> int:
    logging.basicConfig(
        stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(message)s"
    )
    job = Job.model_validate(json.loads(sys.stdin.read()))
    try:
        run(job)
    except exceptions.NovakitError as exc:
        LOG.error("server %s: %s", job.server, exc.format_message())
        return 1
    except Exception:
        LOG.exception("server %s: the worker failed", job.server)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
