"""Ending what a test started, by pid: the pids it recorded (pid files) and their descendants.

Never every process of a user: a uid a test made can be reused, and its processes be someone else's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def process_table() -> dict[int, tuple[int, int]]:
    """Every process's parent pid and real uid, by pid, as /proc has them now."""
    table: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        ppid = uid = None
        try:
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("PPid:"):
                    ppid = int(line.split()[1])
                elif line.startswith("Uid:"):
                    uid = int(line.split()[1])
        except OSError:
            continue
        if ppid is not None and uid is not None:
            table[int(entry.name)] = (ppid, uid)
    return table


def with_descendants(roots: list[int], table: dict[int, tuple[int, int]]) -> list[int]:
    """``roots`` (those alive) and every process descended from them, roots first."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _uid) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    todo = [pid for pid in reversed(roots) if pid in table]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def recorded_pids(directory: Path) -> list[int]:
    """The pids in the pid files under ``directory`` (libvirtd, virtlogd, QEMU write theirs there)."""
    if not directory.is_dir():
        return []
    return [pid for f in directory.rglob("*.pid") if (pid := read_pid(f)) is not None]


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs: a zombie (ended, not yet reaped by its parent, as a child the
    test started and has not waited for) does not."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        # Gone between the signal and the read (reading a vanished process's stat is ESRCH).
        return False


def terminate(pids: list[int], grace: float = 5.0) -> None:
    """SIGTERM these pids, then SIGKILL what is left after ``grace`` seconds; only the pids given."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def end_started(uid: int, roots: list[int], pid_dir: Path | None = None, rounds: int = 3) -> list[int]:
    """End ``roots`` and the pids recorded under ``pid_dir``, with their descendants, while they run as
    ``uid`` (a pid file can outlive its process, and its pid be another's now). Returns what is left
    of them."""
    left: list[int] = []
    for _ in range(rounds):
        table = process_table()
        started = roots + (recorded_pids(pid_dir) if pid_dir is not None else [])
        left = [pid for pid in with_descendants(started, table) if table[pid][1] == uid]
        if not left:
            return []
        terminate(left)
    return [pid for pid in left if alive(pid)]
