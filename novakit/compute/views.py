"""Servers as a caller may see them: what every read and write of the API returns.

Hosts are the operator's business (Nova: ``OS-EXT-SRV-ATTR:host`` is admin-only): a
view names the host only for a caller allowed ``host:show``; everyone gets the
opaque ``host_id``, the same for two servers of a project on one host.
"""

from __future__ import annotations

import hashlib
from typing import Any

from novakit import policy
from novakit.compute import actions
from novakit.compute.states import POWER_STATE_NAMES, PowerState, status_from_state
from novakit.context import RequestContext
from novakit.db.api import ListedServer
from novakit.db.models import Image, Instance

#: Image properties that name where an image's file is (a host): the operator's, as hosts are.
IMAGE_HOST_PROPERTIES = frozenset({"image_host"})


def host_id(project_id: str, host: str | None) -> str:
    """Nova's ``hostId``: which host, as a project may know it (the same within a project, opaque)."""
    if not host:
        return ""
    return hashlib.sha224((project_id + host).encode()).hexdigest()


def host_shown(ctx: RequestContext, project_id: str, host: str) -> str:
    """A host as ``ctx`` may see it: its name for an admin, else its ``host_id``."""
    return host if policy.allowed(ctx, "host:show") else host_id(project_id, host)


#: POWER_STATE_NAMES by the number rows hold
_POWER_NAMES_BY_NUMBER = {int(p): name for p, name in POWER_STATE_NAMES.items()}


def _power_state_name(power_state: int) -> str:
    # By the number first: building the enum for every row cost a listing a tenth of its time.
    name = _POWER_NAMES_BY_NUMBER.get(power_state)
    return name if name is not None else POWER_STATE_NAMES.get(PowerState(power_state), str(power_state))


def _ips(nic: dict[str, Any]) -> list[str]:
    return [ip["address"] for ip in nic.get("fixed_ips") or []]


def _addresses(inst: Instance | ListedServer) -> list[str]:
    """The fixed IPs of its ports when it has ports (chosen before it was built, so known at once),
    else what its host read back from the guest."""
    fixed = [ip for nic in inst.networks or [] if nic.get("port_id") for ip in _ips(nic)]
    return fixed or list(inst.addresses or [])


def security_groups_view(names: list[str]) -> list[dict[str, str]]:
    """A server's ``security_groups`` as Nova shows them: the groups its ports carry, each once,
    as ``{"name": ...}`` (server show adds them: its ports are the API database's)."""
    return [{"name": name} for name in sorted(set(names))]


def server_view(
    inst: Instance | ListedServer, ctx: RequestContext, image_name: str | None = None
) -> dict[str, Any]:
    """A server as the caller may see it (Nova's server show, trimmed): of an instance, or of a
    server as a listing reads it.

    ``image_name``: its image's name, when the caller has read it (listings read them at once).
    """
    # Only a server in error shows its fault: the others never load their faults (a listing reads
    # them as ``ListedServer``s, and those in error whole).
    fault = (
        inst.faults[0] if isinstance(inst, Instance) and inst.vm_state == "error" and inst.faults else None
    )
    operator = policy.allowed(ctx, "host:show")
    view: dict[str, Any] = {
        "id": inst.uuid,
        "name": inst.display_name,
        "hostname": inst.hostname,
        "status": status_from_state(inst.vm_state, inst.task_state),
        "vm_state": inst.vm_state,
        "task_state": inst.task_state,
        "power_state": inst.power_state,
        "power_state_name": _power_state_name(inst.power_state),
        # Hosts are the operator's business (Nova: OS-EXT-SRV-ATTR:host is admin-only); everyone
        # gets the opaque host_id, the same for two servers of a project on one host.
        "host": inst.host if operator else None,
        "node": inst.node if operator else None,
        "host_id": host_id(inst.project_id, inst.host),
        # The zone it was placed in (its host's then; changing zones moves no server).
        "availability_zone": inst.availability_zone,
        "OS-EXT-AZ:availability_zone": inst.availability_zone,  # Nova's name for it
        "flavor": dict(inst.flavor or {}),
        "image": inst.image_ref,
        "image_name": image_name,
        "addresses": _addresses(inst),
        # Its ports (MAC and fixed IPs), known before the guest answers (``novakit.network``).
        "nics": [
            {"port_id": n["port_id"], "mac": n.get("mac"), "network": n.get("source"), "fixed_ips": _ips(n)}
            for n in inst.networks or []
            if n.get("port_id")
        ],
        "metadata": dict(inst.instance_metadata or {}),
        "key_name": inst.key_name,
        "locked": inst.locked,
        "locked_reason": inst.locked_reason,
        "project_id": inst.project_id,
        "user_id": inst.user_id,
        "reservation_id": inst.reservation_id,
        "created": inst.created_at,
        "updated": inst.updated_at,
        "launched_at": inst.launched_at,
        "terminated_at": inst.terminated_at,
    }
    if fault is not None:
        view["fault"] = actions.fault_view(fault, ctx)
    return view


def image_view(image: Image, ctx: RequestContext | None) -> dict[str, Any]:
    """An image as the caller may see it (Glance's image show, trimmed).

    Where the file is on the compute hosts (``location``) and which host wrote a snapshot
    (``properties.image_host``) are the operator's, as hosts are: shown only to a caller
    allowed ``host:show`` (``ctx`` None: the library's own caller, an operator).
    """
    operator = ctx is None or policy.allowed(ctx, "host:show")
    properties = dict(image.properties or {})
    view: dict[str, Any] = {
        "id": image.uuid,
        "name": image.name,
        "disk_format": image.disk_format,
        "container_format": image.container_format,
        "checksum": image.checksum,
        "size": image.size,
        "min_disk": image.min_disk,
        "min_ram": image.min_ram,
        "status": image.status,
        "visibility": image.visibility,
        "owner": image.project_id,
        "created_at": image.created_at,
        "updated_at": image.updated_at,
    }
    if operator:
        view["location"] = image.location
    else:
        properties = {k: v for k, v in properties.items() if k not in IMAGE_HOST_PROPERTIES}
    view["properties"] = properties
    return view
