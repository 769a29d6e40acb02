"""The service catalog: each service's endpoints, as a token's ``catalog`` lists them.

One row per (service type, interface, region). Bootstrap registers the identity service
(``<public url>/identity/v3``) and the compute service (``<public url>/compute/v2.1``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit.db.models import IdentityEndpoint
from novakit.identity.users import new_id


def ensure_endpoint(
    session: Session, service_type: str, service_name: str, interface: str, region_id: str, url: str
) -> bool:
    """Register (or point elsewhere) a service's endpoint; whether anything changed."""
    row = session.execute(
        select(IdentityEndpoint).where(
            IdentityEndpoint.service_type == service_type,
            IdentityEndpoint.interface == interface,
            IdentityEndpoint.region_id == region_id,
        )
    ).scalar_one_or_none()
    if row is not None:
        if (row.url, row.service_name) == (url, service_name):
            return False
        row.url, row.service_name = url, service_name
        return True
    service_id = session.execute(
        select(IdentityEndpoint.service_id).where(IdentityEndpoint.service_type == service_type).limit(1)
    ).scalar_one_or_none()
    session.add(
        IdentityEndpoint(
            uuid=new_id(),
            service_id=service_id or new_id(),
            service_type=service_type,
            service_name=service_name,
            interface=interface,
            region_id=region_id,
            url=url,
        )
    )
    session.flush()
    return True


def view(session: Session) -> list[dict[str, Any]]:
    """The catalog in a token's shape: one entry per service with its endpoints."""
    services: dict[str, dict[str, Any]] = {}
    rows = session.execute(
        select(IdentityEndpoint).order_by(IdentityEndpoint.service_type, IdentityEndpoint.interface)
    ).scalars()
    for row in rows:
        service = {"endpoints": [], "id": row.service_id, "type": row.service_type, "name": row.service_name}
        entry = services.setdefault(row.service_id, service)
        entry["endpoints"].append(
            {
                "id": row.uuid,
                "interface": row.interface,
                "region": row.region_id,
                "region_id": row.region_id,
                "url": row.url,
            }
        )
    return list(services.values())


def endpoint_url(
    session: Session, service_type: str, interface: str = "public", region_id: str | None = None
) -> str | None:
    """A service's URL for an interface (in a region, when given), else None."""
    stmt = select(IdentityEndpoint.url).where(
        IdentityEndpoint.service_type == service_type, IdentityEndpoint.interface == interface
    )
    if region_id is not None:
        stmt = stmt.where(IdentityEndpoint.region_id == region_id)
    return session.execute(stmt.order_by(IdentityEndpoint.region_id).limit(1)).scalar_one_or_none()
