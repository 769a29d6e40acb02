"""The shared base of novakit's Ansible modules.

A module is documentation plus a ``run()`` that calls the library; this class
does the rest: the import guard, the common options (database and identity),
the request context, and turning novakit's errors into ``fail_json`` with a
message that names the problem (and, for "no valid host", the scheduler's
explanation; for a server that did not get where it was asked to be, the
server as last seen, with its status, task state and fault).
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    from novakit import exceptions as nk_exceptions
    from novakit.context import RequestContext, context_from

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

#: the option of the modules that go through ``novakit serve`` (``takes_cloud``; the
#: ``novakit.cloud.cloud`` doc fragment)
CLOUD_ARGS: dict[str, Any] = {"cloud": {"type": "str"}}


# Hosts that Ansible could not reach, or whose compute task failed, in this run, as the
# callback plugin saw them: a JSON object {host: reason}.
HOST_FAILURES_VAR = "NOVAKIT_ANSIBLE_FAILURES"


def host_failures_from_env() -> dict[str, str]:
    """{host: reason} for the hosts the callback plugin saw fail in this run."""
    try:
        data = json.loads(os.environ.get(HOST_FAILURES_VAR) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


class ModuleFailed(Exception):
    """``fail_json`` of a module run in Ansible's worker process (``plugin_utils/in_process.py``)."""

    def __init__(self, msg: str, details: dict[str, Any]) -> None:
        super().__init__(msg)
        self.msg = msg
        self.details = details


class NovakitModule:
    """Subclass, set ``argument_spec`` (and in ``module_kwargs`` its checks: ``required_if``...), implement ``run``.

    ``ansible`` is the module's AnsibleModule, made here from the task's arguments; an
    action plugin that runs the module in its own process passes a stand-in with the
    already validated ``params``, ``check_mode``, ``_diff`` and a ``fail_json`` that raises.
    """

    argument_spec: dict[str, Any] = {}
    #: the options every module of a family shares, set once by the family's base class
    #: (``catalog.CatalogModule``); a module's own ``argument_spec`` comes on top
    family_args: dict[str, Any] = {}
    #: AnsibleModule's checks of the options besides their spec (``required_if``, ``mutually_exclusive``...)
    module_kwargs: dict[str, Any] = {}
    #: every novakit module answers in check mode what a real run would do (the library's dry runs)
    supports_check_mode = True
    needs_database = True
    #: the module may go through ``novakit serve`` (its ``cloud`` option, ``OS_CLOUD``): its calls
    #: are those ``novakit.client.CloudAPI`` carries
    takes_cloud = False

    @classmethod
    def full_argument_spec(cls) -> dict[str, Any]:
        """Every option of the module: its family's, its own, and the database and identity ones."""
        spec = {**cls.family_args, **cls.argument_spec}
        if cls.needs_database:
            spec.update(COMMON_ARGS)
        if cls.takes_cloud:
            spec.update(CLOUD_ARGS)
        return spec

    def __init__(self, ansible: Any = None) -> None:
        if ansible is None:
            ansible = AnsibleModule(
                argument_spec=self.full_argument_spec(),
                supports_check_mode=self.supports_check_mode,
                **self.module_kwargs,
            )
        self.ansible = ansible
        self.params = self.ansible.params
        # The play's run variables (awx_job_id...), which only an in-process run sees.
        self.extra_vars: dict[str, Any] = {}
        # The databases the task opened, closed when it ends (``outcome``).
        self._databases: list[Any] = []
        self._cloud_api: Any = None
        if not HAS_NOVAKIT:
            self.ansible.fail_json(msg=missing_required_lib("novakit"), exception=IMPORT_ERROR)
        self.check_mode = self.ansible.check_mode
        # The fake driver of direct mode keeps its hosts where the compute module does.
        if os.environ.get("NOVAKIT_STATE_DIR") and not os.environ.get("NOVAKIT_FAKE_STATE_DIR"):
            os.environ["NOVAKIT_FAKE_STATE_DIR"] = os.path.join(os.environ["NOVAKIT_STATE_DIR"], "fake")

    # --- helpers for subclasses ------------------------------------------------

    def cloud(self) -> str | None:
        """The cloud the task goes through, or None for the database (``novakit.client.cloud_name``)."""
        from novakit.client import cloud_name

        if not self.takes_cloud:
            return None
        return cloud_name(self.params.get("cloud"), self.params.get("db_url"))

    def context(self) -> RequestContext:
        """The options' identity and request id over the environment's (``novakit.context.context_from``).

        A module sees no play variables: the run's request id reaches it through the
        environment only (the callback's id, the AWX job id, the ansible-runner ident).

        Through a cloud, the identity is the cloud's token's (``CloudAPI.caller``).
        """
        cloud = self.cloud()
        if cloud is not None:
            from novakit.client import refuse_identity

            refuse_identity({name: self.params.get(name) for name in ("project", "user", "roles")}, cloud)
            caller: RequestContext = self.api().caller()
            return caller
        extra_vars = getattr(self, "extra_vars", None) or None
        return context_from(self.params, extra_vars=extra_vars, identity=self.config().identity)

    def config(self) -> Any:
        from novakit.config import load_config

        return load_config(self.params.get("config"), db_url=self.params.get("db_url"))

    def database(self) -> Any:
        from novakit.db.engine import Database

        self.refuse_cloud()
        return self._opened(Database.from_config(self.config()))

    def refuse_cloud(self) -> None:
        """A module that opens the database fails when a cloud is in effect (``OS_CLOUD`` and no
        O(db_url)): a job given only a cloud never falls back to the embedded default. Called by
        ``database`` and ``api``, and by a module that opens its database otherwise (db, heal)."""
        from novakit.client import cloud_name, opens_database

        if self.takes_cloud:
            return
        cloud = cloud_name(None, self.params.get("db_url"))
        if cloud is not None:
            raise ModuleFailed(opens_database(cloud, "this module", "db_url"), {})

    def api(self) -> Any:
        """The library's API over the database, or through a cloud the same calls to ``novakit serve``."""
        from novakit.compute.api import API
        from novakit.db.engine import Database

        cloud = self.cloud()
        if cloud is not None:
            if self._cloud_api is None:
                from novakit.client.api import connect

                self._cloud_api = connect(cloud)
            return self._cloud_api
        self.refuse_cloud()
        conf = self.config()
        return API(self._opened(Database.from_config(conf)), conf)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A library front-door call with the task's database, configuration and caller given
        by name (``novakit.client.calls.bind``); through a cloud, the service runs it with its
        own and the token's (``CloudAPI.call``)."""
        if self.cloud() is not None:
            return self.api().call(fn, *args, **kwargs)
        from novakit.client.calls import run_here

        return run_here(fn, self.provided(), args, kwargs)

    def provided(self) -> dict[str, Callable[[], Any]]:
        """What ``call`` gives a library call by name (``novakit.client.calls.PROVIDED``)."""
        return {
            "db": self.database,
            "conf": self.config,
            "ctx": self.context,
            "on_change": lambda: None,
            "svc": lambda: self.api().conductor,
            "api": self.api,
            "later": lambda: None,
        }

    def _opened(self, db: Any) -> Any:
        """``db``, closed when the task ends (``outcome``): a module run in Ansible's worker ends
        with the worker's hard exit, which would leave SQLite's write-ahead log unmerged."""
        self._databases.append(db)
        return db

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

    def outcome(self) -> dict[str, Any]:
        """The task's result: what ``run`` returned, or the failure it ended in."""
        try:
            return self.run()
        except nk_exceptions.NovakitError as exc:
            return {
                "failed": True,
                "msg": exc.format_message(),
                "error": exc.__class__.__name__,
                **failure(exc),
            }
        except ModuleFailed as exc:
            return {"failed": True, "msg": exc.msg, **exc.details}
        finally:
            while self._databases:
                self._databases.pop().dispose()

    def __call__(self) -> None:
        result = self.outcome()
        if result.pop("failed", False):
            self.ansible.fail_json(**result)
        self.ansible.exit_json(**result)


def failure(exc: Any) -> dict[str, Any]:
    """What a failed task returns besides its message: the scheduler's explanation, the server's state."""
    if isinstance(exc, nk_exceptions.NoValidHost):
        return {"explanation": exc.explanation}
    if isinstance(exc, nk_exceptions.ServerStateError):
        # The server as last seen (status, task state, fault); whether the task had started work.
        out = {"server": exc.server, "id": exc.server["id"], "changed": exc.changed}
        if exc.server.get("fault"):
            out["fault"] = exc.server["fault"]
        return out
    return {}


# --- the state table's actions (the conductor and server_action modules) -------------------

# ``novakit.compute.states.ACTION_NAMES``, written out: a module's argument spec is read before
# novakit is imported, and ansible-doc reads the choices in each module's documentation as written
# (tests/unit/test_module_choices.py keeps the three equal to the table).
ACTION_NAMES = [
    "delete",
    "stop",
    "start",
    "reboot",
    "pause",
    "unpause",
    "suspend",
    "resume",
    "rebuild",
    "resize",
    "migrate",
    "confirm_resize",
    "revert_resize",
    "live_migrate",
    "evacuate",
    "create_image",
    "shelve",
    "shelve_offload",
    "unshelve",
    "rescue",
    "unrescue",
    "lock",
    "unlock",
    "rename",
]
# The actions of the server module's O(state) (delete, and the power states' paths); server_action
# offers the others (``states.MODULE_ACTIONS``).
SERVER_STATE_ACTIONS = ("delete", "stop", "start", "pause", "unpause", "suspend", "resume")
MODULE_ACTIONS = [a for a in ACTION_NAMES if a not in SERVER_STATE_ACTIONS]


# --- wait and timeout (the server and server_action modules) -----------------------

# Documented once, in the novakit.cloud.wait doc fragment.
WAIT_ARGS: dict[str, Any] = {
    "wait": {"type": "bool", "default": True},
    "timeout": {"type": "int", "default": 180},
}


def desired_result(
    module: NovakitModule, call: Callable[..., Any], *args: Any, **kwargs: Any
) -> dict[str, Any]:
    """The task's result of one of ``novakit.desired``'s calls (``ensure``, ``ensure_count``, ``perform``).

    The call gets the task's dry run (check mode) and its O(wait) and O(timeout) with where its
    worker finds the configuration; the result carries the diff of the server(s) when asked.
    """
    from novakit.desired import Background

    p = module.params
    background = Background(
        wait=p["wait"], timeout=p["timeout"], config=p.get("config"), db_url=p.get("db_url")
    )
    out = call(
        module.api(), module.context(), *args, dry_run=module.check_mode, background=background, **kwargs
    )
    return module.with_diff(out.result(), *out.diff())
