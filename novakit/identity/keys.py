"""The Fernet key repository, laid out as Keystone's (``keystone-manage fernet_setup`` and
``fernet_rotate``): a directory (0700) of key files (0600) named by integers.

- ``0`` is the **staged** key: every service node knows it before it is used, so that a
  rotation on one node never makes tokens another node issues unreadable;
- the highest number is the **primary** key: new tokens are encrypted with it;
- the others are **secondary** keys: they only decrypt tokens issued before a rotation.

A rotation makes the staged key primary (``0`` renamed to the next number), writes a new
staged key, and removes the oldest secondary keys beyond ``max_active_keys`` (staged and
primary counted): a token encrypted with a removed key no longer decrypts. The key files are
secrets: they never reach a log, and files are written whole (a temporary file renamed).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from cryptography.fernet import Fernet, MultiFernet

from novakit.identity.errors import KeyRepositoryError

#: Keystone's default ``[fernet_tokens] max_active_keys``.
MAX_ACTIVE_KEYS = 3


class KeyRepository:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._cached: tuple[tuple[int, tuple[str, ...]], MultiFernet] | None = None

    def indexes(self) -> list[int]:
        """The key files' numbers, lowest first (``[0, 1]`` after set-up)."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise KeyRepositoryError(path=str(self.path), reason=exc.strerror or "cannot be read") from None
        return sorted(int(n) for n in names if n.isdigit())

    def _write_key(self, index: int) -> None:
        tmp = self.path / f".{index}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(Fernet.generate_key())
        os.replace(tmp, self.path / str(index))

    def setup(self) -> bool:
        """Make the repository with a staged and a primary key; False if it has keys already."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.path, 0o700)
        if self.indexes():
            return False
        self._write_key(0)
        self.rotate()
        return True

    def rotate(self, max_active_keys: int = MAX_ACTIVE_KEYS) -> list[int]:
        """Promote the staged key, stage a new one, drop the oldest beyond ``max_active_keys``;
        the key numbers afterwards."""
        if max_active_keys < 2:
            raise KeyRepositoryError(path=str(self.path), reason="max_active_keys must be at least 2")
        indexes = self.indexes()
        if 0 not in indexes:
            raise KeyRepositoryError(
                path=str(self.path), reason="has no staged key 0: run `novakit identity fernet-setup` first"
            )
        os.replace(self.path / "0", self.path / str(max(indexes) + 1))
        self._write_key(0)
        indexes = self.indexes()
        secondaries = [i for i in indexes if i not in (0, max(indexes))]
        while len(indexes) > max_active_keys and secondaries:
            oldest = secondaries.pop(0)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path / str(oldest))
            indexes.remove(oldest)
        return indexes

    def _stamp(self) -> tuple[int, tuple[str, ...]]:
        """What changes when the keys do: the directory's mtime, and its names (a rotation always
        adds a number, even within one tick of the clock the mtime is read from)."""
        try:
            return (os.stat(self.path).st_mtime_ns, tuple(sorted(os.listdir(self.path))))
        except FileNotFoundError:
            return (0, ())

    def fernet(self) -> MultiFernet:
        """The keys, primary first then newest to oldest, staged last: encrypts with the primary,
        decrypts with any. Read again when the directory changed (a rotation renames files)."""
        stamp = self._stamp()
        with self._lock:
            if self._cached is not None and self._cached[0] == stamp:
                return self._cached[1]
            indexes = self.indexes()
            if len(indexes) < 2 or 0 not in indexes:
                raise KeyRepositoryError(
                    path=str(self.path), reason="is not set up: run `novakit identity fernet-setup`"
                )
            order = [i for i in reversed(indexes) if i != 0] + [0]
            try:
                keys = [Fernet((self.path / str(i)).read_bytes().strip()) for i in order]
            except (OSError, ValueError) as exc:
                reason = getattr(exc, "strerror", None) or "a key file is not a Fernet key"
                raise KeyRepositoryError(path=str(self.path), reason=reason) from None
            multi = MultiFernet(keys)
            self._cached = (stamp, multi)
            return multi
