"""The libvirt ComputeDriver: QEMU guests on qemu:///system, qemu:///session or a remote daemon.

``LibvirtDriver`` is the public face: every operation of ``ComputeDriver`` is a method here,
which finds the guest, turns libvirt's errors into novakit's and hands the work to the module
of its noun: ``guest`` (power operations on one domain), ``guestconfig`` (the domain
definition of a new guest), ``disks`` (an instance's own disks and console log),
``volumes`` and ``lvm`` (the volume pool), ``storage`` (the pool of a remote daemon),
``unmanaged`` (guests novakit did not create), ``vif`` (NICs and DHCP host entries),
``interfaces`` (a port's NIC hot-plugged into a built guest and out again),
``snapshots``, ``rescue``, ``migration`` (cold moves and resize), ``live_migration``, and
``handover`` (an instance's files passed between two daemons). A new operation follows the
same shape: a method here, its work in a module of its own.

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
``shared_storage``    whether the paths above mean the same files to the daemon (default: true on
                      a local URI, false on a remote one); false on a local URI for a daemon that
                      cannot use this process's files (another user's session daemon, by its socket)
``remote_pool``       on a remote daemon without shared storage: the libvirt ``dir`` storage pool
                      that holds every disk (default ``novakit``; created when missing)
``remote_pool_path``  the remote directory of that pool when novakit creates it (default
                      /var/lib/novakit/pool on system URIs; required on session URIs, whose
                      directory is in the remote user's home)
``reboot_timeout``    seconds a soft reboot waits for the guest before resetting it (default 60)
``volume_pool``       the libvirt storage pool of this host's volumes (default ``novakit-volumes``)
``volume_pool_path``  the directory of that ``dir`` pool when novakit creates it (default
                      /var/lib/novakit/volumes; under ~/.local/share/novakit on session URIs)
``volume_group``      an existing LVM volume group: volumes become its LVs, in a ``logical``
                      pool (``lvm``); novakit never creates, formats or removes the group
``migration_uri``     how the other host of a move reaches this host's daemon (default ``uri``,
                      right when every host's driver runs in one process: libvirt URI transport)
``live_migration_inbound_addr``  the address QEMU here takes live migrations on (default the
                      host of ``migration_uri``, else 127.0.0.1)

Every instance owns one directory, ``<instances_path>/<uuid>``; spawn either
ends with a running domain or removes the domain and that directory again,
and destroy removes both.

On a remote daemon (``qemu+ssh://``...) without ``shared_storage`` the same
disks are volumes in a storage pool on the remote host, made and filled
through the libvirt connection (``storage.RemoteStorage``); the image cache
stays local and verifies each image before its one upload. There an instance
owns every volume named ``<uuid>.*`` instead of a directory.

A guest novakit did not create (a brownfield import, ``novakit.fleet.importer``)
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
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from novakit import exceptions
from novakit.host.messages import (
    FlavorSpec,
    HostResources,
    ImageSpec,
    InstanceSpec,
    NetworkSpec,
    PortFilterSpec,
    UnmanagedGuest,
    VolumeSpec,
)
from novakit.host.power import PowerState
from novakit.network.filter_rules import FilterRule, rules_from_json
from novakit.virt.driver import ComputeDriver, InstanceInfo
from novakit.virt.libvirt import config as vconfig
from novakit.virt.libvirt import (
    handover,
    interfaces,
    live_migration,
    migration,
    nwfilter,
    rescue,
    snapshots,
    unmanaged,
    vif,
)
from novakit.virt.libvirt.disks import INSTANCE_FILES, HostDisks, LocalDisks, RemoteDisks, valid_uuid
from novakit.virt.libvirt.guest import Guest, undefine
from novakit.virt.libvirt.guestconfig import GuestConfigBuilder, parse_networks
from novakit.virt.libvirt.host import Host, bridge_names, is_remote_uri, is_session_uri
from novakit.virt.libvirt.imagecache import ImageCache
from novakit.virt.libvirt.storage import DEFAULT_POOL, RemoteStorage, default_pool_path
from novakit.virt.libvirt.volumes import DEFAULT_VOLUME_POOL, VolumePool

GiB = 1024**3


class LibvirtDriver(ComputeDriver):
    hypervisor_type = "QEMU"
    # The admin password hash goes into the config drive's cloud-init user data (``configdrive``).
    capabilities = {**ComputeDriver.capabilities, "supports_admin_password": True}

    def __init__(self, host: str, options: dict[str, Any] | None = None) -> None:
        super().__init__(host, options)
        self.uri = str(self.options.get("uri") or "qemu:///system")
        self._host = Host(host, self.uri)
        self.libvirt = self._host.libvirt
        session = is_session_uri(self.uri)
        # Network filters live in the system daemon only: a session daemon has none.
        self.capabilities = {**self.capabilities, "supports_port_filter": not session}
        if session:
            data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
            default_root = Path(data_home) / "novakit"
        else:
            default_root = Path("/var/lib/novakit")
        self.instances_path = Path(self.options.get("instances_path") or default_root / "instances")
        self.image_cache_path = Path(self.options.get("image_cache_path") or self.instances_path / "_base")
        self.image_store = Path(self.options.get("image_store") or default_root / "images")
        self.image_cache = ImageCache(self.image_cache_path, self.image_store)
        self.reboot_timeout = float(self.options.get("reboot_timeout", 60))
        shared = self.options.get("shared_storage")
        self.files_are_local = not is_remote_uri(self.uri) if shared is None else _true(shared)
        self.migration_uri = str(self.options.get("migration_uri") or self.uri)
        self.live_migration_inbound_addr = str(
            self.options.get("live_migration_inbound_addr")
            or live_migration.default_inbound_address(self.migration_uri)
        )
        self.volume_pool = VolumePool(
            self.libvirt,
            self._conn,
            str(self.options.get("volume_pool") or DEFAULT_VOLUME_POOL),
            Path(self.options.get("volume_pool_path") or default_root / "volumes"),
            work_dir=self.image_cache_path,
            volume_group=str(self.options["volume_group"]) if self.options.get("volume_group") else None,
            host=host,
        )
        self.guest_config = GuestConfigBuilder(
            self.image_cache,
            self.volume_pool,
            domain_type=str(self.options.get("domain_type") or "qemu"),
            emulator=self.options.get("emulator") or None,
            default_networks=parse_networks(self.options.get("network")),
            port_filters=self.port_filter_mode() == "enforced",
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
        uuid = valid_uuid(instance.uuid)
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

    def _new_instance_uuid(self, instance: InstanceSpec) -> str:
        """The uuid of an instance about to get a guest here (spawn, a move's destination)."""
        uuid = valid_uuid(instance.uuid)
        if uuid is None:
            raise exceptions.BuildAbortError(
                instance_uuid=instance.uuid, reason="the instance uuid is not a UUID"
            )
        if self._lookup(uuid) is not None:
            # Not rescheduled: another host would make a second copy of one instance.
            raise exceptions.BuildAbortError(
                instance_uuid=uuid, reason=f"a domain for this instance already exists on {self.host}"
            )
        return uuid

    def _fresh_place(self, uuid: str) -> Path:
        """An empty directory (or no volume) for a new guest of ``uuid``; its directory."""
        inst_dir = self._instance_dir(uuid)
        if self.remote is None:
            # A directory without a domain is what a crashed spawn leaves; nobody else uses it.
            shutil.rmtree(inst_dir, ignore_errors=True)
            inst_dir.mkdir(parents=True, mode=0o755)
        else:
            # Likewise volumes of this uuid without a domain.
            self._remove_remote_volumes(uuid)
        return inst_dir

    def _maker(self, uuid: str) -> HostDisks:
        """The instance's own disks and files, where this host keeps them."""
        if self.remote is None:
            return LocalDisks(self._instance_dir(uuid))
        return RemoteDisks(self.remote, uuid)

    def _handover_pool(self, uuid: str) -> str:
        """The pool in which another host's driver finds this instance's files (``handover``)."""
        if self.remote is not None:
            return self.remote.pool().name()  # type: ignore[no-any-return]
        return handover.expose_dir(self.libvirt, self._conn(), uuid, self._instance_dir(uuid))

    def _close_handover_pool(self, uuid: str) -> None:
        if self.remote is None:
            handover.close_dir(self.libvirt, self._conn(), uuid)

    # --- host -----------------------------------------------------------------

    def init_host(self) -> None:
        self._conn()
        # First: a volume group that is not there is a configuration error, and nothing is made.
        self.volume_pool.init_host()
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
        if self.volume_pool.logical:
            # Volumes take their DISK_GB from the volume group, not from the disks above.
            try:
                in_volumes, free = self.volume_pool.space()
            except self.libvirt.libvirtError as exc:
                reason = exc.get_error_message()
                raise exceptions.HypervisorUnavailable(host=self.host, reason=reason) from None
            local_gb += (in_volumes + free) // GiB
            local_gb_used += in_volumes // GiB
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
            security_groups=self.port_filter_mode(),  # type: ignore[arg-type]
        )

    # --- spawn and destroy ----------------------------------------------------

    def spawn(self, instance: InstanceSpec) -> None:
        uuid = self._new_instance_uuid(instance)
        try:
            self._fresh_place(uuid)
            guest_config = self._prepare_guest(instance)
            vif.plug_vifs(self._host, instance)
            self._define_port_filters(instance)
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

    def _prepare_guest(self, instance: InstanceSpec) -> vconfig.LibvirtConfigGuest:
        """Make every file the guest needs and return its domain definition (``guestconfig``)."""
        return self.guest_config.build(instance, self._maker(instance.uuid))

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
                undefine(lv, dom)
            except lv.libvirtError as exc:
                if exc.get_error_code() != lv.VIR_ERR_NO_DOMAIN:
                    errors.append(exc.get_error_message())
        if self.remote is None:
            try:
                self._close_handover_pool(uuid)  # a move's, if one was under way
            except lv.libvirtError as exc:
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
            errors = self.remote.delete_instance_volumes(uuid, INSTANCE_FILES)
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

    # --- security groups (``nwfilter``): one network filter per port -----------------

    def _define_port_filters(self, instance: InstanceSpec) -> None:
        """Before the guest is defined: the filters its NICs reference (``GuestInterface.filter``)."""
        if self.port_filter_mode() != "enforced":
            return
        for nic in instance.networks:
            if nic.port_id and nic.filter_rules is not None:
                spec = PortFilterSpec(port_id=nic.port_id, instance_uuid=instance.uuid, mac=nic.mac)
                self.apply_port_filter(spec, rules_from_json(nic.filter_rules))

    def apply_port_filter(self, port: PortFilterSpec, rules: list[FilterRule]) -> None:
        conn = self._conn()
        name = nwfilter.filter_name(port.port_id)
        lv = self.libvirt
        try:
            try:
                uuid: str | None = conn.nwfilterLookupByName(name).UUIDString()
            except lv.libvirtError as exc:
                if exc.get_error_code() != lv.VIR_ERR_NO_NWFILTER:
                    raise
                uuid = None
            # On an existing filter, libvirt re-instantiates it on every running guest that uses it.
            conn.nwfilterDefineXML(nwfilter.build(port.port_id, rules, uuid))
        except lv.libvirtError as exc:
            raise exceptions.ComputeError(
                reason=f"network filter {name} on {self.host}: {exc.get_error_message()}"
            ) from None

    def remove_port_filter(self, port_id: str) -> None:
        lv = self.libvirt
        name = nwfilter.filter_name(port_id)
        try:
            self._conn().nwfilterLookupByName(name).undefine()
        except lv.libvirtError as exc:
            if exc.get_error_code() == lv.VIR_ERR_NO_NWFILTER:
                return
            if exc.get_error_code() == lv.VIR_ERR_OPERATION_INVALID:  # "nwfilter is in use"
                # A running guest's NIC still references it: the port is no longer filtered, so
                # its filter lets everything through (anti-spoofing stays) until the guest goes.
                self.apply_port_filter(PortFilterSpec(port_id=port_id), nwfilter.OPEN)
                return
            raise exceptions.ComputeError(
                reason=f"network filter {name} on {self.host}: {exc.get_error_message()}"
            ) from None

    def list_port_filters(self) -> dict[str, list[FilterRule]]:
        out: dict[str, list[FilterRule]] = {}
        try:
            for nwf in self._conn().listAllNWFilters(0):
                port = nwfilter.port_of(nwf.name())
                if port is not None:
                    out[port] = nwfilter.parse(nwf.XMLDesc(0))
        except self.libvirt.libvirtError as exc:
            raise exceptions.HypervisorUnavailable(host=self.host, reason=exc.get_error_message()) from None
        return out

    def destroy(self, instance: InstanceSpec) -> None:
        uuid = valid_uuid(instance.uuid)
        if uuid is None:
            return  # no such uuid can have a domain or a directory of novakit's
        self._remove_guest(uuid, instance)

    # --- volumes (``volumes.VolumePool``) ----------------------------------------

    def create_volume(self, volume: VolumeSpec) -> None:
        image = volume.image
        fetch = (lambda: self.guest_config.fetch_image(image, "image")) if image is not None else None
        self.volume_pool.create(volume, fetch)

    def delete_volume(self, volume: VolumeSpec) -> None:
        self.volume_pool.delete(volume)

    def attach_volume(self, instance: InstanceSpec, volume: VolumeSpec) -> None:
        self.volume_pool.attach(self._guest(instance).domain, volume)

    def detach_volume(self, instance: InstanceSpec, volume: VolumeSpec) -> None:
        guest = self._lookup(instance.uuid)
        if guest is not None:
            self.volume_pool.detach(guest.domain, volume)

    # --- interfaces (``interfaces``): a port's NIC on a built guest -------------------

    def _port_nic(
        self, instance: InstanceSpec, nic: NetworkSpec
    ) -> tuple[InstanceSpec, vconfig.GuestInterface]:
        """The instance with only this NIC, and the NIC as a spawn defines it (its filter too)."""
        one = instance.model_copy(update={"networks": [nic]})
        return one, self.guest_config.interfaces(one)[0]

    def attach_interface(self, instance: InstanceSpec, nic: NetworkSpec) -> None:
        one, iface = self._port_nic(instance, nic)
        with self._operation("attach an interface to", instance) as guest:
            if iface.mac and interfaces.has_mac(
                guest.domain, iface.mac, self.libvirt.VIR_DOMAIN_XML_INACTIVE
            ):
                return  # attached already
            # As a spawn: the DHCP host entry and the filter the NIC references, before the NIC.
            vif.plug_vifs(self._host, one)
            self._define_port_filters(one)
            try:
                interfaces.attach(self.libvirt, guest.domain, iface, nic.port_id or "")
            except BaseException:
                with contextlib.suppress(self.libvirt.libvirtError, exceptions.NovakitError):
                    vif.unplug_vifs(self._host, one, None)
                    if nic.port_id and self.port_filter_mode() == "enforced":
                        self.remove_port_filter(nic.port_id)
                raise

    def detach_interface(self, instance: InstanceSpec, nic: NetworkSpec) -> None:
        one, iface = self._port_nic(instance, nic)
        guest = self._lookup(instance.uuid)
        if guest is not None:
            try:
                interfaces.detach(self.libvirt, guest.domain, iface, nic.port_id or "")
            except self.libvirt.libvirtError as exc:
                raise self._compute_error("detach an interface from", instance.uuid, exc) from None
        vif.unplug_vifs(self._host, one, None)
        if nic.port_id and self.port_filter_mode() == "enforced":
            self.remove_port_filter(nic.port_id)

    # --- power ----------------------------------------------------------------

    def power_off(self, instance: InstanceSpec, timeout: float = 60, retry_interval: float = 5) -> None:
        with self._operation("power off", instance) as guest:
            guest.power_off(timeout, retry_interval)

    def power_on(self, instance: InstanceSpec) -> None:
        with self._operation("power on", instance) as guest:
            guest.power_on()

    def reboot(self, instance: InstanceSpec, reboot_type: str = "SOFT") -> None:
        with self._operation("reboot", instance) as guest:
            guest.reboot(soft=reboot_type.upper() == "SOFT", timeout=self.reboot_timeout)

    def change_power(self, instance: InstanceSpec, action: str) -> None:
        with self._operation(action, instance) as guest:
            guest.change_power(action)

    # --- looking ----------------------------------------------------------------

    def get_info(self, instance: InstanceSpec) -> InstanceInfo:
        with self._operation("get info of", instance) as guest:
            return InstanceInfo(
                state=guest.get_power_state(),
                internal_id=guest.domain.name(),
                volumes=self.volume_pool.volume_ids(guest.domain),
            )

    def host_boot_id(self) -> str | None:
        """The kernel's boot id where the daemon is this machine's (the driver runs on its
        host, as the compute task does); None for a daemon reached over the network."""
        if is_remote_uri(self.uri):
            return None
        try:
            return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
        except OSError:
            return None

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
                unmanaged.describe(self.libvirt, dom)
                for dom in self._conn().listAllDomains(0)
                if self._owned_uuid(dom) is None
            ]
        except self.libvirt.libvirtError as exc:
            raise exceptions.HypervisorUnavailable(host=self.host, reason=exc.get_error_message()) from None
        return sorted(found, key=lambda g: g.name)

    def adopt(self, instance: InstanceSpec) -> None:
        uuid = valid_uuid(instance.uuid)
        dom = self._lookup_by_uuid(uuid) if uuid else None
        if dom is None:
            raise exceptions.InstanceNotFound(instance_id=instance.uuid)
        if self._owned_uuid(dom) is not None:
            return
        try:
            unmanaged.write_metadata(self.libvirt, dom, instance)
        except self.libvirt.libvirtError as exc:
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
        uuid = self._guest(instance).uuid
        if self.remote is not None:
            data = self._remote_call("read console log from", lambda r: RemoteDisks(r, uuid).console_tail())
        else:
            data = LocalDisks(self._instance_dir(uuid)).console_tail()
        return bytes(data).decode("utf-8", errors="replace")

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

    # --- images of a server, rescue (``snapshots``, ``rescue``) ---------------------------------

    def snapshot(self, instance: InstanceSpec, image_id: str) -> dict[str, Any]:
        return snapshots.snapshot(self, instance, image_id)

    def delete_image(self, image: ImageSpec) -> None:
        snapshots.delete_image(self, image)

    def rescue(self, instance: InstanceSpec, rescue_image: ImageSpec) -> None:
        rescue.rescue(self, instance, rescue_image)

    def unrescue(self, instance: InstanceSpec) -> None:
        rescue.unrescue(self, instance)

    # --- moves (``migration``, ``live_migration``) --------------------------------------------

    def migrate_disk_and_power_off(
        self, instance: InstanceSpec, dest_host: str, flavor: FlavorSpec
    ) -> dict[str, Any]:
        return migration.migrate_disk_and_power_off(self, instance, dest_host, flavor)

    def finish_migration(self, instance: InstanceSpec, disk_info: dict[str, Any], power_on: bool) -> None:
        self._define_port_filters(instance)  # before the guest's NICs reference them here
        migration.finish_migration(self, instance, disk_info, power_on)

    def confirm_migration(self, instance: InstanceSpec) -> None:
        migration.confirm_migration(self, instance)

    def finish_revert_migration(self, instance: InstanceSpec, power_on: bool) -> None:
        migration.finish_revert_migration(self, instance, power_on)

    def pre_live_migration(self, instance: InstanceSpec) -> dict[str, Any]:
        self._define_port_filters(instance)  # the incoming guest's NICs reference them
        return live_migration.pre_live_migration(self, instance)

    def live_migration(
        self, instance: InstanceSpec, dest_host: str, dest_info: dict[str, Any]
    ) -> dict[str, Any]:
        return live_migration.live_migration(self, instance, dest_host, dest_info)

    def abort_live_migration(self, instance: InstanceSpec) -> None:
        """``virDomainAbortJob`` on the guest: its ``migrate3`` (``live_migration``, running in
        another thread or process) fails, and libvirt keeps the guest running here. A guest that
        is gone (the migration ended) or has no job now is left alone, as Nova's abort is."""
        uuid = valid_uuid(instance.uuid)
        guest = self._lookup(uuid) if uuid else None
        if guest is None:
            return
        try:
            guest.domain.abortJob()
        except self.libvirt.libvirtError as exc:
            lv = self.libvirt
            if exc.get_error_code() in (lv.VIR_ERR_OPERATION_INVALID, lv.VIR_ERR_NO_DOMAIN):
                return  # "no job is active on the domain": the migration ended meanwhile
            raise self._compute_error("abort the live migration of", instance.uuid, exc) from None

    def post_live_migration_at_destination(self, instance: InstanceSpec, handed: dict[str, Any]) -> None:
        live_migration.post_live_migration_at_destination(self, instance)

    def rollback_live_migration_at_destination(self, instance: InstanceSpec) -> None:
        live_migration.rollback_live_migration_at_destination(self, instance)


def _true(value: Any) -> bool:
    """An option's truth; options may come as text (``novakit host register --option k=v``)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _error_text(exc: Exception) -> str:
    if isinstance(exc, exceptions.NovakitError):
        return exc.format_message()
    return str(exc.get_error_message()) if hasattr(exc, "get_error_message") else str(exc)
