"""Domain XML built from typed objects: names and metadata stay data."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from novakit.host.messages import FlavorSpec, InstanceSpec
from novakit.virt.libvirt import config as vconfig
from novakit.virt.libvirt.host import bridge_names

MakeInstance = Callable[..., InstanceSpec]
HOSTILE = "a</name><title>x</title><name>b"


def guest_for(instance: InstanceSpec) -> vconfig.LibvirtConfigGuest:
    return vconfig.LibvirtConfigGuest(
        uuid=instance.uuid,
        name=vconfig.domain_name(instance.uuid),
        title=instance.name,
        metadata=vconfig.InstanceMetadata.from_instance(instance),
        memory_mb=instance.flavor.memory_mb,
        vcpus=instance.flavor.vcpus,
        kernel="/var/lib/novakit/instances/_base/k",
        initrd="/var/lib/novakit/instances/_base/r",
        cmdline="console=ttyS0 quiet",
        disks=[
            vconfig.GuestDisk("/i/disk", "vda"),
            vconfig.GuestDisk("/i/disk.config", "vdb", driver_type="raw", readonly=True),
        ],
        interfaces=[
            vconfig.GuestInterface("network", "default", "52:54:00:00:00:01"),
            vconfig.GuestInterface("bridge", "br0"),
            vconfig.GuestInterface("user"),
        ],
        serial_log=vconfig.GuestSerialLog("/i/console.log"),
    )


def test_a_name_with_xml_metacharacters_stays_text(make_instance: MakeInstance) -> None:
    inst = make_instance(
        name=HOSTILE, project_id='p"<&>', flavor=FlavorSpec(name="m&1", vcpus=2, memory_mb=512, root_gb=1)
    )
    xml = guest_for(inst).to_xml()
    assert HOSTILE not in xml  # only ever present escaped
    dom = ET.fromstring(xml)
    assert [e.text for e in dom.findall("name")] == [f"novakit-{inst.uuid}"]
    assert [e.text for e in dom.findall("title")] == [HOSTILE]
    meta = vconfig.InstanceMetadata.from_xml(xml)
    assert (meta.name, meta.project_id, meta.flavor_name) == (HOSTILE, 'p"<&>', "m&1")
    assert (meta.uuid, meta.vcpus, meta.memory_mb, meta.image_id) == (inst.uuid, 2, 512, "img-tiny")


def test_domain_carries_flavor_sizes_disks_nics_and_serial_log(make_instance: MakeInstance) -> None:
    inst = make_instance()
    dom = ET.fromstring(guest_for(inst).to_xml())
    assert dom.get("type") == "qemu"
    assert dom.findtext("uuid") == inst.uuid
    assert (dom.findtext("memory"), dom.find("memory").get("unit"), dom.findtext("vcpu")) == (
        "256",
        "MiB",
        "1",
    )  # type: ignore[union-attr]
    assert (dom.findtext("os/kernel"), dom.findtext("os/cmdline")) == (
        "/var/lib/novakit/instances/_base/k",
        "console=ttyS0 quiet",
    )
    disks = [(d.find("source").get("file"), d.find("target").get("dev")) for d in dom.findall("devices/disk")]  # type: ignore[union-attr]
    assert disks == [("/i/disk", "vda"), ("/i/disk.config", "vdb")]
    assert dom.find("devices/disk[2]/readonly") is not None
    nics = [
        (i.get("type"), i.find("source").attrib if i.find("source") is not None else {})
        for i in dom.findall("devices/interface")
    ]
    assert nics == [("network", {"network": "default"}), ("bridge", {"bridge": "br0"}), ("user", {})]
    assert dom.find("devices/serial/log").get("file") == "/i/console.log"  # type: ignore[union-attr]


def test_metadata_lives_in_novakit_namespace(make_instance: MakeInstance) -> None:
    inst = make_instance()
    dom = ET.fromstring(guest_for(inst).to_xml())
    elem = dom.find(f"metadata/{{{vconfig.NOVAKIT_NS}}}instance")
    assert elem is not None
    assert elem.findtext(f"{{{vconfig.NOVAKIT_NS}}}uuid") == inst.uuid


def test_title_drops_newlines_and_control_characters(make_instance: MakeInstance) -> None:
    inst = make_instance(name="two\nlines\x07")
    dom = ET.fromstring(guest_for(inst).to_xml())
    assert dom.findtext("title") == "two lines"


def test_a_disk_boot_has_no_kernel(make_instance: MakeInstance) -> None:
    cfg = guest_for(make_instance())
    cfg.kernel = None
    dom = ET.fromstring(cfg.to_xml())
    assert dom.find("os/kernel") is None
    assert dom.find("os/boot").get("dev") == "hd"  # type: ignore[union-attr]


def test_owned_uuid_recognises_only_novakit_names() -> None:
    u = "0f8fad5b-d9cb-469f-a165-70867728950e"
    assert vconfig.owned_uuid(f"novakit-{u}", u.upper()) == u
    assert vconfig.owned_uuid("instance-00000001", u) is None
    assert vconfig.owned_uuid("novakit-other", u) is None


def test_a_dhcp_host_entry_is_xml_with_its_name_escaped() -> None:
    entry = vconfig.NetworkDhcpHost("52:54:00:aa:bb:cc", "192.0.2.10", "a'b<c>")
    elem = ET.fromstring(entry.to_xml())
    assert (elem.tag, elem.attrib) == (
        "host",
        {"mac": "52:54:00:aa:bb:cc", "ip": "192.0.2.10", "name": "a'b<c>"},
    )
    assert (
        "name"
        not in ET.fromstring(vconfig.NetworkDhcpHost("52:54:00:aa:bb:cc", "192.0.2.10").to_xml()).attrib
    )


def test_the_dhcp_range_is_the_ip_element_whose_subnet_holds_the_address() -> None:
    xml = (
        "<network><name>n</name>"
        "<ip address='198.51.100.1' prefix='24'/>"
        "<ip address='192.0.2.1' netmask='255.255.255.0'><dhcp><range start='192.0.2.100' end='192.0.2.200'/>"
        "<host mac='52:54:00:AA:BB:CC' ip='192.0.2.10' name='web'/></dhcp></ip></network>"
    )
    assert vconfig.network_dhcp_range(xml, "192.0.2.20") == (
        1,
        [vconfig.NetworkDhcpHost("52:54:00:aa:bb:cc", "192.0.2.10", "web")],
    )
    # A subnet without <dhcp>, or none at all: the static network-config is all the guest gets.
    assert vconfig.network_dhcp_range(xml, "198.51.100.7") is None
    assert vconfig.network_dhcp_range(xml, "203.0.113.7") is None


def test_bridges_are_the_links_with_a_bridge_directory(tmp_path: Path) -> None:
    for link in ("eth0", "br-data", "virbr0"):
        (tmp_path / link).mkdir()
    (tmp_path / "br-data" / "bridge").mkdir()
    (tmp_path / "virbr0" / "bridge").mkdir()
    assert bridge_names(tmp_path) == ["br-data", "virbr0"]
    assert bridge_names(tmp_path / "missing") == []
