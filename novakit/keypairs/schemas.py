"""The key pair create request (Nova's os-keypairs body), with Nova's rules.

A name (Nova 2.92's: letters, digits, space and ``@._-``, 1 to 255 characters, no surrounding
space), a type (``ssh``; ``x509`` is refused: novakit delivers SSH keys only), and either a
public key to import or nothing, which makes a new pair of ``algorithm`` (ed25519 unless
``rsa`` is asked for). ``user_id`` names another user's pairs, for an admin.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from novakit.compute.schemas import _Request
from novakit.keypairs import keys

NAME = re.compile(r"^[A-Za-z0-9 @._-]{1,255}$")


def check_key_name(value: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 255:
        raise ValueError("must be 1 to 255 characters long")
    if value != value.strip():
        raise ValueError("must not begin or end with a space")
    if not NAME.match(value):
        raise ValueError("may hold only letters, digits, space and the characters @ . _ -")
    return value


class KeyPairCreate(_Request):
    name: str
    type: str = "ssh"
    public_key: str | None = None
    algorithm: Literal["ed25519", "rsa"] | None = None
    user_id: str | None = Field(default=None, min_length=1, max_length=255)

    _check_name = field_validator("name")(classmethod(lambda cls, v: check_key_name(v)))

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        if v == "x509":
            raise ValueError("x509 key pairs are not supported: novakit delivers SSH keys only (type ssh)")
        if v != "ssh":
            raise ValueError(f"{str(v)[:40]!r} is not a key pair type: only ssh is supported")
        return v

    def checked_public_key(self) -> str | None:
        """The imported public key, checked (``keys.check_public_key``), or None to generate one."""
        return None if self.public_key is None else keys.check_public_key(self.public_key)
