"""SHA-512 crypt, as glibc's crypt(3) computes it: what the guest's /etc/shadow will hold."""

from __future__ import annotations

import warnings

import pytest

from novakit.compute.passwords import ALPHABET, hash_admin_password, sha512_crypt

# The vectors of the scheme's specification ("Unix crypt using SHA-256 and SHA-512").
SPEC_VECTORS = [
    (
        "Hello world!",
        "saltstring",
        5000,
        "$6$saltstring$svn8UoSVapNtMuq1ukKS4tPQd8iKwSMHWjl/O817G3uBnIFNjnQJuesI68u4OTLiBFdcbYEdFCoEOfaS35inz1",
    ),
    (
        "Hello world!",
        "saltstringsaltstring",  # cut to its first 16 characters
        10000,
        "$6$rounds=10000$saltstringsaltst$OW1/O6BYHV6BcXZu8QVeXbDWra3Oeqh0sbHbbMCVNSnCM/UrjmM0Dp8vOuZeHBy/"
        "YTBmSK6H9qs/y3RnOaw5v.",
    ),
]


@pytest.mark.parametrize("password,salt,rounds,expected", SPEC_VECTORS)
def test_the_specifications_vectors(password: str, salt: str, rounds: int, expected: str) -> None:
    assert sha512_crypt(password, salt, rounds) == expected


@pytest.mark.parametrize("password", ["", "a", "x" * 63, "y" * 64, "z" * 65, "pässwörd ✓", "p" * 255])
@pytest.mark.parametrize("salt", ["a", "abcdefghijklmnop", "./AZaz09"])
def test_what_the_c_library_computes(password: str, salt: str) -> None:
    """Block boundaries (63, 64, 65 bytes), non-ASCII, the longest password the API takes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        crypt = pytest.importorskip("crypt")  # gone in Python 3.13
    assert sha512_crypt(password, salt) == crypt.crypt(password, f"$6${salt}")
    assert sha512_crypt(password, salt, 1000) == crypt.crypt(password, f"$6$rounds=1000${salt}")


def test_each_hash_has_a_new_salt_and_verifies() -> None:
    first, second = hash_admin_password("hunter2"), hash_admin_password("hunter2")
    assert first != second
    for hashed in (first, second):
        _, scheme, salt, digest = hashed.split("$")
        assert scheme == "6" and len(salt) == 16 and len(digest) == 86
        assert set(salt + digest) <= set(ALPHABET)
        assert sha512_crypt("hunter2", salt) == hashed
        assert sha512_crypt("hunter3", salt) != hashed


@pytest.mark.parametrize("salt,rounds", [("bad$salt", 5000), ("salt", 999), ("salt", 10**9)])
def test_bad_settings_are_refused(salt: str, rounds: int) -> None:
    with pytest.raises(ValueError):
        sha512_crypt("pw", salt, rounds)
