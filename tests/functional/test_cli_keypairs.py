"""``novakit keypair`` and ``server create --key-name`` as a user types them (issue 26)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from tests.functional.test_cli import Run, cloud, env, nk  # noqa: F401 (fixtures)
from tests.functional.test_keypairs import ED25519, ED25519_FP

ALICE = {"NOVAKIT_PROJECT": "team-a", "NOVAKIT_USER": "alice", "NOVAKIT_ROLES": "member"}


def _json(result: Any) -> Any:
    return json.loads(result.stdout)


def test_a_generated_pair_s_private_key_goes_to_a_0600_file_once(cloud: Run, tmp_path: Path) -> None:  # noqa: F811
    key_file = tmp_path / "id_made"
    made = cloud("keypair", "create", "made", "--private-key", str(key_file), "-f", "json", **ALICE)
    shown = _json(made)
    assert "private key written to" in made.stderr
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    private = serialization.load_ssh_private_key(key_file.read_bytes(), password=None)
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert shown["public_key"].split()[:2] == public.decode().split()
    assert "PRIVATE KEY" not in made.stdout
    listed = _json(cloud("keypair", "list", "-f", "json", **ALICE))
    assert [(k["name"], k["fingerprint"], k["type"]) for k in listed] == [
        ("made", shown["fingerprint"], "ssh")
    ]
    assert cloud("keypair", "show", "made", "--public-key", **ALICE).stdout.strip() == shown["public_key"]

    # The file is never overwritten, and a refused create makes no pair.
    refused = cloud("keypair", "create", "again", "--private-key", str(key_file), code=1, **ALICE)
    assert "--private-key" in refused.stderr and "exists" in refused.stderr
    assert [k["name"] for k in _json(cloud("keypair", "list", "-f", "json", **ALICE))] == ["made"]


def test_without_a_file_the_private_key_is_printed_once(cloud: Run) -> None:  # noqa: F811
    printed = cloud("keypair", "create", "printed", "--algorithm", "rsa", **ALICE).stdout
    private = serialization.load_ssh_private_key(printed.encode(), password=None)
    assert private.key_size >= 3072  # type: ignore[union-attr]
    assert "PRIVATE KEY" not in cloud("keypair", "show", "printed", "-f", "json", **ALICE).stdout


def test_import_bad_keys_and_booting_with_a_key(cloud: Run, tmp_path: Path) -> None:  # noqa: F811
    pub = tmp_path / "id.pub"
    pub.write_text(ED25519 + "\n")
    made = _json(cloud("keypair", "create", "laptop", "--public-key", str(pub), "-f", "json", **ALICE))
    assert made["fingerprint"] == ED25519_FP

    bad = tmp_path / "bad.pub"
    bad.write_text('from="10.0.0.1" ' + ED25519 + "\n")
    refused = cloud("keypair", "create", "bad", "--public-key", str(bad), code=1, **ALICE)
    assert "public_key" in refused.stderr and "options" in refused.stderr
    x509 = cloud("keypair", "create", "x", "--type", "x509", "--public-key", str(pub), code=1, **ALICE)
    assert "type" in x509.stderr and "x509" in x509.stderr
    dup = cloud("keypair", "create", "laptop", "--public-key", str(pub), code=1, **ALICE)
    assert "already exists" in dup.stderr
    assert [k["name"] for k in _json(cloud("keypair", "list", "-f", "json", **ALICE))] == ["laptop"]

    unknown = cloud(
        "server",
        "create",
        "s",
        "--flavor",
        "m1.small",
        "--image",
        "tiny",
        "--key-name",
        "nope",
        code=1,
        **ALICE,
    )
    assert "key_name" in unknown.stderr and "Invalid key_name provided" in unknown.stderr
    assert _json(cloud("server", "list", "-o", "json", **ALICE)) == []

    cloud("server", "create", "s", "--flavor", "m1.small", "--image", "tiny", "--key-name", "laptop", **ALICE)
    shown = _json(cloud("server", "show", "s", "-f", "json", **ALICE))
    assert shown["key_name"] == "laptop"


def test_another_user_s_pairs_are_an_admin_s_business(cloud: Run, tmp_path: Path) -> None:  # noqa: F811
    pub = tmp_path / "id.pub"
    pub.write_text(ED25519)
    cloud("keypair", "create", "given", "--public-key", str(pub), "--user", "alice")  # the admin
    assert [k["name"] for k in _json(cloud("keypair", "list", "-f", "json", **ALICE))] == ["given"]
    assert [k["name"] for k in _json(cloud("keypair", "list", "--user", "alice", "-f", "json"))] == ["given"]
    refused = cloud("keypair", "list", "--user", "bob", code=1, **ALICE)
    assert "keypair:any_user" in refused.stderr
    assert "key pair given deleted" in cloud("keypair", "delete", "given", "--user", "alice").stdout
    assert _json(cloud("keypair", "list", "-f", "json", **ALICE)) == []
    missing = cloud("keypair", "delete", "given", code=1, **ALICE)
    assert "Keypair given not found" in missing.stderr
