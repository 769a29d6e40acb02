"""The service's pool for the conductor's part of creates and actions (Nova's 202 Accepted).

A create or an action is checked and recorded in the request (its errors are the answer: 400,
403, 404, 409, 413), its task state written, and the answer given at once; what follows (the
scheduler, the hosts, the records of their results) runs here, in a bounded pool of threads of
the worker process, as the same library calls the CLI makes inline (``API.later``). A worker
that stops leaves the work it had not finished to heal, as a killed CLI does: every build and
action holds a lease its owner renews, and heal takes over those whose lease ran out.

A create's build goes through the conductor's queue of waiting builds (``Conductor.build_later``):
one piece of work on the pool schedules every build waiting at that moment, in one round for
those that ask the same, and hands their host calls and records back to the pool.

Each piece of work runs in a copy of the context it was handed in (the cell it targeted).
Its failure is recorded by the library (the server's fault and action events); what escapes
is logged by its kind and the request id, never with its arguments (a create carries user data
and passwords).
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

LOG = logging.getLogger(__name__)

#: threads of each worker process's pool (``NOVAKIT_SERVE_WORK_THREADS``)
THREADS_ENV = "NOVAKIT_SERVE_WORK_THREADS"
DEFAULT_THREADS = 8


def threads_from_env() -> int:
    given = os.environ.get(THREADS_ENV, "")
    return int(given) if given.isdigit() and int(given) > 0 else DEFAULT_THREADS


class WorkPool:
    """``pool(fn, *args)`` runs ``fn(*args)`` on one of ``threads`` threads, in the caller's context."""

    def __init__(self, threads: int = DEFAULT_THREADS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="novakit-work")

    def __call__(self, fn: Callable[..., Any], *args: Any) -> None:
        context = contextvars.copy_context()
        self._pool.submit(context.run, _run, fn, args)

    def shutdown(self) -> None:
        """Let the running work finish; what has not started is left to heal (its lease)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def _run(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    ctx = next((a for a in args if hasattr(a, "request_id")), None)
    try:
        fn(*args)
    except Exception as exc:
        LOG.error(
            "%s: %s failed in the background: %s",
            getattr(ctx, "request_id", "-"),
            getattr(fn, "__name__", "work"),
            type(exc).__name__,
        )
