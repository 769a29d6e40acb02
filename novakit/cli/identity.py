"""``novakit identity``: the service path's identity, as ``keystone-manage`` sets it up.

- ``bootstrap``: the first admin user, project and roles, and the service catalog
  (``keystone-manage bootstrap``); run again, it changes only what differs;
- ``clouds-yaml``: a ``clouds.yaml`` entry for a user (its password never written) or an
  application credential, the auth URL from the catalog unless given;
- ``fernet-setup``, ``fernet-rotate``: the Fernet key repository of ``novakit serve``
  (``keystone-manage fernet_setup`` / ``fernet_rotate``), by default ``fernet-keys`` in the
  state directory, else ``--key-repository`` or ``NOVAKIT_FERNET_KEYS``.

Bootstrap is the operator's: it needs the operator's admin role, as ``db upgrade`` does. The
password comes from ``--password`` or, better (it stays out of the process list and the shell
history), ``NOVAKIT_BOOTSTRAP_PASSWORD`` / ``OS_BOOTSTRAP_PASSWORD``; it is never printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from novakit.cli.base import app as root_app
from novakit.cli.base import conf, console, ctx, db, err_console, group, guard

if TYPE_CHECKING:
    from novakit.identity.keys import KeyRepository

identity_app = group(
    "Identity for novakit serve: bootstrap, Fernet keys (as keystone-manage).", root_app, "identity"
)

KEY_REPOSITORY = typer.Option(
    None,
    "--key-repository",
    envvar="NOVAKIT_FERNET_KEYS",
    help="the Fernet key directory (default: fernet-keys in the state directory)",
)


def _keys(path: Path | None) -> KeyRepository:
    from novakit.identity.keys import KeyRepository
    from novakit.identity.settings import IdentitySettings

    return KeyRepository(guard(lambda: IdentitySettings.from_env(conf(), path)).key_repository)


@identity_app.command("bootstrap")
def bootstrap(
    password: str = typer.Option(
        ...,
        "--password",
        envvar=["NOVAKIT_BOOTSTRAP_PASSWORD", "OS_BOOTSTRAP_PASSWORD"],
        help="the admin user's password (better: NOVAKIT_BOOTSTRAP_PASSWORD)",
        show_envvar=True,
        show_default=False,
    ),
    username: str = typer.Option("admin", "--username", help="the admin user's name"),
    project_name: str = typer.Option("admin", "--project-name", help="the admin project's name"),
    role_name: str = typer.Option("admin", "--role-name", help="the role given to the user on the project"),
    region_id: str = typer.Option("RegionOne", "--region-id", help="the catalog's region"),
    public_url: str = typer.Option(
        "http://127.0.0.1:8774",
        "--public-url",
        help="where novakit serve is reached; the catalog gets <url>/identity/v3 and <url>/compute/v2.1",
    ),
) -> None:
    """Create the admin user, project and roles and the service catalog (keystone-manage bootstrap)."""
    from novakit import policy
    from novakit.identity.bootstrap import bootstrap as run

    guard(lambda: policy.authorize(ctx(), "identity:bootstrap"))
    result = guard(
        lambda: run(
            db(),
            password=password,
            username=username,
            project_name=project_name,
            role_name=role_name,
            region_id=region_id,
            public_url=public_url,
        )
    )
    for change in result.changed:
        console.print(f"made: {change}", highlight=False)
    if not result.changed:
        console.print("nothing to do: everything was there already", highlight=False)
    console.print(f"user id {result.user_id}, project id {result.project_id}", highlight=False)


@identity_app.command("fernet-setup")
def fernet_setup(key_repository: Path | None = KEY_REPOSITORY) -> None:
    """Create the Fernet key repository: a staged key (0) and a primary key (1)."""
    keys = _keys(key_repository)
    made = guard(keys.setup)
    state = "created" if made else "already set up"
    console.print(f"{keys.path}: {state}, keys {keys.indexes()}", highlight=False)


@identity_app.command("fernet-rotate")
def fernet_rotate(
    key_repository: Path | None = KEY_REPOSITORY,
    max_active_keys: int = typer.Option(
        3, "--max-active-keys", min=2, help="keys kept, staged and primary counted (Keystone's default 3)"
    ),
) -> None:
    """Rotate the keys: the staged key becomes primary, a new one is staged, the oldest goes."""
    keys = _keys(key_repository)
    indexes = guard(lambda: keys.rotate(max_active_keys))
    console.print(f"{keys.path}: keys {indexes} (primary {max(indexes)}, staged 0)", highlight=False)


@identity_app.command("clouds-yaml")
def clouds_yaml(
    cloud: str = typer.Argument("novakit", help="the cloud's name in clouds.yaml (--os-cloud NAME)"),
    auth_url: str | None = typer.Option(
        None, "--auth-url", help="the identity URL (default: the catalog's public identity endpoint)"
    ),
    username: str | None = typer.Option(None, "--username", help="a user (its password is not written)"),
    project: str | None = typer.Option(None, "--project", help="the user's project"),
    application_credential_id: str | None = typer.Option(
        None, "--application-credential-id", help="an application credential's id"
    ),
    application_credential_secret: str | None = typer.Option(
        None,
        "--application-credential-secret",
        envvar="OS_APPLICATION_CREDENTIAL_SECRET",
        show_envvar=True,
        help="its secret (better: OS_APPLICATION_CREDENTIAL_SECRET, out of the process list)",
    ),
    region_id: str = typer.Option("RegionOne", "--region-id", help="the catalog's region"),
) -> None:
    """Print a clouds.yaml entry for a user (no password written) or an application credential."""
    from novakit.identity import catalog, clouds

    if auth_url is None:
        with db().reader() as session:
            auth_url = catalog.endpoint_url(session, "identity", "public", region_id)
        if auth_url is None:
            err_console.print(
                "no identity endpoint in the catalog: give --auth-url (or run novakit identity bootstrap)",
                highlight=False,
            )
            raise typer.Exit(1)
    url = auth_url
    config = guard(
        lambda: clouds.entry(
            cloud,
            url,
            username=username,
            project=project,
            application_credential_id=application_credential_id,
            application_credential_secret=application_credential_secret,
            region_name=region_id,
        )
    )
    typer.echo(clouds.render(config), nl=False)
