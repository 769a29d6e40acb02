"""Key pairs (Nova's os-keypairs): a user's SSH public keys, and the one a server boots with.

``keys``: what a public key is (parsing, Nova's fingerprint) and making a new pair;
``schemas``: the create request; ``registry``: create, list, show, delete and the look-up of
a boot's ``key_name``. A pair belongs to a user, not a project: its name is unique per user,
and only an admin (``keypair:any_user``) acts on another user's pairs. The private key of a
generated pair is returned once to the caller and never stored, logged or recorded.
"""

from __future__ import annotations

import base64
import hashlib


def fingerprint(public_key: str) -> str:
    """Nova's fingerprint of an OpenSSH public key ``TYPE BASE64 [COMMENT]``: the MD5 of the
    base64-decoded key data as lower-case hex pairs joined by colons (``ssh-keygen -l -E md5``
    without ``MD5:``). Here, with the standard library only, so that a host (the fake driver)
    can say which key a guest got; ``keys.check_public_key`` is what makes a key valid."""
    blob = base64.b64decode(public_key.split()[1])
    digest = hashlib.md5(blob, usedforsecurity=False).hexdigest()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))
