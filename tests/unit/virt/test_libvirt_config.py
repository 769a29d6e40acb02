"""Domain XML built from typed objects: names and metadata stay data."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

from novakit.compute.messages import FlavorSpec, InstanceSpec
from novakit.virt.libvirt import config as vconfig

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
