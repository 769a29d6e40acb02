"""The admin password: hashed once, at the API, and never kept or sent in clear.

Nova hands ``adminPass`` to the guest in clear (config drive ``meta_data.json``,
the metadata service). novakit stores its build requests in the database and
builds in a later play, so a clear password would have to be stored; instead
the API turns it into a SHA-512 crypt hash (``$6$<salt>$<digest>``, what
``/etc/shadow`` holds and ``chpasswd -e`` takes) before anything is written,
and only the hash is stored, sent to the host and written to the config drive.
The clear text is never stored anywhere, logged or sent.

SHA-512 crypt is implemented here from its public specification (Ulrich
Drepper, "Unix crypt using SHA-256 and SHA-512") with ``hashlib``: Python's
``crypt`` module is deprecated and gone in 3.13, and ``passlib`` is
unmaintained. 5000 rounds, the scheme's default and what ``mkpasswd`` and
``chpasswd`` write, so the hash reads like any other shadow entry.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING

from novakit import exceptions
from novakit.virt.driver import CAPABILITY_TRAITS

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

#: the trait of a host whose driver hands the admin password to the guest
ADMIN_PASSWORD_TRAIT = CAPABILITY_TRAITS["supports_admin_password"]

#: the alphabet of crypt's base64 (salt and digest)
ALPHABET = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
DEFAULT_ROUNDS = 5000
MIN_ROUNDS, MAX_ROUNDS = 1000, 999_999_999
SALT_LENGTH = 16  # the scheme's maximum

# The digest's 64 bytes go out in groups of three, in the scheme's order: group i starts
# at byte 22 * i (mod 63) and takes the bytes 21 and 42 places on; byte 63 goes alone.
_GROUPS = [((22 * i) % 63, (22 * i + 21) % 63, (22 * i + 42) % 63) for i in range(21)]


def check_deliverable(session: Session, field: str, config_drive: bool, host: str | None = None) -> None:
    """Refuse, naming ``field``, an admin password that would not reach the guest.

    It goes through the config drive only, and only a driver with the capability
    writes it there (``ADMIN_PASSWORD_TRAIT`` on the host's provider): a create needs
    an enabled host that has it (the scheduler then picks only such hosts), a rebuild
    its own ``host``. A request that would drop it silently is refused before anything
    is written.
    """
    from novakit.placement import traits as placement_traits

    if not config_drive:
        raise exceptions.ValidationError(
            field, "reaches the guest only through the config drive: it needs config_drive true"
        )
    capable = placement_traits.providers_with(
        session, ADMIN_PASSWORD_TRAIT, include_disabled=host is not None
    )
    if host is None and not capable:
        raise exceptions.ValidationError(
            field,
            f"no enabled compute host can set it: none reports {ADMIN_PASSWORD_TRAIT} (a host registered "
            "by an older novakit reports it once registered again)",
        )
    if host is not None and host not in capable:
        raise exceptions.ValidationError(
            # The host's name is the operator's business (novakit.policy, host:show): not said here.
            field,
            f"the server's host cannot set it: its driver does not report {ADMIN_PASSWORD_TRAIT}",
        )


def hash_admin_password(password: str) -> str:
    """A SHA-512 crypt hash of ``password`` with a new random salt."""
    salt = "".join(secrets.choice(ALPHABET) for _ in range(SALT_LENGTH))
    return sha512_crypt(password, salt)


def sha512_crypt(password: str, salt: str, rounds: int = DEFAULT_ROUNDS) -> str:
    """``crypt(3)``'s ``$6$`` scheme: the same string glibc's crypt returns for these inputs."""
    if not MIN_ROUNDS <= rounds <= MAX_ROUNDS:
        raise ValueError(f"rounds must be {MIN_ROUNDS} to {MAX_ROUNDS}")
    if any(c not in ALPHABET for c in salt):
        raise ValueError("the salt may hold only . / 0-9 A-Z a-z")
    salt = salt[:SALT_LENGTH]
    pw, sl = password.encode(), salt.encode()

    alternate = hashlib.sha512(pw + sl + pw).digest()
    first = hashlib.sha512(pw + sl + _stretch(alternate, len(pw)))
    n = len(pw)
    while n:
        first.update(alternate if n & 1 else pw)
        n >>= 1
    digest = first.digest()

    p_seq = _stretch(hashlib.sha512(pw * len(pw)).digest(), len(pw))
    s_seq = _stretch(hashlib.sha512(sl * (16 + digest[0])).digest(), len(sl))
    for i in range(rounds):
        step = hashlib.sha512(p_seq if i & 1 else digest)
        if i % 3:
            step.update(s_seq)
        if i % 7:
            step.update(p_seq)
        step.update(digest if i & 1 else p_seq)
        digest = step.digest()

    setting = f"rounds={rounds}$" if rounds != DEFAULT_ROUNDS else ""
    return f"$6${setting}{salt}${_b64(digest)}"


def _stretch(block: bytes, length: int) -> bytes:
    """``block`` repeated to exactly ``length`` bytes."""
    return (block * (length // len(block) + 1))[:length]


def _b64(digest: bytes) -> str:
    out = []
    for a, b, c in _GROUPS:
        out.append(_chars((digest[a] << 16) | (digest[b] << 8) | digest[c], 4))
    out.append(_chars(digest[63], 2))
    return "".join(out)


def _chars(word: int, count: int) -> str:
    chars = []
    for _ in range(count):
        chars.append(ALPHABET[word & 0x3F])
        word >>= 6
    return "".join(chars)
