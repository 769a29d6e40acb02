"""The shared base of novakit's Ansible modules.

A module is documentation plus a ``run()`` that calls the library; this class
does the rest: the import guard, the common options (database and identity),
the request context, and turning novakit's errors into ``fail_json`` with a
message that names the problem (and, for "no valid host", the scheduler's
explanation).
"""

from __future__ import annotations

import json
import os
import traceback
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    from novakit import exceptions as nk_exceptions
    from novakit.context import RequestContext

    HAS_NOVAKIT = True
    IMPORT_ERROR = None
except ImportError:  # pragma: no cover - exercised on a host without novakit
    HAS_NOVAKIT = False
    IMPORT_ERROR = traceback.format_exc()

COMMON_ARGS: dict[str, Any] = {
    "db_url": {"type": "str", "no_log": True},
    "config": {"type": "path"},
    "project": {"type": "str"},
    "user": {"type": "str"},
    "roles": {"type": "list", "elements": "str"},
    "request_id": {"type": "str"},
}


# Where a run's request id comes from, first match wins: the id the novakit callback
# plugin put in the environment for this run, the AWX job id, the ansible-runner ident.
REQUEST_ID_VARS = ("NOVAKIT_REQUEST_ID", "JOB_ID", "AWX_JOB_ID", "TOWER_JOB_ID", "RUNNER_IDENT")
# Hosts that Ansible could not reach, or whose compute task failed, in this run, as the
# callback plugin saw them: a JSON object {host: reason}.
HOST_FAILURES_VAR = "NOVAKIT_ANSIBLE_FAILURES"


def normalize_request_id(value: Any, source: str | None = None) -> str:
    """``req-...`` as the audit trail keys it; AWX job ids become ``req-awx-<id>``."""
    value = str(value)
    if value.startswith("req-"):
        return value
    awx = ("JOB_ID", "AWX_JOB_ID", "TOWER_JOB_ID", "awx_job_id", "tower_job_id")
    prefix = "awx-" if source in awx else ""
    return f"req-{prefix}{value}"


def request_id_from_env() -> str | None:
    """The run's request id, when the run has one (see REQUEST_ID_VARS)."""
    for var in REQUEST_ID_VARS:
        if os.environ.get(var):
            return normalize_request_id(os.environ[var], var)
    return None


def host_failures_from_env() -> dict[str, str]:
    """{host: reason} for the hosts the callback plugin saw fail in this run."""
    try:
        data = json.loads(os.environ.get(HOST_FAILURES_VAR) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


class NovakitModule:
    """Subclass, set ``argument_spec`` (and ``supports_check_mode``), implement ``run``."""

    argument_spec: dict[str, Any] = {}
    module_kwargs: dict[str, Any] = {}
    needs_database = True

    def __init__(self) -> None:
        spec = dict(self.argument_spec)
        if self.needs_database:
            spec.update(COMMON_ARGS)
        self.ansible = AnsibleModule(argument_spec=spec, **self.module_kwargs)
        self.params = self.ansible.params
        if not HAS_NOVAKIT:
            self.ansible.fail_json(msg=missing_required_lib("novakit"), exception=IMPORT_ERROR)
        self.check_mode = self.ansible.check_mode
        # The fake driver of direct mode keeps its hosts where the compute module does.
        if os.environ.get("NOVAKIT_STATE_DIR") and not os.environ.get("NOVAKIT_FAKE_STATE_DIR"):
            os.environ["NOVAKIT_FAKE_STATE_DIR"] = os.path.join(os.environ["NOVAKIT_STATE_DIR"], "fake")

    # --- helpers for subclasses ------------------------------------------------

    def context(self) -> RequestContext:
        given = self.params.get("request_id")
        base = RequestContext.from_env(normalize_request_id(given) if given else request_id_from_env())
        roles = self.params.get("roles")
        return RequestContext(
            project_id=self.params.get("project") or base.project_id,
            user_id=self.params.get("user") or base.user_id,
            roles=list(roles) if roles else base.roles,
            request_id=base.request_id,
        )

    def config(self) -> Any:
        from novakit.config import load_config

        return load_config(self.params.get("config"), db_url=self.params.get("db_url"))

    def database(self) -> Any:
        from novakit.db.engine import Database

        return Database(self.config().database_url)

    def api(self) -> Any:
        from novakit.compute.api import API
        from novakit.db.engine import Database

        conf = self.config()
        return API(Database(conf.database_url), conf)

    def fail(self, msg: str, **kwargs: Any) -> None:
        self.ansible.fail_json(msg=msg, **kwargs)

    def with_diff(self, result: dict[str, Any], before: Any, after: Any) -> dict[str, Any]:
        """Add Ansible's diff (``--diff``) of two plain views to ``result``."""
        if self.ansible._diff:
            result["diff"] = {
                "before": before if before is not None else {},
                "after": after if after is not None else {},
            }
        return result

    # --- the run ------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        raise NotImplementedError

    def __call__(self) -> None:
        try:
            result = self.run()
        except nk_exceptions.NoValidHost as exc:
            self.ansible.fail_json(msg=exc.format_message(), error="NoValidHost", explanation=exc.explanation)
        except nk_exceptions.NovakitError as exc:
            self.ansible.fail_json(msg=exc.format_message(), error=exc.__class__.__name__)
        self.ansible.exit_json(**result)


# --- wait and timeout (the server and server_action modules) -----------------------

WAIT_ARGS: dict[str, Any] = {
    "wait": {"type": "bool", "default": True},
    "timeout": {"type": "int", "default": 180},
}


def carry_on(module: NovakitModule, ctx: Any, server: str, **job: Any) -> tuple[Any, str]:
    """Hand the rest of a started request to a detached worker (``novakit.worker``).

    ``job`` takes the fields of ``novakit.worker.Job``: ``build`` (uuids),
    ``request`` (a deferred action's ComputeRequest), ``then`` (later actions).
    Returns the worker process and the path of its log.
    """
    from novakit import worker

    request = job.pop("request", None)
    spec = worker.Job.for_context(
        ctx,
        server,
        config=module.params.get("config"),
        db_url=module.params.get("db_url"),
        request=request.to_wire() if request is not None else None,
        **job,
    )
    proc, log = worker.start(module.config(), spec)
    return proc, str(log)


def wait_until(
    module: NovakitModule,
    api: Any,
    ctx: Any,
    server: dict[str, Any],
    settled: Any,
    wanted: str,
    proc: Any = None,
    log: str | None = None,
    changed: bool = True,
) -> dict[str, Any] | None:
    """Poll the server until ``settled(view)`` (the view is None once deleted), within ``timeout``.

    Fails the module, naming the server, its status and task_state, when the
    timeout passes first or the worker ends without the server getting there;
    ``changed`` says whether the task had started work before it waited.
    """
    from novakit import worker

    def read() -> dict[str, Any] | None:
        try:
            return api.get(ctx, server["id"])
        except nk_exceptions.InstanceNotFound:
            return None

    timeout = module.params["timeout"]
    view, why = worker.wait_for(read, settled, timeout, proc)
    if why is None:
        return view
    now = view or server
    where = f"it is {now['status']} (task_state: {now['task_state'] or 'none'})"
    if why == "timeout":
        msg = f"timed out after {timeout} s waiting for server {now['name']} to be {wanted}: {where}"
        if proc is not None:
            msg += f"; the work goes on in the background (log: {log})"
    else:
        msg = f"server {now['name']} is not {wanted} and its background worker has ended: {where}; see {log}"
    module.fail(msg, server=view, id=server["id"], changed=changed)
    return None
