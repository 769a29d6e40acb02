"""``novakit identity bootstrap``, as ``keystone-manage bootstrap``: the first admin.

Makes what is missing of: the roles ``admin``, ``member`` and ``reader`` (and the named admin
role), the admin project, the admin user with the password given, the user's admin role on
the project, and the catalog's endpoints for the public interface of the region (``ENDPOINTS``:
identity ``/identity/v3``, compute ``/compute/v2.1``, image ``/image``, network ``/network``,
placement ``/placement``, block-storage ``/volume/v3`` and novakit ``/novakit/v1`` (novakit's
own tools) below the public URL; the volume URL names no project, as Cinder's may from 3.67).
Run again it changes nothing, except what differs: a password that no longer matches is set
again (its tokens stop working), a disabled admin is enabled, an endpoint's URL follows the new
one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.db.engine import Database
from novakit.db.models import utcnow
from novakit.identity import assignments, catalog, passwords, projects, roles, users

DEFAULT_ROLES = ("admin", "member", "reader")
#: the catalog's services: type, name, path below the public URL
ENDPOINTS = (
    ("identity", "keystone", "/identity/v3"),
    ("compute", "nova", "/compute/v2.1"),
    ("image", "glance", "/image"),
    ("network", "neutron", "/network"),
    ("placement", "placement", "/placement"),
    ("block-storage", "cinder", "/volume/v3"),
    # novakit's own tools through the service (``novakit.client``, ``novakit.service.native``)
    ("novakit", "novakit", "/novakit/v1"),
)


@dataclass
class BootstrapResult:
    user_id: str = ""
    project_id: str = ""
    changed: list[str] = field(default_factory=list)


def bootstrap(
    db: Database,
    *,
    password: str,
    username: str = "admin",
    project_name: str = "admin",
    role_name: str = "admin",
    region_id: str = "RegionOne",
    public_url: str,
) -> BootstrapResult:
    if not password:
        raise exceptions.ValidationError("password", "is required (--password or NOVAKIT_BOOTSTRAP_PASSWORD)")
    if len(password) > passwords.MAX_PASSWORD_LENGTH:
        limit = passwords.MAX_PASSWORD_LENGTH
        raise exceptions.ValidationError("password", f"is longer than {limit} characters")
    if not public_url.startswith(("http://", "https://")):
        raise exceptions.ValidationError("public_url", "must be an http:// or https:// URL")
    base = public_url.rstrip("/")
    # Hashed before the transaction: argon2 is slow on purpose.
    with db.reader() as session:
        existing = users.find(session, username)
        keeps = existing is not None and passwords.verify(existing.password_hash, password)
    new_hash = None if keeps else passwords.hash_password(password)

    def write(session: Session) -> BootstrapResult:
        result = BootstrapResult()
        made = {}
        for name in dict.fromkeys((*DEFAULT_ROLES, role_name)):
            made[name], created = roles.ensure(session, name)
            if created:
                result.changed.append(f"role {name}")
        project = projects.find(session, project_name)
        if project is None:
            project = projects.create(session, project_name, "Bootstrap project for initializing the cloud.")
            result.changed.append(f"project {project_name}")
        user = users.find(session, username)
        if user is None:
            user = users.create(session, username)
            result.changed.append(f"user {username}")
        elif new_hash is not None:
            result.changed.append(f"password of {username}")
        if new_hash is not None:
            user.password_hash, user.password_changed_at = new_hash, utcnow()
        if not user.enabled:
            users.set_enabled(user, True)
            result.changed.append(f"{username} enabled")
        if assignments.grant(session, user, project, made[role_name]):
            result.changed.append(f"role {role_name} of {username} on {project_name}")
        for service_type, name, path in ENDPOINTS:
            if catalog.ensure_endpoint(session, service_type, name, "public", region_id, base + path):
                result.changed.append(f"{service_type} endpoint {base + path}")
        result.user_id, result.project_id = user.uuid, project.uuid
        return result

    return db.run_in_transaction(write)
