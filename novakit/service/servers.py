"""Compute v2.1, the servers' write side: create, update, delete and the actions (Nova's
``servers`` and ``server actions`` controllers), thin over the library.

A create or an action is checked and started in the request, as the CLI's call starts it (the
library's ``API.create`` / ``API.act``: its validation, policy, quota, lock and state-table
checks, its one guarded write), and answered 202 at once with the server in its task state;
the conductor's part runs in the service's pool (``novakit.service.work``, ``API.later``). A
refusal is the library's exception, answered by the error table (``novakit.service.errors``):
400 for a bad body (naming the field), 403, 404 (another project's server), 409 (a state or a
lock that refuses it), 413 (over quota), and nothing is written.

Nova's request bodies are translated here into the library's request (``_create_request``,
``ACTIONS``): names only, no decision. What Nova accepts that novakit does not do (personality
files, access IPs, an action with no library counterpart) is refused with 400 naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions
from novakit.network import filter_sync, networks, security_groups
from novakit.service.auth import Caller, caller
from novakit.service.body import read_json
from novakit.service.compute import COMPUTE, _links, _service, shown_server
from novakit.service.microversion import Version

router = APIRouter(prefix="/compute")


class BadReference(exceptions.NovakitError):
    msg_fmt = "%(reason)s"
    code = 400


#: the keys of Nova's ``server`` create body that novakit takes, and the library's name for each
_CREATE_KEYS = {
    "name": "name",
    "flavorRef": "flavor",
    "imageRef": "image",
    "min_count": "min_count",
    "max_count": "max_count",
    "metadata": "metadata",
    "availability_zone": "availability_zone",
    "key_name": "key_name",
    "adminPass": "admin_password",
    "description": "description",
    "config_drive": "config_drive",
}
#: taken and not used, as Nova's own API takes them (a disk layout novakit does not choose)
_IGNORED_KEYS = {"OS-DCF:diskConfig"}
_HINTS = ("group", "same_host", "different_host")


def _ref(value: Any, field: str) -> str:
    """An id or a link to one (Nova takes both for ``flavorRef`` and ``imageRef``)."""
    if not isinstance(value, str) or not value.strip():
        raise exceptions.ValidationError(field, "must be an id or a link to one")
    return value.rstrip("/").rsplit("/", 1)[-1]


def _networks(value: Any) -> list[dict[str, Any]]:
    """Nova's ``networks``: ``auto`` (the project's network, as novakit picks one), or a list of
    ``{"uuid"|"port", "fixed_ip"}``. ``none`` (a server with no NIC) novakit does not make."""
    if value == "auto":
        return []
    if value == "none":
        raise exceptions.ValidationError("networks", "'none' is not supported: a server has at least one NIC")
    if not isinstance(value, list):
        raise exceptions.ValidationError("networks", "must be 'auto' or a list of {uuid|port, fixed_ip}")
    out = []
    for nic in value:
        if not isinstance(nic, dict) or not set(nic) <= {"uuid", "port", "fixed_ip", "tag"}:
            raise exceptions.ValidationError("networks", "each must be an object of uuid, port and fixed_ip")
        one: dict[str, Any] = {}
        if "uuid" in nic:
            one["net_id"] = nic["uuid"]
        if "port" in nic:
            one["port_id"] = nic["port"]
        if "fixed_ip" in nic:
            one["fixed_ip"] = nic["fixed_ip"]
        out.append(one)
    return out


def _root_disk(mappings: Any, data: dict[str, Any]) -> None:
    """Nova's ``block_device_mapping_v2`` as novakit takes it: one mapping, the root disk
    (``boot_index`` 0): the image on the host's disk (``source_type`` image, ``destination_type``
    local: what ``openstack server create --image`` sends), a new volume from the image
    (destination volume, ``volume_size``), or an existing volume (``source_type`` volume)."""
    field = "block_device_mapping_v2"
    if not isinstance(mappings, list) or len(mappings) != 1 or not isinstance(mappings[0], dict):
        raise exceptions.ValidationError(field, "must hold exactly one mapping, the root disk (boot_index 0)")
    bdm = mappings[0]
    if bdm.get("volume_type") is not None:
        raise exceptions.ValidationError(f"{field}.volume_type", "novakit's volumes have no types")
    source, destination = bdm.get("source_type"), bdm.get("destination_type", "volume")
    if str(bdm.get("boot_index")) != "0":
        raise exceptions.ValidationError(field, "the one mapping must be the root disk: boot_index 0")
    if source == "image" and destination == "local":
        data["image"] = _ref(bdm.get("uuid"), f"{field}.uuid")
        return
    if destination != "volume":
        raise exceptions.ValidationError(f"{field}.destination_type", "must be local (an image) or volume")
    if source == "image":
        data["image"] = _ref(bdm.get("uuid"), f"{field}.uuid")
        data["boot_from_volume"] = bdm.get("volume_size")
    elif source == "volume":
        data["boot_volume"] = bdm.get("uuid")
        data.pop("image", None)
    else:
        raise exceptions.ValidationError(f"{field}.source_type", "must be image or volume")
    if "delete_on_termination" in bdm:
        data["delete_on_termination"] = bdm["delete_on_termination"]


def _create_request(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The library's create request for Nova's body, and whether the caller asked for the
    reservation id instead of the server."""
    server = body.get("server")
    if not isinstance(server, dict):
        raise exceptions.ValidationError("server", "is required: an object")
    data: dict[str, Any] = {}
    for key, value in server.items():
        if key in _CREATE_KEYS:
            data[_CREATE_KEYS[key]] = value
        elif key in _IGNORED_KEYS:
            continue
        elif key == "user_data":  # base64, as the library takes it
            data["user_data"] = value
        elif key == "networks":
            data["networks"] = _networks(value)
        elif key == "security_groups":
            data["security_groups"] = value
        elif key in ("trusted_image_certificates", "host", "hypervisor_hostname"):
            # 2.63's certificates (novakit verifies none), 2.74's host (novakit's scheduler picks
            # it; an admin names it with a zone or a hint): none given is nothing lost
            if value not in ([], None):
                raise exceptions.ValidationError(key, "is not taken by novakit")
        elif key == "tags":  # novakit keeps no server tags: none given is nothing lost
            if value not in ([], None):
                raise exceptions.ValidationError("tags", "novakit keeps no server tags")
        elif key not in ("block_device_mapping_v2", "return_reservation_id"):
            raise exceptions.ValidationError(key, "is not a server attribute novakit takes")
    if data.get("max_count", data.get("min_count")) == 1 and data.get("min_count", 1) == 1:
        # Nova names a server of a request for one as asked; the library's count names its
        # servers name-1 ... name-N, which Nova does only for more than one.
        data.pop("min_count", None)
        data.pop("max_count", None)
    if "flavor" in data:
        data["flavor"] = _ref(data["flavor"], "flavorRef")
    if data.get("image") in (None, ""):  # no image: a boot from a volume
        data.pop("image", None)
    else:
        data["image"] = _ref(data["image"], "imageRef")
    if "block_device_mapping_v2" in server:
        _root_disk(server["block_device_mapping_v2"], data)
    hints = body.get("os:scheduler_hints") or body.get("OS-SCH-HNT:scheduler_hints") or {}
    if not isinstance(hints, dict):
        raise exceptions.ValidationError("os:scheduler_hints", "must be an object")
    # Nova passes a hint no filter reads through unused; novakit reads these three.
    if any(h in hints for h in _HINTS):
        data["scheduler_hints"] = {h: hints[h] for h in _HINTS if h in hints}
    reservation = server.get("return_reservation_id", False)
    if not isinstance(reservation, bool):
        raise exceptions.ValidationError("return_reservation_id", "must be true or false")
    return data, reservation


@router.post("/v2.1/servers", status_code=202)
async def create_server(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    body = await read_json(request)
    data, reservation = _create_request(body)
    if version.at_least(2, 37) and "networks" not in body["server"]:
        raise exceptions.ValidationError("networks", "is required from microversion 2.37 ('auto' or a list)")
    api = _service(request).api
    try:
        created = await run_in_threadpool(api.create, who.ctx, data)
    except exceptions.NotFound as exc:
        # What a create names (its flavor, image, network, port, key pair, group, volume) and is
        # not found is a bad request, not a missing resource (Nova's create answers 400).
        raise BadReference(reason=exc.format_message()) from None
    first = created[0]
    if reservation:
        return COMPUTE.respond({"reservation_id": first["reservation_id"]}, version, status_code=202)
    links = _links(request, "servers", first["id"])
    answer = {
        "id": first["id"],
        "links": links,
        "OS-DCF:diskConfig": "MANUAL",
        "security_groups": [{"name": g} for g in (data.get("security_groups") or ["default"])],
    }
    if "admin_password" in data:
        answer["adminPass"] = data["admin_password"]
    headers = {"Location": links[0]["href"]}
    return COMPUTE.respond({"server": answer}, version, status_code=202, headers=headers)


@router.put("/v2.1/servers/{server_id}")
async def update_server(server_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    body = await read_json(request)
    server = body.get("server")
    if not isinstance(server, dict) or not server:
        raise exceptions.ValidationError("server", "is required: an object with name")
    unknown = sorted(set(server) - {"name"})
    if unknown:
        raise exceptions.ValidationError(unknown[0], "cannot be changed (novakit changes a server's name)")
    service = _service(request)
    await run_in_threadpool(service.api.rename, who.ctx, server_id, server["name"])
    view = await run_in_threadpool(service.api.get, who.ctx, server_id)
    return COMPUTE.respond({"server": shown_server(request, view, version, who.ctx, None)}, version)


@router.delete("/v2.1/servers/{server_id}", status_code=204)
async def delete_server(server_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    version = COMPUTE.requested(request)
    await run_in_threadpool(_service(request).api.act, who.ctx, server_id, "delete")
    return COMPUTE.accepted(version, 204)


# ---------------------------------------------------------------- actions


@dataclass(frozen=True)
class Action:
    """One of Nova's server actions: the library's action and how its options are read from the
    action's body (``options``), or a handler of its own (``run``: console output, security
    groups)."""

    action: str | None
    options: Callable[[Any], dict[str, Any]] = lambda _: {}
    run: Callable[[Request, Caller, str, Any], Any] | None = None
    #: keys of the action's body taken only from a microversion on (Nova's schema of that version)
    since: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: keys taken only before a microversion (Nova removed them there)
    until: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def check_version(self, name: str, value: Any, version: Version) -> None:
        """A key of the body that the asked microversion does not take is 400, naming it."""
        for key in value if isinstance(value, dict) else ():
            if key in self.since and not version.at_least(*self.since[key]):
                at = ".".join(map(str, self.since[key]))
                raise exceptions.ValidationError(f"{name}.{key}", f"is taken from microversion {at}")
            if key in self.until and version.at_least(*self.until[key]):
                at = ".".join(map(str, self.until[key]))
                raise exceptions.ValidationError(f"{name}.{key}", f"is not taken from microversion {at}")


def _object(name: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise exceptions.ValidationError(name, "must be an object")
    return value


def _only(name: str, value: Any, keys: dict[str, str]) -> dict[str, Any]:
    """An action's body with only ``keys`` (Nova's name -> the library's), else 400."""
    given = _object(name, value)
    unknown = sorted(set(given) - set(keys))
    if unknown:
        raise exceptions.ValidationError(f"{name}.{unknown[0]}", "is not an option of this action")
    return {keys[k]: v for k, v in given.items()}


def _reboot(value: Any) -> dict[str, Any]:
    given = _only("reboot", value, {"type": "reboot_type"})
    if str(given.get("reboot_type", "")).upper() not in ("SOFT", "HARD"):
        raise exceptions.ValidationError("reboot.type", "must be SOFT or HARD")
    return {"reboot_type": given["reboot_type"].upper()}


def _rebuild(value: Any) -> dict[str, Any]:
    given = _only(
        "rebuild",
        value,
        {
            "imageRef": "image",
            "name": "name",
            "metadata": "metadata",
            "adminPass": "admin_password",
            "key_name": "key_name",
            "user_data": "user_data",
            "OS-DCF:diskConfig": "-",
        },
    )
    given.pop("-", None)
    if "image" not in given:
        raise exceptions.ValidationError("rebuild.imageRef", "is required")
    given["image"] = _ref(given["image"], "rebuild.imageRef")
    return given


def _resize(value: Any) -> dict[str, Any]:
    given = _only("resize", value, {"flavorRef": "flavor", "OS-DCF:diskConfig": "-"})
    if "flavor" not in given:
        raise exceptions.ValidationError("resize.flavorRef", "is required")
    return {"flavor": _ref(given["flavor"], "resize.flavorRef")}


def _host_option(name: str, extra: tuple[str, ...] = ()) -> Callable[[Any], dict[str, Any]]:
    """An action whose one option novakit takes is the destination ``host`` (Nova's other keys
    of it, ``extra``, are taken and left: novakit decides them itself)."""

    def options(value: Any) -> dict[str, Any]:
        given = _only(name, value, {"host": "host", **{k: "-" for k in extra}})
        given.pop("-", None)
        return {k: v for k, v in given.items() if v is not None}

    return options


def _console_output(request: Request, who: Caller, server_id: str, value: Any) -> JSONResponse:
    given = _only("os-getConsoleOutput", value, {"length": "lines"})
    lines = given.get("lines")
    if lines is not None and (not str(lines).lstrip("-").isdigit() or int(lines) < -1):
        raise exceptions.ValidationError("os-getConsoleOutput.length", "must be an integer of -1 or more")
    wanted = None if lines in (None, -1, "-1") else int(lines)
    output = _service(request).api.console_output(who.ctx, server_id, wanted)
    return COMPUTE.respond({"output": output}, COMPUTE.requested(request))


def _security_group(change: Callable[..., None], name: str) -> Callable[[Request, Caller, str, Any], None]:
    def run(request: Request, who: Caller, server_id: str, value: Any) -> None:
        group = _object(name, value).get("name")
        if not isinstance(group, str) or not group:
            raise exceptions.ValidationError(f"{name}.name", "is required: the group's name or id")
        api = _service(request).api

        def push(port_uuids: list[str]) -> None:
            filter_sync.push_filters(api.conductor.rpc, who.ctx.request_id, port_uuids)

        change(api.db, who.ctx, server_id, group, on_change=push)

    return run


#: Nova's action names (the body's one key) -> novakit's
ACTIONS: dict[str, Action] = {
    "os-start": Action("start"),
    "os-stop": Action("stop"),
    "reboot": Action("reboot", _reboot),
    "pause": Action("pause"),
    "unpause": Action("unpause"),
    "suspend": Action("suspend"),
    "resume": Action("resume"),
    "lock": Action(
        "lock", lambda v: _only("lock", v, {"locked_reason": "reason"}), since={"locked_reason": (2, 73)}
    ),
    "unlock": Action("unlock"),
    "rebuild": Action(
        "rebuild", _rebuild, since={"key_name": (2, 54), "user_data": (2, 57)}, until={"personality": (2, 57)}
    ),
    "resize": Action("resize", _resize),
    "confirmResize": Action("confirm_resize"),
    "revertResize": Action("revert_resize"),
    "migrate": Action("migrate", _host_option("migrate"), since={"host": (2, 56)}),
    "os-migrateLive": Action(
        "live_migrate",
        _host_option("os-migrateLive", ("block_migration", "disk_over_commit", "force")),
        until={"disk_over_commit": (2, 25), "force": (2, 68)},
    ),
    "evacuate": Action(
        "evacuate",
        _host_option("evacuate", ("onSharedStorage", "adminPass", "force")),
        until={"onSharedStorage": (2, 14), "force": (2, 68)},
    ),
    "createImage": Action(
        "create_image", lambda v: _only("createImage", v, {"name": "name", "metadata": "metadata"})
    ),
    "shelve": Action("shelve"),
    "shelveOffload": Action("shelve_offload"),
    "unshelve": Action("unshelve", lambda v: _only("unshelve", v, {})),
    "rescue": Action("rescue", lambda v: _only("rescue", v, {"rescue_image_ref": "image"})),
    "unrescue": Action("unrescue"),
    "os-getConsoleOutput": Action(None, run=_console_output),
    "addSecurityGroup": Action(None, run=_security_group(security_groups.add_to_server, "addSecurityGroup")),
    "removeSecurityGroup": Action(
        None, run=_security_group(security_groups.remove_from_server, "removeSecurityGroup")
    ),
}


@router.post("/v2.1/servers/{server_id}/action")
async def server_action(server_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    version = COMPUTE.requested(request)
    body = await read_json(request)
    if len(body) != 1:
        raise exceptions.ValidationError("body", "must name exactly one action")
    [(name, value)] = body.items()
    known = ACTIONS.get(name)
    if known is None:
        raise exceptions.ValidationError(name, "is not a server action novakit takes")
    if known.run is not None:
        answered = await run_in_threadpool(known.run, request, who, server_id, value)
        return answered if isinstance(answered, Response) else COMPUTE.accepted(version)
    assert known.action is not None
    known.check_version(name, value, version)
    options = known.options(value)
    api = _service(request).api
    outcome = await run_in_threadpool(api.act, who.ctx, server_id, known.action, options)
    if known.action == "rebuild" and outcome.server is not None:
        # Nova answers a rebuild with the server (2.75 made it show's view in full).
        rebuilt = shown_server(request, outcome.server, version, who.ctx, None)
        if "admin_password" in options:
            rebuilt["adminPass"] = options["admin_password"]
        return COMPUTE.respond({"server": rebuilt}, version, status_code=202)
    if known.action == "create_image" and outcome.image_id is not None:
        # The image's id, chosen as the snapshot started: in the body from 2.45, before in Location.
        if version.at_least(2, 45):
            return COMPUTE.respond({"image_id": outcome.image_id}, version, status_code=202)
        location = f"{str(request.base_url).rstrip('/')}/image/v2/images/{outcome.image_id}"
        return COMPUTE.accepted(version, headers={"Location": location})
    return COMPUTE.accepted(version)


# ---------------------------------------------------------------- os-networks (before 2.36)


def _network(net: dict[str, Any]) -> dict[str, Any]:
    """Nova's proxy view of a network (the keys its Neutron proxy fills; the rest null)."""
    return {"id": net["id"], "label": net["name"], "cidr": None, "mtu": net["mtu"], "shared": net["shared"]}


def _networks_served(request: Request) -> Any:
    """Nova's network proxy went in 2.36: from there it answers 404, as Nova's."""
    version = COMPUTE.requested(request)
    if version.at_least(2, 36):
        raise exceptions.NotFound()
    return version


@router.get("/v2.1/os-networks")
def list_networks(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """The networks a create may name (the library's listing of those the caller may see: its
    project's and the shared ones), for an older client that looks a network's name up here."""
    version = _networks_served(request)
    listed = networks.list_networks(_service(request).db, who.ctx)
    return COMPUTE.respond({"networks": [_network(n) for n in listed]}, version)


@router.get("/v2.1/os-networks/{network_id}")
def show_network(network_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = _networks_served(request)
    shown = networks.show(_service(request).db, network_id, who.ctx)
    return COMPUTE.respond({"network": _network(shown)}, version)


# ---------------------------------------------------------------- a server's security groups


def _rule(rule: dict[str, Any], group_id: str) -> dict[str, Any]:
    """Nova's proxy view of a rule (ingress rules: Nova's proxy shows those)."""
    return {
        "id": rule["id"],
        "parent_group_id": group_id,
        "ip_protocol": rule["protocol"],
        "from_port": rule["port_range_min"],
        "to_port": rule["port_range_max"],
        "ip_range": {"cidr": rule["remote_ip_prefix"]} if rule["remote_ip_prefix"] else {},
        "group": {"name": rule["remote_group"]} if rule["remote_group"] else {},
    }


@router.get("/v2.1/servers/{server_id}/os-security-groups")
def server_security_groups(server_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """The groups the server's ports carry, with their ingress rules (Nova's proxy; this one route
    of it stays after 2.36). openstack.cloud's ``server`` module reads it on every run."""
    version = COMPUTE.requested(request)
    db = _service(request).db
    groups = [
        security_groups.show_group(db, who.ctx, name)
        for name in security_groups.server_groups(db, who.ctx, server_id)
    ]
    shown = [
        {
            "id": g["id"],
            "name": g["name"],
            "description": g["description"],
            "tenant_id": g["project_id"],
            "rules": [_rule(r, g["id"]) for r in g["security_group_rules"] if r["direction"] == "ingress"],
        }
        for g in groups
    ]
    return COMPUTE.respond({"security_groups": shown}, version)


@router.get("/v2.1/os-floating-ip-pools")
def floating_ip_pools(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """Nova's floating IP pools (a proxy gone in 2.36): novakit has no floating IPs, so none.
    openstacksdk's ``create_server`` asks for them (its ``auto_ip``) when no network service is
    in the catalog."""
    version = _networks_served(request)
    del who
    return COMPUTE.respond({"floating_ip_pools": []}, version)


# ---------------------------------------------------------------- topology (2.78)


@router.get("/v2.1/servers/{server_id}/topology")
def server_topology(server_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """Nova's NUMA topology of a server (2.78): novakit pins no guest to NUMA nodes, so none."""
    version = COMPUTE.requested(request)
    if not version.at_least(2, 78):
        raise exceptions.NotFound()
    _service(request).api.get(who.ctx, server_id)  # another project's server is not found
    return COMPUTE.respond({"nodes": [], "pagesize_kb": None}, version)
