"""Run novakit's playbooks through ansible-runner, as AWX does, and stream their events.

``run`` blocks and returns a ``RunResult``; ``run_async`` returns at once with a
thread and the runner, for callers that poll. Both hand every ansible-runner
event to ``on_event`` as it happens, and both enable the novakit callback
plugin, so the run gets one request id (the runner's ident unless the caller or
AWX gives one) and unreachable compute hosts become faults and reschedules.

``boot`` is the entry the CLI's ``novakit boot`` uses::

    def show(event: dict) -> None:           # one ansible-runner event
        if event.get("event") == "runner_on_ok":
            progress.advance(task)

    result = boot("web", flavor="m1.small", image="tiny", count=3, on_event=show)
    result.ok, result.servers, result.request_id

Secrets in extra variables (``user_data``, ``admin_password``) reach ansible-runner only through
its ``env/extravars`` file, which is removed when the run ends; the tasks that
carry them set ``no_log``, so they are in no event or artifact.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PLAYBOOKS = ROOT / "playbooks"
DEFAULT_INVENTORY = ROOT / "inventory" / "local.yml"
CALLBACK = "novakit.cloud.novakit"

EventHandler = Callable[[dict[str, Any]], None]


@dataclass
class RunResult:
    """What a run ended with: ansible-runner's status and rc, its stats, what novakit published."""

    status: str
    rc: int
    ident: str
    request_id: str
    artifact_dir: Path
    stats: dict[str, Any] = field(default_factory=dict)
    published: dict[str, Any] = field(default_factory=dict)  # set_stats data (novakit_servers, ...)
    runner: Any = None

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0

    @property
    def servers(self) -> list[dict[str, Any]]:
        return list(self.published.get("novakit_servers") or [])


def playbook_path(playbook: str | os.PathLike[str]) -> str:
    """``boot``, ``boot.yml``, a path, or a collection playbook name (``novakit.cloud.boot``)."""
    text = str(playbook)
    if text.startswith("novakit.cloud."):
        return text
    path = Path(text)
    if path.is_file():
        return str(path.resolve())
    for candidate in (PLAYBOOKS / text, PLAYBOOKS / f"{text}.yml"):
        if candidate.is_file():
            return str(candidate)
    known = sorted(p.stem for p in PLAYBOOKS.glob("*.yml"))
    from novakit import exceptions

    raise exceptions.ValidationError("playbook", f"no playbook {text!r}; known playbooks: {', '.join(known)}")


def _prepare(
    playbook: str | os.PathLike[str],
    *,
    inventory: str | os.PathLike[str] | None,
    extravars: dict[str, Any] | None,
    envvars: dict[str, str] | None,
    private_data_dir: str | os.PathLike[str] | None,
    ident: str | None,
    request_id: str | None,
    verbosity: int,
    check: bool,
    on_event: EventHandler | None,
) -> tuple[dict[str, Any], RunResult, Path]:
    ident = ident or uuid.uuid4().hex
    private = Path(private_data_dir or tempfile.mkdtemp(prefix="novakit-runner-"))
    private.mkdir(parents=True, exist_ok=True)
    _forget_extravars(private)
    extravars = dict(extravars or {})
    if request_id:
        extravars["novakit_request_id"] = request_id
    rid = str(extravars.get("novakit_request_id") or os.environ.get("NOVAKIT_REQUEST_ID") or ident)
    rid = rid if rid.startswith("req-") else f"req-{rid}"
    env = {
        # The ansible-playbook next to this interpreter, so that modules run where novakit is installed.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(
            [str(PLAYBOOKS / "collections"), os.environ.get("ANSIBLE_COLLECTIONS_PATH", "")]
        ).rstrip(os.pathsep),
        "ANSIBLE_CALLBACKS_ENABLED": ",".join(
            filter(None, [os.environ.get("ANSIBLE_CALLBACKS_ENABLED", ""), CALLBACK])
        ),
        "NOVAKIT_REQUEST_ID": rid,
        **{k: v for k, v in os.environ.items() if k.startswith("NOVAKIT_") and k != "NOVAKIT_REQUEST_ID"},
        **(envvars or {}),
    }
    cmdline = "--check --diff" if check else None

    def handler(event: dict[str, Any]) -> bool:
        if on_event is not None:
            on_event(event)
        return True  # keep the event in the artifacts

    kwargs: dict[str, Any] = {
        "private_data_dir": str(private),
        "playbook": playbook_path(playbook),
        # ansible-runner runs from its private directory: a relative path would name nothing there.
        "inventory": str(Path(inventory).resolve() if inventory else DEFAULT_INVENTORY),
        "envvars": env,
        "extravars": extravars,
        "ident": ident,
        "quiet": True,
        "verbosity": verbosity,
        "event_handler": handler,
        "cmdline": cmdline,
    }
    result = RunResult(
        status="unstarted", rc=-1, ident=ident, request_id=rid, artifact_dir=private / "artifacts" / ident
    )
    return kwargs, result, private


def _finish(runner: Any, result: RunResult, private: Path) -> RunResult:
    _forget_extravars(private)
    result.runner = runner
    result.status, result.rc = runner.status, runner.rc if runner.rc is not None else -1
    result.stats = dict(runner.stats or {})
    for event in runner.events:
        data = (event.get("event_data") or {}).get("res") or {}
        published = (data.get("ansible_stats") or {}).get("data") if isinstance(data, dict) else None
        if published:
            result.published.update(published)
    return result


def _forget_extravars(private: Path) -> None:
    """Remove what ansible-runner wrote under ``env/`` for this run.

    The extra variables may hold user data and the environment a database URL with
    its password: they must not outlive the run on disk. ansible-runner also prefers
    files it finds there to what the next run passes, so each run starts clean.
    """
    for name in ("extravars", "envvars", "cmdline"):
        (private / "env" / name).unlink(missing_ok=True)


def run(
    playbook: str | os.PathLike[str],
    *,
    inventory: str | os.PathLike[str] | None = None,
    extravars: dict[str, Any] | None = None,
    envvars: dict[str, str] | None = None,
    private_data_dir: str | os.PathLike[str] | None = None,
    ident: str | None = None,
    request_id: str | None = None,
    verbosity: int = 0,
    check: bool = False,
    on_event: EventHandler | None = None,
) -> RunResult:
    """Run one of the playbooks (``boot``, ``delete``, ``server_action``, ...) and wait for it."""
    import ansible_runner

    kwargs, result, private = _prepare(
        playbook,
        inventory=inventory,
        extravars=extravars,
        envvars=envvars,
        private_data_dir=private_data_dir,
        ident=ident,
        request_id=request_id,
        verbosity=verbosity,
        check=check,
        on_event=on_event,
    )
    try:
        runner = ansible_runner.run(**kwargs)
    finally:
        _forget_extravars(private)
    return _finish(runner, result, private)


def run_async(
    playbook: str | os.PathLike[str],
    *,
    inventory: str | os.PathLike[str] | None = None,
    extravars: dict[str, Any] | None = None,
    envvars: dict[str, str] | None = None,
    private_data_dir: str | os.PathLike[str] | None = None,
    ident: str | None = None,
    request_id: str | None = None,
    verbosity: int = 0,
    check: bool = False,
    on_event: EventHandler | None = None,
) -> tuple[threading.Thread, Callable[[], RunResult]]:
    """Start a run in a thread; returns the thread and a function that waits and returns the result."""
    import ansible_runner

    kwargs, result, private = _prepare(
        playbook,
        inventory=inventory,
        extravars=extravars,
        envvars=envvars,
        private_data_dir=private_data_dir,
        ident=ident,
        request_id=request_id,
        verbosity=verbosity,
        check=check,
        on_event=on_event,
    )
    thread, runner = ansible_runner.run_async(**kwargs)

    def wait() -> RunResult:
        thread.join()
        return _finish(runner, result, private)

    return thread, wait


def boot(
    server_name: str,
    *,
    flavor: str = "m1.small",
    image: str = "tiny",
    count: int = 1,
    min_count: int | None = None,
    user_data: str | None = None,
    admin_password: str | None = None,
    availability_zone: str | None = None,
    server_group: str | None = None,
    inventory: str | os.PathLike[str] | None = None,
    request_id: str | None = None,
    check: bool = False,
    private_data_dir: str | os.PathLike[str] | None = None,
    on_event: EventHandler | None = None,
) -> RunResult:
    """Boot ``count`` servers through ``playbooks/boot.yml`` and return the result.

    ``on_event`` receives every ansible-runner event (a dict with ``event``,
    ``event_data`` (``task``, ``host``, ``res``...), ``stdout``, ``counter``) as it
    happens: enough for a progress bar over the plays and hosts. The result's
    ``servers`` are what the playbook published (id, name, host, addresses,
    status), ``request_id`` keys the run's instance actions, ``ok`` says whether
    the playbook succeeded (a server in ERROR does not fail it: check ``servers``).
    """
    extravars: dict[str, Any] = {"server_name": server_name, "flavor": flavor, "image": image, "count": count}
    optional = {
        "min_count": min_count,
        "user_data": user_data,
        "admin_password": admin_password,
        "availability_zone": availability_zone,
        "server_group": server_group,
    }
    extravars.update({k: v for k, v in optional.items() if v is not None})
    return run(
        "boot",
        inventory=inventory,
        extravars=extravars,
        request_id=request_id,
        check=check,
        private_data_dir=private_data_dir,
        on_event=on_event,
    )
