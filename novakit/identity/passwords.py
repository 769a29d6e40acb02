"""Passwords are kept only as argon2id hashes (argon2-cffi's defaults: RFC 9106's
low-memory profile, a random salt per hash); nothing here logs or returns a password.

``verify`` against no hash (an unknown user, a user without a password) still does the work of
one verification, so that the time an answer takes does not tell whether the user exists.
"""

from __future__ import annotations

from functools import lru_cache

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

#: Keystone refuses longer passwords too (its ``max_password_length``).
MAX_PASSWORD_LENGTH = 4096

_HASHER = PasswordHasher()


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


@lru_cache(maxsize=1)
def _dummy_hash() -> str:
    return _HASHER.hash("novakit: no user has this password")


def verify(password_hash: str | None, password: str) -> bool:
    """Whether ``password`` matches ``password_hash``; False for no hash, after the same work."""
    try:
        return _HASHER.verify(password_hash or _dummy_hash(), password) and password_hash is not None
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False
