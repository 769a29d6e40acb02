"""The hypervisor driver interface: what a compute host can do to a guest.

A driver works on one host and never touches the database; everything it
needs arrives in an ``InstanceSpec``. Errors tell the conductor what to do
next: ``RescheduledError`` means "this host failed, another may succeed",
``BuildAbortError`` means "no host would do better" (a bad image, a bad
request). Any other exception is an internal error and is rescheduled.

Drivers are registered by name in ``DRIVERS`` and built with ``load_driver``;
an unknown name fails at once with the list of known names.

What a driver can do beyond the base contract is in ``capabilities`` (Nova's
driver capabilities); each is reported as a placement trait
(``CAPABILITY_TRAITS``), so that the API refuses, and the scheduler steers
around, what no host or not this host can do.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
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
from novakit.network.filter_rules import FilterRule


@dataclass(frozen=True)
class InstanceInfo:
    """A guest as the hypervisor sees it."""

    state: PowerState
    internal_id: str | None = None
    # The ids of the volumes in the guest's definition (what heal settles an interrupted attach
    # or detach by); None: this driver cannot tell.
    volumes: tuple[str, ...] | None = None


#: capability -> the trait a host whose driver has it carries on its resource provider
CAPABILITY_TRAITS: dict[str, str] = {
    # spawn hands ``InstanceSpec.admin_password_hash`` to the guest (through the config drive)
    "supports_admin_password": "CUSTOM_ADMIN_PASSWORD",
}


@dataclass(frozen=True)
class PowerChange:
    """A power change that keeps the guest's memory: the state it ends in (a guest there already
    is left as it is, so a retry succeeds) and the states it starts from. From any other state it
    fails: InstanceNotRunning when ``not_running``, else a 409 naming the state it needs."""

    target: PowerState
    sources: tuple[PowerState, ...]
    not_running: bool


POWER_CHANGES: dict[str, PowerChange] = {
    "pause": PowerChange(PowerState.PAUSED, (PowerState.RUNNING,), not_running=True),
    "unpause": PowerChange(PowerState.RUNNING, (PowerState.PAUSED,), not_running=False),
    "suspend": PowerChange(PowerState.SUSPENDED, (PowerState.RUNNING, PowerState.PAUSED), not_running=True),
    "resume": PowerChange(PowerState.RUNNING, (PowerState.SUSPENDED,), not_running=False),
}


def power_change_needed(action: str, instance_uuid: str, current: PowerState) -> bool:
    """Whether a driver must act for ``action`` on a guest in ``current``: False when the guest
    is at the target already, True from a state the action starts from, its error otherwise."""
    change = POWER_CHANGES[action]
    if current == change.target:
        return False
    if current in change.sources:
        return True
    if change.not_running:
        raise exceptions.InstanceNotRunning(instance_uuid=instance_uuid)
    needed = change.sources[0]
    raise exceptions.ComputeError(
        reason=f"cannot {action} instance {instance_uuid}: its guest is {current.name}, not {needed.name}",
        code=409,
    )


def _power_change(action: str) -> Callable[[ComputeDriver, InstanceSpec], None]:
    def method(self: ComputeDriver, instance: InstanceSpec) -> None:
        self.change_power(instance, action)

    method.__name__ = method.__qualname__ = action
    method.__doc__ = (
        f"``change_power(instance, {action!r})``: the guest ends {POWER_CHANGES[action].target.name}."
    )
    return method


class ComputeDriver:
    """Base class. Subclasses implement every method that raises NotImplementedError."""

    #: shown in host listings and used by ImagePropertiesFilter
    hypervisor_type = "unknown"

    #: what this driver can do (keys of ``CAPABILITY_TRAITS``); a driver that has one says so
    capabilities: dict[str, bool] = {"supports_admin_password": False, "supports_port_filter": False}

    def __init__(self, host: str, options: dict[str, Any] | None = None) -> None:
        self.host = host
        self.options = dict(options or {})

    def capability_traits(self) -> list[str]:
        """The traits of this driver's capabilities, for ``HostResources.traits``."""
        return sorted(t for c, t in CAPABILITY_TRAITS.items() if self.capabilities.get(c))

    def check_instance_supported(self, instance: InstanceSpec) -> None:
        """Raise BuildAbortError if this driver cannot build ``instance`` as asked.

        The API refuses such requests before anything is written; this is the host's
        own word, for a request that reached it anyway (a host re-registered with another
        driver since). An admin password is delivered through the config drive only:
        without one, or without the capability, it would be silently dropped.
        """
        filtered = [n.port_id or n.source for n in instance.networks if n.filter_rules is not None]
        if filtered and self.port_filter_mode() == "unsupported":
            raise exceptions.BuildAbortError(
                instance_uuid=instance.uuid,
                reason=(
                    f"security_groups: the {self.hypervisor_type} driver of host {self.host} cannot "
                    f"filter ports ({', '.join(filtered)}); mark the host security_groups: none to run "
                    "servers there unfiltered"
                ),
            )
        if instance.admin_password_hash is None:
            return
        if not self.capabilities.get("supports_admin_password"):
            reason = f"admin_password: the {self.hypervisor_type} driver of host {self.host} cannot set it"
        elif not instance.config_drive:
            reason = "admin_password: it reaches the guest only through the config drive (config_drive: true)"
        else:
            return
        raise exceptions.BuildAbortError(instance_uuid=instance.uuid, reason=reason)

    def port_filter_mode(self) -> str:
        """Security groups on this host: ``enforced`` (the driver filters ports), ``none`` (the
        operator set the driver option ``security_groups: none``: it runs servers unfiltered,
        knowingly) or ``unsupported`` (the driver cannot filter). Reported in
        ``HostResources.security_groups``; the scheduler's ``SecurityGroupFilter`` reads it."""
        if str(self.options.get("security_groups", "")).lower() == "none":
            return "none"
        return "enforced" if self.capabilities.get("supports_port_filter") else "unsupported"

    def init_host(self) -> None:
        """Prepare the host (connect, create directories). Safe to call again."""

    def lock_dir(self) -> Path:
        """A directory for lock files shared by every process that drives this host here
        (the compute manager's build slots). Default: ``$XDG_STATE_HOME/novakit/locks``."""
        state_home = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
        return Path(state_home) / "novakit" / "locks"

    def get_available_resource(self) -> HostResources:
        """The host's total resources and the images its cache holds."""
        raise NotImplementedError

    def spawn(self, instance: InstanceSpec) -> None:
        """Create and start the guest.

        Post-condition: on return the guest is running, and has been handed its admin
        password hash if the spec has one (only a driver with ``supports_admin_password``
        is given one; the compute manager checks ``check_instance_supported`` first).
        If spawn raises, nothing is left behind: no domain, disk, config drive or log.
        """
        raise NotImplementedError

    def destroy(self, instance: InstanceSpec) -> None:
        """Stop the guest at once and remove it and every file it owns.

        Idempotent: destroying a guest that does not exist succeeds.
        """
        raise NotImplementedError

    def power_off(self, instance: InstanceSpec, timeout: float = 60, retry_interval: float = 5) -> None:
        """Ask the guest to shut down; after ``timeout`` seconds, force it off.

        Post-condition: get_info(instance).state is SHUTDOWN.
        """
        raise NotImplementedError

    def power_on(self, instance: InstanceSpec) -> None:
        """Post-condition: the guest is RUNNING."""
        raise NotImplementedError

    def reboot(self, instance: InstanceSpec, reboot_type: str = "SOFT") -> None:
        """SOFT asks the guest (falling back to HARD if it does not come back); HARD resets it.

        Post-condition: the guest is RUNNING.
        """
        raise NotImplementedError

    def change_power(self, instance: InstanceSpec, action: str) -> None:
        """Pause, unpause, suspend or resume the guest: ``POWER_CHANGES[action]``, decided by
        ``power_change_needed``. Post-condition: the guest is in the action's ``target`` state.

        pause: PAUSED (vCPUs stopped, memory kept); unpause: RUNNING; suspend: the guest's memory
        saved to disk, SUSPENDED (libvirt: managed save); resume: RUNNING from its saved memory.
        """
        raise NotImplementedError

    # The host's calls (the state table's ``host_call``), one per row of POWER_CHANGES.
    pause = _power_change("pause")
    unpause = _power_change("unpause")
    suspend = _power_change("suspend")
    resume = _power_change("resume")

    def get_info(self, instance: InstanceSpec) -> InstanceInfo:
        """Raises InstanceNotFound if the hypervisor has no such guest."""
        raise NotImplementedError

    def list_instances(self) -> dict[str, PowerState]:
        """Every guest novakit owns on this host: instance uuid -> power state."""
        raise NotImplementedError

    def host_boot_id(self) -> str | None:
        """What changes each time the host boots (Linux's ``/proc/sys/kernel/random/boot_id``),
        or None where the driver cannot tell. Heal compares it with the last one it saw: a
        host that booted since is one whose guests Nova's ``resume_guests_state_on_host_boot``
        brings back."""
        return None

    def list_unmanaged(self) -> list[UnmanagedGuest]:
        """Every guest on this host that novakit does not own (``list_instances`` leaves it out):
        what a brownfield import reads. Nothing is changed on the host."""
        raise NotImplementedError

    def adopt(self, instance: InstanceSpec) -> None:
        """Make the unmanaged guest whose uuid is ``instance.uuid`` this instance's guest.

        Post-condition: ``list_instances`` lists it and every operation on ``instance``
        finds it; ``list_unmanaged`` no longer does. Its power state, disks and devices
        are left as they are. Idempotent for a guest already adopted; raises
        InstanceNotFound when the host has no such guest (it was removed meanwhile).
        """
        raise NotImplementedError

    def get_interface_addresses(self, instance: InstanceSpec) -> list[str]:
        """The guest's IP addresses as far as the host can tell; may be empty."""
        return []

    def get_console_output(self, instance: InstanceSpec) -> str:
        """The guest's serial console log so far."""
        raise NotImplementedError

    def cache_image(self, image: ImageSpec) -> None:
        """Fetch ``image`` into this host's image cache ahead of any build (Nova's pre-caching).

        Post-condition: the image id is listed in get_available_resource().cached_images.
        Idempotent; raises InvalidImage / ImageNotFound, leaving the cache as it was, when the
        image cannot be used.
        """
        raise NotImplementedError

    # --- security groups (``novakit.network.filter_rules``): one filter per port ---------------

    def apply_port_filter(self, port: PortFilterSpec, rules: list[FilterRule]) -> None:
        """Make the port's filter allow exactly ``rules`` (and replies to allowed traffic), live:
        a running guest's NIC is filtered by the new rules on return, without a reboot.

        Only called when ``port_filter_mode()`` is ``enforced``. Idempotent. A port whose guest
        is not here yet gets its filter ready for the guest's NIC.
        """
        raise NotImplementedError

    def remove_port_filter(self, port_id: str) -> None:
        """Remove the port's filter (its port was deleted, or it left every group). Idempotent: no
        filter succeeds. A filter a running guest's NIC still references cannot go: it then
        allows everything instead (the port is no longer filtered) until the guest goes."""
        raise NotImplementedError

    def list_port_filters(self) -> dict[str, list[FilterRule]]:
        """Every port filter novakit made on this host: port id -> its rules as the host holds
        them (what heal compares with the records). Only called when filtering is ``enforced``."""
        raise NotImplementedError

    # --- volumes (``novakit.volume``): disks in the host's storage pool -------------------

    def create_volume(self, volume: VolumeSpec) -> None:
        """Make the volume in its pool: empty, or holding ``volume.image``'s contents.

        Post-condition: the volume exists with ``size_gb`` GiB. If this raises, no volume is
        left behind. Idempotent for a volume that already exists with that size.
        """
        raise NotImplementedError

    def delete_volume(self, volume: VolumeSpec) -> None:
        """Remove the volume and its data. Idempotent: a volume that is gone succeeds."""
        raise NotImplementedError

    def attach_volume(self, instance: InstanceSpec, volume: VolumeSpec) -> None:
        """Attach the volume as ``volume.device_name``: hot-plugged into a running guest and
        kept in its definition, so it stays after a stop/start; only in the definition of a
        stopped one. If this raises, the guest is as it was."""
        raise NotImplementedError

    def detach_volume(self, instance: InstanceSpec, volume: VolumeSpec) -> None:
        """Detach the volume from the guest (running or stopped), leaving its data as it is.
        Idempotent: a volume that is not attached succeeds."""
        raise NotImplementedError

    # --- interfaces (``novakit.compute.interfaces``): a port's NIC on a built guest ----------

    def attach_interface(self, instance: InstanceSpec, nic: NetworkSpec) -> None:
        """Add the port's NIC (``nic``: its network, MAC, fixed IPs, filter rules) to the guest:
        hot-plugged into a running one and kept in its definition, so it stays after a
        stop/start; only in the definition of a stopped one. Its filter (security groups) is
        defined first, as a spawn's. Idempotent: a NIC of that MAC already there succeeds. If
        this raises, the guest is as it was."""
        raise NotImplementedError

    def detach_interface(self, instance: InstanceSpec, nic: NetworkSpec) -> None:
        """Remove the port's NIC from the guest (running or stopped) and the port's filter from
        the host. Idempotent: a NIC that is not there (or a guest that is gone) succeeds."""
        raise NotImplementedError

    # --- moves (novakit.moves) ------------------------------------------------------------

    def migrate_disk_and_power_off(
        self, instance: InstanceSpec, dest_host: str, flavor: FlavorSpec
    ) -> dict[str, Any]:
        """On the source of a move: power the guest off and hand its disks over for ``dest_host``,
        which will run it with ``flavor``. Returns what the destination's ``finish_migration``
        needs (it travels through the controller).

        Post-condition: the guest no longer runs here, and everything needed to bring it back
        here (``finish_revert_migration``) is kept until ``confirm_migration``. If this raises,
        the guest is as it was (running if it ran).
        """
        raise NotImplementedError

    def finish_migration(self, instance: InstanceSpec, disk_info: dict[str, Any], power_on: bool) -> None:
        """On the destination: bring ``instance`` up, with the flavor of its spec, from what the
        source handed over; running if ``power_on``, else defined and shut off.
        If this raises, nothing of it is left here."""
        raise NotImplementedError

    def confirm_migration(self, instance: InstanceSpec) -> None:
        """On the source, once the move is confirmed: remove what was kept for a revert.
        Idempotent: nothing kept succeeds."""
        raise NotImplementedError

    def finish_revert_migration(self, instance: InstanceSpec, power_on: bool) -> None:
        """On the source, when a move is reverted or rolled back: the guest as it was before the
        move, running if ``power_on``. Idempotent: a guest already back succeeds."""
        raise NotImplementedError

    def pre_live_migration(self, instance: InstanceSpec) -> dict[str, Any]:
        """On the destination of a live migration, before it: make ready what the guest needs
        here (its disks' places, its networks). Returns what the source needs to know of this
        host (``dest_info``). If this raises, nothing is left here."""
        raise NotImplementedError

    def live_migration(
        self, instance: InstanceSpec, dest_host: str, dest_info: dict[str, Any]
    ) -> dict[str, Any]:
        """On the source: move the running (or paused) guest to ``dest_host`` without stopping
        it, its disks copied when storage is not shared. Returns what the destination's
        ``post_live_migration_at_destination`` needs. Post-condition on success: the guest runs
        there and nothing of it is left here; if this raises, the guest still runs here."""
        raise NotImplementedError

    def abort_live_migration(self, instance: InstanceSpec) -> None:
        """On the source, from another thread or process than ``live_migration``'s: stop the
        live migration of ``instance`` that runs now (Nova's ``live_migration_abort``). That
        ``live_migration`` then raises, the guest still running here. No migration running (it
        just ended) is not an error: nothing is done."""
        raise NotImplementedError

    def post_live_migration_at_destination(self, instance: InstanceSpec, handed: dict[str, Any]) -> None:
        """On the destination, once the guest runs here: make it this host's for good (its
        persistent definition)."""
        raise NotImplementedError

    def rollback_live_migration_at_destination(self, instance: InstanceSpec) -> None:
        """On the destination of a live migration that failed: remove what ``pre_live_migration``
        made. Idempotent."""
        raise NotImplementedError

    # --- images of a server, rescue ----------------------------------------------------------

    def snapshot(self, instance: InstanceSpec, image_id: str) -> dict[str, Any]:
        """Write the guest's root disk, as it is now, into this host's image store as a new image
        file named for ``image_id``: returns ``location``, ``checksum`` (sha256), ``size`` and
        ``disk_format``. A running guest is paused for the copy and resumed (its disk is
        consistent; Nova quiesces it through the guest agent where it can). If this raises,
        no file is left and the guest is as it was."""
        raise NotImplementedError

    def delete_image(self, image: ImageSpec) -> None:
        """Remove an image file this host wrote (``snapshot``). Idempotent."""
        raise NotImplementedError

    def rescue(self, instance: InstanceSpec, rescue_image: ImageSpec) -> None:
        """Boot the guest from ``rescue_image`` with its own root disk attached as a second disk,
        its definition kept for ``unrescue``. If this raises, the guest is as it was."""
        raise NotImplementedError

    def unrescue(self, instance: InstanceSpec) -> None:
        """Leave rescue: the guest runs from its own root disk again, the rescue disk is gone."""
        raise NotImplementedError


DRIVERS: dict[str, str] = {
    "fake": "novakit.virt.fake:FakeDriver",
    "libvirt": "novakit.virt.libvirt.driver:LibvirtDriver",
}


def load_driver(name: str, host: str, options: dict[str, Any] | None = None) -> ComputeDriver:
    """Build the driver registered as ``name`` for ``host``."""
    try:
        target = DRIVERS[name]
    except KeyError:
        raise exceptions.ConfigError(
            option="compute_driver",
            reason=f"unknown driver {name!r}; known drivers: {', '.join(sorted(DRIVERS))}",
        ) from None
    module_name, _, cls_name = target.partition(":")
    module = importlib.import_module(module_name)
    cls = getattr(module, cls_name)
    driver: ComputeDriver = cls(host, options)
    return driver
