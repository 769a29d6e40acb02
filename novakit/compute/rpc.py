"""Requests to compute hosts: the controller's half of Nova's compute RPC.

Nova casts to a host's queue; novakit calls the host's transport (chosen by
what the host registered in ``compute_nodes.driver``, see ``novakit.transport``),
which answers with a ``ComputeResult``. Every hop is a plain function call:
``ComputeRPC.send`` -> ``Transport.call`` -> ``ComputeManager.handle``, in this
process or in ``python -m novakit.host`` on the host.

A request never raises here: a host that could not run it at all (not
registered, unreachable, its driver would not start) answers ``unusable``, a
result whose ``error`` and per-instance faults say why and ask for a reschedule.

The database is read by the controller's halves only (``driver_infos``,
``instance_spec``), which import it where they read it: the transports and the
compute side's entry point shape ``unusable`` results with this module, and the
compute side never loads the database layer (``tests/unit/test_imports.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from novakit import exceptions
from novakit.config import Config
from novakit.host.faults import unusable
from novakit.host.messages import (
    ComputeRequest,
    ComputeResult,
    ImageSpec,
    InstanceSpec,
    NetworkSpec,
    VolumeSpec,
)
from novakit.transport import Transport
from novakit.transport.factory import get_transport

if TYPE_CHECKING:
    from sqlalchemy import TextualSelect
    from sqlalchemy.orm import Session

    from novakit.db.engine import Database
    from novakit.db.models import Instance

TransportFactory = Callable[[str, dict[str, Any]], Transport]

#: most requests in flight at once from one ``send_all``
MAX_PARALLEL = 16


class ComputeRPC:
    """Sends requests to the hosts that registered, each through its own transport.

    ``transport_factory(host, driver_info)``: how a transport is made (tests and
    benchmarks wrap or replace it); by default ``novakit.transport.get_transport``.
    """

    def __init__(self, db: Database, conf: Config, transport_factory: TransportFactory | None = None) -> None:
        self.db = db
        self.conf = conf
        self.transport_factory: TransportFactory = transport_factory or self._transport

    def _transport(self, host: str, info: dict[str, Any]) -> Transport:
        return get_transport(host, info, self.conf.compute.max_concurrent_builds)

    def send(self, request: ComputeRequest, infos: dict[str, dict[str, Any]] | None = None) -> ComputeResult:
        """One request to its host; ``infos`` (host -> driver info) when the caller has read them."""
        try:
            if infos is None:
                infos = self.driver_infos({request.host})
            if request.host not in infos:
                raise exceptions.ComputeHostNotFound(host=request.host)
            return self.transport_factory(request.host, infos[request.host]).call(request)
        except Exception as exc:
            return unusable(request, exc, request.host)

    def send_all(
        self, requests: list[ComputeRequest], infos: dict[str, dict[str, Any]] | None = None
    ) -> list[ComputeResult]:
        """Each request to its host, in parallel; the results in the requests' order."""
        if not requests:
            return []
        hosts = {r.host for r in requests}
        if not infos or not hosts <= infos.keys():
            infos = self.driver_infos(hosts)
        if len(requests) == 1:
            return [self.send(requests[0], infos)]
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(requests))) as pool:
            return list(pool.map(lambda r: self.send(r, infos), requests))

    def driver_infos(self, hosts: set[str], session: Session | None = None) -> dict[str, dict[str, Any]]:
        """How to reach each registered host (its driver and transport), in one query.

        ``session``: read in the caller's transaction (the scheduler's claims), else in a new one.
        A host that is not registered is not in the answer.
        """
        if not hosts:
            return {}
        if session is None:
            with self.db.reader() as session:
                return self.driver_infos(hosts, session)
        from sqlalchemy import select

        from novakit.db.models import ComputeNode

        if len(hosts) == 1:
            rows = session.execute(_driver_of_one(), {"host": next(iter(hosts))}).all()
        else:
            rows = session.execute(
                select(ComputeNode.host, ComputeNode.driver).where(
                    ComputeNode.host.in_(sorted(hosts)), ComputeNode.deleted == 0
                )
            ).all()
        return {host: dict(driver or {}) for host, driver in rows}


def instance_spec(
    session: Session,
    inst: Instance,
    images_seen: dict[str, Any] | None = None,
    *,
    image: ImageSpec | None = None,
    volumes: list[VolumeSpec] | None = None,
) -> InstanceSpec:
    """Everything a compute host needs about one instance, from its records.

    ``images_seen`` caches image rows across the instances of one request. What the caller
    already knows is not read again: ``image``, the instance's image as its request spec holds
    it (Nova's build takes the request spec's image too), used when it is the instance's;
    ``volumes``, its volumes (``[]``: a server whose request named no volume has none).
    """
    from novakit.catalog import flavors
    from novakit.network.filter_sync import with_filters

    image, props = _image_of(session, inst, images_seen, image)
    kernel, ramdisk = _kernel_and_ramdisk(session, props)
    flavor = inst.flavor or {}
    return InstanceSpec(
        uuid=inst.uuid,
        name=inst.display_name,
        hostname=inst.hostname,
        project_id=inst.project_id,
        user_id=inst.user_id,
        flavor=flavors.spec(
            flavor, {"vcpus": inst.vcpus, "memory_mb": inst.memory_mb, "root_gb": inst.root_gb}
        ),
        image=image,
        kernel=kernel,
        ramdisk=ramdisk,
        metadata={k: str(v) for k, v in (inst.instance_metadata or {}).items()},
        user_data=inst.user_data,  # type: ignore[arg-type]
        admin_password_hash=inst.admin_password_hash,  # type: ignore[arg-type]
        key_name=inst.key_name,
        key_data=inst.key_data,
        config_drive=inst.config_drive,
        networks=with_filters(session, [NetworkSpec.model_validate(n) for n in (inst.networks or [])]),
        volumes=_volumes_of(session, inst.uuid) if volumes is None else volumes,
    )


def _image_of(
    session: Session, inst: Instance, images_seen: dict[str, Any] | None, image: ImageSpec | None
) -> tuple[ImageSpec, dict[str, Any]]:
    """The instance's image and its properties: ``image`` when it is the instance's, else read
    (once per request through ``images_seen``); a deleted image is named as such."""
    from novakit.catalog import images

    if image is not None and image.id == (inst.image_ref or ""):
        return image, dict(image.properties)
    cache = images_seen if images_seen is not None else {}
    key = inst.image_ref or ""
    if key not in cache:
        cache[key] = images.by_uuid(session, inst.image_ref or "")
    img = cache[key]
    if img is None:
        return ImageSpec(id=inst.image_ref or "", name="(deleted image)"), {}
    return images.spec(img), img.properties or {}


def _kernel_and_ramdisk(session: Session, props: dict[str, Any]) -> tuple[ImageSpec | None, ImageSpec | None]:
    """The kernel and ramdisk images an image's properties name (None: not named, or gone)."""
    from novakit.catalog import images

    def named(key: str) -> ImageSpec | None:
        ref = props.get(key)
        found = images.by_uuid(session, ref) if ref else None
        return images.spec(found) if found is not None else None

    return named("kernel_id"), named("ramdisk_id")


def _volumes_of(session: Session, instance_uuid: str) -> list[VolumeSpec]:
    from novakit.volume.volumes import specs_of_server

    return specs_of_server(session, instance_uuid)


def volume_spec(session: Session, volume_uuid: str, instance_uuid: str) -> VolumeSpec:
    """One volume attached (or being attached) to the server, with its device: what an
    attach_volume / detach_volume request carries."""
    from novakit.volume.volumes import specs_of_server

    found = specs_of_server(session, instance_uuid, volume_uuid)
    if not found:
        raise exceptions.Invalid(reason=f"volume {volume_uuid} is not attached to server {instance_uuid}")
    return found[0]


@functools.cache
def _driver_of_one() -> TextualSelect:
    """The one-host look-up of the hot path, built once (building a statement costs more than
    running it), when first used: importing this module loads no database layer."""
    from sqlalchemy import JSON, String, text

    return text("SELECT host, driver FROM compute_nodes WHERE host = :host AND deleted = 0").columns(
        host=String, driver=JSON
    )
