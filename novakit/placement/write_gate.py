"""One writer at a time on SQLite, queued by the kernel instead of by SQLite's busy handler.

SQLite lets one transaction write at a time. A writer that finds the lock
taken is retried by SQLite's busy handler, which sleeps 1, 2, 5, 10, 15, 20,
25 ... up to 100 ms between attempts and cannot be woken when the lock is
freed. With eight processes claiming at once most of them sleep while the
database sits idle: measured, eight processes managed 2 to 18 claims per
second although one claim holds the lock for about a millisecond.

The placement writers therefore queue on an ``flock`` of a file next to the
database first: the kernel wakes the next waiter the moment the holder
releases it, and by then SQLite's lock is free, so BEGIN IMMEDIATE succeeds
without sleeping. Writers that do not take the gate (other parts of novakit)
still get SQLite's busy handler, exactly as before. PostgreSQL needs none of
this: its row locks queue waiters and wake them at commit.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy.orm import Session

from novakit.db.engine import Database

T = TypeVar("T")

_lock = threading.Lock()
# Per database file: (a lock for the threads of this process, the gate file's descriptor).
_gates: dict[str, tuple[threading.Lock, int]] = {}
_held = threading.local()


def _gate(path: str) -> tuple[threading.Lock, int]:
    with _lock:
        gate = _gates.get(path)
        if gate is None:
            fd = os.open(path + ".writers.lock", os.O_RDWR | os.O_CREAT, 0o600)
            gate = _gates[path] = (threading.Lock(), fd)
        return gate


@contextmanager
def sqlite_write_gate(db: Database) -> Iterator[None]:
    """Hold the gate of ``db``'s file (re-entrant within a thread); a no-op for PostgreSQL or :memory:."""
    path = db.url.split("///", 1)[-1] if db.is_sqlite else ""
    held: set[str] = _held.__dict__.setdefault("paths", set())
    if not path or path == ":memory:" or path in held:
        yield
        return
    thread_lock, fd = _gate(path)
    # flock excludes other processes only; threads of this process share the descriptor.
    with thread_lock:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.add(path)
        try:
            yield
        finally:
            held.discard(path)
            fcntl.flock(fd, fcntl.LOCK_UN)


def run_in_write_transaction(db: Database, fn: Callable[[Session], T], *, retries: int = 10) -> T:
    """``db.run_in_transaction`` behind the SQLite write gate."""
    with sqlite_write_gate(db):
        return db.run_in_transaction(fn, retries=retries)
