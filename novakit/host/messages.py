"""The JSON that crosses between the controller and a compute host.

These models are the whole contract of the compute side: the conductor sends a
``ComputeRequest`` and gets a ``ComputeResult`` back, whether the host is
reached in-process, over SSH (``python -m novakit.host``), or by the Ansible
``compute`` module. A compute host never sees the database, so everything it
needs to build an instance travels in ``InstanceSpec``.

Secrets (``admin_password_hash``, ``user_data``) are ``SecretStr``: they serialise
as ``**********`` unless the sender asks for them explicitly with
``to_wire()``, so they cannot leak through a log line or a repr. The admin
password itself never crosses: the API hashed it (``novakit.compute.passwords``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

Operation = Literal[
    "build",
    "destroy",
    "stop",
    "start",
    "reboot",
    "pause",
    "unpause",
    "suspend",
    "resume",
    "rebuild",
    "get_info",
    "list_instances",
    "get_available_resource",
    "console_output",
    # Brownfield import (``novakit.fleet.importer``): the guests novakit does not own, and
    # marking one as an instance's so that every later operation finds it.
    "list_unmanaged",
    "adopt",
    # Volumes (``novakit.volume``): made and removed in the host's storage pool, attached to
    # and detached from a guest (hot on a running one, in its definition on a stopped one).
    "volume_create",
    "volume_delete",
    "attach_volume",
    "detach_volume",
    # A port's NIC added to or removed from a built guest (``novakit.compute.interfaces``; the
    # state table's rows, whose options carry the NIC).
    "attach_interface",
    "detach_interface",
    # Moves (``novakit.moves``), Nova's driver calls: the source hands the guest's disks over
    # and powers it off, the destination brings it up; confirm clears what the source kept
    # for a revert, a revert brings it back there.
    "migrate_disk_and_power_off",
    "finish_migration",
    "confirm_migration",
    "revert_migration",
    "finish_revert_migration",
    "pre_live_migration",
    "live_migration",
    "post_live_migration_at_destination",
    "rollback_live_migration_at_destination",
    # Stop a live migration running from this host (``novakit.moves.abort``): run beside it, not
    # after it (the instance's lock is the migration's until it ends).
    "live_migration_abort",
    # Images of a server (``novakit.moves.snapshot``, ``novakit.moves.shelve``): its root disk
    # written into the host's image store (shelve powers it off first), a shelved guest removed
    # from its host, a snapshot file removed again; rescue boots a rescue image.
    "snapshot",
    "shelve",
    "shelve_offload",
    "image_delete",
    "rescue",
    "unrescue",
    # Security groups (``novakit.network.filter_sync``): each port's filter made what its rules
    # say (or removed), and the filters the host holds now, for heal to compare.
    "apply_port_filters",
    "list_port_filters",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FlavorSpec(_Model):
    name: str
    vcpus: int
    memory_mb: int
    root_gb: int
    ephemeral_gb: int = 0
    swap: int = 0  # MiB, as Nova's flavors
    extra_specs: dict[str, str] = Field(default_factory=dict)


class ImageSpec(_Model):
    id: str
    name: str = ""
    disk_format: str = "qcow2"
    container_format: str = "bare"
    # sha256 of the image file, checked by the host's image cache.
    checksum: str | None = None
    # A path on the compute host or a file:// URL.
    location: str = ""
    size: int = 0
    min_disk: int = 0
    min_ram: int = 0
    properties: dict[str, str] = Field(default_factory=dict)


class FixedIp(_Model):
    """One address of a port, with what the guest needs to configure it statically."""

    address: str
    cidr: str  # the subnet's, e.g. "10.0.0.0/24"
    gateway: str | None = None
    dns_nameservers: list[str] = Field(default_factory=list)


class NetworkSpec(_Model):
    # "network": a libvirt network by name; "bridge": a host bridge;
    # "user": QEMU user-mode networking (session connections).
    type: Literal["network", "bridge", "user"] = "user"
    source: str = ""
    mac: str | None = None
    # A port of a novakit network (``novakit.network``): its id and fixed IPs, chosen by the
    # controller before the build. The guest learns them from the config drive's
    # network-config; on a libvirt network the host adds a DHCP host entry (MAC -> IP) too.
    port_id: str | None = None
    fixed_ips: list[FixedIp] = Field(default_factory=list)
    # The port's effective security-group rules (``novakit.network.filter_rules.FilterRule`` as
    # JSON), read from the records when the request is made; None: the port is not filtered.
    filter_rules: list[dict[str, Any]] | None = None


class PortFilterSpec(_Model):
    """One port's filter as ``apply_port_filters`` sets it on the host that runs the port."""

    port_id: str
    instance_uuid: str | None = None
    mac: str | None = None
    # FilterRule JSON; None: the port has no filter any more (its port was deleted, or it left
    # every group), so the host removes it.
    rules: list[dict[str, Any]] | None = None


class VolumeSpec(_Model):
    """A volume as its host needs it: where it lives, and where it goes in a guest."""

    id: str
    name: str = ""
    size_gb: int
    format: Literal["qcow2", "raw"] = "qcow2"
    pool: str = "novakit-volumes"
    # Made from this image (a bootable volume); None: an empty disk.
    image: ImageSpec | None = None
    # In a guest: the target device (vdb, ...) and 0 for the root disk of a server booted from it.
    device_name: str | None = None
    boot_index: int | None = None


class InstanceSpec(_Model):
    """What a host needs to build or act on one instance."""

    uuid: str
    name: str
    hostname: str
    project_id: str
    user_id: str
    flavor: FlavorSpec
    image: ImageSpec
    kernel: ImageSpec | None = None
    ramdisk: ImageSpec | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    user_data: SecretStr | None = None  # base64, as the API received it
    # The admin (root) password as a SHA-512 crypt hash ($6$...), for the config drive.
    admin_password_hash: SecretStr | None = None
    # The key pair it was booted (or rebuilt) with: its name and public key, for the config
    # drive's ``public_keys`` and cloud-config's ``ssh_authorized_keys`` (``novakit.keypairs``).
    key_name: str | None = None
    key_data: str | None = None
    config_drive: bool = True
    networks: list[NetworkSpec] = Field(default_factory=list)
    # Attached volumes; the one with boot_index 0 is the root disk instead of an image overlay.
    volumes: list[VolumeSpec] = Field(default_factory=list)
    # power state the instance should end in after a rebuild (stopped stays stopped)
    preserve_power_off: bool = False

    def to_wire(self) -> dict[str, Any]:
        """Serialise for the compute host, secrets included (never for logs)."""
        data = self.model_dump(mode="json")
        data["user_data"] = self.user_data.get_secret_value() if self.user_data else None
        data["admin_password_hash"] = (
            self.admin_password_hash.get_secret_value() if self.admin_password_hash else None
        )
        return data


class ComputeRequest(_Model):
    request_id: str
    host: str
    # One of ``Operation``, or the operation of an action the state table holds (its row's
    # ``operation`` and ``host_call``: a row added at run time brings its own).
    operation: Operation | str
    # The state table's action the request carries out (``reboot_hard`` for a hard reboot's
    # ``reboot``): what the controller records when the result comes back. None for
    # requests that are no instance action (builds, clean-ups, queries).
    action: str | None = None
    instances: list[InstanceSpec] = Field(default_factory=list)
    # The volumes a volume operation acts on (volume_create, volume_delete, attach_volume,
    # detach_volume: for the last two, with the one server in ``instances``).
    volumes: list[VolumeSpec] = Field(default_factory=list)
    # Operation options: reboot_type ("SOFT"/"HARD"), timeout (seconds) for a
    # graceful power off, ...
    options: dict[str, Any] = Field(default_factory=dict)
    # When the API started the action this request carries out (its action's start time).
    # The host runs an instance's operations one at a time, in this order: one started
    # before the last it ran is refused (``ActionSuperseded``). None: no order to keep.
    issued_at: dt.datetime | None = None
    # How the far side builds its driver when it keeps no configuration of its own
    # (``python -m novakit.host`` over SSH): {"driver": "fake", "options": {...},
    # "max_concurrent_builds": 10}. In-process and Ansible callers leave it out.
    driver: dict[str, Any] | None = None
    # apply_port_filters: the ports whose filters to set or remove.
    port_filters: list[PortFilterSpec] = Field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", exclude={"instances"})
        data["instances"] = [i.to_wire() for i in self.instances]
        return data


class Event(_Model):
    """One step on a host, recorded as an instance action event."""

    event: str
    start_time: dt.datetime
    finish_time: dt.datetime | None = None
    result: Literal["Success", "Error"] | None = None
    host: str | None = None
    details: str | None = None
    traceback: str | None = None


class Fault(_Model):
    """A failure as a host reports it; the conductor stores it as an instance fault."""

    code: int = 500
    message: str
    exception_class: str
    details: str | None = None  # the traceback, only for internal (500) errors
    host: str | None = None
    reschedule: bool = False


class InstanceResult(_Model):
    uuid: str
    ok: bool
    power_state: int | None = None
    addresses: list[str] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)
    fault: Fault | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    console: str | None = None
    # get_info: the ids of the volumes in the guest's definition; None: its driver cannot tell
    volumes: list[str] | None = None
    # migrate_disk_and_power_off: what the destination's finish_migration needs of the source
    # (where its disks are, for the fake driver the guest's record)
    disk_info: dict[str, Any] | None = None
    # snapshot / shelve: the image file the host wrote (location, checksum, size, disk_format)
    image: dict[str, Any] | None = None


class HostResources(_Model):
    """What a host's driver reports about itself (Nova's get_available_resource)."""

    hypervisor_hostname: str
    hypervisor_type: str
    hypervisor_version: int = 0
    cpu_arch: str = "x86_64"
    vcpus: int
    memory_mb: int
    local_gb: int
    vcpus_used: int = 0
    memory_mb_used: int = 0
    local_gb_used: int = 0
    cpu_features: list[str] = Field(default_factory=list)
    cached_images: list[str] = Field(default_factory=list)
    # What the driver can do, as placement traits (``ComputeDriver.capability_traits``): the
    # scheduler sends a request that needs one only to a host that has it.
    traits: list[str] = Field(default_factory=list)
    # The libvirt networks and bridges this host has, by name (``NetworkFilter``); None: every
    # network (the fake driver, unless its options name some).
    networks: list[str] | None = None
    # Security groups on this host (``ComputeDriver.port_filter_mode``): "enforced" (its driver
    # filters ports), "none" (the operator knowingly runs it without filters), "unsupported"
    # (its driver cannot filter). None: a host that has not said (as "unsupported").
    security_groups: Literal["enforced", "none", "unsupported"] | None = None


class UnmanagedGuest(_Model):
    """A guest on a host that novakit did not create, as an import needs to know it.

    ``root_gb`` is the first disk's virtual size and ``ephemeral_gb`` the other disks'
    together, each rounded up to whole GiB (what a flavor would have to give it).
    ``problem`` says why it cannot be imported as it is (a disk whose size the host
    cannot read), or is None.
    """

    uuid: str
    name: str
    vcpus: int
    memory_mb: int
    root_gb: int
    ephemeral_gb: int = 0
    power_state: int
    disks: list[str] = Field(default_factory=list)  # the disks' targets (vda, ...), for the report
    problem: str | None = None


class ComputeResult(_Model):
    request_id: str
    host: str
    operation: Operation | str
    results: list[InstanceResult] = Field(default_factory=list)
    resources: HostResources | None = None
    instances_on_host: dict[str, int] | None = None  # uuid -> power state
    host_boot_id: str | None = None  # with instances_on_host: ComputeDriver.host_boot_id
    unmanaged: list[UnmanagedGuest] | None = None  # operation list_unmanaged
    error: Fault | None = None  # the whole request failed (driver unusable, ...)
    # list_port_filters, list_instances: port id -> its filter's rules (FilterRule JSON) as the
    # host holds them; None: this host does not filter (nothing to compare).
    port_filters: dict[str, list[dict[str, Any]]] | None = None


# --- secrets apart from the wire requests -------------------------------------------------

SECRET_FIELDS = ("user_data", "admin_password_hash")


def split_secrets(requests: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, dict[str, str]]]:
    """Wire requests without their secrets, and the secrets by instance uuid.

    The playbooks hand the secrets to the compute task in an option of their own,
    marked ``no_log``: only they are hidden, and the task's result (why a host
    failed or was unreachable) shows. The ``compute`` module puts them back.
    """
    public: list[dict[str, Any]] = []
    secrets: dict[str, dict[str, str]] = {}
    for request in requests:
        instances = []
        for inst in request.get("instances") or []:
            hidden = {k: inst[k] for k in SECRET_FIELDS if inst.get(k) is not None}
            if hidden:
                secrets.setdefault(inst["uuid"], {}).update(hidden)
            instances.append({**inst, **dict.fromkeys(hidden)})
        public.append({**request, "instances": instances})
    return public, secrets


def join_secrets(request: dict[str, Any], secrets: dict[str, dict[str, str]]) -> dict[str, Any]:
    """A wire request with its instances' secrets put back (``split_secrets`` undone), on the host."""
    instances = [{**i, **(secrets.get(i.get("uuid")) or {})} for i in request.get("instances") or []]
    return {**request, "instances": instances}
