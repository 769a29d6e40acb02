"""The Placement API under ``/placement`` (OpenStack Placement's), thin over ``novakit.placement``.

What is served: the version document (``GET /placement``, no token needed, as Placement's root);
resource providers (a listing with ``name``, ``uuid``, ``member_of``, ``resources``, ``in_tree``,
``required`` as the microversions allow, one provider), their inventories, usages, traits and
aggregates; the traits; allocation candidates (the scheduler's one candidate query,
``novakit.placement.candidates``); a consumer's allocations (read, replaced, deleted); a
project's usages. Providers, inventories, traits and aggregates are written by the fleet's
registration (``novakit host``, the compute hosts), not here: their write routes answer 405.

Everything is the admin's, as Placement's own policy defaults: the library refuses anyone else
(``placement:read``, ``placement:allocations:update`` in ``novakit.policy``), 403; no token
401. Errors take Placement's shape (``novakit.service.errors``).

Microversions 1.0 to 1.24 (``OpenStack-API-Version: placement 1.x``, echoed with ``Vary``): the
aggregates from 1.1, ``member_of`` 1.3, ``resources`` 1.4, traits 1.6, project ids required in
allocations 1.8, usages 1.9, candidates 1.10, allocations' links 1.11, the dict form of
allocations 1.12, nesting's fields and ``in_tree`` 1.14 (a provider is its own tree's root: novakit
nests none), candidates' ``limit`` 1.16 and ``required`` 1.17, providers' ``required`` 1.18,
aggregates' generation 1.19, candidates' ``member_of`` 1.21, forbidden traits 1.22, several
``member_of`` 1.24. Not 1.25 (granular request groups) and later: consumer generations (1.28)
need a consumer record novakit does not keep. osc-placement negotiates down to 1.24.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions
from novakit.placement import aggregates, allocations, candidates, inventories, providers, traits
from novakit.placement.candidates import ProviderAsk
from novakit.placement.inventories import InventorySpec
from novakit.placement.providers import ProviderView
from novakit.service.auth import Caller, caller
from novakit.service.body import read_json
from novakit.service.microversion import Service, Version

PLACEMENT = Service("placement", "", Version(1, 0), Version(1, 24))
PREFIX = "/placement"

router = APIRouter(prefix=PREFIX)


def _db(request: Request) -> Any:
    return request.app.state.compute.db


def _since(version: Version, major: int, minor: int) -> None:
    """A route that came with ``major.minor``: before it Placement knows no such resource (404)."""
    if not version.at_least(major, minor):
        raise exceptions.NotFound("The resource could not be found.")


def _only_params(request: Request, allowed: set[str]) -> None:
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise exceptions.ValidationError(
            unknown[0], "is not a parameter of this request at this microversion"
        )


def _uuid(value: str, what: str) -> str:
    try:
        return str(uuidlib.UUID(value))
    except ValueError:
        raise exceptions.ValidationError(what, f"is not a uuid: {value[:40]!r}") from None


def _one(request: Request, name: str) -> str | None:
    given = request.query_params.getlist(name)
    if len(given) > 1:
        raise exceptions.ValidationError(name, "is given more than once")
    return given[0] if given else None


# ---------------------------------------------------------------- query parameters


def _resources(value: str) -> dict[str, int]:
    """``VCPU:1,MEMORY_MB:512``; amounts' own rules are the library's."""
    found: dict[str, int] = {}
    for part in value.split(","):
        rc, sep, amount = part.strip().partition(":")
        if not sep or not rc or not amount.strip().isdigit():
            raise exceptions.ValidationError("resources", "must be CLASS:AMOUNT[,CLASS:AMOUNT...]")
        if rc in found:
            raise exceptions.ValidationError("resources", f"names {rc} more than once")
        found[rc] = int(amount)
    return found


def _traits(value: str, version: Version) -> tuple[list[str], list[str]]:
    """``required``: traits, each with ``!`` forbidden from 1.22."""
    required: list[str] = []
    forbidden: list[str] = []
    for name in (n.strip() for n in value.split(",")):
        if name.startswith("!") and version.at_least(1, 22):
            forbidden.append(name[1:])
        else:
            required.append(name)
    return required, forbidden


def _member_of(request: Request, version: Version) -> list[list[str]]:
    """``member_of``: ``UUID`` or ``in:UUID,UUID``; given several times (all must hold) from 1.24."""
    given = request.query_params.getlist("member_of")
    if len(given) > 1 and not version.at_least(1, 24):
        raise exceptions.ValidationError("member_of", "is taken more than once from microversion 1.24")
    groups = []
    for value in given:
        listed = value[3:] if value.startswith("in:") else value
        groups.append([_uuid(u.strip(), "member_of") for u in listed.split(",")])
    return groups


def _ask(request: Request, version: Version, params: set[str]) -> ProviderAsk:
    """What a listing or a candidates request asks, from the parameters its version takes."""
    _only_params(request, params)
    ask = ProviderAsk(member_of=_member_of(request, version))
    resources = _one(request, "resources")
    if resources is not None:
        ask.resources = _resources(resources)
    required = _one(request, "required")
    if required is not None:
        ask.required, ask.forbidden = _traits(required, version)
    ask.name, ask.uuid, ask.in_tree = _one(request, "name"), _one(request, "uuid"), _one(request, "in_tree")
    limit = _one(request, "limit")
    if limit is not None:
        if not limit.isdigit() or int(limit) < 1:
            raise exceptions.ValidationError("limit", "must be a whole number of 1 or more")
        ask.limit = int(limit)
    return ask


# ---------------------------------------------------------------- views


def _provider_url(uuid: str) -> str:
    return f"{PREFIX}/resource_providers/{uuid}"


def _provider(p: ProviderView | candidates.Candidate, version: Version) -> dict[str, Any]:
    """Placement's resource provider, with the links its version has."""
    url = _provider_url(p.uuid)
    links = [
        {"rel": "self", "href": url},
        {"rel": "inventories", "href": f"{url}/inventories"},
        {"rel": "usages", "href": f"{url}/usages"},
    ]
    for rel, since in (("aggregates", (1, 1)), ("traits", (1, 6)), ("allocations", (1, 11))):
        if version.at_least(*since):
            links.append({"rel": rel, "href": f"{url}/{rel}"})
    out: dict[str, Any] = {"uuid": p.uuid, "name": p.name, "generation": p.generation, "links": links}
    if version.at_least(1, 14):
        out.update(parent_provider_uuid=None, root_provider_uuid=p.uuid)
    return out


def _inventory(spec: InventorySpec) -> dict[str, Any]:
    return {
        "total": spec.total,
        "reserved": spec.reserved,
        "min_unit": spec.min_unit,
        "max_unit": spec.max_unit,
        "step_size": spec.step_size,
        "allocation_ratio": spec.allocation_ratio,
    }


def _candidates(
    found: list[candidates.Candidate], held: dict[int, list[str]], ask: ProviderAsk, version: Version
) -> dict[str, Any]:
    """Placement's allocation candidates: one request per provider (list form before 1.12), and
    each provider's summary of the classes asked (and its traits from 1.17)."""
    requests: list[dict[str, Any]] = []
    summaries: dict[str, Any] = {}
    for c in found:
        if version.at_least(1, 12):
            requests.append({"allocations": {c.uuid: {"resources": dict(ask.resources)}}})
        else:
            one = {"resource_provider": {"uuid": c.uuid}, "resources": dict(ask.resources)}
            requests.append({"allocations": [one]})
        summary: dict[str, Any] = {
            "resources": {rc: {"capacity": c.capacity[rc], "used": c.used[rc]} for rc in ask.resources}
        }
        if version.at_least(1, 17):
            summary["traits"] = held.get(c.provider_id, [])
        summaries[c.uuid] = summary
    return {"allocation_requests": requests, "provider_summaries": summaries}


def _consumer(found: allocations.ConsumerAllocations, version: Version) -> dict[str, Any]:
    out: dict[str, Any] = {
        "allocations": {
            rp: {"generation": generation, "resources": dict(resources)}
            for rp, (generation, resources) in found.allocations.items()
        }
    }
    if version.at_least(1, 12) and found.allocations:
        out.update(project_id=found.project_id, user_id=found.user_id)
    return out


# ---------------------------------------------------------------- the version document


@router.get("")
@router.get("/")
def versions(request: Request) -> JSONResponse:
    """Placement's one major version and its microversions' range; no token needed."""
    version = PLACEMENT.requested(request)
    body = {
        "versions": [
            {
                "id": "v1.0",
                "min_version": str(PLACEMENT.minimum),
                "max_version": str(PLACEMENT.maximum),
                "status": "CURRENT",
                "links": [{"rel": "self", "href": ""}],
            }
        ]
    }
    return PLACEMENT.respond(body, version)


# ---------------------------------------------------------------- resource providers


_LISTING_PARAMS = {
    (1, 0): {"name", "uuid"},
    (1, 3): {"member_of"},
    (1, 4): {"resources"},
    (1, 14): {"in_tree"},
    (1, 18): {"required"},
}


@router.get("/resource_providers")
def list_providers(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = PLACEMENT.requested(request)
    params = {p for since, names in _LISTING_PARAMS.items() if version.at_least(*since) for p in names}
    ask = _ask(request, version, params)
    found = candidates.find_providers(_db(request), who.ctx, ask)
    return PLACEMENT.respond({"resource_providers": [_provider(p, version) for p in found]}, version)


@router.get("/resource_providers/{uuid}")
def show_provider(uuid: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = PLACEMENT.requested(request)
    return PLACEMENT.respond(
        _provider(providers.show_provider(_db(request), who.ctx, uuid), version), version
    )


@router.get("/resource_providers/{uuid}/inventories")
def list_inventories(uuid: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = PLACEMENT.requested(request)
    provider, found = inventories.provider_inventories(_db(request), who.ctx, uuid)
    body = {
        "inventories": {rc: _inventory(spec) for rc, spec in sorted(found.items())},
        "resource_provider_generation": provider.generation,
    }
    return PLACEMENT.respond(body, version)


@router.get("/resource_providers/{uuid}/inventories/{resource_class}")
def show_inventory(
    uuid: str, resource_class: str, request: Request, who: Caller = Depends(caller)
) -> JSONResponse:
    version = PLACEMENT.requested(request)
    provider, found = inventories.provider_inventories(_db(request), who.ctx, uuid)
    if resource_class not in found:
        raise exceptions.NotFound(f"No inventory of class {resource_class} for resource provider {uuid}")
    body = {**_inventory(found[resource_class]), "resource_provider_generation": provider.generation}
    return PLACEMENT.respond(body, version)


@router.get("/resource_providers/{uuid}/usages")
def provider_usages(uuid: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = PLACEMENT.requested(request)
    provider, usages = allocations.provider_usages(_db(request), who.ctx, uuid)
    body = {"usages": usages, "resource_provider_generation": provider.generation}
    return PLACEMENT.respond(body, version)


@router.get("/resource_providers/{uuid}/traits")
def provider_traits(uuid: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = PLACEMENT.requested(request)
    _since(version, 1, 6)
    provider, held = traits.provider_traits(_db(request), who.ctx, uuid)
    return PLACEMENT.respond({"traits": held, "resource_provider_generation": provider.generation}, version)


@router.get("/resource_providers/{uuid}/aggregates")
def provider_aggregates(uuid: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = PLACEMENT.requested(request)
    _since(version, 1, 1)
    provider, uuids = aggregates.provider_aggregate_uuids(_db(request), who.ctx, uuid)
    body: dict[str, Any] = {"aggregates": uuids}
    if version.at_least(1, 19):
        body["resource_provider_generation"] = provider.generation
    return PLACEMENT.respond(body, version)


# ---------------------------------------------------------------- traits


@router.get("/traits")
def list_traits(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """``name=startswith:PREFIX`` or ``name=in:A,B``; ``associated=true|false``."""
    version = PLACEMENT.requested(request)
    _since(version, 1, 6)
    _only_params(request, {"name", "associated"})
    name, associated = _one(request, "name"), _one(request, "associated")
    names = prefix = None
    if name is not None:
        if name.startswith("startswith:"):
            prefix = name.removeprefix("startswith:")
        elif name.startswith("in:"):
            names = [n.strip() for n in name.removeprefix("in:").split(",")]
        else:
            raise exceptions.ValidationError("name", "must be startswith:PREFIX or in:NAME[,NAME...]")
    if associated is not None and associated.lower() not in ("true", "false"):
        raise exceptions.ValidationError("associated", "must be true or false")
    found = traits.list_traits(
        _db(request),
        who.ctx,
        names=names,
        prefix=prefix,
        associated=None if associated is None else associated.lower() == "true",
    )
    return PLACEMENT.respond({"traits": found}, version)


# ---------------------------------------------------------------- allocation candidates and usages


@router.get("/allocation_candidates")
def allocation_candidates(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = PLACEMENT.requested(request)
    _since(version, 1, 10)
    params = {"resources"}
    for since, name in (((1, 16), "limit"), ((1, 17), "required"), ((1, 21), "member_of")):
        if version.at_least(*since):
            params.add(name)
    ask = _ask(request, version, params)
    if not ask.resources:
        raise exceptions.ValidationError("resources", "is required: CLASS:AMOUNT[,CLASS:AMOUNT...]")
    found, held = candidates.allocation_candidates(_db(request), who.ctx, ask)
    return PLACEMENT.respond(_candidates(found, held, ask, version), version)


@router.get("/usages")
def project_usages(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = PLACEMENT.requested(request)
    _since(version, 1, 9)
    _only_params(request, {"project_id", "user_id"})
    project = _one(request, "project_id")
    if not project:
        raise exceptions.ValidationError("project_id", "is required")
    usages = allocations.project_usages(_db(request), who.ctx, project, _one(request, "user_id"))
    return PLACEMENT.respond({"usages": usages}, version)


# ---------------------------------------------------------------- allocations


@router.get("/allocations/{consumer_uuid}")
def show_allocations(consumer_uuid: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = PLACEMENT.requested(request)
    found = allocations.show_consumer(_db(request), who.ctx, consumer_uuid)
    return PLACEMENT.respond(_consumer(found, version), version)


def _amounts(given: Any, where: str) -> dict[str, int]:
    if not isinstance(given, dict) or not given:
        raise exceptions.ValidationError(where, "must be an object of resource classes and amounts")
    for rc, amount in given.items():
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise exceptions.ValidationError(f"{where}.{rc}", "must be an integer")
    return dict(given)


def _wanted(body: dict[str, Any], version: Version) -> dict[str, dict[str, int]]:
    """The body's allocations as {provider uuid: {class: amount}}: a list of
    ``{"resource_provider": {"uuid"}, "resources"}`` before 1.12, an object keyed by provider
    uuid of ``{"resources", "generation"}`` from it (the generation is not compared: Placement's
    neither)."""
    given = body.get("allocations")
    wanted: dict[str, dict[str, int]] = {}
    if version.at_least(1, 12):
        if not isinstance(given, dict) or not given:
            raise exceptions.ValidationError("allocations", "must be an object of one or more providers")
        for rp, one in given.items():
            if not isinstance(one, dict) or set(one) - {"resources", "generation"}:
                raise exceptions.ValidationError(f"allocations.{rp}", "takes resources (and generation)")
            wanted[_uuid(rp, "allocations")] = _amounts(one.get("resources"), f"allocations.{rp}.resources")
        return wanted
    if not isinstance(given, list) or not given:
        raise exceptions.ValidationError("allocations", "must be a list of one or more allocations")
    for n, one in enumerate(given):
        where = f"allocations[{n}]"
        if not isinstance(one, dict) or set(one) != {"resource_provider", "resources"}:
            raise exceptions.ValidationError(where, "takes resource_provider and resources")
        rp = one["resource_provider"]
        if not isinstance(rp, dict) or set(rp) != {"uuid"} or not isinstance(rp["uuid"], str):
            raise exceptions.ValidationError(f"{where}.resource_provider", "must be an object with a uuid")
        wanted[_uuid(rp["uuid"], f"{where}.resource_provider.uuid")] = _amounts(
            one["resources"], f"{where}.resources"
        )
    return wanted


@router.put("/allocations/{consumer_uuid}")
async def set_allocations(consumer_uuid: str, request: Request, who: Caller = Depends(caller)) -> Response:
    """Replace what the consumer holds; project and user ids required from 1.8."""
    version = PLACEMENT.requested(request)
    consumer = _uuid(consumer_uuid, "consumer_uuid")
    body = await read_json(request)
    extra = sorted(set(body) - {"allocations", "project_id", "user_id"})
    if extra:
        raise exceptions.ValidationError(extra[0], "is not taken in an allocations body")
    owner: dict[str, str | None] = {}
    for key in ("project_id", "user_id"):
        value = body.get(key)
        if value is None and version.at_least(1, 8):
            raise exceptions.ValidationError(key, "is required from microversion 1.8")
        if value is not None and (not isinstance(value, str) or not value or len(value) > 255):
            raise exceptions.ValidationError(key, "must be a string of 1 to 255 characters")
        owner[key] = value
    wanted = _wanted(body, version)
    await run_in_threadpool(
        allocations.set_allocations,
        _db(request),
        who.ctx,
        consumer,
        wanted,
        owner["project_id"],
        owner["user_id"],
    )
    return PLACEMENT.accepted(version, 204)


@router.delete("/allocations/{consumer_uuid}")
def delete_allocations(consumer_uuid: str, request: Request, who: Caller = Depends(caller)) -> Response:
    version = PLACEMENT.requested(request)
    allocations.delete_consumer_allocations(_db(request), who.ctx, consumer_uuid)
    return PLACEMENT.accepted(version, 204)
