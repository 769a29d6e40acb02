"""``novakit keypair``: a user's SSH keys, as ``openstack keypair`` (Nova's os-keypairs).

``create`` without ``--public-key`` generates a pair: the private key is written to
``--private-key FILE`` (made 0600, never over an existing file), else printed once on stdout;
it is kept nowhere else. ``--user`` names another user's pairs (admins: ``keypair:any_user``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import typer

from novakit.cli import output
from novakit.cli.base import app as root_app
from novakit.cli.base import call, console, err_console, fail, group, guard
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format

keypair_app = group(
    "Key pairs: the SSH keys servers are booted with (Nova's os-keypairs).", root_app, "keypair"
)

COLUMNS = [Col("Name", "name"), Col("Fingerprint", "fingerprint"), Col("Type", "type")]
FIELDS = [*COLUMNS, Col("User", "user_id"), Col("Created At", "created_at"), Col("Public Key", "public_key")]
USER = typer.Option(None, "--user", help="another user's key pairs (admins)")


def _private_file(path: Path) -> int:
    """The file the private key goes to, made now (0600) so that a path that cannot take it
    fails before the pair is made; an existing file is not overwritten."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fail(f"--private-key: {path} exists; it is not overwritten (remove it or name another file)")
    except OSError as exc:
        fail(f"--private-key: cannot create {path}: {exc.strerror}")
    raise AssertionError("unreachable")  # fail exits


@keypair_app.command("create")
def keypair_create(
    name: str = typer.Argument(..., help="the key pair's name (unique per user)"),
    public_key: Path | None = typer.Option(
        None, "--public-key", help="import this OpenSSH public key file (.pub) instead of generating a pair"
    ),
    private_key: Path | None = typer.Option(
        None, "--private-key", help="write the generated private key to this new file (mode 0600)"
    ),
    key_type: str = typer.Option("ssh", "--type", help="key pair type: ssh (x509 is not supported)"),
    algorithm: str | None = typer.Option(
        None, "--algorithm", help="a generated pair's algorithm: ed25519 (default) or rsa"
    ),
    user: str | None = USER,
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Create a key pair: import --public-key, or generate one (openstack keypair create)."""
    from novakit.keypairs import registry

    if public_key is not None and private_key is not None:
        fail("--private-key: only a generated pair has a private key; --public-key imports one")
    data: dict[str, Any] = {"name": name, "type": key_type}
    if public_key is not None:
        try:
            data["public_key"] = public_key.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"--public-key: cannot read {public_key}: {getattr(exc, 'strerror', None) or exc}")
    if algorithm is not None:
        data["algorithm"] = algorithm
    if user is not None:
        data["user_id"] = user
    fd = _private_file(private_key) if private_key is not None else None
    try:
        made = guard(lambda: call(registry.create, data))
    except BaseException:
        if fd is not None and private_key is not None:
            os.close(fd)
            with contextlib.suppress(OSError):
                private_key.unlink()
        raise
    secret = made.pop("private_key", None)
    if fd is not None:
        with os.fdopen(fd, "w") as f:
            f.write(secret or "")
    if secret is not None and private_key is None:
        # openstack's habit: with no file named, the private key is the output, this once.
        print(secret, end="")
        return
    guard(lambda: output.emit_show(made, FIELDS, fmt, out, column, f"key pair {made['name']}"))
    if private_key is not None:
        # On stderr: stdout stays the pair as asked for (-f json is one document).
        err_console.print(f"private key written to {private_key} (mode 0600); it is kept nowhere else")


@keypair_app.command("list")
def keypair_list(
    user: str | None = USER,
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """The user's key pairs (openstack keypair list)."""
    from novakit.keypairs import registry

    rows = guard(lambda: call(registry.list_keypairs, user_id=user))
    guard(lambda: output.emit_list(rows, COLUMNS, fmt, out, column, "key pairs"))


@keypair_app.command("show")
def keypair_show(
    name: str = typer.Argument(..., help="the key pair's name"),
    public_key: bool = typer.Option(False, "--public-key", help="print the public key only"),
    user: str | None = USER,
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """One key pair (openstack keypair show)."""
    from novakit.keypairs import registry

    pair = guard(lambda: call(registry.show, name, user_id=user))
    if public_key:
        print(pair["public_key"])
        return
    guard(lambda: output.emit_show(pair, FIELDS, fmt, out, column, f"key pair {pair['name']}"))


@keypair_app.command("delete")
def keypair_delete(
    names: list[str] = typer.Argument(..., help="the key pairs' names"),
    user: str | None = USER,
) -> None:
    """Delete key pairs; servers booted with one keep the key they were given."""
    from novakit.keypairs import registry

    for name in names:
        guard(lambda n=name: call(registry.delete, n, user_id=user))  # type: ignore[misc]
        console.print(f"key pair {name} deleted")
