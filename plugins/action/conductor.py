"""The controller steps of the orchestrated flows, run inside Ansible's worker process.

The ``novakit.cloud.conductor`` module (documentation, and the fallback below) would cost
each step a fresh interpreter that imports SQLAlchemy, pydantic and novakit again, plus
AnsiballZ packaging; a boot pays two steps or more. This action plugin calls the same
library function (``novakit.playflow.run_step``) in the worker Ansible forks for the task.

The heavy imports happen when this file is imported. Ansible's linear and free strategies
load an action plugin's class in the main ``ansible-playbook`` process before they fork the
task's worker, so the first conductor task of a run pays the imports once and every worker
forked after it inherits them. Nothing that holds a database connection is made before the
fork: each step opens its own engine in its worker and disposes of it at the end, so SQLite
(WAL) and PostgreSQL see an ordinary client per step.

When the task does not run on the controller itself (delegated over SSH), or novakit cannot
be imported by the Python that runs Ansible, the module runs on the target as before.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import traceback
import warnings

from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase
from ansible_collections.novakit.cloud.plugins.module_utils.novakit import (
    COMMON_ARGS,
    host_failures_from_env,
)
from ansible_collections.novakit.cloud.plugins.modules.conductor import ConductorModule

try:
    # Imported here, in the main process, so that the workers inherit them (see above).
    from sqlalchemy.orm import configure_mappers

    from novakit import exceptions as nk_exceptions
    from novakit import playflow
    from novakit.compute.api import API
    from novakit.config import load_config
    from novakit.context import RUN_VARS, context_from
    from novakit.db import migration
    from novakit.db.engine import Database

    # The schedule step's filters and weighers, which it would otherwise import when it first runs.
    from novakit.scheduler import manager  # noqa: F401  # pylint: disable=unused-import

    configure_mappers()  # the ORM's mapper set-up: pure Python, no connection
    HAS_NOVAKIT = True
except ImportError:
    HAS_NOVAKIT = False
if HAS_NOVAKIT:
    # Cached: the embedded database compares its schema with it on open. A broken migration
    # set is the step's to report, with the task that met it.
    with contextlib.suppress(Exception):
        migration.head_revision()

LOCAL_CONNECTIONS = ("local", "ansible.builtin.local")


def _plain(value):
    """What the module's JSON round trip would make of a value (datetimes as ISO strings)."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    raise TypeError(f"{value.__class__.__name__} is not JSON serialisable")


class _Collected(logging.Handler):
    """The library's log warnings during a step: a module's stderr would have swallowed them."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _quiet():
    """Keep the step's log records and Python warnings off Ansible's output (and its artifacts)."""
    logger, handler = logging.getLogger("novakit"), _Collected()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with warnings.catch_warnings(record=True) as caught:
            yield handler.messages, caught
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        if not self._runs_here():
            result.update(self._execute_module(task_vars=task_vars))
            return result
        spec = dict(ConductorModule.argument_spec, **COMMON_ARGS)
        validation, args = self.validate_argument_spec(
            argument_spec=spec, required_if=ConductorModule.module_kwargs["required_if"]
        )
        # The module sees plain JSON; so does the library here (no Ansible data tags).
        args = json.loads(json.dumps(args, default=_plain))
        with _quiet() as (logged, caught):
            out = self._step(args, task_vars or {})
        if not self._task.no_log:  # Ansible shows a result's warnings even under no_log
            said = logged + [str(w.message) for w in caught]
            if said:
                out["warnings"] = list(out.get("warnings") or []) + said
        out = json.loads(json.dumps(out, default=_plain))
        result.update(remove_values(out, validation._no_log_values))
        return result

    def _runs_here(self):
        """Whether the step can run in this process: the task's target is the controller itself."""
        connection = getattr(self._connection, "transport", None) or self._play_context.connection
        return HAS_NOVAKIT and connection in LOCAL_CONNECTIONS

    def _step(self, args, task_vars):
        environment: dict[str, str] = {}
        self._compute_environment_string(raw_environment_out=environment)
        # This worker ends with the task: the task's environment is its own, as a module's would be.
        os.environ.update({str(k): str(v) for k, v in environment.items()})
        if os.environ.get("NOVAKIT_STATE_DIR") and not os.environ.get("NOVAKIT_FAKE_STATE_DIR"):
            os.environ["NOVAKIT_FAKE_STATE_DIR"] = os.path.join(os.environ["NOVAKIT_STATE_DIR"], "fake")
        api = None
        try:
            conf = load_config(args.get("config"), db_url=args.get("db_url"))
            api = API(Database.from_config(conf), conf)
            return playflow.run_step(
                api,
                self._context(args, task_vars, conf),
                args,
                check_mode=bool(self._task.check_mode),
                host_failures=host_failures_from_env(),
                diff=bool(self._task.diff),
            )
        except nk_exceptions.NoValidHost as exc:
            return {
                "failed": True,
                "msg": exc.format_message(),
                "error": "NoValidHost",
                "explanation": exc.explanation,
            }
        except nk_exceptions.NovakitError as exc:
            return {"failed": True, "msg": exc.format_message(), "error": exc.__class__.__name__}
        except Exception as exc:
            # Ansible keeps 'exception' even in a no_log result: a traceback only when it may be shown.
            failed = {"failed": True, "msg": f"{exc.__class__.__name__}: {exc}"}
            if not self._task.no_log:
                failed["exception"] = traceback.format_exc()
            return failed
        finally:
            if api is not None:
                api.db.dispose()

    def _context(self, args, task_vars, conf):
        """The caller's identity and the run's request id, as the module's ``context()`` builds them.

        Unlike the module, the step sees the play's variables: an AWX job's ``awx_job_id``
        names the request even when the novakit callback is not enabled.
        """
        run_vars = {name: self._templar.template(task_vars[name]) for name in RUN_VARS if name in task_vars}
        return context_from(args, environ=os.environ, extra_vars=run_vars, identity=conf.identity)
