"""Guests novakit did not create: what a brownfield import reads of one, and its adoption.

``describe`` is read-only: an import (``novakit.fleet.importer``) shows it to the operator
before anything changes. ``write_metadata`` is the whole of adoption on the host: novakit's
``<metadata>`` element written into the domain (its definition, and the running guest), after
which the driver owns it as the instance whose uuid is the domain's uuid.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from novakit.host.messages import InstanceSpec, UnmanagedGuest
from novakit.virt.libvirt import config as vconfig
from novakit.virt.libvirt.guest import Guest

GiB = 1024**3


def describe(lv: Any, dom: Any) -> UnmanagedGuest:
    """What an import needs of a foreign domain: its size, its disks' virtual sizes, its state."""
    info = dom.info()  # [state, max memory KiB, memory KiB, vCPUs, cpu time]
    problems: list[str] = []
    sizes: list[int] = []
    targets: list[str] = []
    devices = ET.fromstring(dom.XMLDesc(0)).findall("devices/disk[@device='disk']")
    for disk in devices:
        target_elem = disk.find("target")
        target = (target_elem.get("dev", "") if target_elem is not None else "") or "?"
        targets.append(target)
        try:
            sizes.append(int(dom.blockInfo(target, 0)[0]))
        except lv.libvirtError as exc:
            problems.append(f"cannot read the size of disk {target}: {exc.get_error_message()}")
    if not devices:
        problems.append("it has no disk")
    if not dom.isPersistent():
        problems.append("it is a transient domain (not defined): novakit could not keep its record on it")
    gib = [-(-size // GiB) for size in sizes]
    return UnmanagedGuest(
        uuid=str(dom.UUIDString()).lower(),
        name=str(dom.name()),
        vcpus=int(info[3]),
        memory_mb=-(-int(info[1]) // 1024),
        root_gb=gib[0] if gib else 0,
        ephemeral_gb=sum(gib[1:]),
        power_state=int(Guest(dom, str(dom.UUIDString())).get_power_state()),
        disks=targets,
        problem="; ".join(problems) or None,
    )


def write_metadata(lv: Any, dom: Any, instance: InstanceSpec) -> None:
    """Write novakit's record of ``instance`` into the domain; raises libvirt's error."""
    element = vconfig.InstanceMetadata.from_instance(instance).to_element()
    # libvirt puts the element into the namespace given with it: it must come without one.
    for node in element.iter():
        node.tag = node.tag.rpartition("}")[2]
    flags = lv.VIR_DOMAIN_AFFECT_CONFIG | (lv.VIR_DOMAIN_AFFECT_LIVE if dom.isActive() else 0)
    dom.setMetadata(
        lv.VIR_DOMAIN_METADATA_ELEMENT,
        ET.tostring(element, encoding="unicode"),
        "novakit",
        vconfig.NOVAKIT_NS,
        flags,
    )
