# -*- coding: utf-8 -*-
"""The shared base of novakit's Ansible modules.

A module is documentation plus a ``run()`` that calls the library; this class
does the rest: the import guard, the common options (database and identity),
the request context, and turning novakit's errors into ``fail_json`` with a
message that names the problem (and, for "no valid host", the scheduler's
explanation).
"""

from __future__ import annotations

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


def request_id_from_env() -> str | None:
    """The AWX job id or the ansible-runner ident, when the run has one."""
    for var in ("NOVAKIT_REQUEST_ID", "JOB_ID", "AWX_JOB_ID", "RUNNER_IDENT"):
        if os.environ.get(var):
            prefix = "awx-" if var in ("JOB_ID", "AWX_JOB_ID") else ""
            return f"req-{prefix}{os.environ[var]}" if not os.environ[var].startswith("req-") else os.environ[var]
    return None


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

    # --- helpers for subclasses ------------------------------------------------

    def context(self) -> RequestContext:
        base = RequestContext.from_env(self.params.get("request_id") or request_id_from_env())
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

        conf = self.config()
        from novakit.db.engine import Database

        return API(Database(conf.database_url), conf)

    # --- the run ------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        raise NotImplementedError

    def __call__(self) -> None:
        try:
            result = self.run()
        except nk_exceptions.NoValidHost as exc:
            self.ansible.fail_json(msg=exc.format_message(), explanation=exc.explanation)
        except nk_exceptions.NovakitError as exc:
            self.ansible.fail_json(msg=exc.format_message(), error=exc.__class__.__name__)
        self.ansible.exit_json(**result)
