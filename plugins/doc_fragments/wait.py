"""O(wait) and O(timeout) of the modules that hand their work to a background worker (server, server_action)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  wait:
    description:
      - V(true) returns once the work the task started has ended - the server is where the task
        asked (ACTIVE, SHUTOFF, PAUSED or SUSPENDED as asked, deleted, or done with its action), or
        in ERROR, which fails the task with the server's fault.
      - V(false) returns as soon as the request is recorded and accepted (validation, quota, the lock
        and the state table checked; a new server is BUILD) and leaves the work to a background
        process (C(python -m novakit.worker)) that outlives the task, logging to RV(worker_log) under
        the novakit state directory. Work done on the spot (lock, unlock, rename) is done either way.
    type: bool
    default: true
  timeout:
    description:
      - Seconds O(wait) waits. When they pass first the task fails with the server's status and
        task state, and the work goes on in the background.
    type: int
    default: 180
"""
