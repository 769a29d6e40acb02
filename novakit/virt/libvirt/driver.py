"""The libvirt ComputeDriver: QEMU guests on qemu:///system, qemu:///session or a remote daemon.

Options (all optional):

``uri``               libvirt URI (default ``qemu:///system``)
``domain_type``       ``qemu`` (TCG, the default: works where nested KVM does not) or ``kvm``
``instances_path``    per-instance files: overlay, ephemeral, swap, config drive, console log
                      (default /var/lib/novakit/instances; ~/.local/share/novakit/instances on session URIs)
``image_cache_path``  the verified image copies (default ``<instances_path>/_base``, as Nova)
``image_store``       the only directory images are read from (default /var/lib/novakit/images)
``network``           NICs for instances that ask for none: a list of libvirt network names,
                      ``bridge:<name>`` or ``user`` (default: one user-mode NIC)
``emulator``          the QEMU binary, when libvirt's default is not wanted
``shared_storage``    true if the paths above mean the same files to a remote daemon
``reboot_timeout``    seconds a soft reboot waits for the guest before resetting it (default 60)

Every instance owns one directory, ``<instances_path>/<uuid>``; spawn either
ends with a running domain or removes the domain and that directory again,
and destroy removes both.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from novakit import exceptions
from novakit.compute.messages import HostResources, ImageSpec, InstanceSpec
from novakit.compute.states import PowerState
from novakit.virt.driver import ComputeDriver, InstanceInfo
from novakit.virt.libvirt import config as vconfig
from novakit.virt.libvirt import images
from novakit.virt.libvirt.configdrive import ConfigDrive, guest_mac
from novakit.virt.libvirt.guest import Guest
from novakit.virt.libvirt.host import Host, is_remote_uri, is_session_uri
from novakit.virt.libvirt.imagecache import CachedImage, ImageCache

GiB = 1024**3
#: get_console_output returns at most this much of the end of the log (Nova's limit)
MAX_CONSOLE_BYTES = 100 * 1024
DEFAULT_CMDLINE = "root=/dev/vda console=tty0 console=ttyS0"
CONSOLE_LOG = "console.log"
_DISK_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class LibvirtDriver(ComputeDriver):
    hypervisor_type = "QEMU"

    def __init__(self, host: str, options: dict[str, Any] | None = None) -> None:
        super().__init__(host, options)
        self.uri = str(self.options.get("uri") or "qemu:///system")
        self._host = Host(host, self.uri)
        self.libvirt = self._host.libvirt
        self.domain_type = str(self.options.get("domain_type") or "qemu")
        session = is_session_uri(self.uri)
        if session:
            data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
            default_root = Path(data_home) / "novakit"
        else:
            default_root = Path("/var/lib/novakit")
        self.instances_path = Path(self.options.get("instances_path") or default_root / "instances")
        self.image_cache_path = Path(self.options.get("image_cache_path") or self.instances_path / "_base")
        self.image_store = Path(self.options.get("image_store") or default_root / "images")
        self.image_cache = ImageCache(self.image_cache_path, self.image_store)
        self.default_networks = _parse_networks(self.options.get("network"))
        self.emulator = self.options.get("emulator") or None
        self.reboot_timeout = float(self.options.get("reboot_timeout", 60))
        self.files_are_local = not is_remote_uri(self.uri) or bool(self.options.get("shared_storage"))

    # --- plumbing -------------------------------------------------------------

    def _conn(self) -> Any:
        return self._host.get_connection()

    def _instance_dir(self, uuid: str) -> Path:
        return self.instances_path / uuid

    def _lookup(self, uuid: str) -> Guest | None:
        """The domain novakit made for this instance, or None."""
        try:
            domain = self._conn().lookupByName(vconfig.domain_name(uuid))
        except self.libvirt.libvirtError as exc:
            if exc.get_error_code() == self.libvirt.VIR_ERR_NO_DOMAIN:
                return None
            raise self._compute_error("look up", uuid, exc) from None
        return Guest(domain, uuid)

    def _guest(self, instance: InstanceSpec) -> Guest:
        uuid = _valid_uuid(instance.uuid)
        guest = self._lookup(uuid) if uuid else None
        if guest is None:
            raise exceptions.InstanceNotFound(instance_id=instance.uuid)
        return guest

    def _compute_error(self, action: str, uuid: str, exc: Any) -> exceptions.NovakitError:
        if exc.get_error_code() == self.libvirt.VIR_ERR_NO_DOMAIN:
            return exceptions.InstanceNotFound(instance_id=uuid)
        return exceptions.ComputeError(reason=f"cannot {action} instance {uuid}: {exc.get_error_message()}")

    @contextlib.contextmanager
    def _operation(self, action: str, instance: InstanceSpec) -> Iterator[Guest]:
        """The instance's guest, with libvirt errors turned into novakit's."""
        guest = self._guest(instance)
        try:
            yield guest
        except self.libvirt.libvirtError as exc:
            raise self._compute_error(action, instance.uuid, exc) from None

    # --- host -----------------------------------------------------------------

    def init_host(self) -> None:
        self._conn()
        if self.files_are_local:
            self.instances_path.mkdir(parents=True, exist_ok=True)
            self.image_cache_path.mkdir(parents=True, exist_ok=True)

    def get_available_resource(self) -> HostResources:
        conn = self._conn()
        try:
            info = conn.getInfo()
            caps = ET.fromstring(conn.getCapabilities())
            version = int(conn.getVersion())
            domains = conn.listAllDomains(self.libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
            vcpus_used = memory_kib_used = 0
            for dom in domains:
                if vconfig.owned_uuid(dom.name(), dom.UUIDString()) is None:
                    continue
                dom_info = dom.info()
                memory_kib_used += int(dom_info[1])
                vcpus_used += int(dom_info[3])
        except self.libvirt.libvirtError as exc:
            raise exceptions.HypervisorUnavailable(host=self.host, reason=exc.get_error_message()) from None
        local_gb = local_gb_used = 0
        if self.files_are_local:
            self.instances_path.mkdir(parents=True, exist_ok=True)
            st = os.statvfs(self.instances_path)
            local_gb = st.f_blocks * st.f_frsize // GiB
            local_gb_used = (st.f_blocks - st.f_bfree) * st.f_frsize // GiB
        return HostResources(
            hypervisor_hostname=self.host,
            hypervisor_type=self.hypervisor_type,
            hypervisor_version=version,
            cpu_arch=caps.findtext("host/cpu/arch") or str(info[0]),
            cpu_features=sorted(f.get("name", "") for f in caps.findall("host/cpu/feature")),
            vcpus=int(info[2]),
            memory_mb=int(info[1]),
            local_gb=local_gb,
            vcpus_used=vcpus_used,
            memory_mb_used=memory_kib_used // 1024,
            local_gb_used=local_gb_used,
            cached_images=self.image_cache.cached_image_ids() if self.files_are_local else [],
        )

    # --- spawn and destroy ----------------------------------------------------

    def spawn(self, instance: InstanceSpec) -> None:
        uuid = _valid_uuid(instance.uuid)
        if uuid is None:
            raise exceptions.BuildAbortError(
                instance_uuid=instance.uuid, reason="the instance uuid is not a UUID"
            )
        if not self.files_are_local:
            raise exceptions.RescheduledError(
                instance_uuid=uuid,
                reason=(
                    f"{self.uri} is a remote daemon; novakit prepares disks in local paths, so set the "
                    "option shared_storage when those paths are shared, or run novakit on that host"
                ),
            )
        if self._lookup(uuid) is not None:
            # Not rescheduled: another host would make a second copy of one instance.
            raise exceptions.BuildAbortError(
                instance_uuid=uuid, reason=f"a domain for this instance already exists on {self.host}"
            )
        inst_dir = self._instance_dir(uuid)
        try:
            # A directory without a domain is what a crashed spawn leaves; nobody else uses it.
            shutil.rmtree(inst_dir, ignore_errors=True)
            inst_dir.mkdir(parents=True, mode=0o755)
            guest_config = self._prepare_guest(instance, inst_dir)
            self._define_and_start(guest_config)
        except BaseException as exc:
            try:
                self._remove_guest(uuid)
            except exceptions.NovakitError as cleanup_exc:
                exc.add_note(f"cleanup after the failed spawn also failed: {cleanup_exc.format_message()}")
            if isinstance(exc, Exception):
                raise self._build_error(uuid, exc) from exc
            raise

    def _build_error(self, uuid: str, exc: Exception) -> Exception:
        """Say whether another host could succeed where this one failed."""
        if isinstance(exc, exceptions.BuildAbortError | exceptions.RescheduledError):
            return exc
        if isinstance(exc, exceptions.InvalidImage | exceptions.ImageNotFound):
            return exceptions.BuildAbortError(instance_uuid=uuid, reason=exc.format_message())
        if isinstance(exc, exceptions.NovakitError):
            return exceptions.RescheduledError(instance_uuid=uuid, reason=exc.format_message())
        if isinstance(exc, self.libvirt.libvirtError):
            return exceptions.RescheduledError(
                instance_uuid=uuid, reason=f"libvirt on {self.host}: {exc.get_error_message()}"
            )
        return exc

    def _prepare_guest(self, instance: InstanceSpec, inst_dir: Path) -> vconfig.LibvirtConfigGuest:
        """Make every file the guest needs and return its domain definition."""
        flavor = instance.flavor
        base = self._fetch_image(instance.image, "image")
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
        root = inst_dir / "disk"
        images.create_overlay(base.path, base.format, root, root_size)
        disks.append(vconfig.GuestDisk(str(root), f"vd{next(letters)}", serial=instance.uuid[:20]))
        if flavor.ephemeral_gb:
            eph = inst_dir / "disk.eph0"
            images.create_blank_qcow2(eph, flavor.ephemeral_gb * GiB)
            disks.append(vconfig.GuestDisk(str(eph), f"vd{next(letters)}"))
        if flavor.swap:
            swap = inst_dir / "disk.swap"
            images.create_swap(swap, flavor.swap)
            disks.append(vconfig.GuestDisk(str(swap), f"vd{next(letters)}", driver_type="raw"))
        interfaces = self._interfaces(instance)
        if instance.config_drive:
            iso = inst_dir / "disk.config"
            ConfigDrive.from_instance(instance, [i.mac or "" for i in interfaces]).write_iso(iso)
            disks.append(vconfig.GuestDisk(str(iso), f"vd{next(letters)}", driver_type="raw", readonly=True))
        kernel = initrd = cmdline = None
        if instance.kernel is not None:
            kernel = str(self._fetch_image(instance.kernel, "kernel").path)
            if instance.ramdisk is not None:
                initrd = str(self._fetch_image(instance.ramdisk, "ramdisk").path)
            cmdline = instance.image.properties.get("os_command_line") or DEFAULT_CMDLINE
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
            serial_log=vconfig.GuestSerialLog(str(inst_dir / CONSOLE_LOG)),
        )

    def _fetch_image(self, image: ImageSpec, role: str) -> CachedImage:
        if role in ("kernel", "ramdisk") and image.disk_format not in images.RAW_ALIASES:
            raise exceptions.InvalidImage(
                image_id=image.id, reason=f"a {role} image must be a raw file (aki, ari or raw)"
            )
        return self.image_cache.fetch(image)

    def _interfaces(self, instance: InstanceSpec) -> list[vconfig.GuestInterface]:
        wanted: list[tuple[str, str, str | None]] = [(n.type, n.source, n.mac) for n in instance.networks]
        if not wanted:
            wanted = [(kind, source, None) for kind, source in self.default_networks]
        return [
            vconfig.GuestInterface(kind, source, mac or guest_mac(instance.uuid, i))  # type: ignore[arg-type]
            for i, (kind, source, mac) in enumerate(wanted)
        ]

    def _define_and_start(self, guest_config: vconfig.LibvirtConfigGuest) -> Any:
        """Define the domain from its typed config and boot it (the libvirt half of spawn)."""
        domain = self._conn().defineXML(guest_config.to_xml())
        domain.create()
        return domain

    def _remove_guest(self, uuid: str) -> None:
        """Remove the domain (with its saved memory and NVRAM) and the instance's files.

        Each step runs even if an earlier one failed, so a half-built guest
        cannot keep its files because its domain was already gone.
        """
        lv = self.libvirt
        errors: list[str] = []
        try:
            guest = self._lookup(uuid)
        except exceptions.NovakitError as exc:
            guest = None
            errors.append(exc.format_message())
        if guest is not None:
            dom = guest.domain
            try:
                if dom.isActive():
                    dom.destroy()
            except lv.libvirtError as exc:
                if exc.get_error_code() not in (lv.VIR_ERR_NO_DOMAIN, lv.VIR_ERR_OPERATION_INVALID):
                    errors.append(exc.get_error_message())
            try:
                _undefine(lv, dom)
            except lv.libvirtError as exc:
                if exc.get_error_code() != lv.VIR_ERR_NO_DOMAIN:
                    errors.append(exc.get_error_message())
        if self.files_are_local:
            shutil.rmtree(self._instance_dir(uuid), ignore_errors=True)
            if self._instance_dir(uuid).exists():
                errors.append(f"could not remove {self._instance_dir(uuid)}")
        if errors:
            raise exceptions.ComputeError(reason=f"destroying instance {uuid}: " + "; ".join(errors))

    def destroy(self, instance: InstanceSpec) -> None:
        uuid = _valid_uuid(instance.uuid)
        if uuid is None:
            return  # no such uuid can have a domain or a directory of novakit's
        self._remove_guest(uuid)

    # --- power ----------------------------------------------------------------

    def power_off(self, instance: InstanceSpec, timeout: float = 60, retry_interval: float = 5) -> None:
        with self._operation("power off", instance) as guest:
            state = guest.get_power_state()
            if state == PowerState.SUSPENDED:
                guest.discard_saved_memory()
                return
            if state == PowerState.RUNNING and guest.shutdown_gracefully(timeout, retry_interval):
                return
            guest.force_off()
            if guest.is_active():
                raise exceptions.InstancePowerOffFailure(instance_uuid=instance.uuid, reason="still running")

    def power_on(self, instance: InstanceSpec) -> None:
        with self._operation("power on", instance) as guest:
            state = guest.get_power_state()
            if state == PowerState.RUNNING:
                return
            if state == PowerState.PAUSED:
                guest.domain.resume()
                return
            guest.force_off()  # a crashed guest may still be "active"
            guest.start()

    def reboot(self, instance: InstanceSpec, reboot_type: str = "SOFT") -> None:
        with self._operation("reboot", instance) as guest:
            state = guest.get_power_state()
            # Shut down and start (rather than virDomainReboot) so the guest really
            # went down: Nova's _soft_reboot. A guest that ignores ACPI gets a hard reboot.
            soft = reboot_type.upper() == "SOFT" and state == PowerState.RUNNING
            if soft and guest.shutdown_gracefully(self.reboot_timeout, retry_interval=5):
                guest.start()
                return
            guest.discard_saved_memory()
            guest.force_off()
            guest.start()

    def pause(self, instance: InstanceSpec) -> None:
        with self._operation("pause", instance) as guest:
            state = guest.get_power_state()
            if state == PowerState.PAUSED:
                return
            if state != PowerState.RUNNING:
                raise exceptions.InstanceNotRunning(instance_uuid=instance.uuid)
            guest.domain.suspend()

    def unpause(self, instance: InstanceSpec) -> None:
        with self._operation("unpause", instance) as guest:
            state = guest.get_power_state()
            if state == PowerState.RUNNING:
                return
            if state != PowerState.PAUSED:
                raise guest.wrong_state("unpause", state, "PAUSED")
            guest.domain.resume()

    def suspend(self, instance: InstanceSpec) -> None:
        with self._operation("suspend", instance) as guest:
            state = guest.get_power_state()
            if state == PowerState.SUSPENDED:
                return
            if state not in (PowerState.RUNNING, PowerState.PAUSED):
                raise exceptions.InstanceNotRunning(instance_uuid=instance.uuid)
            guest.domain.managedSave(0)

    def resume(self, instance: InstanceSpec) -> None:
        with self._operation("resume", instance) as guest:
            state = guest.get_power_state()
            if state == PowerState.RUNNING:
                return
            if state != PowerState.SUSPENDED:
                raise guest.wrong_state("resume", state, "SUSPENDED")
            guest.start()

    # --- looking ----------------------------------------------------------------

    def get_info(self, instance: InstanceSpec) -> InstanceInfo:
        with self._operation("get info of", instance) as guest:
            return InstanceInfo(state=guest.get_power_state(), internal_id=guest.domain.name())

    def list_instances(self) -> dict[str, PowerState]:
        try:
            domains = self._conn().listAllDomains(0)
            result = {}
            for dom in domains:
                uuid = vconfig.owned_uuid(dom.name(), dom.UUIDString())
                if uuid is not None:
                    result[uuid] = Guest(dom, uuid).get_power_state()
        except self.libvirt.libvirtError as exc:
            raise exceptions.HypervisorUnavailable(host=self.host, reason=exc.get_error_message()) from None
        return result

    def get_interface_addresses(self, instance: InstanceSpec) -> list[str]:
        """Addresses from DHCP leases, then the guest agent, then the ARP table; failures count as none."""
        lv = self.libvirt
        guest = self._guest(instance)
        sources = [
            getattr(lv, "VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE", 0),
            getattr(lv, "VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT", 1),
            getattr(lv, "VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_ARP", 2),
        ]
        for source in sources:
            try:
                ifaces = guest.domain.interfaceAddresses(source, 0) or {}
            except lv.libvirtError:
                continue
            found = []
            for name, iface in ifaces.items():
                if name == "lo":
                    continue
                for addr in iface.get("addrs") or []:
                    ip = addr.get("addr")
                    if ip and not ip.startswith(("127.", "fe80:", "::1")) and ip not in found:
                        found.append(ip)
            if found:
                return found
        return []

    def get_console_output(self, instance: InstanceSpec) -> str:
        guest = self._guest(instance)
        path = self._instance_dir(guest.uuid) / CONSOLE_LOG
        try:
            with open(path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - MAX_CONSOLE_BYTES))
                data = f.read()
        except FileNotFoundError:
            return ""
        return data.decode("utf-8", errors="replace")

    def cache_image(self, image: ImageSpec) -> None:
        """Copy and verify the image into the cache now, so that the first build does not wait."""
        self.image_cache.fetch(image)


def _valid_uuid(value: str) -> str | None:
    """The canonical form of a uuid, or None: it becomes a path, so nothing else may pass."""
    try:
        return str(uuidlib.UUID(value))
    except (ValueError, TypeError, AttributeError):
        return None


def _undefine(lv: Any, dom: Any) -> None:
    # Not every driver knows every flag (the test driver refuses NVRAM); fall back step by step.
    for flags in (
        lv.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | lv.VIR_DOMAIN_UNDEFINE_NVRAM,
        lv.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE,
    ):
        try:
            dom.undefineFlags(flags)
            return
        except lv.libvirtError as exc:
            if exc.get_error_code() not in (lv.VIR_ERR_INVALID_ARG, lv.VIR_ERR_NO_SUPPORT):
                raise
    dom.undefine()


def _parse_networks(value: Any) -> list[tuple[str, str]]:
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
