"""Live migration between two hosts' daemons without shared storage (Nova's block migration).

**Destination first** (``pre_live_migration``): every file the guest needs is made as for a spawn
(``GuestConfigBuilder``): an empty overlay of the right size on this host's copy of the image,
the ephemeral and swap disks, the config drive (read-only, so not copied), the console log. It
answers where they are (``LiveDestination``): the disks by device, the log, and how the source
reaches this host's daemon and QEMU.

**Source** (``live_migration``): the guest's migratable definition with those paths (its security
labels left to the destination's daemon) is sent with ``virDomainMigrate3``, the client (this
driver) speaking to both daemons: ``VIR_MIGRATE_LIVE`` (the guest runs on meanwhile),
``NON_SHARED_INC`` (QEMU copies what the overlays hold over NBD; the image under them is the
same on both hosts), ``PERSIST_DEST`` and ``UNDEFINE_SOURCE``. QEMU's own stream and the NBD
copy go to ``LiveDestination.address`` only (the destination's ``live_migration_inbound_addr``).
The console log read so far is written into the destination's log first, so the console reads
on as one story: a guest that did not reboot shows its boot once. Then the source's files go.
If the migration fails, libvirt keeps the guest running here; it is resumed if it was left
paused, and the error raised.

**Destination after** (``post_live_migration_at_destination``): the guest is persistent here
already (``PERSIST_DEST``); it is defined again if it is not, and the move's pool is closed.
``rollback_live_migration_at_destination`` removes what ``pre_live_migration`` made, never a
guest that runs here.
"""

from __future__ import annotations

import logging
import urllib.parse
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from novakit import exceptions
from novakit.host.messages import InstanceSpec
from novakit.host.power import PowerState
from novakit.virt.libvirt import handover, vif
from novakit.virt.libvirt.disks import CONSOLE_LOG, valid_uuid
from novakit.virt.libvirt.migration import refuse_volumes
from novakit.virt.libvirt.storage import CONSOLE_HEADER

if TYPE_CHECKING:
    from novakit.virt.libvirt.driver import LibvirtDriver

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveDestination:
    """What the destination made ready, as the source needs it (``dest_info``)."""

    uri: str
    address: str
    disks: dict[str, str]  # target device -> path on the destination
    console_log: str
    console: handover.Handover  # the log as a volume the source writes the guest's past into
    console_offset: int
    boot_files: dict[str, str]  # "kernel", "initrd" of a direct-boot guest -> path on the destination

    def to_dict(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "address": self.address,
            "disks": dict(self.disks),
            "console_log": self.console_log,
            "console": self.console.to_dict(),
            "console_offset": self.console_offset,
            "boot_files": dict(self.boot_files),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LiveDestination:
        try:
            return cls(
                uri=str(data["uri"]),
                address=str(data["address"]),
                disks={str(k): str(v) for k, v in data["disks"].items()},
                console_log=str(data["console_log"]),
                console=handover.Handover.from_dict(data["console"], "live_migration"),
                console_offset=int(data["console_offset"]),
                boot_files={str(k): str(v) for k, v in (data.get("boot_files") or {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise exceptions.ComputeError(
                reason="live_migration: the destination's answer (dest_info) lacks uri, address, disks "
                "or console; is it running an older novakit?"
            ) from None


def default_inbound_address(uri: str) -> str:
    """Where QEMU on this host takes a migration: the host of its URI, else the loopback address."""
    host = urllib.parse.urlparse(uri).hostname
    return host if host and host not in ("localhost",) else "127.0.0.1"


# --- the destination -------------------------------------------------------------------------


def pre_live_migration(drv: LibvirtDriver, instance: InstanceSpec) -> dict[str, Any]:
    refuse_volumes(drv, instance)
    uuid = drv._new_instance_uuid(instance)
    try:
        drv._fresh_place(uuid)
        config = drv._prepare_guest(instance)
        disks = drv._maker(uuid)
        if drv.remote is None:
            disks.write_file(CONSOLE_LOG, b"")  # so that it is a volume of the move's pool
        pool = drv._handover_pool(uuid)
        volumes = disks.existing((CONSOLE_LOG,))
        vif.plug_vifs(drv._host, instance)
    except BaseException as exc:
        try:
            drv._remove_guest(uuid, instance)
        except exceptions.NovakitError as cleanup_exc:
            exc.add_note(f"cleanup after the failed preparation also failed: {cleanup_exc.format_message()}")
        if isinstance(exc, drv.libvirt.libvirtError | OSError):
            raise exceptions.ComputeError(
                reason=f"cannot make {drv.host} ready for instance {uuid}: {_text(exc)}"
            ) from None
        raise
    assert config.serial_log is not None
    return LiveDestination(
        uri=drv.migration_uri,
        address=drv.live_migration_inbound_addr,
        disks={d.target_dev: d.source_path for d in config.disks},
        console_log=config.serial_log.log_path,
        console=handover.Handover(drv.migration_uri, pool, volumes),
        console_offset=0 if drv.remote is None else len(CONSOLE_HEADER),
        boot_files={k: v for k, v in (("kernel", config.kernel), ("initrd", config.initrd)) if v},
    ).to_dict()


def post_live_migration_at_destination(drv: LibvirtDriver, instance: InstanceSpec) -> None:
    with drv._operation("take over", instance) as guest:
        if not guest.domain.isPersistent():
            drv._conn().defineXML(guest.domain.XMLDesc(drv.libvirt.VIR_DOMAIN_XML_MIGRATABLE))
    drv._close_handover_pool(guest.uuid)


def rollback_live_migration_at_destination(drv: LibvirtDriver, instance: InstanceSpec) -> None:
    uuid = valid_uuid(instance.uuid)
    if uuid is None:
        return
    guest = drv._lookup(uuid)
    if guest is not None and guest.get_power_state() == PowerState.RUNNING:
        raise exceptions.ComputeError(
            reason=f"instance {uuid} runs on {drv.host}: the migration reached it after all; "
            "it is not removed"
        )
    drv._remove_guest(uuid, instance)


# --- the source ------------------------------------------------------------------------------


def destination_definition(migratable_xml: str, dest: LiveDestination) -> tuple[str, list[str]]:
    """The guest's definition with the destination's paths (disks, console log, kernel and
    ramdisk), and the devices QEMU copies.

    Security labels are the destination daemon's to choose (its QEMU may run as another user).
    """
    dom = ET.fromstring(migratable_xml)
    for label in dom.findall("seclabel"):
        dom.remove(label)
    copied = []
    for disk in dom.findall("devices/disk"):
        target, source = disk.find("target"), disk.find("source")
        dev = target.get("dev", "") if target is not None else ""
        if source is None or source.get("file") is None:
            continue
        if dev not in dest.disks:
            raise exceptions.ComputeError(reason=f"the destination made no disk for {dev}")
        source.set("file", dest.disks[dev])
        for label in source.findall("seclabel"):
            source.remove(label)
        if disk.find("readonly") is None:
            copied.append(dev)
    for log in dom.findall("devices/serial/log"):
        log.set("file", dest.console_log)
    for name, path in dest.boot_files.items():
        elem = dom.find(f"os/{name}")
        if elem is not None:
            elem.text = path
    return ET.tostring(dom, encoding="unicode"), copied


def live_migration(
    drv: LibvirtDriver, instance: InstanceSpec, dest_host: str, dest_info: dict[str, Any]
) -> dict[str, Any]:
    refuse_volumes(drv, instance)
    dest = LiveDestination.from_dict(dest_info)
    if dest.uri == drv.migration_uri:
        raise exceptions.ComputeError(reason=f"{dest_host} is {drv.host} itself (the same daemon)", code=409)
    guest = drv._guest(instance)
    lv = drv.libvirt
    was_running = guest.get_power_state() == PowerState.RUNNING
    with handover.peer(lv, dest.uri, drv.uri, drv._conn()) as dconn:
        try:
            definition, copied = destination_definition(
                guest.domain.XMLDesc(lv.VIR_DOMAIN_XML_MIGRATABLE), dest
            )
        except lv.libvirtError as exc:
            raise drv._compute_error("live-migrate", instance.uuid, exc) from None
        _carry_console(drv, instance, dconn, dest)
        params = {
            lv.VIR_MIGRATE_PARAM_URI: f"tcp://{dest.address}",
            lv.VIR_MIGRATE_PARAM_LISTEN_ADDRESS: dest.address,
            lv.VIR_MIGRATE_PARAM_DEST_XML: definition,
            lv.VIR_MIGRATE_PARAM_MIGRATE_DISKS: copied,
        }
        flags = (
            lv.VIR_MIGRATE_LIVE
            | lv.VIR_MIGRATE_PERSIST_DEST
            | lv.VIR_MIGRATE_UNDEFINE_SOURCE
            | lv.VIR_MIGRATE_NON_SHARED_INC
        )
        try:
            guest.domain.migrate3(dconn, params, flags)
        except lv.libvirtError as exc:
            if not _arrived(drv, guest, dconn):
                _keep_running(drv, guest, was_running)
                raise exceptions.ComputeError(
                    reason=f"live migration of instance {guest.uuid} to {dest_host} failed, the guest "
                    f"runs on {drv.host}: {exc.get_error_message()}"
                ) from None
    try:
        drv._remove_guest(guest.uuid, instance)  # its files and DHCP entries here; the domain is gone
    except exceptions.NovakitError as exc:
        # The guest runs there: the move succeeded, and what is left here is only files.
        LOG.warning("instance %s moved to %s; left on %s: %s", guest.uuid, dest_host, drv.host, exc)
    return {"source_host": drv.host}


def _carry_console(drv: LibvirtDriver, instance: InstanceSpec, dconn: Any, dest: LiveDestination) -> None:
    """The guest's console so far, into the destination's log; a failure only loses that past."""
    volume = dest.console.volumes.get(CONSOLE_LOG)
    if volume is None:
        return
    try:
        past = drv.get_console_output(instance).encode()
        if past:
            handover.write_into(drv.libvirt, dconn, dest.console.pool, volume, past, dest.console_offset)
    except (drv.libvirt.libvirtError, exceptions.NovakitError) as exc:
        LOG.warning("the console of instance %s so far stays on %s: %s", instance.uuid, drv.host, _text(exc))


def _arrived(drv: LibvirtDriver, guest: Any, dconn: Any) -> bool:
    """Whether the guest runs on the destination and no longer here, whatever libvirt said."""
    lv = drv.libvirt
    try:
        if drv._lookup(guest.uuid) is not None:
            return False
        return bool(dconn.lookupByUUIDString(guest.uuid).isActive())
    except (lv.libvirtError, exceptions.NovakitError):
        return False


def _keep_running(drv: LibvirtDriver, guest: Any, was_running: bool) -> None:
    """A failed migration may leave the source guest paused: it runs on, as before."""
    try:
        if was_running and guest.get_power_state() == PowerState.PAUSED:
            guest.domain.resume()
    except drv.libvirt.libvirtError as exc:
        LOG.warning("instance %s stays paused after the failed migration: %s", guest.uuid, _text(exc))


def _text(exc: BaseException) -> str:
    if isinstance(exc, exceptions.NovakitError):
        return exc.format_message()
    getter = getattr(exc, "get_error_message", None)
    return str(getter()) if getter is not None else str(exc)
