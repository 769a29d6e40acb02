"""Rescue and unrescue (Nova's): boot a guest from a rescue image, its own disks attached after it.

``rescue`` keeps the guest's definition as it is (``unrescue.xml`` among the instance's files)
and redefines the same domain with the rescue image's overlay (``disk.rescue``) as its first
disk, ``vda``, so the guest boots from it; the guest's own disks follow it, each one letter on
(its root disk becomes ``vdb``), so a rescue system finds the broken root as its second disk.
Their PCI addresses are dropped for libvirt to assign anew, as one more disk needs a slot. A
direct-boot guest keeps its kernel and ramdisk; the rescue image's ``os_command_line`` replaces
its command line when the image has one.

``unrescue`` defines the kept definition again, boots it, and removes the rescue disk and the
kept file. ``rescue`` makes everything before it touches the guest (a bad rescue image leaves it
running); if defining or booting the rescue fails, the kept definition is put back the same way,
so the guest is as it was (booted again if it ran). A guest in rescue is not rescued again: its
kept definition is the one to go back to.
"""

from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from novakit import exceptions
from novakit.host.messages import ImageSpec, InstanceSpec
from novakit.virt.libvirt import config as vconfig
from novakit.virt.libvirt.disks import RESCUE_DISK, UNRESCUE_XML
from novakit.virt.libvirt.guest import Guest

if TYPE_CHECKING:
    from novakit.virt.libvirt.driver import LibvirtDriver

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def rescue_definition(original_xml: str, rescue_disk: vconfig.GuestDisk, cmdline: str | None) -> str:
    """The domain of ``original_xml`` booting from ``rescue_disk`` (as vda), its disks moved on."""
    dom = ET.fromstring(original_xml)
    devices = dom.find("devices")
    if devices is None:
        raise exceptions.ComputeError(reason="the guest's definition has no devices")
    disks = devices.findall("disk")
    for disk in disks:
        target = disk.find("target")
        dev = target.get("dev", "") if target is not None else ""
        if target is not None and dev.startswith("vd") and len(dev) == 3:
            index = _LETTERS.index(dev[2]) + 1
            if index >= len(_LETTERS):
                raise exceptions.ComputeError(reason=f"no device name after {dev} for the rescue disk")
            target.set("dev", f"vd{_LETTERS[index]}")
        address = disk.find("address")
        if address is not None:
            disk.remove(address)
    position = list(devices).index(disks[0]) if disks else 0
    devices.insert(position, rescue_disk.to_element())
    kernel_cmdline = dom.find("os/cmdline")
    if cmdline and kernel_cmdline is not None:
        kernel_cmdline.text = cmdline
    return ET.tostring(dom, encoding="unicode")


def rescue(drv: LibvirtDriver, instance: InstanceSpec, rescue_image: ImageSpec) -> None:
    guest = drv._guest(instance)
    lv = drv.libvirt
    disks = drv._maker(guest.uuid)
    if disks.read_file(UNRESCUE_XML) is not None:
        raise exceptions.ComputeError(
            reason=f"instance {guest.uuid} is in rescue already (unrescue it first)", code=409
        )
    try:
        # Everything made before the guest is touched: a bad rescue image leaves it running.
        original = guest.domain.XMLDesc(lv.VIR_DOMAIN_XML_INACTIVE)
        base = drv.guest_config.fetch_image(rescue_image, "image")
        path = disks.overlay(base, base.virtual_size, RESCUE_DISK)
        disk = vconfig.GuestDisk(path, "vda", driver_type="qcow2")
        definition = rescue_definition(original, disk, rescue_image.properties.get("os_command_line"))
        disks.write_file(UNRESCUE_XML, original.encode())
    except BaseException as exc:
        with contextlib.suppress(Exception):
            disks.remove_file(RESCUE_DISK)
            disks.remove_file(UNRESCUE_XML)
        if isinstance(exc, lv.libvirtError):
            raise drv._compute_error("rescue", instance.uuid, exc) from None
        raise
    was_active = guest.is_active()
    try:
        guest.force_off()
        guest.discard_saved_memory()  # a suspended guest's memory belongs to the other definition
        drv._conn().defineXML(definition)
        guest.start()
    except BaseException as exc:
        try:
            _restore(drv, guest, original, start=was_active)
        except Exception as restore_exc:  # the first error is the one to report
            exc.add_note(f"putting the guest back also failed: {restore_exc}")
        if isinstance(exc, lv.libvirtError):
            raise drv._compute_error("rescue", instance.uuid, exc) from None
        raise


def unrescue(drv: LibvirtDriver, instance: InstanceSpec) -> None:
    guest = drv._guest(instance)
    kept = drv._maker(guest.uuid).read_file(UNRESCUE_XML)
    if kept is None:
        return  # not rescued (or unrescued already)
    try:
        _restore(drv, guest, kept.decode(), start=True)
    except drv.libvirt.libvirtError as exc:
        raise drv._compute_error("unrescue", instance.uuid, exc) from None


def _restore(drv: LibvirtDriver, guest: Guest, original: str, start: bool) -> None:
    """The kept definition defined again (booted if ``start``); the rescue's files removed."""
    disks = drv._maker(guest.uuid)
    guest.force_off()
    guest.discard_saved_memory()
    drv._conn().defineXML(original)
    if start:
        guest.start()
    with contextlib.suppress(Exception):  # leftovers only: destroy removes them in any case
        disks.remove_file(RESCUE_DISK)
    disks.remove_file(UNRESCUE_XML)
