"""Ties an Ansible run to novakit's audit trail."""

from __future__ import annotations

DOCUMENTATION = r"""
name: novakit
type: aggregate
short_description: Tie the run to novakit's audit trail; report host failures as faults
description:
  - Gives the run one request id, used by every novakit module of the run for the instance
    actions it records, in the order of C(novakit.context.run_request_id) - the extra variable
    C(novakit_request_id), else an id already in E(NOVAKIT_REQUEST_ID), else the AWX job id
    (the extra variable C(awx_job_id) or C(tower_job_id), or E(JOB_ID)) as C(req-awx-<id>),
    else the ansible-runner ident as C(req-<ident>), else a new id. Modules on the controller
    read it from E(NOVAKIT_REQUEST_ID), which this plugin sets for the run.
  - Without this plugin the modules and the conductor steps find the same AWX job id or
    ansible-runner ident themselves; a run that has neither then gets a new id per task.
  - Compute hosts that Ansible cannot reach, and failed C(novakit.cloud.compute) tasks, are
    handed to the controller's record steps (E(NOVAKIT_ANSIBLE_FAILURES)), which turn them into
    instance faults with Ansible's message and reschedule the builds to alternate hosts.
  - At the end of the run, prints a table of the run's servers (status, host, fault) and hosts.
  - Enable it with C(callbacks_enabled = novakit.cloud.novakit) in C(ansible.cfg)
    (E(ANSIBLE_CALLBACKS_ENABLED)); C(novakit.runner) enables it.
version_added: 0.1.0
author: novakit developers (@novakit)
requirements:
  - novakit, importable by the Python that runs Ansible (for the request id and the summary table)
"""

import json  # noqa: E402
import os  # noqa: E402

from ansible.plugins.callback import CallbackBase  # noqa: E402

try:
    from novakit.context import REQUEST_ID_ENV, generate_request_id, run_request_id

    HAS_NOVAKIT = True
except ImportError:  # ansible-playbook's Python lacks novakit; the modules' interpreter may have it
    HAS_NOVAKIT = False

HOST_FAILURES_VAR = "NOVAKIT_ANSIBLE_FAILURES"
COMPUTE_ACTIONS = ("novakit.cloud.compute", "compute")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "novakit.cloud.novakit"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.request_id = None
        self.failures = {}

    def v2_playbook_on_play_start(self, play):
        if self.request_id is not None:
            return
        if not HAS_NOVAKIT:
            # The modules and conductor steps still find an AWX job id or ansible-runner ident
            # themselves; a run with neither gets a new id per task.
            self._display.warning(
                "novakit: the Python that runs Ansible cannot import novakit; no run request id"
            )
            self.request_id = ""
            return
        manager = getattr(play, "_variable_manager", None)
        extra_vars = dict(getattr(manager, "extra_vars", None) or {})
        self.request_id = run_request_id(extra_vars) or generate_request_id()
        # Inherited by every task forked from now on: the controller's modules read it.
        os.environ[REQUEST_ID_ENV] = self.request_id

    def _host_failed(self, result, reason):
        host = result._host.get_name()
        self.failures[host] = reason
        os.environ[HOST_FAILURES_VAR] = json.dumps(self.failures)

    @staticmethod
    def _message(result):
        msg = str(result._result.get("msg", "")).strip()
        if not msg or "censored" in msg or result._result.get("censored"):
            return "details hidden by no_log; run the task's host by hand to see them"
        return msg

    def v2_runner_on_unreachable(self, result):
        host = result._host.get_name()
        self._host_failed(
            result, f"host {host} unreachable (task {result._task.get_name()}): {self._message(result)}"[:250]
        )

    def v2_runner_on_failed(self, result, ignore_errors=False):
        # The playbooks ignore a compute task's failure so that the run goes on; it is still a failure.
        if result._task.action in COMPUTE_ACTIONS:
            host = result._host.get_name()
            self._host_failed(result, f"compute task failed on host {host}: {self._message(result)}"[:250])

    def v2_playbook_on_stats(self, stats):
        if not self.request_id:
            return
        try:
            rows, hosts = self._summary()
        except Exception as exc:  # the table is a courtesy: never fail the run over it
            self._display.warning(f"novakit: no summary ({exc.__class__.__name__}: {exc})")
            return
        if not rows and not self.failures:
            return
        self._display.banner(f"NOVAKIT SUMMARY ({self.request_id})")
        width = max([len(r[0]) for r in rows] + [6])
        self._display.display(f"{'SERVER'.ljust(width)}  {'STATUS':8}  {'HOST':16}  FAULT")
        for name, status, host, fault in rows:
            self._display.display(f"{name.ljust(width)}  {status:8}  {host:16}  {fault}")
        for host, count in sorted(hosts.items()):
            self._display.display(f"host {host}: {count} server(s) of this run")
        for host, reason in sorted(self.failures.items()):
            self._display.display(f"host {host}: {reason}")

    def _summary(self):
        from sqlalchemy import select

        from novakit.client import cloud_name

        if cloud_name(None, None) is not None:
            # Through a cloud the run holds no database to read: its tasks' results say it all.
            return [], {}

        from novakit.compute.api import API
        from novakit.config import load_config
        from novakit.context import context_from
        from novakit.db.engine import Database
        from novakit.db.models import InstanceAction

        conf = load_config()
        # The run's own identity: the summary shows what this caller may see, and nothing of a
        # request id that names another project's work (a guessed id shows an empty table).
        ctx = context_from({"request_id": self.request_id}, identity=conf.identity)
        api = API(Database.from_config(conf), conf)
        from novakit.cells.scatter import scatter

        def touched(_cell, session):
            return (
                session.execute(
                    select(InstanceAction.instance_uuid)
                    .where(InstanceAction.request_id == self.request_id)
                    .order_by(InstanceAction.id)
                )
                .scalars()
                .all()
            )

        # The run's servers are in whichever cells their hosts are in: every cell is asked.
        uuids = list(dict.fromkeys(u for found in scatter(api.db, touched).results.values() for u in found))
        servers = api.list(ctx, uuids=uuids, include_deleted=True) if uuids else []
        rows = []
        hosts: dict[str, int] = {}
        for s in servers:
            fault = s.get("fault") or {}
            said = f"{fault.get('host') or '-'}: {fault['message']}" if fault else ""
            rows.append((s["name"], s["status"], s["host"] or "-", said[:100]))
            if s["host"]:
                hosts[s["host"]] = hosts.get(s["host"], 0) + 1
        return rows, hosts
