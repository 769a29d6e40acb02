"""novakit's own tools through ``novakit serve``: the service path for the CLI, the modules and the playbooks.

With a cloud given (``--os-cloud NAME``, a module's ``cloud`` option, ``OS_CLOUD``), the
``novakit`` command and the ``novakit.cloud`` modules do not open the database: they reach
``novakit serve`` over HTTP with the cloud's credentials (``clouds.yaml``, read by openstacksdk's
loader, authenticated by keystoneauth as every OpenStack client is) and call the library there.

- ``cloud_name`` is the one rule for whether a call goes through a cloud;
- ``CloudAPI`` (``novakit.client.api``) has the library API's interface for what the tools call
  (``get``, ``list_servers``, ``act``, ``create_servers``, the conductor's steps...). It decides
  nothing: every call is one request to ``/novakit/v1`` (``novakit.service.native``), where the
  library's own function runs with the token's identity; the library's errors come back as
  the same exceptions, with the same messages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from novakit import exceptions

CLOUD_ENV = "OS_CLOUD"
DB_URL_ENV = "NOVAKIT_DB_URL"


def cloud_name(cloud: str | None, db_url: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The cloud a call goes through, or None for the database (the operator path).

    A cloud named by the caller wins; then a database URL given by the caller (an option, or
    ``NOVAKIT_DB_URL``); then ``OS_CLOUD``. So an operator with ``OS_CLOUD`` set for the
    ``openstack`` command keeps the database path by giving its URL, and a job given only a cloud
    never falls back to the embedded database.
    """
    env = os.environ if environ is None else environ
    if cloud:
        return cloud
    if db_url or env.get(DB_URL_ENV):
        return None
    return env.get(CLOUD_ENV) or None


def refuse_identity(given: Mapping[str, Any], cloud: str) -> None:
    """Through a cloud the token says who calls: an identity option given (``{option: value}``,
    as the face names its options) is refused, naming the option."""
    named = next((option for option, value in given.items() if value), None)
    if named is not None:
        raise exceptions.ValidationError(
            named, f"is the cloud's credentials' to say: not with a cloud ({cloud})"
        )


def opens_database(cloud: str, what: str, option: str) -> str:
    """Why ``what`` (a command, a module) cannot run when a cloud is in effect: it opens the
    database, the operator's path (the service's own schema, its hosts' registration, heal,
    a host's drain), and a job given only a cloud must not fall back to the embedded default."""
    return (
        f"{what} opens the database, and does not go through a cloud ({cloud}): "
        f"give {option} (the operator's path)"
    )
