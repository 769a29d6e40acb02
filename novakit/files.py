"""Files only the operator reads: what novakit creates on disk is 0600, its directories 0700.

The SQLite database holds user data and the whole fleet; the notifications,
the worker logs and the fake driver's hosts say what runs where; lock files
name instances. None of it is anyone else's business on a shared machine, so
every file novakit creates is made 0600 and every directory 0700 at the moment
it is created (``os.open`` and ``mkdir`` with the mode), never widened by the
umask (which can only take bits away) and never chmod'ed afterwards, so there
is no instant in which another user could open it. SQLite makes a database's
``-wal`` and ``-shm`` files with the database file's own permissions, so a
database file created here 0600 gets private companions too. (What QEMU must
read on a libvirt host, the image cache and the instance directories, keeps the
modes libvirt needs; only the lock files in them are private.)

A directory that exists already keeps its mode, with one exception. The
operator chose an explicit ``NOVAKIT_STATE_DIR``, a notifications file's
directory or a database directory, and may share it with a group on purpose;
what novakit creates in it is private all the same. The built-in state
directory (``$XDG_STATE_HOME/novakit``, usually ``~/.local/state/novakit``) is
novakit's by name, and earlier versions created it world-readable with the
database in it: whenever novakit uses it, it is tightened to 0700 if it is
looser and belongs to this user, which also closes the files that older
versions left in it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

from novakit.config import builtin_state_dir

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: str | os.PathLike[str]) -> Path:
    """``mkdir -p`` whose every new directory, parents included, is 0700; returns the path.

    (``os.makedirs`` gives its mode to the last directory only.)
    """
    target = Path(path)
    missing: list[Path] = []
    for directory in (target, *target.parents):
        if directory.is_dir():
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise
            # another process made it a moment ago, 0700 as well if it was novakit
    _tighten_builtin_state_dir(target)
    return target


def create_private(path: str | os.PathLike[str], flags: int = os.O_RDONLY) -> int:
    """``os.open`` with ``O_CREAT``: a file that does not exist yet is created 0600."""
    return os.open(path, flags | os.O_CREAT, FILE_MODE)


def open_private(path: str | os.PathLike[str], mode: str = "a", **kwargs: Any) -> IO[Any]:
    """``open()`` whose file, when this call creates it, is 0600."""

    def opener(name: str, flags: int) -> int:
        return os.open(name, flags, FILE_MODE)

    return open(path, mode, opener=opener, **kwargs)


def _tighten_builtin_state_dir(used: Path) -> None:
    builtin = Path(os.path.abspath(builtin_state_dir()))
    used = Path(os.path.abspath(used))
    if used != builtin and builtin not in used.parents:
        return
    try:
        st = builtin.stat()
    except FileNotFoundError:
        return
    if st.st_mode & 0o077 and st.st_uid == os.geteuid():
        builtin.chmod(DIR_MODE)
