"""Run a novakit module's ``run()`` inside Ansible's worker process instead of as a module.

A novakit module run the usual way costs each task a fresh interpreter that unpacks the
AnsiballZ archive and imports SQLAlchemy, pydantic and novakit again (about a second and a
half of CPU here) before it does a few milliseconds of work. Every controller-side module
of the collection has an action plugin of its name made by ``in_process``: when the task
runs on the controller itself, the plugin validates the options with the module's own
argument spec, builds the module object over them and calls the same ``run()``.

The heavy imports happen when this file is imported. Ansible's strategies load an action
plugin's class in the main ``ansible-playbook`` process before they fork the task's worker,
so the first novakit task of a run pays the imports once and every worker forked after it
inherits them. Nothing that holds a database connection is made before the fork: each task
opens its own engine in its worker, which ends with the task.

When the task does not run on the controller (delegated over SSH), novakit cannot be
imported by the Python that runs Ansible, or the environment of the run sets
``NOVAKIT_MODULES_IN_PROCESS=0``, the module runs on the target as before.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import traceback
import warnings
from typing import Any

from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase
from ansible_collections.novakit.cloud.plugins.module_utils.novakit import ModuleFailed

try:
    # Imported here, in the main process, so that the workers inherit them (see above).
    from sqlalchemy.orm import configure_mappers

    from novakit import playflow  # noqa: F401  # pylint: disable=unused-import
    from novakit.compute.api import API  # noqa: F401  # pylint: disable=unused-import
    from novakit.context import RUN_VARS
    from novakit.db import migration

    # The schedule step's filters and weighers, which it would otherwise import when it first runs.
    from novakit.scheduler import manager  # noqa: F401  # pylint: disable=unused-import

    configure_mappers()  # the ORM's mapper set-up: pure Python, no connection
    HAS_NOVAKIT = True
except ImportError:
    HAS_NOVAKIT = False
if HAS_NOVAKIT:
    # Cached: the embedded database compares its schema with it on open. A broken migration
    # set is the task's to report, with the task that met it.
    with contextlib.suppress(Exception):
        migration.head_revision()

LOCAL_CONNECTIONS = ("local", "ansible.builtin.local")
# The argument spec checks of AnsibleModule that validate_argument_spec takes as well.
SPEC_CHECKS = ("mutually_exclusive", "required_together", "required_one_of", "required_if", "required_by")


def _plain(value):
    """What the module's JSON round trip would make of a value (datetimes as ISO strings)."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    raise TypeError(f"{value.__class__.__name__} is not JSON serialisable")


class _Collected(logging.Handler):
    """The library's log warnings during a task: a module's stderr would have swallowed them."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _quiet():
    """Keep the task's log records and Python warnings off Ansible's output (and its artifacts)."""
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


class InProcess:
    """What a module's code reads of its AnsibleModule, for a run in the worker process."""

    def __init__(self, params, check_mode, diff):
        self.params = params
        self.check_mode = check_mode
        self._diff = diff

    def fail_json(self, msg, **kwargs):
        raise ModuleFailed(msg, kwargs)


class InProcessAction(ActionBase):
    """Subclass with ``module`` set to the module's class (``NovakitModule``)."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False
    module: Any = None  # the module's class

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        if not self._runs_here():
            result.update(self._execute_module(task_vars=task_vars))
            return result
        module = self.module
        spec = module.full_argument_spec()
        checks = {k: v for k, v in module.module_kwargs.items() if k in SPEC_CHECKS}
        validation, args = self.validate_argument_spec(argument_spec=spec, **checks)
        # The module sees plain JSON; so does the library here (no Ansible data tags).
        args = json.loads(json.dumps(args, default=_plain))
        if self._task.check_mode and not module.supports_check_mode:
            result.update(skipped=True, msg="the module does not support check mode")
            return result
        with _quiet() as (logged, caught):
            out = self._outcome(args, task_vars or {})
        if not self._task.no_log:  # Ansible shows a result's warnings even under no_log
            said = logged + [str(w.message) for w in caught]
            if said:
                out["warnings"] = list(out.get("warnings") or []) + said
        out = json.loads(json.dumps(out, default=_plain))
        result.update(remove_values(out, validation._no_log_values))
        return result

    def _runs_here(self):
        """Whether the task can run in this process: its target is the controller itself."""
        connection = getattr(self._connection, "transport", None) or self._play_context.connection
        wanted = os.environ.get("NOVAKIT_MODULES_IN_PROCESS", "1") != "0"
        return HAS_NOVAKIT and wanted and connection in LOCAL_CONNECTIONS

    def _run_vars(self, task_vars):
        """The play's variables that name the run (a module sees none): an AWX job's
        ``awx_job_id`` names the request even when the novakit callback is not enabled."""
        return {name: self._templar.template(task_vars[name]) for name in RUN_VARS if name in task_vars}

    def _outcome(self, args, task_vars):
        environment: dict[str, Any] = {}
        self._compute_environment_string(raw_environment_out=environment)
        # This worker ends with the task: the task's environment is its own, as a module's would be.
        os.environ.update({str(k): str(v) for k, v in environment.items()})
        try:
            runner = self.module(InProcess(args, bool(self._task.check_mode), bool(self._task.diff)))
            runner.extra_vars = self._run_vars(task_vars)
            return runner.outcome()
        except Exception as exc:  # what a module process would end with: a failure, not a crash of Ansible
            failed = {"failed": True, "msg": f"{exc.__class__.__name__}: {exc}"}
            if not self._task.no_log:  # Ansible keeps 'exception' even in a no_log result
                failed["exception"] = traceback.format_exc()
            return failed


def in_process(module_class):
    """The action plugin class that runs ``module_class`` in the worker process."""
    return type("ActionModule", (InProcessAction,), {"module": module_class})
