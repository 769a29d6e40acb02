"""OpenSSH public keys: checked, fingerprinted as Nova does, and generated.

Nova's fingerprint of an SSH key is the MD5 of the key's base64-decoded blob, in lower-case
hex pairs joined by colons (``ssh-keygen -E md5 -l`` without its ``MD5:``), after the key
has loaded as an OpenSSH public key. The tiny test guest computes the same from the key it
receives, so a test can compare the two.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from novakit import exceptions
from novakit.keypairs import fingerprint

__all__ = ["ALGORITHMS", "KEY_TYPES", "GeneratedPair", "check_public_key", "fingerprint", "generate"]

#: the key types a public key may have (what ``cryptography`` loads, less DSA, which OpenSSH dropped)
KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
)
#: what ``generate`` makes: ed25519 by default, RSA on request
ALGORITHMS = ("ed25519", "rsa")
RSA_BITS = 3072
MAX_PUBLIC_KEY = 16384  # characters: an RSA key of 16384 bits is about 2,800


def check_public_key(value: str, field_name: str = "public_key") -> str:
    """``value`` as one OpenSSH public key line ``TYPE BASE64 [COMMENT]``, or ValidationError
    naming ``field_name`` and the rule broken. One trailing newline (a ``.pub`` file's) is
    dropped; nothing else is changed."""
    if not isinstance(value, str):
        raise exceptions.ValidationError(field_name, "must be a string: an OpenSSH public key")
    text = value[:-1] if value.endswith("\n") else value
    text = text[:-1] if text.endswith("\r") else text
    if not text.strip():
        raise exceptions.ValidationError(field_name, "must not be empty: give an OpenSSH public key")
    if len(text) > MAX_PUBLIC_KEY:
        raise exceptions.ValidationError(field_name, f"must be at most {MAX_PUBLIC_KEY} characters")
    if "PRIVATE KEY" in text:
        raise exceptions.ValidationError(
            field_name, "is a private key: give the public key (the .pub file), never the private one"
        )
    if "\n" in text or "\r" in text:
        raise exceptions.ValidationError(
            field_name, "must be one line holding one key (TYPE BASE64 [COMMENT]), with no newlines"
        )
    if text.startswith("-----BEGIN"):
        raise exceptions.ValidationError(
            field_name, "is a PEM file: give the key in OpenSSH's form (TYPE BASE64 [COMMENT])"
        )
    parts = text.split()
    key_type = parts[0]
    if key_type not in KEY_TYPES:
        if any(p in KEY_TYPES for p in parts[1:]):
            raise exceptions.ValidationError(
                field_name,
                "must not carry authorized_keys options (such as from= or command=) before the key: "
                "give the key alone (TYPE BASE64 [COMMENT])",
            )
        raise exceptions.ValidationError(
            field_name, f"key type {key_type[:40]!r} is not one of {', '.join(KEY_TYPES)}"
        )
    if len(parts) < 2:
        raise exceptions.ValidationError(field_name, f"has no key data after {key_type}: it is truncated")
    try:
        base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise exceptions.ValidationError(
            field_name, "key data is not valid base64: the key is truncated or damaged"
        ) from None
    try:
        serialization.load_ssh_public_key(f"{key_type} {parts[1]}".encode())
    except (ValueError, UnsupportedAlgorithm):
        raise exceptions.ValidationError(
            field_name,
            f"is not a valid {key_type} key: its data is truncated, damaged or of another key type",
        ) from None
    return text


@dataclass(frozen=True)
class GeneratedPair:
    """A new key pair. ``private_key`` (OpenSSH PEM) is for the caller only: never stored."""

    public_key: str
    private_key: str = field(repr=False)


def generate(algorithm: str = "ed25519", comment: str = "") -> GeneratedPair:
    """A new key pair of ``algorithm`` (``ALGORITHMS``), its public key ending in ``comment``."""
    key: ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey
    if algorithm == "ed25519":
        key = ed25519.Ed25519PrivateKey.generate()
    elif algorithm == "rsa":
        key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
    else:
        raise exceptions.ValidationError("algorithm", f"{algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public_key = public.decode() + (f" {comment}" if comment else "")
    return GeneratedPair(public_key=public_key, private_key=private.decode())
