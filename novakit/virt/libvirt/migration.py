"""Cold migration and resize between two hosts (Nova's migrate_disk_and_power_off and finish_*).

**Source** (``migrate_disk_and_power_off``): the guest is shut down (asked, then forced), its
definition kept among its files (``resize-source.xml``) and undefined, so that this host no
longer lists it as its own, and its files are handed over where they are (``handover``): the
destination reads them from this host's daemon. Everything stays here until ``confirm_migration``
removes it, or ``finish_revert_migration`` defines the kept definition again and boots it.

**Destination** (``finish_migration``): the root disk, the ephemeral disk and the console log
are read from the source's daemon; the root overlay is pointed at this host's copy of its image
(read from the image store through the image cache, verified as for a boot) and grown to the
new flavor's root disk; the domain is then built exactly as for a spawn, with the new flavor's
vCPUs and memory (``GuestConfigBuilder``): swap and the config drive are made anew, an ephemeral
disk that was not there is made empty. The guest's console log goes on from the source's.
If anything fails, nothing of the guest is left here (as for a failed spawn).

A server with volumes does not move: a volume lives in one host's pool (the API refuses such
moves first; this is the host's own word).
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from novakit import exceptions
from novakit.host.messages import FlavorSpec, InstanceSpec
from novakit.host.power import PowerState
from novakit.virt.libvirt import handover, images, vif
from novakit.virt.libvirt.configdrive import ConfigDrive
from novakit.virt.libvirt.disks import (
    CONSOLE_LOG,
    EPHEMERAL_DISK,
    RESIZE_SOURCE_XML,
    ROOT_DISK,
    HostDisks,
    valid_uuid,
)
from novakit.virt.libvirt.guest import undefine
from novakit.virt.libvirt.imagecache import CachedImage
from novakit.virt.libvirt.storage import CONSOLE_HEADER

if TYPE_CHECKING:
    from novakit.virt.libvirt.driver import LibvirtDriver

GiB = 1024**3
#: the files a cold migration hands over; swap and the config drive are made anew
HANDED_OVER = (ROOT_DISK, EPHEMERAL_DISK, CONSOLE_LOG)
#: how long the guest may take to shut down when asked, before it is forced off
SHUTDOWN_TIMEOUT = 60


def refuse_volumes(drv: LibvirtDriver, instance: InstanceSpec) -> None:
    if instance.volumes:
        names = ", ".join(v.name or v.id for v in instance.volumes)
        raise exceptions.ComputeError(
            reason=f"instance {instance.uuid} has volumes ({names}) in {drv.host}'s storage pool; "
            "they do not move with it: detach them first",
            code=409,
        )


# --- the source -----------------------------------------------------------------------------


def migrate_disk_and_power_off(
    drv: LibvirtDriver, instance: InstanceSpec, dest_host: str, flavor: FlavorSpec
) -> dict[str, Any]:
    refuse_volumes(drv, instance)
    guest = drv._guest(instance)
    lv = drv.libvirt
    disks = drv._maker(guest.uuid)
    was_running = guest.get_power_state() == PowerState.RUNNING
    try:
        root_size = int(guest.domain.blockInfo("vda", 0)[0])
        if flavor.root_gb and root_size > flavor.root_gb * GiB:
            raise exceptions.ComputeError(
                reason=f"flavor {flavor.name}'s root disk ({flavor.root_gb} GiB) is smaller than the "
                f"guest's ({root_size} bytes): a disk does not shrink",
                code=409,
            )
        definition = guest.domain.XMLDesc(lv.VIR_DOMAIN_XML_INACTIVE)
        guest.power_off(SHUTDOWN_TIMEOUT, retry_interval=5)
    except lv.libvirtError as exc:
        raise drv._compute_error("shut down for its move", instance.uuid, exc) from None
    try:
        disks.write_file(RESIZE_SOURCE_XML, definition.encode())
        pool = drv._handover_pool(guest.uuid)
        handed = handover.Handover(drv.migration_uri, pool, disks.existing(HANDED_OVER))
        if ROOT_DISK not in handed.volumes:
            raise exceptions.ComputeError(
                reason=f"instance {instance.uuid} has no root disk of its own on {drv.host} to move"
            )
        undefine(lv, guest.domain)
    except BaseException as exc:
        # As it was: defined (it still is unless the undefine was the step that failed) and running.
        for undo in (
            lambda: drv._close_handover_pool(guest.uuid),
            lambda: disks.remove_file(RESIZE_SOURCE_XML),
            lambda: guest.start() if was_running else None,
        ):
            with contextlib.suppress(Exception):
                undo()
        if isinstance(exc, lv.libvirtError):
            raise drv._compute_error(f"hand over to {dest_host}", instance.uuid, exc) from None
        raise
    return {"handover": handed.to_dict(), "source_host": drv.host}


def confirm_migration(drv: LibvirtDriver, instance: InstanceSpec) -> None:
    """Remove the kept guest (its files, its handed-over pool, its ports' DHCP entries here)."""
    uuid = valid_uuid(instance.uuid)
    if uuid is None or drv._lookup(uuid) is not None:
        return  # nothing kept for a revert, or the guest is this host's again: nothing to remove
    if drv._maker(uuid).read_file(RESIZE_SOURCE_XML) is None:
        return
    drv._remove_guest(uuid, instance)


def finish_revert_migration(drv: LibvirtDriver, instance: InstanceSpec, power_on: bool) -> None:
    uuid = valid_uuid(instance.uuid)
    if uuid is None:
        raise exceptions.InstanceNotFound(instance_id=instance.uuid)
    disks = drv._maker(uuid)
    kept = disks.read_file(RESIZE_SOURCE_XML)
    try:
        if kept is not None and drv._lookup(uuid) is None:
            drv._conn().defineXML(kept.decode())
        guest = drv._guest(instance)
        vif.plug_vifs(drv._host, instance)
        if power_on:
            guest.power_on()
        drv._close_handover_pool(uuid)
        if kept is not None:
            disks.remove_file(RESIZE_SOURCE_XML)
    except drv.libvirt.libvirtError as exc:
        raise drv._compute_error("bring back", instance.uuid, exc) from None


# --- the destination ------------------------------------------------------------------------


@dataclass
class Received:
    """What the source handed over, as local files (None: it had none)."""

    root: Path
    ephemeral: Path | None
    console: bytes


class HandedOverDisks:
    """The host's disk maker, but the root and ephemeral disks and the console log are the
    received ones: ``GuestConfigBuilder.build`` puts them where a spawn would make new ones."""

    def __init__(self, inner: HostDisks, received: Received) -> None:
        self.inner = inner
        self.received = received

    def image_path(self, cached: CachedImage) -> str:
        return self.inner.image_path(cached)

    def overlay(self, base: CachedImage, size: int, file_name: str = ROOT_DISK) -> str:
        root = self.received.root
        images.inspect_overlay(root)
        # Grown while it points at the local cached image (qemu-img opens the chain), then
        # pointed at the copy the daemon reads, which on remote storage is a pool volume.
        images.rebase_unsafe(root, base.path, base.format)
        images.grow(root, "qcow2", size)
        backing = self.inner.image_path(base)
        if backing != str(base.path):
            images.rebase_unsafe(root, backing, base.format)
        return self.inner.place(root, file_name, "qcow2")

    def blank_qcow2(self, size: int) -> str:
        eph = self.received.ephemeral
        if eph is None:
            return self.inner.blank_qcow2(size)
        images.inspect_overlay(eph)
        images.grow(eph, "qcow2", size)
        return self.inner.place(eph, EPHEMERAL_DISK, "qcow2")

    def swap(self, size_mb: int) -> str:
        return self.inner.swap(size_mb)

    def config_drive(self, drive: ConfigDrive) -> str:
        return self.inner.config_drive(drive)

    def console_log(self, carried: bytes = b"") -> str:
        return self.inner.console_log(self.received.console + carried)


def finish_migration(
    drv: LibvirtDriver, instance: InstanceSpec, disk_info: dict[str, Any], power_on: bool
) -> None:
    uuid = drv._new_instance_uuid(instance)
    handed = handover.Handover.from_dict(dict(disk_info.get("handover") or {}), "finish_migration")
    if handed.uri == drv.migration_uri:
        # The source's kept files are this host's: making the guest's place anew would remove them.
        raise exceptions.ComputeError(
            reason=f"instance {uuid} moves from {drv.host}'s own daemon; a move needs another host",
            code=409,
        )
    lv = drv.libvirt
    try:
        drv._fresh_place(uuid)
        drv.image_cache_path.mkdir(parents=True, exist_ok=True)
        with (
            handover.peer(lv, handed.uri, drv.uri, drv._conn()) as source,
            tempfile.TemporaryDirectory(prefix=".incoming-", dir=drv.image_cache_path) as work,
        ):
            received = receive(lv, source, handed, Path(work))
            config = drv.guest_config.build(instance, HandedOverDisks(drv._maker(uuid), received))
        vif.plug_vifs(drv._host, instance)
        domain = drv._conn().defineXML(config.to_xml())
        if power_on:
            domain.create()
    except BaseException as exc:
        try:
            drv._remove_guest(uuid, instance)
        except exceptions.NovakitError as cleanup_exc:
            exc.add_note(f"cleanup after the failed move also failed: {cleanup_exc.format_message()}")
        if isinstance(exc, lv.libvirtError):
            raise exceptions.ComputeError(
                reason=f"cannot bring instance {uuid} up on {drv.host}: {exc.get_error_message()}"
            ) from None
        if isinstance(exc, OSError):
            raise exceptions.ComputeError(
                reason=f"cannot bring instance {uuid} up on {drv.host}: {exc}"
            ) from None
        raise


def receive(lv: Any, source: Any, handed: handover.Handover, work: Path) -> Received:
    """Read the handed-over files from the source's daemon into ``work``."""
    root = work / ROOT_DISK
    if not handover.fetch(lv, source, handed, ROOT_DISK, root):
        raise exceptions.ComputeError(reason="the source handed over no root disk")
    eph = work / EPHEMERAL_DISK
    has_eph = handover.fetch(lv, source, handed, EPHEMERAL_DISK, eph)
    log = work / CONSOLE_LOG
    console = log.read_bytes() if handover.fetch(lv, source, handed, CONSOLE_LOG, log) else b""
    # A remote source's log volume starts with novakit's header line, not the guest's output.
    return Received(root, eph if has_eph else None, console.removeprefix(CONSOLE_HEADER))
