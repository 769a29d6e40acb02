"""A ``clouds.yaml`` entry (openstacksdk's and the ``openstack`` command's configuration file) for
a user or an application credential of ``novakit serve``.

A password is never written: the entry names the user and the project, and the password comes
from where the client asks for it (``OS_PASSWORD``, a prompt, AWX's credential). An application
credential's secret is written, as it must be for the file to work: the file is then a secret
itself (mode 0600, AWX's credential store).
"""

from __future__ import annotations

from typing import Any

import yaml

from novakit import exceptions
from novakit.identity import DEFAULT_DOMAIN_NAME


def entry(
    cloud: str,
    auth_url: str,
    *,
    username: str | None = None,
    project: str | None = None,
    application_credential_id: str | None = None,
    application_credential_secret: str | None = None,
    region_name: str = "RegionOne",
    interface: str = "public",
) -> dict[str, Any]:
    """The ``clouds:`` mapping for one cloud; ValidationError unless exactly one way to
    authenticate is named whole."""
    if not cloud:
        raise exceptions.ValidationError("cloud", "must be a name")
    if not auth_url.startswith(("http://", "https://")):
        raise exceptions.ValidationError("auth_url", "must be an http:// or https:// URL")
    by_credential = application_credential_id is not None or application_credential_secret is not None
    by_user = username is not None or project is not None
    if by_credential == by_user:
        raise exceptions.ValidationError(
            "auth", "name either --username and --project, or an application credential's id and secret"
        )
    auth: dict[str, Any] = {"auth_url": auth_url}
    if by_credential:
        if not application_credential_id or not application_credential_secret:
            raise exceptions.ValidationError("application_credential", "needs both its id and its secret")
        auth_type = "v3applicationcredential"
        auth.update(
            application_credential_id=application_credential_id,
            application_credential_secret=application_credential_secret,
        )
    else:
        if not username or not project:
            raise exceptions.ValidationError("username", "needs --project too (and the other way round)")
        auth_type = "password"
        auth.update(
            username=username,
            user_domain_name=DEFAULT_DOMAIN_NAME,
            project_name=project,
            project_domain_name=DEFAULT_DOMAIN_NAME,
        )
    config = {
        "auth_type": auth_type,
        "auth": auth,
        "region_name": region_name,
        "interface": interface,
        "identity_api_version": 3,
    }
    return {"clouds": {cloud: config}}


def render(clouds: dict[str, Any]) -> str:
    text: str = yaml.safe_dump(clouds, default_flow_style=False, sort_keys=False)
    return text
