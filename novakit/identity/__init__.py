"""Identity for the service path: a Keystone v3 subset in the API database.

``novakit serve`` (``novakit.service``) asks callers to prove who they are with a token, as
Keystone does; this package is the library behind it, and the CLI's ``novakit identity``
commands. The operator path (CLI, modules, playbooks with the database URL) is unchanged: its
identity stays the operator's environment (``novakit.context``).

- ``users``, ``projects``, ``roles``, ``assignments``: the registries (one module per noun),
  and the identity API's operations on them (an admin's, by ``novakit.policy``'s rules);
- ``application_credentials``: a user's delegation of its roles on a project to a job;
- ``passwords``: argon2 hashes, the only form a password is kept in;
- ``keys``: the Fernet key repository (Keystone's layout: ``0`` staged, highest primary);
- ``tokens``: a token's payload, encrypted with the primary key, and its validation;
- ``revision``: the number every change to the identity tables raises, which tells a service
  process when a token it validated must be checked again;
- ``auth``: ``POST /v3/auth/tokens`` as a library call (password, token and application
  credential methods);
- ``catalog``: the service catalog's endpoints; ``bootstrap``: ``keystone-manage bootstrap``;
- ``clouds``: a ``clouds.yaml`` entry for a user or an application credential.

Domains: there is one, fixed: id ``default``, name ``Default`` (Keystone's default domain).
Users and projects belong to it; a request naming another domain is refused as a bad
credential would be.
"""

from __future__ import annotations

#: The one domain (Keystone's default domain), by id and name.
DEFAULT_DOMAIN_ID = "default"
DEFAULT_DOMAIN_NAME = "Default"


def domain_view() -> dict[str, str]:
    return {"id": DEFAULT_DOMAIN_ID, "name": DEFAULT_DOMAIN_NAME}


def is_default_domain(domain_id: str | None, domain_name: str | None) -> bool:
    """Whether a reference to a domain (by id, or else by name) names the default one."""
    if domain_id is not None:
        return domain_id == DEFAULT_DOMAIN_ID
    return domain_name == DEFAULT_DOMAIN_NAME


# Registered with every session from the first import of the package: no identity write can
# miss raising the revision (``revision``'s docstring).
from novakit.identity import revision as _revision  # noqa: E402,F401
