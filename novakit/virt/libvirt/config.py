"""libvirt domain XML as typed objects (after Nova's ``virt/libvirt/config.py``).

Every value a user can influence (the display name, metadata, paths) goes
through ElementTree as text or an attribute value, so it is escaped by the
serialiser; nothing here formats XML by hand. A name like
``a</name><title>x</title><name>b`` therefore stays one string.

The domain's libvirt ``<name>`` is ``novakit-<instance uuid>``: stable,
unique per host, and free of characters libvirt rejects. The user's display
name lives in ``<title>`` and in novakit's ``<metadata>`` element, which is
also how ``list_instances`` recognises the domains novakit owns.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Literal

from novakit.host.messages import InstanceSpec

NOVAKIT_NS = "https://novakit.dev/xmlns/libvirt/instance/1.0"
DOMAIN_NAME_PREFIX = "novakit-"

ET.register_namespace("novakit", NOVAKIT_NS)


def domain_name(instance_uuid: str) -> str:
    """The libvirt name of an instance's domain."""
    return f"{DOMAIN_NAME_PREFIX}{instance_uuid}"


def owned_uuid(name: str, uuid: str) -> str | None:
    """The instance uuid if a domain called ``name`` with ``uuid`` is one novakit made."""
    uuid = uuid.lower()
    return uuid if name == domain_name(uuid) else None


def _q(tag: str) -> str:
    return f"{{{NOVAKIT_NS}}}{tag}"


def sub_element(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    """A child ``tag`` of ``parent`` with ``attrs`` and, when given, ``text`` (escaped on output)."""
    elem = ET.SubElement(parent, tag, attrs)
    if text is not None:
        elem.text = text
    return elem


def _clean_text(value: str) -> str:
    # XML 1.0 cannot carry most control characters even escaped; drop them
    # rather than produce a document libvirt refuses.
    return "".join(ch for ch in value if ch in "\t\n\r" or ord(ch) >= 0x20)


@dataclass
class InstanceMetadata:
    """novakit's record inside the domain: who owns it and what it was built from."""

    uuid: str
    name: str
    hostname: str
    project_id: str
    user_id: str
    flavor_name: str
    vcpus: int
    memory_mb: int
    root_gb: int
    ephemeral_gb: int
    swap_mb: int
    image_id: str
    creation_time: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))

    @classmethod
    def from_instance(cls, instance: InstanceSpec) -> InstanceMetadata:
        flavor = instance.flavor
        return cls(
            uuid=instance.uuid,
            name=instance.name,
            hostname=instance.hostname,
            project_id=instance.project_id,
            user_id=instance.user_id,
            flavor_name=flavor.name,
            vcpus=flavor.vcpus,
            memory_mb=flavor.memory_mb,
            root_gb=flavor.root_gb,
            ephemeral_gb=flavor.ephemeral_gb,
            swap_mb=flavor.swap,
            image_id=instance.image.id,
        )

    def to_element(self) -> ET.Element:
        root = ET.Element(_q("instance"))
        sub_element(root, _q("uuid"), self.uuid)
        sub_element(root, _q("name"), _clean_text(self.name))
        sub_element(root, _q("hostname"), _clean_text(self.hostname))
        sub_element(root, _q("creationTime"), self.creation_time)
        sub_element(
            root,
            _q("flavor"),
            name=_clean_text(self.flavor_name),
            vcpus=str(self.vcpus),
            memory_mb=str(self.memory_mb),
            root_gb=str(self.root_gb),
            ephemeral_gb=str(self.ephemeral_gb),
            swap_mb=str(self.swap_mb),
        )
        sub_element(root, _q("owner"), project=_clean_text(self.project_id), user=_clean_text(self.user_id))
        sub_element(root, _q("image"), id=_clean_text(self.image_id))
        return root

    @classmethod
    def from_xml(cls, text: str) -> InstanceMetadata:
        """Read the element back (as ``virDomainGetMetadata`` or a whole domain XML returns it)."""
        elem = ET.fromstring(text)
        # virDomainGetMetadata hands the element back without its namespace.
        ns = "" if elem.tag == "instance" else f"{{{NOVAKIT_NS}}}"
        if elem.tag not in ("instance", _q("instance")):
            found = elem.find(f".//{_q('instance')}")
            if found is None:
                raise ValueError("no novakit instance metadata in this XML")
            elem = found

        def text_of(tag: str) -> str:
            child = elem.find(ns + tag)
            return (child.text or "") if child is not None else ""

        def attr(tag: str, name: str, default: str = "") -> str:
            child = elem.find(ns + tag)
            return child.get(name, default) if child is not None else default

        return cls(
            uuid=text_of("uuid"),
            name=text_of("name"),
            hostname=text_of("hostname"),
            project_id=attr("owner", "project"),
            user_id=attr("owner", "user"),
            flavor_name=attr("flavor", "name"),
            vcpus=int(attr("flavor", "vcpus", "0")),
            memory_mb=int(attr("flavor", "memory_mb", "0")),
            root_gb=int(attr("flavor", "root_gb", "0")),
            ephemeral_gb=int(attr("flavor", "ephemeral_gb", "0")),
            swap_mb=int(attr("flavor", "swap_mb", "0")),
            image_id=attr("image", "id"),
            creation_time=text_of("creationTime"),
        )


@dataclass
class GuestDisk:
    """A disk or cdrom backed by a file, or by a block device (``source_type="block"``: an LV)."""

    source_path: str
    target_dev: str
    target_bus: str = "virtio"
    driver_type: str = "qcow2"
    device: Literal["disk", "cdrom"] = "disk"
    readonly: bool = False
    serial: str | None = None
    source_type: Literal["file", "block"] = "file"

    def to_element(self) -> ET.Element:
        disk = ET.Element("disk", type=self.source_type, device=self.device)
        # No cache mode: "none" needs O_DIRECT, which tmpfs and some overlay filesystems lack.
        sub_element(disk, "driver", name="qemu", type=self.driver_type)
        if self.source_type == "block":
            sub_element(disk, "source", dev=self.source_path)
        else:
            sub_element(disk, "source", file=self.source_path)
        sub_element(disk, "target", dev=self.target_dev, bus=self.target_bus)
        if self.readonly:
            sub_element(disk, "readonly")
        if self.serial:
            sub_element(disk, "serial", _clean_text(self.serial))
        return disk


@dataclass
class GuestInterface:
    """A NIC on a libvirt network, a host bridge, or QEMU's user-mode network."""

    net_type: Literal["network", "bridge", "user"]
    source: str = ""
    mac: str | None = None
    model: str = "virtio"
    # The port's network filter (``nwfilter``, its security groups) and its parameters (IP).
    filter: str | None = None
    filter_params: dict[str, str] = field(default_factory=dict)

    def to_element(self) -> ET.Element:
        iface = ET.Element("interface", type=self.net_type)
        if self.mac:
            sub_element(iface, "mac", address=self.mac)
        if self.net_type == "network":
            sub_element(iface, "source", network=self.source)
        elif self.net_type == "bridge":
            sub_element(iface, "source", bridge=self.source)
        sub_element(iface, "model", type=self.model)
        if self.filter:
            ref = sub_element(iface, "filterref", filter=self.filter)
            for name, value in sorted(self.filter_params.items()):
                sub_element(ref, "parameter", name=name, value=value)
        return iface


@dataclass(frozen=True)
class NetworkDhcpHost:
    """A ``<host>`` entry of a libvirt network's DHCP server: this MAC always gets this IP.

    How a port's fixed IP reaches a guest that asks by DHCP, on a libvirt network
    (Neutron's DHCP agent keeps the same table, in dnsmasq's hosts file).
    """

    mac: str
    ip: str
    name: str | None = None

    def to_xml(self) -> str:
        attrs = {"mac": self.mac, "ip": self.ip}
        if self.name:
            attrs["name"] = _clean_text(self.name)
        return ET.tostring(ET.Element("host", attrs), encoding="unicode")

    @classmethod
    def from_element(cls, elem: ET.Element) -> NetworkDhcpHost:
        return cls(mac=elem.get("mac", "").lower(), ip=elem.get("ip", ""), name=elem.get("name"))


def network_dhcp_range(network_xml: str, address: str) -> tuple[int, list[NetworkDhcpHost]] | None:
    """Where a DHCP host entry for ``address`` goes in a libvirt network's definition.

    The index of the network's ``<ip>`` element (among all of them, as virNetworkUpdate
    counts its parentIndex) whose subnet holds ``address`` and that runs DHCP, with that
    element's host entries; None if no such element (no DHCP there: the guest's static
    network-config is all it gets).
    """
    wanted = ipaddress.ip_address(address)
    for index, ip_elem in enumerate(ET.fromstring(network_xml).findall("ip")):
        dhcp = ip_elem.find("dhcp")
        if dhcp is None or not ip_elem.get("address"):
            continue
        prefix = ip_elem.get("prefix") or ip_elem.get("netmask") or "24"
        try:
            subnet = ipaddress.ip_network(f"{ip_elem.get('address')}/{prefix}", strict=False)
        except ValueError:
            continue
        if wanted in subnet:
            return index, [NetworkDhcpHost.from_element(h) for h in dhcp.findall("host")]
    return None


@dataclass
class GuestSerialLog:
    """Serial port 0 on a pty, copied by virtlogd into ``log_path`` (Nova's choice).

    A pty keeps ``virsh console`` usable while the log gives get_console_output
    something to read; virtlogd caps its size, so a chatty guest cannot fill the disk.
    """

    log_path: str

    def to_elements(self) -> list[ET.Element]:
        serial = ET.Element("serial", type="pty")
        # Appended, so the console of a rebooted guest still shows the boot before.
        sub_element(serial, "log", file=self.log_path, append="on")
        sub_element(serial, "target", port="0")
        console = ET.Element("console", type="pty")
        sub_element(console, "target", type="serial", port="0")
        return [serial, console]


@dataclass
class LibvirtConfigGuest:
    """A whole domain definition."""

    uuid: str
    name: str
    memory_mb: int
    vcpus: int
    domain_type: str = "qemu"
    title: str | None = None
    metadata: InstanceMetadata | None = None
    os_type: str = "hvm"
    arch: str | None = None
    machine: str | None = None
    kernel: str | None = None
    initrd: str | None = None
    cmdline: str | None = None
    emulator: str | None = None
    disks: list[GuestDisk] = field(default_factory=list)
    interfaces: list[GuestInterface] = field(default_factory=list)
    serial_log: GuestSerialLog | None = None
    on_poweroff: str = "destroy"
    on_reboot: str = "restart"
    on_crash: str = "destroy"

    def to_element(self) -> ET.Element:
        dom = ET.Element("domain", type=self.domain_type)
        sub_element(dom, "name", self.name)
        sub_element(dom, "uuid", self.uuid)
        if self.title:
            # libvirt refuses a title with a newline in it.
            sub_element(dom, "title", " ".join(_clean_text(self.title).splitlines()))
        if self.metadata is not None:
            meta = sub_element(dom, "metadata")
            meta.append(self.metadata.to_element())
        sub_element(dom, "memory", str(self.memory_mb), unit="MiB")
        sub_element(dom, "currentMemory", str(self.memory_mb), unit="MiB")
        sub_element(dom, "vcpu", str(self.vcpus), placement="static")
        os_elem = sub_element(dom, "os")
        type_attrs = {k: v for k, v in (("arch", self.arch), ("machine", self.machine)) if v}
        sub_element(os_elem, "type", self.os_type, **type_attrs)
        if self.kernel:
            sub_element(os_elem, "kernel", self.kernel)
            if self.initrd:
                sub_element(os_elem, "initrd", self.initrd)
            if self.cmdline:
                sub_element(os_elem, "cmdline", _clean_text(self.cmdline))
        else:
            sub_element(os_elem, "boot", dev="hd")
        features = sub_element(dom, "features")
        sub_element(features, "acpi")
        sub_element(features, "apic")
        sub_element(dom, "clock", offset="utc")
        sub_element(dom, "on_poweroff", self.on_poweroff)
        sub_element(dom, "on_reboot", self.on_reboot)
        sub_element(dom, "on_crash", self.on_crash)
        devices = sub_element(dom, "devices")
        if self.emulator:
            sub_element(devices, "emulator", self.emulator)
        for disk in self.disks:
            devices.append(disk.to_element())
        for iface in self.interfaces:
            devices.append(iface.to_element())
        if self.serial_log is not None:
            devices.extend(self.serial_log.to_elements())
        # No balloon: novakit does not overcommit memory, and it is one less device to boot.
        sub_element(devices, "memballoon", model="none")
        return dom

    def to_xml(self) -> str:
        return ET.tostring(self.to_element(), encoding="unicode")
