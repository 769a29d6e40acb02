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
``remote_pool``       on a remote daemon without shared storage: the libvirt ``dir`` storage pool
                      that holds every disk (default ``novakit``; created when missing)
``remote_pool_path``  the remote directory of that pool when novakit creates it (default
                      /var/lib/novakit/pool on system URIs; required on session URIs, whose
                      directory is in the remote user's home)
``reboot_timeout``    seconds a soft reboot waits for the guest before resetting it (default 60)

Every instance owns one directory, ``<instances_path>/<uuid>``; spawn either
ends with a running domain or removes the domain and that directory again,
and destroy removes both.

On a remote daemon (``qemu+ssh://``...) without ``shared_storage`` the same
disks are volumes in a storage pool on the remote host, made and filled
through the libvirt connection (``storage.RemoteStorage``); the image cache
stays local and verifies each image before its one upload. There an instance
owns every volume named ``<uuid>.*`` instead of a directory.

A guest novakit did not create (a brownfield import, ``novakit.compute.importer``)
keeps its name and disks; ``adopt`` writes novakit's ``<metadata>`` element into
it, and from then on it is the instance whose uuid is the domain's uuid (Nova's
instance uuid is the libvirt domain uuid too). Destroying it removes the domain,
its saved memory and NVRAM, not its disk files: novakit did not make them and
cannot know what else uses them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from novakit import exceptions
from novakit.compute.messages import HostResources, ImageSpec, InstanceSpec, UnmanagedGuest, VolumeSpec
from novakit.compute.states import PowerState
from novakit.virt.driver import ComputeDriver, InstanceInfo
from novakit.virt.libvirt import config as vconfig
from novakit.virt.libvirt import images, vif
from novakit.virt.libvirt.configdrive import ConfigDrive, guest_mac
from novakit.virt.libvirt.guest import Guest
from novakit.virt.libvirt.host import Host, bridge_names, is_remote_uri, is_session_uri
from novakit.virt.libvirt.imagecache import CachedImage, ImageCache
from novakit.virt.libvirt.storage import (
    CONSOLE_HEADER,
    DEFAULT_POOL,
    RemoteStorage,
    StorageVolumeConfig,
    default_pool_path,
    instance_volume_name,
)
from novakit.virt.libvirt.volumes import DEFAULT_VOLUME_POOL, VolumePool

GiB = 1024**3
#: get_console_output returns at most this much of the end of the log (Nova's limit)
MAX_CONSOLE_BYTES = 100 * 1024
DEFAULT_CMDLINE = "root=/dev/vda console=tty0 console=ttyS0"
CONSOLE_LOG = "console.log"
_DISK_LETTERS = "abcdefghijklmnopqrstuvwxyz"
# The file names of an instance's disks: in its directory, or after "<uuid>." in the remote pool.
ROOT_DISK, EPHEMERAL_DISK, SWAP_DISK, CONFIG_DRIVE = "disk", "disk.eph0", "disk.swap", "disk.config"
_INSTANCE_FILES = (ROOT_DISK, EPHEMERAL_DISK, SWAP_DISK, CONFIG_DRIVE, CONSOLE_LOG)


class LibvirtDriver(ComputeDriver):
    hypervisor_type = "QEMU"
    # The admin password hash goes into the config drive's cloud-init user data (``configdrive``).
    capabilities = {**ComputeDriver.capabilities, "supports_admin_password": True}

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
        self.volume_pool = VolumePool(
            self.libvirt,
            self._conn,
            str(self.options.get("volume_pool") or DEFAULT_VOLUME_POOL),
            Path(self.options.get("volume_pool_path") or default_root / "volumes"),
            work_dir=self.image_cache_path,
        )
        self.remote: RemoteStorage | None = None
        if not self.files_are_local:
            self.remote = RemoteStorage(
                self.libvirt,
                self._conn,
                str(self.options.get("remote_pool") or DEFAULT_POOL),
                default_pool_path(session, self.options.get("remote_pool_path")),
                lock_dir=self.image_cache_path,
            )

    # --- plumbing -------------------------------------------------------------

    def _conn(self) -> Any:
        return self._host.get_connection()

    def _instance_dir(self, uuid: str) -> Path:
        return self.instances_path / uuid

    def _lookup(self, uuid: str) -> Guest | None:
        """The domain novakit made (or adopted) for this instance, or None."""
        try:
            domain = self._conn().lookupByName(vconfig.domain_name(uuid))
        except self.libvirt.libvirtError as exc:
            if exc.get_error_code() != self.libvirt.VIR_ERR_NO_DOMAIN:
                raise self._compute_error("look up", uuid, exc) from None
            domain = self._lookup_by_uuid(uuid)
            if domain is None or self._owned_uuid(domain) != uuid:
                return None  # no domain, or one novakit does not own: never touched
        return Guest(domain, uuid)

    def _lookup_by_uuid(self, uuid: str) -> Any:
        try:
            return self._conn().lookupByUUIDString(uuid)
        except self.libvirt.libvirtError as exc:
            if exc.get_error_code() == self.libvirt.VIR_ERR_NO_DOMAIN:
                return None
            raise self._compute_error("look up", uuid, exc) from None

    def _owned_uuid(self, dom: Any) -> str | None:
        """The instance uuid of a domain novakit made or adopted, else None."""
        owned = vconfig.owned_uuid(dom.name(), dom.UUIDString())
        if owned is not None:
            return owned
        try:
            dom.metadata(self.libvirt.VIR_DOMAIN_METADATA_ELEMENT, vconfig.NOVAKIT_NS, 0)
        except self.libvirt.libvirtError as exc:
            if exc.get_error_code() in (
                self.libvirt.VIR_ERR_NO_DOMAIN_METADATA,
                self.libvirt.VIR_ERR_NO_DOMAIN,
            ):
                return None
            raise
        return str(dom.UUIDString()).lower()

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
        else:
            self.image_cache_path.mkdir(parents=True, exist_ok=True)
            self._remote_call("prepare storage pool", lambda remote: remote.pool())

    def get_available_resource(self) -> HostResources:
        conn = self._conn()
        try:
            info = conn.getInfo()
            caps = ET.fromstring(conn.getCapabilities())
            version = int(conn.getVersion())
            domains = conn.listAllDomains(self.libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
            vcpus_used = memory_kib_used = 0
            for dom in domains:
                if self._owned_uuid(dom) is None:
                    continue
                dom_info = dom.info()
                memory_kib_used += int(dom_info[1])
                vcpus_used += int(dom_info[3])
        except self.libvirt.libvirtError as exc:
            raise exceptions.HypervisorUnavailable(host=self.host, reason=exc.get_error_message()) from None
        local_gb = local_gb_used = 0
        cached_images: list[str] = []
        if self.remote is not None:
            capacity, allocation = self._remote_call("read storage pool", lambda remote: remote.capacity())
            local_gb, local_gb_used = capacity // GiB, allocation // GiB
            cached_images = self._remote_call("read storage pool", lambda remote: remote.cached_image_ids())
        if self.files_are_local:
            self.instances_path.mkdir(parents=True, exist_ok=True)
            st = os.statvfs(self.instances_path)
            local_gb = st.f_blocks * st.f_frsize // GiB
            local_gb_used = (st.f_blocks - st.f_bfree) * st.f_frsize // GiB
            cached_images = self.image_cache.cached_image_ids()
        # A remote host's bridges are not in this machine's /sys: there, its libvirt networks only.
        networks = set(self._host.network_names()) | set(bridge_names() if self.files_are_local else [])
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
            cached_images=cached_images,
            traits=self.capability_traits(),
            networks=sorted(networks),
        )

    # --- spawn and destroy ----------------------------------------------------

    def spawn(self, instance: InstanceSpec) -> None:
        uuid = _valid_uuid(instance.uuid)
        if uuid is None:
            raise exceptions.BuildAbortError(
                instance_uuid=instance.uuid, reason="the instance uuid is not a UUID"
            )
        if self._lookup(uuid) is not None:
            # Not rescheduled: another host would make a second copy of one instance.
            raise exceptions.BuildAbortError(
                instance_uuid=uuid, reason=f"a domain for this instance already exists on {self.host}"
            )
        inst_dir = self._instance_dir(uuid)
        try:
            if self.remote is None:
                # A directory without a domain is what a crashed spawn leaves; nobody else uses it.
                shutil.rmtree(inst_dir, ignore_errors=True)
                inst_dir.mkdir(parents=True, mode=0o755)
            else:
                # Likewise volumes of this uuid without a domain.
                self._remove_remote_volumes(uuid)
            guest_config = self._prepare_guest(instance, inst_dir)
            vif.plug_vifs(self._host, instance)
            self._define_and_start(guest_config)
        except BaseException as exc:
            try:
                self._remove_guest(uuid, instance)
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
        maker: _LocalDisks | _RemoteDisks
        maker = _LocalDisks(inst_dir) if self.remote is None else _RemoteDisks(self.remote, instance.uuid)
        # Kernel and ramdisk first: on a remote host they are uploads, cheaper to fail before disks.
        kernel = initrd = cmdline = None
        if instance.kernel is not None:
            kernel = maker.image_path(self._fetch_image(instance.kernel, "kernel"))
            if instance.ramdisk is not None:
                initrd = maker.image_path(self._fetch_image(instance.ramdisk, "ramdisk"))
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
        interfaces = self._interfaces(instance)
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

    def _remove_guest(self, uuid: str, instance: InstanceSpec | None = None) -> None:
        """Remove the domain (with its saved memory and NVRAM), its ports' DHCP host entries
        and the instance's files.

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
        try:
            vif.unplug_vifs(self._host, instance, guest.domain.XMLDesc(0) if guest is not None else None)
        except (lv.libvirtError, exceptions.NovakitError) as exc:
            errors.append(_error_text(exc))
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
        else:
            errors.extend(self._remove_remote_volumes(uuid, raise_errors=False))
        if errors:
            raise exceptions.ComputeError(reason=f"destroying instance {uuid}: " + "; ".join(errors))

    def _remove_remote_volumes(self, uuid: str, raise_errors: bool = True) -> list[str]:
        """Delete every ``<uuid>.*`` volume; the base volumes they were made from stay."""
        assert self.remote is not None
        try:
            errors = self.remote.delete_instance_volumes(uuid, _INSTANCE_FILES)
        except (self.libvirt.libvirtError, exceptions.NovakitError) as exc:
            errors = [_error_text(exc)]
        if errors and raise_errors:
            raise exceptions.ComputeError(reason=f"cleaning up volumes of {uuid}: " + "; ".join(errors))
        return errors

    def _remote_call(self, action: str, call: Any) -> Any:
        """Run ``call(self.remote)`` with libvirt's errors said as novakit's."""
        assert self.remote is not None
        try:
            return call(self.remote)
        except self.libvirt.libvirtError as exc:
            raise exceptions.HypervisorUnavailable(
                host=self.host, reason=f"cannot {action} {self.remote.pool_name}: {exc.get_error_message()}"
            ) from None

    def destroy(self, instance: InstanceSpec) -> None:
        uuid = _valid_uuid(instance.uuid)
        if uuid is None:
            return  # no such uuid can have a domain or a directory of novakit's
        self._remove_guest(uuid, instance)

    # --- volumes (``volumes.VolumePool``) ----------------------------------------

    def create_volume(self, volume: VolumeSpec) -> None:
        base = self._fetch_image(volume.image, "image") if volume.image is not None else None
        self.volume_pool.create(volume, base)

    def delete_volume(self, volume: VolumeSpec) -> None:
        self.volume_pool.delete(volume)

    def attach_volume(self, instance: InstanceSpec, volume: VolumeSpec) -> None:
        self.volume_pool.attach(self._guest(instance).domain, volume)

    def detach_volume(self, instance: InstanceSpec, volume: VolumeSpec) -> None:
        guest = self._lookup(instance.uuid)
        if guest is not None:
            self.volume_pool.detach(guest.domain, volume)

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
                uuid = self._owned_uuid(dom)
                if uuid is not None:
                    result[uuid] = Guest(dom, uuid).get_power_state()
        except self.libvirt.libvirtError as exc:
            raise exceptions.HypervisorUnavailable(host=self.host, reason=exc.get_error_message()) from None
        return result

    def list_unmanaged(self) -> list[UnmanagedGuest]:
        try:
            found = [
                self._describe(dom) for dom in self._conn().listAllDomains(0) if self._owned_uuid(dom) is None
            ]
        except self.libvirt.libvirtError as exc:
            raise exceptions.HypervisorUnavailable(host=self.host, reason=exc.get_error_message()) from None
        return sorted(found, key=lambda g: g.name)

    def _describe(self, dom: Any) -> UnmanagedGuest:
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
            except self.libvirt.libvirtError as exc:
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

    def adopt(self, instance: InstanceSpec) -> None:
        uuid = _valid_uuid(instance.uuid)
        dom = self._lookup_by_uuid(uuid) if uuid else None
        if dom is None:
            raise exceptions.InstanceNotFound(instance_id=instance.uuid)
        if self._owned_uuid(dom) is not None:
            return
        lv = self.libvirt
        element = vconfig.InstanceMetadata.from_instance(instance).to_element()
        # libvirt puts the element into the namespace given with it: it must come without one.
        for node in element.iter():
            node.tag = node.tag.rpartition("}")[2]
        flags = lv.VIR_DOMAIN_AFFECT_CONFIG | (lv.VIR_DOMAIN_AFFECT_LIVE if dom.isActive() else 0)
        try:
            dom.setMetadata(
                lv.VIR_DOMAIN_METADATA_ELEMENT,
                ET.tostring(element, encoding="unicode"),
                "novakit",
                vconfig.NOVAKIT_NS,
                flags,
            )
        except lv.libvirtError as exc:
            raise self._compute_error("adopt", instance.uuid, exc) from None

    def get_interface_addresses(self, instance: InstanceSpec) -> list[str]:
        """Addresses from DHCP leases, then the guest agent, then the ARP table; failures count as none.

        When every NIC is a port with fixed IPs, those are the addresses: the guest was told
        them (network-config, DHCP host entry), and they are known before it answers.
        """
        lv = self.libvirt
        guest = self._guest(instance)
        if instance.networks and all(nic.fixed_ips for nic in instance.networks):
            return list(dict.fromkeys(ip.address for nic in instance.networks for ip in nic.fixed_ips))
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
        if self.remote is not None:
            # The log is a volume in the pool (see _RemoteDisks.console_log), read over the
            # connection; the header novakit wrote before the guest's first byte is not console.
            name = instance_volume_name(guest.uuid, CONSOLE_LOG)
            data = self._remote_call("read console log from", lambda r: r.read_tail(name, MAX_CONSOLE_BYTES))
            data = data.removeprefix(CONSOLE_HEADER)
            return bytes(data).decode("utf-8", errors="replace")
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
        cached = self.image_cache.fetch(image)
        if self.remote is not None:
            self._remote_call("upload image to", lambda remote: remote.ensure_base(cached))

    def remove_cached_image(self, image_id: str) -> list[str]:
        """Image-cache cleanup on a remote pool: delete the image's base volumes no instance uses.

        Returns the volumes kept because overlays still use them. Bases are
        never removed by destroy, since other instances may share them.
        """
        if self.remote is None:
            return []
        kept: list[str] = self._remote_call("clean image cache in", lambda r: r.remove_base_image(image_id))
        return kept


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


def _error_text(exc: Exception) -> str:
    if isinstance(exc, exceptions.NovakitError):
        return exc.format_message()
    return str(exc.get_error_message()) if hasattr(exc, "get_error_message") else str(exc)


class _LocalDisks:
    """An instance's disks as files in its directory (local or shared storage)."""

    def __init__(self, inst_dir: Path) -> None:
        self.inst_dir = inst_dir

    def image_path(self, cached: CachedImage) -> str:
        return str(cached.path)

    def overlay(self, base: CachedImage, size: int) -> str:
        path = self.inst_dir / ROOT_DISK
        images.create_overlay(base.path, base.format, path, size)
        return str(path)

    def blank_qcow2(self, size: int) -> str:
        path = self.inst_dir / EPHEMERAL_DISK
        images.create_blank_qcow2(path, size)
        return str(path)

    def swap(self, size_mb: int) -> str:
        path = self.inst_dir / SWAP_DISK
        images.create_swap(path, size_mb)
        return str(path)

    def config_drive(self, drive: ConfigDrive) -> str:
        path = self.inst_dir / CONFIG_DRIVE
        drive.write_iso(path)
        return str(path)

    def console_log(self) -> str:
        return str(self.inst_dir / CONSOLE_LOG)


class _RemoteDisks:
    """The same disks as volumes in the remote pool; each returns the path the remote daemon sees.

    Disks stay ``type='file'`` in the domain with the volume's remote path, so
    the domain XML is the same in both modes and formats stay explicit.
    """

    def __init__(self, remote: RemoteStorage, uuid: str) -> None:
        self.remote = remote
        self.uuid = uuid

    def _name(self, suffix: str) -> str:
        return instance_volume_name(self.uuid, suffix)

    def image_path(self, cached: CachedImage) -> str:
        return str(self.remote.ensure_base(cached).path())

    def overlay(self, base: CachedImage, size: int) -> str:
        base_path = self.image_path(base)
        config = StorageVolumeConfig(
            self._name(ROOT_DISK), size, "qcow2", backing_path=base_path, backing_format=base.format
        )
        return str(self.remote.create(config).path())

    def blank_qcow2(self, size: int) -> str:
        return str(self.remote.create(StorageVolumeConfig(self._name(EPHEMERAL_DISK), size, "qcow2")).path())

    def swap(self, size_mb: int) -> str:
        header = images.swap_header(size_mb)
        vol = self.remote.create(StorageVolumeConfig(self._name(SWAP_DISK), size_mb * 1024 * 1024, "raw"))
        self.remote.write_bytes(vol, header)
        return str(vol.path())

    def config_drive(self, drive: ConfigDrive) -> str:
        # Written locally (mode 0600, it holds user data) only for as long as the upload takes.
        with tempfile.TemporaryDirectory(prefix="novakit-cd-") as tmp:
            iso = Path(tmp) / CONFIG_DRIVE
            drive.write_iso(iso)
            return str(self.remote.upload_file(self._name(CONFIG_DRIVE), iso, "raw").path())

    def console_log(self) -> str:
        """A volume virtlogd appends the serial console to (append='on' in the domain).

        Chosen over virDomainOpenConsole: a log keeps the whole boot, whoever
        reads it and whenever, survives reboots, and leaves the console itself
        free for ``virsh console``; a console stream sees only what the guest
        prints while it is connected, and one client at a time.
        """
        vol = self.remote.create(StorageVolumeConfig(self._name(CONSOLE_LOG), len(CONSOLE_HEADER), "raw"))
        self.remote.write_bytes(vol, CONSOLE_HEADER)
        return str(vol.path())
