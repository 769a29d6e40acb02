"""``novakit serve``: the OpenStack HTTP face (``novakit.service``) under uvicorn.

``--bind HOST:PORT`` (default ``127.0.0.1:8774``, Nova's API port: one service answers
``/identity`` and, later, ``/compute`` and the others, as devstack puts them under one host),
``--workers`` processes (each builds its own app and database engine), TLS with
``--ssl-certfile`` and ``--ssl-keyfile``. The database is the configuration's (``--db-url``,
``NOVAKIT_DB_URL``); a PostgreSQL database must be migrated first (``novakit db upgrade``), the
key repository set up (``novakit identity fernet-setup``). The settings reach the worker
processes through the environment: the configuration as JSON (``novakit.service.app``) and
``novakit.identity.settings``' variables.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import typer

from novakit import exceptions
from novakit.cli.base import app as root_app
from novakit.cli.base import conf, fail, guard

DEFAULT_BIND = "127.0.0.1:8774"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def parse_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6 address]:PORT`` for IPv6) as a host and a port."""
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise exceptions.ValidationError("--bind", f"{bind!r} must be HOST:PORT, e.g. {DEFAULT_BIND}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging, with novakit's own loggers on its default handler."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["novakit"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    return config


@root_app.command("serve")
def serve(
    bind: str = typer.Option(DEFAULT_BIND, "--bind", help="HOST:PORT to listen on"),
    workers: int = typer.Option(1, "--workers", min=1, help="worker processes"),
    ssl_certfile: Path | None = typer.Option(None, "--ssl-certfile", help="TLS certificate (PEM)"),
    ssl_keyfile: Path | None = typer.Option(None, "--ssl-keyfile", help="TLS private key (PEM)"),
    key_repository: Path | None = typer.Option(
        None,
        "--key-repository",
        envvar="NOVAKIT_FERNET_KEYS",
        help="the Fernet key directory (default: fernet-keys in the state directory)",
    ),
    token_expiration: int | None = typer.Option(
        None,
        "--token-expiration",
        min=1,
        envvar="NOVAKIT_TOKEN_EXPIRATION",
        help="seconds a new token lives (default 3600)",
    ),
    log_level: str = typer.Option("info", "--log-level", help=f"one of {', '.join(LOG_LEVELS)}"),
) -> None:
    """Serve the OpenStack APIs over HTTP: Keystone v3 (identity) now; Compute v2.1 to come."""
    import uvicorn

    from novakit.db.engine import Database
    from novakit.identity.keys import KeyRepository
    from novakit.identity.settings import EXPIRATION_ENV, KEYS_ENV, IdentitySettings
    from novakit.service.app import CONFIG_ENV

    host, port = guard(lambda: parse_bind(bind))
    if (ssl_certfile is None) != (ssl_keyfile is None):
        fail("--ssl-certfile and --ssl-keyfile go together: give both, or neither")
    if log_level not in LOG_LEVELS:
        fail(f"--log-level: {log_level!r} is not one of {', '.join(LOG_LEVELS)}")
    config = conf()
    if token_expiration is not None:
        os.environ[EXPIRATION_ENV] = str(token_expiration)
    settings = guard(lambda: IdentitySettings.from_env(config, key_repository))
    guard(KeyRepository(settings.key_repository).fernet)  # set up? (else: say so, now)
    database = guard(lambda: Database.from_config(config))  # the embedded default is made here
    database.dispose()
    # What the worker processes' create_app reads: the whole configuration (a --config file's
    # too), with the database it was given or the default's URL.
    os.environ[CONFIG_ENV] = config.model_copy(update={"db_url": config.database_url}).model_dump_json()
    os.environ[KEYS_ENV] = str(settings.key_repository)
    os.environ[EXPIRATION_ENV] = str(settings.token_expiration)
    uvicorn.run(
        "novakit.service.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
        ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
        log_level=log_level,
        log_config=_log_config(log_level),
        server_header=False,
    )
