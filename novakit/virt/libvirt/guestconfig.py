"""An instance's domain definition, its disks made on the way (Nova's ``_get_guest_config``).

``GuestConfigBuilder.build`` turns an ``InstanceSpec`` into a typed
``config.LibvirtConfigGuest``: it fetches the images (verified, through the image cache),
makes the instance's own disks with the host's maker (``disks``), takes the disks of its
volumes from the volume pool, and chooses its NICs. Disks get their targets in this order:
root (the boot volume, or an overlay of the image), ephemeral, swap, config drive, then the
attached volumes at the devices the controller chose for them.

What is made here is removed by the driver's cleanup when a later step of spawn fails; nothing
here defines or starts a domain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from novakit import exceptions
from novakit.host.messages import ImageSpec, InstanceSpec
from novakit.virt.libvirt import config as vconfig
from novakit.virt.libvirt import images, nwfilter
from novakit.virt.libvirt.configdrive import ConfigDrive, guest_mac
from novakit.virt.libvirt.disks import InstanceDisks
from novakit.virt.libvirt.imagecache import CachedImage, ImageCache
from novakit.virt.libvirt.volumes import VolumePool

GiB = 1024**3
DEFAULT_CMDLINE = "root=/dev/vda console=tty0 console=ttyS0"
_DISK_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def parse_networks(value: Any) -> list[tuple[str, str]]:
    """options["network"]: "name", "bridge:br0", "user", or a list of those."""
    if not value:
        return [("user", "")]
    items = [value] if isinstance(value, str) else list(value)
    parsed = []
    for item in items:
        text = str(item)
        if text == "user":
            parsed.append(("user", ""))
        elif text.startswith("bridge:"):
            parsed.append(("bridge", text.removeprefix("bridge:")))
        else:
            parsed.append(("network", text.removeprefix("network:")))
    return parsed


@dataclass
class GuestConfigBuilder:
    """The driver's options that shape every domain, and the stores its disks come from."""

    image_cache: ImageCache
    volume_pool: VolumePool
    domain_type: str
    emulator: str | None
    default_networks: list[tuple[str, str]]
    # Whether a NIC whose port has security-group rules references its network filter.
    port_filters: bool = False

    def fetch_image(self, image: ImageSpec, role: str) -> CachedImage:
        """The verified cached copy of ``image``; a kernel or ramdisk must be a raw file."""
        if role in ("kernel", "ramdisk") and image.disk_format not in images.RAW_ALIASES:
            raise exceptions.InvalidImage(
                image_id=image.id, reason=f"a {role} image must be a raw file (aki, ari or raw)"
            )
        return self.image_cache.fetch(image)

    def build(self, instance: InstanceSpec, maker: InstanceDisks) -> vconfig.LibvirtConfigGuest:
        """Make every disk the guest needs and return its domain definition."""
        flavor = instance.flavor
        base = self.fetch_image(instance.image, "image")
        root_size = base.virtual_size
        if flavor.root_gb:
            if base.virtual_size > flavor.root_gb * GiB:
                raise exceptions.BuildAbortError(
                    instance_uuid=instance.uuid,
                    reason=(
                        f"flavor {flavor.name}'s root disk ({flavor.root_gb} GiB) is smaller than image "
                        f"{instance.image.id} ({base.virtual_size} bytes)"
                    ),
                )
            root_size = flavor.root_gb * GiB
        letters = iter(_DISK_LETTERS)
        disks = []
        # Kernel and ramdisk first: on a remote host they are uploads, cheaper to fail before disks.
        kernel = initrd = cmdline = None
        if instance.kernel is not None:
            kernel = maker.image_path(self.fetch_image(instance.kernel, "kernel"))
            if instance.ramdisk is not None:
                initrd = maker.image_path(self.fetch_image(instance.ramdisk, "ramdisk"))
            cmdline = instance.image.properties.get("os_command_line") or DEFAULT_CMDLINE
        root_volume = next((v for v in instance.volumes if v.boot_index == 0), None)
        if root_volume is not None:  # booted from a volume: it is the root disk, no overlay
            disks.append(self.volume_pool.disk(root_volume.model_copy(update={"device_name": "vda"})))
            next(letters)
        else:
            root = maker.overlay(base, root_size)
            disks.append(vconfig.GuestDisk(root, f"vd{next(letters)}", serial=instance.uuid[:20]))
        if flavor.ephemeral_gb:
            eph = maker.blank_qcow2(flavor.ephemeral_gb * GiB)
            disks.append(vconfig.GuestDisk(eph, f"vd{next(letters)}"))
        if flavor.swap:
            swap = maker.swap(flavor.swap)
            disks.append(vconfig.GuestDisk(swap, f"vd{next(letters)}", driver_type="raw"))
        interfaces = self.interfaces(instance)
        if instance.config_drive:
            iso = maker.config_drive(ConfigDrive.from_instance(instance, [i.mac or "" for i in interfaces]))
            disks.append(vconfig.GuestDisk(iso, f"vd{next(letters)}", driver_type="raw", readonly=True))
        # Attached volumes keep their devices (chosen by the controller after these disks).
        disks.extend(self.volume_pool.disk(v) for v in instance.volumes if v.boot_index != 0)
        console_log = maker.console_log()
        return vconfig.LibvirtConfigGuest(
            uuid=instance.uuid,
            name=vconfig.domain_name(instance.uuid),
            title=instance.name,
            metadata=vconfig.InstanceMetadata.from_instance(instance),
            memory_mb=flavor.memory_mb,
            vcpus=flavor.vcpus,
            domain_type=self.domain_type,
            kernel=kernel,
            initrd=initrd,
            cmdline=cmdline,
            emulator=self.emulator,
            disks=disks,
            interfaces=interfaces,
            serial_log=vconfig.GuestSerialLog(console_log),
        )

    def interfaces(self, instance: InstanceSpec) -> list[vconfig.GuestInterface]:
        """The instance's NICs, else one on each of the host's default networks; MACs stable."""
        wanted: list[tuple[str, str, str | None]] = [(n.type, n.source, n.mac) for n in instance.networks]
        if not wanted:
            wanted = [(kind, source, None) for kind, source in self.default_networks]
        nics = [
            vconfig.GuestInterface(kind, source, mac or guest_mac(instance.uuid, i))  # type: ignore[arg-type]
            for i, (kind, source, mac) in enumerate(wanted)
        ]
        for nic, spec in zip(nics, instance.networks, strict=False):
            if self.port_filters and spec.port_id and spec.filter_rules is not None:
                nic.filter = nwfilter.filter_name(spec.port_id)
                v4 = [ip.address for ip in spec.fixed_ips if ":" not in ip.address]
                if v4:  # the address the anti-spoofing rules allow (else libvirt learns it)
                    nic.filter_params = {"IP": v4[0]}
        return nics
