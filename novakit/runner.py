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

Nothing of a run's secrets stays on disk. The run gets a private data directory
of its own (``/tmp/novakit-runner-*``, 0700) that is removed when it ends, its
events and output read into the result first; ``keep_artifacts=True`` keeps it,
and a ``private_data_dir`` the caller names is the caller's and is kept too.
A kept directory holds no environment and no extra variables: ansible-runner
gets the environment (the database URL, with its password, and the identity)
in memory only (``suppress_env_files``), and its record of the command,
``artifacts/<ident>/command``, which it writes with the whole environment, is
rewritten without it before ansible-playbook starts. The extra variables, which
may hold user data, are written to ``env/extravars`` (0600) for ansible-playbook
to read, and removed once it has read them and again when the run ends; the
tasks that carry them (``user_data``, ``admin_password``) set ``no_log``, so they are in no event.

Where the playbooks come from: run from a checkout (the tests, an editable install),
``boot`` is the checkout's ``playbooks/boot.yml`` and the inventory defaults to its
``inventory/local.yml``. Installed (a wheel, or ``pip install`` of the installed
collection's own files), there is no ``playbooks/`` next to the package: ``boot``
becomes ``novakit.cloud.boot``, which ansible-playbook finds in its collections path
(``ANSIBLE_COLLECTIONS_PATH`` or Ansible's defaults), and the inventory defaults to
the copy of ``inventory/local.yml`` the package carries (``BUILTIN_INVENTORY``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

from novakit import context, files

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = "novakit.cloud"
#: A checkout's playbooks; an installed novakit has none next to it (ROOT is site-packages).
PLAYBOOKS = ROOT / "playbooks"
#: The embedded default (fake compute hosts on this machine, connection local, the Python that runs
#: ansible-playbook): a checkout's inventory/local.yml, else the copy the package carries.
BUILTIN_INVENTORY = Path(__file__).resolve().with_name("data") / "local_inventory.yml"
DEFAULT_INVENTORY = ROOT / "inventory" / "local.yml"
CALLBACK = f"{COLLECTION}.novakit"
# Ansible's collections path when ANSIBLE_COLLECTIONS_PATH does not set one.
_ANSIBLE_DEFAULT_COLLECTIONS = ("~/.ansible/collections", "/usr/share/ansible/collections")

EventHandler = Callable[[dict[str, Any]], None]


@dataclass
class RunResult:
    """What a run ended with: ansible-runner's status and rc, its events, what novakit published."""

    status: str
    rc: int
    ident: str
    request_id: str
    # The run's artifacts (stdout, job_events/), or None once removed with the run's directory.
    artifact_dir: Path | None
    stats: dict[str, Any] = field(default_factory=dict)
    published: dict[str, Any] = field(default_factory=dict)  # set_stats data (novakit_servers, ...)
    events: list[dict[str, Any]] = field(default_factory=list)  # every ansible-runner event, in order
    stdout: str = ""  # ansible-playbook's output
    # The ansible_runner.Runner while its artifacts exist (kept), else None: its events and
    # stdout are read from them.
    runner: Any = None

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0

    @property
    def servers(self) -> list[dict[str, Any]]:
        return list(self.published.get("novakit_servers") or [])


@dataclass
class _Run:
    """One run's private directory, and whether it goes when the run ends."""

    private: Path
    remove: bool

    @property
    def env_dir(self) -> Path:
        return self.private / "env"


def in_checkout() -> bool:
    """Whether novakit runs from a checkout of the repository, its playbooks next to the package."""
    return (ROOT / "galaxy.yml").is_file() and PLAYBOOKS.is_dir()


def default_inventory() -> Path:
    return DEFAULT_INVENTORY if in_checkout() and DEFAULT_INVENTORY.is_file() else BUILTIN_INVENTORY


def collections_paths(env: dict[str, str] | None = None) -> list[Path]:
    """Where ansible-playbook looks for collections: the given path, else Ansible's defaults and sys.path."""
    source: Mapping[str, str] = os.environ if env is None else env
    given = source.get("ANSIBLE_COLLECTIONS_PATH") or source.get("ANSIBLE_COLLECTIONS_PATHS")
    paths = given.split(os.pathsep) if given else list(_ANSIBLE_DEFAULT_COLLECTIONS)
    # ansible-core also finds collections installed as ansible_collections/ on its Python's sys.path.
    return [Path(p).expanduser() for p in [*paths, *sys.path] if p]


def installed_playbooks(env: dict[str, str] | None = None) -> list[str] | None:
    """The playbooks of the first novakit.cloud in the collections path, or None if none is found."""
    namespace, name = COLLECTION.split(".")
    for base in collections_paths(env):
        playbooks = base / "ansible_collections" / namespace / name / "playbooks"
        if playbooks.is_dir():
            return sorted(p.stem for p in playbooks.glob("*.yml"))
    return None


def playbook_path(playbook: str | os.PathLike[str], env: dict[str, str] | None = None) -> str:
    """``boot``, ``boot.yml``, a path, or a collection playbook name (``novakit.cloud.boot``).

    From a checkout a name is a file of its ``playbooks/``; installed, it is the
    collection's playbook of that name, left for ansible-playbook to find in the
    collections path of ``env`` (default: this process's environment).
    """
    from novakit import exceptions

    text = str(playbook)
    if text.startswith(f"{COLLECTION}."):
        return text
    path = Path(text)
    if path.is_file():
        return str(path.resolve())
    if in_checkout():
        for candidate in (PLAYBOOKS / text, PLAYBOOKS / f"{text}.yml"):
            if candidate.is_file():
                return str(candidate)
        known: list[str] | None = sorted(p.stem for p in PLAYBOOKS.glob("*.yml"))
    else:
        name = text.removesuffix(".yml")
        known = installed_playbooks(env)
        if re.fullmatch(r"[a-z_][a-z0-9_]*", name) and (known is None or name in known):
            # Also when no collection is found here (an ansible.cfg may name another path): then
            # ansible-playbook says it found no such playbook.
            return f"{COLLECTION}.{name}"
    listed = f"known playbooks: {', '.join(known)}" if known else f"the {COLLECTION} collection has none here"
    raise exceptions.ValidationError("playbook", f"no playbook {text!r}; {listed}")


class RunOptions(TypedDict, total=False):
    """How ``run`` and ``run_async`` run a playbook (each may be left out).

    ``inventory`` (default: the embedded local one), ``extravars``, ``envvars`` (added to the
    run's environment), ``private_data_dir`` (the caller's, kept; default: a temporary one),
    ``keep_artifacts`` (keep the temporary one), ``ident`` (default: a new uuid),
    ``request_id`` (the run's; default: the ident's), ``verbosity``, ``check`` (check mode with
    diff), ``on_event`` (called with every ansible-runner event as it happens)."""

    inventory: str | os.PathLike[str] | None
    extravars: dict[str, Any] | None
    envvars: dict[str, str] | None
    private_data_dir: str | os.PathLike[str] | None
    keep_artifacts: bool
    ident: str | None
    request_id: str | None
    verbosity: int
    check: bool
    on_event: EventHandler | None


def _prepare(playbook: str | os.PathLike[str], options: RunOptions) -> tuple[dict[str, Any], RunResult, _Run]:
    ident = options.get("ident") or uuid.uuid4().hex
    run_dir = _run_dir(options.get("private_data_dir"), options.get("keep_artifacts", False))
    _forget_secrets(run_dir)
    extravars = dict(options.get("extravars") or {})
    if options.get("request_id"):
        extravars["novakit_request_id"] = options.get("request_id")
    envvars = options.get("envvars")
    on_event = options.get("on_event")
    inventory = options.get("inventory")
    # The rule every plugin follows (the caller's id, NOVAKIT_REQUEST_ID, an AWX job id), else the ident.
    rid = context.run_request_id(
        extravars, {**os.environ, **(envvars or {})}
    ) or context.normalize_request_id(ident)
    env = _run_env(rid, envvars)
    if extravars:
        _write_extravars(run_dir, extravars)

    def handler(event: dict[str, Any]) -> bool:
        if event.get("event") == "playbook_on_start":
            # ansible-playbook has read its extra variables before it starts the playbook.
            _forget_extravars(run_dir)
        if on_event is not None:
            on_event(event)
        return True  # keep the event in the artifacts

    kwargs: dict[str, Any] = {
        "private_data_dir": str(run_dir.private),
        "playbook": playbook_path(playbook, env),
        # ansible-runner runs from its private directory: a relative path would name nothing there.
        "inventory": str(Path(inventory).resolve() if inventory else default_inventory()),
        # In memory only: with suppress_env_files ansible-runner writes no env/envvars.
        "envvars": env,
        "suppress_env_files": True,
        "ident": ident,
        "quiet": True,
        "verbosity": options.get("verbosity", 0),
        "event_handler": handler,
        "status_handler": _status_handler,
        "cmdline": "--check --diff" if options.get("check") else None,
    }
    result = RunResult(
        status="unstarted",
        rc=-1,
        ident=ident,
        request_id=rid,
        artifact_dir=run_dir.private / "artifacts" / ident,
    )
    return kwargs, result, run_dir


def _run_dir(private_data_dir: str | os.PathLike[str] | None, keep_artifacts: bool) -> _Run:
    """The caller's private data directory, kept; else a new one, removed at the end unless
    ``keep_artifacts``."""
    if private_data_dir is not None:
        return _Run(files.private_dir(private_data_dir), remove=False)
    return _Run(Path(tempfile.mkdtemp(prefix="novakit-runner-")), remove=not keep_artifacts)


def _write_extravars(run_dir: _Run, extravars: dict[str, Any]) -> None:
    """ansible-runner passes env/extravars to ansible-playbook as -e @file when it is there;
    handed to ansible-runner instead, they would be on the command line, in `ps` for all."""
    files.private_dir(run_dir.env_dir)
    with files.open_private(run_dir.env_dir / "extravars", "w", encoding="utf-8") as fh:
        json.dump(extravars, fh)


def _run_env(rid: str, envvars: dict[str, str] | None) -> dict[str, str]:
    """ansible-playbook's environment: this interpreter's ansible-playbook, novakit's callback,
    the run's request id, the caller's NOVAKIT_ settings and ``envvars``, the collections."""
    env = {
        # The ansible-playbook next to this interpreter, so that modules run where novakit is installed.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CALLBACKS_ENABLED": ",".join(
            filter(None, [os.environ.get("ANSIBLE_CALLBACKS_ENABLED", ""), CALLBACK])
        ),
        "NOVAKIT_REQUEST_ID": rid,
        **{k: v for k, v in os.environ.items() if k.startswith("NOVAKIT_") and k != "NOVAKIT_REQUEST_ID"},
        **(envvars or {}),
    }
    # A checkout's collection first (its playbooks/collections links to the checkout); installed,
    # the collections path the caller has, or Ansible's defaults when it has none.
    collections = [str(PLAYBOOKS / "collections")] if in_checkout() else []
    given = env.get("ANSIBLE_COLLECTIONS_PATH", os.environ.get("ANSIBLE_COLLECTIONS_PATH", ""))
    collections += [given] if given else []
    if collections:
        env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join(collections)
    return env


def _status_handler(data: dict[str, Any], runner_config: Any = None) -> None:
    # "running" comes after ansible-runner has recorded the command and before it starts it.
    if data.get("status") == "running" and runner_config is not None:
        _scrub_command(Path(runner_config.artifact_dir))


def _finish(runner: Any, result: RunResult, run_dir: _Run) -> RunResult:
    """Read the run's events and output into ``result``, then remove or scrub its directory."""
    _forget_secrets(run_dir, result)
    try:
        result.status, result.rc = runner.status, runner.rc if runner.rc is not None else -1
        result.events = list(runner.events)
        result.stats = dict(runner.stats or {})
        stdout = run_dir.private / "artifacts" / result.ident / "stdout"
        if stdout.is_file():
            result.stdout = stdout.read_text(encoding="utf-8", errors="replace")
        for event in result.events:
            data = (event.get("event_data") or {}).get("res") or {}
            published = (data.get("ansible_stats") or {}).get("data") if isinstance(data, dict) else None
            if published:
                result.published.update(published)
    finally:
        if run_dir.remove:
            _remove(run_dir, result)
        else:
            result.runner = runner
    return result


def _remove(run_dir: _Run, result: RunResult) -> None:
    shutil.rmtree(run_dir.private, ignore_errors=True)
    result.artifact_dir = None


def _forget_extravars(run_dir: _Run) -> None:
    (run_dir.env_dir / "extravars").unlink(missing_ok=True)


def _forget_secrets(run_dir: _Run, result: RunResult | None = None) -> None:
    """Remove what may be left under ``env/`` of a run, and the environment from its command record.

    The extra variables may hold user data and the environment a database URL with
    its password: they must not outlive the run on disk. ansible-runner also reads
    files it finds under ``env/`` into the next run, so each run starts clean.
    """
    for name in ("extravars", "envvars", "cmdline"):
        (run_dir.env_dir / name).unlink(missing_ok=True)
    if result is not None and result.artifact_dir is not None:
        _scrub_command(result.artifact_dir)


def _abandon(run_dir: _Run, result: RunResult) -> None:
    """After ansible-runner raised: nothing to read, the same clean-up."""
    _forget_secrets(run_dir, result)
    if run_dir.remove:
        _remove(run_dir, result)


def _scrub_command(artifact_dir: Path) -> None:
    """Rewrite ansible-runner's ``command`` record without the environment it dumps with it.

    The command line and working directory stay (they say what ran, and hold no
    extra variables: those are in a file); the environment holds NOVAKIT_DB_URL.
    """
    path = artifact_dir / "command"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return
    if not isinstance(record, dict) or "env" not in record:
        return
    record.pop("env")
    tmp = path.with_name(".command.tmp")
    with files.open_private(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)


def run(playbook: str | os.PathLike[str], **options: Unpack[RunOptions]) -> RunResult:
    """Run one of the playbooks (``boot``, ``delete``, ``server_action``, ...) and wait for it
    (``options``: ``RunOptions``).

    The run's directory goes when it ends unless ``keep_artifacts`` or ``private_data_dir``
    is given; the result carries its events and output either way.
    """
    _thread, wait = _start(playbook, options, wait_here=True)
    return wait()


def run_async(
    playbook: str | os.PathLike[str], **options: Unpack[RunOptions]
) -> tuple[threading.Thread, Callable[[], RunResult]]:
    """Start a run in a thread (``options``: ``RunOptions``); returns the thread and a function
    that waits and returns the result.

    Call the function: it is what removes the run's directory (or scrubs a kept one).
    """
    thread, wait = _start(playbook, options, wait_here=False)
    assert thread is not None
    return thread, wait


def _start(
    playbook: str | os.PathLike[str], options: RunOptions, *, wait_here: bool
) -> tuple[threading.Thread | None, Callable[[], RunResult]]:
    """Start the run (``wait_here``: and wait for it, in this thread); the thread it runs in
    (none when waited for here) and the function that finishes it."""
    import ansible_runner

    kwargs, result, run_dir = _prepare(playbook, options)
    thread: threading.Thread | None = None
    try:
        if wait_here:
            runner = ansible_runner.run(**kwargs)
        else:
            thread, runner = ansible_runner.run_async(**kwargs)
    except BaseException:
        _abandon(run_dir, result)
        raise

    def wait() -> RunResult:
        if thread is not None:
            thread.join()
        return _finish(runner, result, run_dir)

    return thread, wait


def boot(
    server_name: str,
    *,
    flavor: str = "m1.small",
    image: str = "tiny",
    count: int | None = None,
    min_count: int | None = None,
    user_data: str | None = None,
    admin_password: str | None = None,
    availability_zone: str | None = None,
    server_group: str | None = None,
    **options: Unpack[RunOptions],
) -> RunResult:
    """Have ``count`` servers ``server_name-1`` ... ``-N`` (no count: one, ``server_name``) through
    the boot playbook (``novakit.cloud.boot``) and return the result (``options``: ``run``'s,
    ``RunOptions``; the boot's variables go with its ``extravars``).

    ``on_event`` receives every ansible-runner event (a dict with ``event``,
    ``event_data`` (``task``, ``host``, ``res``...), ``stdout``, ``counter``) as it
    happens: enough for a progress bar over the plays and hosts. The result's
    ``servers`` are what the playbook published (id, name, host, addresses,
    status), ``request_id`` keys the run's instance actions, ``ok`` says whether
    the playbook succeeded (a server in ERROR does not fail it: check ``servers``).
    """
    extravars: dict[str, Any] = {"server_name": server_name, "flavor": flavor, "image": image}
    optional = {
        "count": count,
        "min_count": min_count,
        "user_data": user_data,
        "admin_password": admin_password,
        "availability_zone": availability_zone,
        "server_group": server_group,
    }
    extravars.update({k: v for k, v in optional.items() if v is not None})
    options["extravars"] = {**(options.get("extravars") or {}), **extravars}
    return run("boot", **options)
