"""A driver without a hypervisor, for tests and demos (Nova ships one too).

Guests are records in one JSON file per host, so several processes (an
Ansible fork per host, a CLI next to a server) see the same "hypervisor".
Every change is a read-modify-write under an exclusive ``flock`` on a side
lock file, and the new state is written to a temporary file and renamed over
the old one, so a reader never sees half a file and no update is lost.

Failure modes make the unhappy paths of the boot flow reproducible; they come
from ``options["failure_mode"]`` or, per host, from the environment variable
``NOVAKIT_FAKE_FAILURE_<HOST>`` (host upper-cased, other characters as ``_``),
which is how a test points one host of an inventory at a failure:

``none``
    every spawn succeeds.
``fail_first_spawn``
    the first spawn on the host raises RescheduledError, later ones succeed
    (remembered in the state file, so it holds across processes).
``fail_every_spawn``
    every spawn raises RescheduledError.
``abort_spawn``
    every spawn raises BuildAbortError (as a bad image would).
``slow_spawn``
    spawn sleeps ``options["spawn_delay"]`` seconds (default 2) first.
``crash_running``
    spawn succeeds; the next look at the guest (get_info, list_instances)
    finds it CRASHED. ``crash(uuid)`` does the same on demand.
``fail_volume_create`` / ``fail_volume_attach``
    every volume create (attach) raises VolumeBackendError, leaving nothing behind.
``fail_migrate_source`` / ``fail_migrate_dest``
    a move's step on this host fails: as its source, handing the guest over
    (``migrate_disk_and_power_off``, ``live_migration``: the guest keeps
    running); as its destination, bringing it up (``finish_migration``,
    ``pre_live_migration``, a spawn of an evacuated server: nothing left behind).
``fail_reboot``
    every reboot (soft or hard) raises ComputeError; the guest stays as it was.
``fail_interface_attach``
    every interface attach raises ComputeError; the guest stays as it was.
``slow_live_migration``
    a live migration from this host takes ``options["live_migration_delay"]`` seconds (default
    10) before the guest is handed over, so that an abort (``abort_live_migration``, from
    another thread or process) lands while it runs: the migration then fails as an aborted
    libvirt job does (ComputeError), and the guest runs on here.

A move hands the guest's record over: the source keeps it, shut off and marked
``resize_source`` (not listed, as libvirt's shut-off leftover belongs to no
instance of that host) until ``confirm_migration`` removes it or
``finish_revert_migration`` brings it back; the destination defines the guest
with the new flavor, its console carried over, so the guest's story reads on.

Volumes are records in the same state file (``volumes``: id -> size, format, image,
the guest it is attached to and as which device); a guest lists its disks under
``volumes`` (device -> volume id) and its console shows ``NOVAKIT-DISK <dev> <sectors>``
for each disk that appears, as the tiny guest prints it.

A guest's NICs are ``networks`` (how many), ``fixed_ips`` (per NIC, IP/prefix) and ``ports``
(per NIC, its port id or null); ``attach_interface`` appends one (its console shows
``NOVAKIT-NIC <mac> <addresses>`` on a running guest) and ``detach_interface`` removes it.

Port filters (security groups) are records too (``port_filters``: port id -> the guest and the
effective rules, FilterRule JSON), set at spawn from the NICs' rules and by ``apply_port_filter``;
``port_filter(port_id)`` reads one for a test, ``edit_port_filter`` changes one behind novakit's
back. ``options["supports_port_filter"]`` false makes a host that cannot filter.

``vanish(uuid)`` deletes a guest behind novakit's back, for tests of healing;
``reboot_host()`` is the host going down and coming back: a new ``host_boot_id`` and
every guest shut off.
``define_foreign(...)`` defines a guest novakit did not create (someone ran
``virt-install``), for tests of brownfield imports: it is ``foreign`` in the
state file until ``adopt`` makes it an instance's; till then ``list_instances``
and every operation on an instance leave it alone, as the libvirt driver does.

An admin password reaches a fake guest as the libvirt driver's reaches a real
one: its hash is recorded with the guest (``admin_password_hash``) and the
console shows the tiny guest's ``NOVAKIT-GUEST-ADMIN-PASSWORD`` line, only when
the guest has a config drive. ``options["supports_admin_password"]`` false
makes a host whose driver cannot deliver one (the API then refuses requests
with an admin password for it).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import tempfile
import time
import uuid as uuid_mod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from novakit import exceptions, files
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
from novakit.keypairs import fingerprint as key_fingerprint
from novakit.network.filter_rules import FilterRule, rules_from_json, rules_to_json
from novakit.virt import admin_password_line, guest_ready_line
from novakit.virt.driver import POWER_CHANGES, ComputeDriver, InstanceInfo, power_change_needed

FAILURE_MODES = (
    "none",
    "fail_first_spawn",
    "fail_every_spawn",
    "abort_spawn",
    "slow_spawn",
    "crash_running",
    "fail_volume_create",
    "fail_volume_attach",
    "fail_migrate_source",
    "fail_migrate_dest",
    "fail_reboot",
    "fail_interface_attach",
    "slow_live_migration",
)

#: a console keeps this many lines, like a log that is rotated
_CONSOLE_LINES = 200

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")


def default_state_dir() -> Path:
    """Where host files live unless ``options["state_dir"]`` says otherwise."""
    env = os.environ.get("NOVAKIT_FAKE_STATE_DIR")
    if env:
        return Path(env)
    state_home = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(state_home) / "novakit" / "fake"


def failure_env_var(host: str) -> str:
    """The environment variable that sets the failure mode of one host."""
    return "NOVAKIT_FAKE_FAILURE_" + re.sub(r"[^A-Z0-9]", "_", host.upper())


def fake_address(uuid: str, index: int = 0) -> str:
    """A stable address from TEST-NET-1 (RFC 5737): shown to users, never contacted."""
    digest = hashlib.sha256(f"{uuid}/{index}".encode()).digest()
    return f"192.0.2.{1 + digest[0] % 254}"


def _networks_option(value: Any) -> list[str] | None:
    """options["networks"]: the networks the host has, as a list or comma-separated text.

    Absent: None, every network (the embedded default's hosts offer whatever is asked);
    given, even empty, exactly those, so a test can make a host without a network.
    """
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    return sorted({str(item).strip() for item in items if str(item).strip()})


def _with_prefix(address: str, cidr: str) -> str:
    """``10.0.0.5`` in ``10.0.0.0/24`` as ``10.0.0.5/24``, as a guest shows its address."""
    return f"{address}/{cidr.rpartition('/')[2]}" if "/" in cidr else address


def _host_file_stem(host: str) -> str:
    # A host name is used as a file name; anything that could escape the
    # directory or collide after cleaning gets a hash suffix instead.
    if _SAFE_NAME.match(host):
        return host
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", host).lstrip(".")[:80] or "host"
    return f"{cleaned}-{hashlib.sha256(host.encode()).hexdigest()[:12]}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


class FakeDriver(ComputeDriver):
    """A hypervisor made of a JSON file. Capacity comes from options, not the machine."""

    hypervisor_type = "fake"

    def __init__(self, host: str, options: dict[str, Any] | None = None) -> None:
        super().__init__(host, options)
        self.state_dir = Path(self.options.get("state_dir") or default_state_dir()).expanduser()
        stem = _host_file_stem(host)
        self.state_file = self.state_dir / f"{stem}.json"
        self._lock_file = self.state_dir / f"{stem}.lock"
        self.vcpus = int(self.options.get("vcpus", 16))
        self.memory_mb = int(self.options.get("memory_mb", 32768))
        self.local_gb = int(self.options.get("local_gb", 500))
        self.cpu_arch = str(self.options.get("cpu_arch", "x86_64"))
        self.spawn_delay = float(self.options.get("spawn_delay", 2))
        self.live_migration_delay = float(self.options.get("live_migration_delay", 10))
        # Options may come as text (``novakit host register --option key=value``).
        supports = self.options.get("supports_admin_password", True)
        if isinstance(supports, str):
            supports = supports.strip().lower() not in ("0", "false", "no", "off")
        filters = self.options.get("supports_port_filter", True)
        if isinstance(filters, str):
            filters = filters.strip().lower() not in ("0", "false", "no", "off")
        self.capabilities = {
            **self.capabilities,
            "supports_admin_password": bool(supports),
            "supports_port_filter": bool(filters),
        }
        self.networks = _networks_option(self.options.get("networks"))
        # Checked now so that a typo fails at start-up, not at the first spawn.
        self.failure_mode()

    # --- configuration ------------------------------------------------------

    def failure_mode(self) -> str:
        """The mode in force now; the environment wins so tests can retarget a running host."""
        mode = os.environ.get(failure_env_var(self.host)) or self.options.get("failure_mode") or "none"
        if mode not in FAILURE_MODES:
            raise exceptions.ConfigError(
                option="failure_mode",
                reason=f"unknown fake failure mode {mode!r}; known modes: {', '.join(FAILURE_MODES)}",
            )
        return str(mode)

    # --- the state file -----------------------------------------------------

    @contextlib.contextmanager
    def _locked_state(self, readonly: bool = False) -> Iterator[dict[str, Any]]:
        """Yield the host's state under an exclusive lock; write it back if it changed.

        ``readonly``: a shared lock, and whatever the block does to the state is not saved.
        The lock sits on a separate file because the state file itself is
        replaced on every write, and a lock on a replaced inode guards nothing.
        """
        files.private_dir(self.state_dir)
        with files.open_private(self._lock_file, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH if readonly else fcntl.LOCK_EX)
            try:
                state = self._read()
                if readonly:
                    yield state
                    return
                before = json.dumps(state, sort_keys=True)
                yield state
                if json.dumps(state, sort_keys=True) != before:
                    self._write(state)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        try:
            with open(self.state_file, encoding="utf-8") as f:
                state: dict[str, Any] = json.load(f)
        except FileNotFoundError:
            state = {}
        state.setdefault("instances", {})
        state.setdefault("cached_images", [])
        state.setdefault("spawns_attempted", 0)
        state.setdefault("first_spawn_failed", False)
        state.setdefault("volumes", {})
        state.setdefault("boot_id", "first-boot")
        state.setdefault("port_filters", {})
        return state

    def _write(self, state: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.state_dir, prefix=f".{self.state_file.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                # No fsync: the atomic replace keeps the file whole if a process dies mid-write,
                # which is all a fake hypervisor promises (it is not meant to survive a power cut).
                # One C-encoded string: json.dump to a file, or any indent, takes the pure-Python encoder.
                f.write(json.dumps(state, sort_keys=True, separators=(",", ":")))
            os.replace(tmp, self.state_file)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def _guest(self, state: dict[str, Any], uuid: str) -> dict[str, Any]:
        guest: dict[str, Any] | None = state["instances"].get(uuid)
        if guest is None or guest.get("foreign"):
            # A foreign guest is nobody's instance until it is adopted.
            raise exceptions.InstanceNotFound(instance_id=uuid)
        return guest

    @staticmethod
    def _settle(guest: dict[str, Any]) -> None:
        # crash_running: the crash is noticed at the first look after spawn.
        if guest.pop("crash_pending", False) and guest["power_state"] == PowerState.RUNNING:
            guest["power_state"] = int(PowerState.CRASHED)
            _console(guest, "Kernel panic - not syncing: fake crash (novakit fake driver)")

    # --- ComputeDriver ------------------------------------------------------

    def lock_dir(self) -> Path:
        # Next to the host's state: hosts of separate state directories never share slots.
        return self.state_dir

    def init_host(self) -> None:
        # Writing an empty state now makes a wrong state_dir fail at start-up.
        with self._locked_state() as state:
            if not self.state_file.exists():
                self._write(state)

    def get_available_resource(self) -> HostResources:
        with self._locked_state(readonly=True) as state:
            guests = list(state["instances"].values())
            cached = sorted(state["cached_images"])
        return HostResources(
            hypervisor_hostname=self.host,
            hypervisor_type=self.hypervisor_type,
            hypervisor_version=1000,
            cpu_arch=self.cpu_arch,
            vcpus=self.vcpus,
            memory_mb=self.memory_mb,
            local_gb=self.local_gb,
            vcpus_used=sum(g["vcpus"] for g in guests),
            memory_mb_used=sum(g["memory_mb"] for g in guests),
            local_gb_used=sum(g["disk_gb"] for g in guests),
            cached_images=cached,
            traits=self.capability_traits(),
            networks=self.networks,
            security_groups=self.port_filter_mode(),  # type: ignore[arg-type]
        )

    def spawn(self, instance: InstanceSpec) -> None:
        mode = self.failure_mode()
        uuid = instance.uuid
        with self._locked_state() as state:
            self._refuse_duplicate(state, uuid)
            state["spawns_attempted"] += 1
            if mode == "fail_first_spawn" and not state["first_spawn_failed"]:
                state["first_spawn_failed"] = True
                failure: exceptions.ComputeError | None = exceptions.RescheduledError(
                    instance_uuid=uuid, reason=f"fake failure: first spawn on host {self.host} fails"
                )
            elif mode == "fail_every_spawn":
                failure = exceptions.RescheduledError(
                    instance_uuid=uuid, reason=f"fake failure: every spawn on host {self.host} fails"
                )
            elif mode == "abort_spawn":
                failure = exceptions.BuildAbortError(
                    instance_uuid=uuid, reason=f"fake failure: spawns on host {self.host} abort"
                )
            else:
                failure = None
            if failure is None and mode != "slow_spawn":
                # Nothing to wait for: the guest is defined under the same lock.
                self._filter_ports(state, instance)
                self._define(state, instance, mode)
                return
        # Raised outside the lock block so the remembered first failure is saved.
        if failure is not None:
            raise failure
        time.sleep(self.spawn_delay)
        with self._locked_state() as state:
            # A slow spawn of the same uuid from elsewhere may have won meanwhile.
            self._refuse_duplicate(state, uuid)
            self._filter_ports(state, instance)
            self._define(state, instance, mode)

    @staticmethod
    def _define(state: dict[str, Any], instance: InstanceSpec, mode: str) -> None:
        uuid = instance.uuid
        flavor = instance.flavor
        guest: dict[str, Any] = {
            "name": instance.name,
            "hostname": instance.hostname,
            "project_id": instance.project_id,
            "user_id": instance.user_id,
            "image_id": instance.image.id,
            "flavor": flavor.name,
            "vcpus": flavor.vcpus,
            "memory_mb": flavor.memory_mb,
            "disk_gb": flavor.root_gb + flavor.ephemeral_gb + (flavor.swap + 1023) // 1024,
            "networks": max(1, len(instance.networks)),
            # Per NIC, the port's fixed IPs as IP/prefix: what the tiny guest would apply.
            "fixed_ips": [
                [_with_prefix(ip.address, ip.cidr) for ip in n.fixed_ips] for n in instance.networks
            ],
            "ports": [n.port_id for n in instance.networks],
            "config_drive": instance.config_drive,
            "power_state": int(PowerState.RUNNING),
            "created_at": _now(),
            "console": [],
        }
        if instance.admin_password_hash is not None and instance.config_drive:
            # What the guest's cloud-init would write to /etc/shadow: the hash, never a password.
            guest["admin_password_hash"] = instance.admin_password_hash.get_secret_value()
        if instance.key_data and instance.config_drive:
            # The key pair as the libvirt driver's config drive carries it: meta_data.json's
            # public_keys and the user data's ssh_authorized_keys (public keys: no secret).
            guest.update(_delivered_keys(instance))
        if mode == "crash_running":
            guest["crash_pending"] = True
        # The server's volumes are defined with it (a rebuild keeps them); the root one is its disk.
        guest["volumes"] = {v.device_name or "vdb": v.id for v in instance.volumes}
        for v in instance.volumes:
            known = state["volumes"].get(v.id)
            if known is not None:
                known.update(attached_to=uuid, device=v.device_name)
        _boot_console(guest, uuid)
        state["instances"][uuid] = guest
        if instance.image.id not in state["cached_images"]:
            state["cached_images"].append(instance.image.id)

    def _filter_ports(self, state: dict[str, Any], instance: InstanceSpec) -> None:
        """The filters of the guest's NICs, as the libvirt driver defines them before its guest."""
        if self.port_filter_mode() != "enforced":
            return
        for nic in instance.networks:
            if nic.port_id and nic.filter_rules is not None:
                rules = rules_to_json(rules_from_json(nic.filter_rules))
                state["port_filters"][nic.port_id] = {"instance_uuid": instance.uuid, "rules": rules}

    def _refuse_duplicate(self, state: dict[str, Any], uuid: str) -> None:
        if uuid in state["instances"]:
            # Not rescheduled: a second host would make two copies of one instance.
            raise exceptions.BuildAbortError(
                instance_uuid=uuid, reason=f"a guest with this uuid already exists on host {self.host}"
            )

    def destroy(self, instance: InstanceSpec) -> None:
        with self._locked_state() as state:
            guest = state["instances"].get(instance.uuid)
            if guest is not None and not guest.get("foreign"):
                del state["instances"][instance.uuid]

    # --- security groups: the effective rule set per port, as the test asserts it ----------

    def apply_port_filter(self, port: PortFilterSpec, rules: list[FilterRule]) -> None:
        with self._locked_state() as state:
            state["port_filters"][port.port_id] = {
                "instance_uuid": port.instance_uuid,
                "rules": rules_to_json(rules),
            }

    def remove_port_filter(self, port_id: str) -> None:
        with self._locked_state() as state:
            state["port_filters"].pop(port_id, None)

    def list_port_filters(self) -> dict[str, list[FilterRule]]:
        with self._locked_state(readonly=True) as state:
            return {p: rules_from_json(f["rules"]) for p, f in state["port_filters"].items()}

    def port_filter(self, port_id: str) -> list[FilterRule] | None:
        """The rules the port's filter holds on this host; None: the port has no filter."""
        return self.list_port_filters().get(port_id)

    def edit_port_filter(self, port_id: str, rules: list[FilterRule] | None) -> None:
        """Change (None: drop) a port's filter behind novakit's back (someone ran ``virsh
        nwfilter-define``, or the host lost it), for tests of healing."""
        with self._locked_state() as state:
            if rules is None:
                state["port_filters"].pop(port_id, None)
            else:
                state["port_filters"][port_id] = {"instance_uuid": None, "rules": rules_to_json(rules)}

    def power_off(self, instance: InstanceSpec, timeout: float = 60, retry_interval: float = 5) -> None:
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            self._settle(guest)
            if guest["power_state"] != PowerState.SHUTDOWN:
                guest["power_state"] = int(PowerState.SHUTDOWN)
                _console(guest, "reboot: Power down")

    def power_on(self, instance: InstanceSpec) -> None:
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            self._settle(guest)
            if guest["power_state"] != PowerState.RUNNING:
                guest["power_state"] = int(PowerState.RUNNING)
                _boot_console(guest, instance.uuid)

    def reboot(self, instance: InstanceSpec, reboot_type: str = "SOFT") -> None:
        # A soft reboot of a guest that is not running falls back to hard, as libvirt's does.
        if self.failure_mode() == "fail_reboot":
            raise exceptions.ComputeError(reason=f"fake failure: reboots on host {self.host} fail")
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            self._settle(guest)
            guest["power_state"] = int(PowerState.RUNNING)
            _console(guest, "reboot: Restarting system")
            _boot_console(guest, instance.uuid)

    def change_power(self, instance: InstanceSpec, action: str) -> None:
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            self._settle(guest)
            if power_change_needed(action, instance.uuid, PowerState(guest["power_state"])):
                guest["power_state"] = int(POWER_CHANGES[action].target)

    def get_info(self, instance: InstanceSpec) -> InstanceInfo:
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            self._settle(guest)
            return InstanceInfo(
                state=PowerState(guest["power_state"]),
                internal_id=f"fake-{instance.uuid}",
                volumes=tuple(sorted(set((guest.get("volumes") or {}).values()))),
            )

    def list_instances(self) -> dict[str, PowerState]:
        with self._locked_state() as state:
            for guest in state["instances"].values():
                self._settle(guest)
            return {
                uuid: PowerState(g["power_state"])
                for uuid, g in state["instances"].items()
                if not g.get("foreign") and not g.get("resize_source")
            }

    def list_unmanaged(self) -> list[UnmanagedGuest]:
        with self._locked_state(readonly=True) as state:
            return [
                UnmanagedGuest(
                    uuid=uuid,
                    name=g["name"],
                    vcpus=g["vcpus"],
                    memory_mb=g["memory_mb"],
                    root_gb=g["disk_gb"] - g.get("ephemeral_gb", 0),
                    ephemeral_gb=g.get("ephemeral_gb", 0),
                    power_state=g["power_state"],
                    disks=["vda", "vdb"] if g.get("ephemeral_gb") else ["vda"],
                )
                for uuid, g in sorted(state["instances"].items(), key=lambda item: item[1]["name"])
                if g.get("foreign")
            ]

    def adopt(self, instance: InstanceSpec) -> None:
        with self._locked_state() as state:
            guest = state["instances"].get(instance.uuid)
            if guest is None:
                raise exceptions.InstanceNotFound(instance_id=instance.uuid)
            if guest.pop("foreign", False):
                guest.update(
                    project_id=instance.project_id, user_id=instance.user_id, flavor=instance.flavor.name
                )

    def get_interface_addresses(self, instance: InstanceSpec) -> list[str]:
        with self._locked_state(readonly=True) as state:
            guest = self._guest(state, instance.uuid)
            count = int(guest.get("networks", 1))
            fixed = list(guest.get("fixed_ips") or [])
        # A NIC with a port has the port's addresses; one without gets an invented one.
        addresses: list[str] = []
        for i in range(count):
            nic = fixed[i] if i < len(fixed) else []
            if nic:
                addresses.extend(a.partition("/")[0] for a in nic)
            else:
                addresses.append(fake_address(instance.uuid, i))
        return addresses

    def get_console_output(self, instance: InstanceSpec) -> str:
        with self._locked_state(readonly=True) as state:
            guest = self._guest(state, instance.uuid)
            return "".join(line + "\n" for line in guest["console"])

    def cache_image(self, image: ImageSpec) -> None:
        """The fake has no image bytes: caching records the id, as a spawn does."""
        with self._locked_state() as state:
            if image.id not in state["cached_images"]:
                state["cached_images"].append(image.id)

    # --- volumes ------------------------------------------------------------

    def create_volume(self, volume: VolumeSpec) -> None:
        if self.failure_mode() == "fail_volume_create":
            raise exceptions.VolumeBackendError(
                volume=volume.id, reason=f"fake failure: volume creates on host {self.host} fail"
            )
        with self._locked_state() as state:
            known = state["volumes"].get(volume.id)
            if known is not None:
                if known["size_gb"] != volume.size_gb:
                    raise exceptions.VolumeBackendError(
                        volume=volume.id, reason=f"exists with {known['size_gb']} GiB, not {volume.size_gb}"
                    )
                return
            state["volumes"][volume.id] = {
                "size_gb": volume.size_gb,
                "format": volume.format,
                "image_id": volume.image.id if volume.image else None,
                "attached_to": None,
                "device": None,
            }

    def delete_volume(self, volume: VolumeSpec) -> None:
        with self._locked_state() as state:
            state["volumes"].pop(volume.id, None)

    def attach_volume(self, instance: InstanceSpec, volume: VolumeSpec) -> None:
        if self.failure_mode() == "fail_volume_attach":
            raise exceptions.VolumeBackendError(
                volume=volume.id, reason=f"fake failure: attaches on host {self.host} fail"
            )
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            known = state["volumes"].get(volume.id)
            if known is None:
                raise exceptions.VolumeBackendError(
                    volume=volume.id, reason=f"not in host {self.host}'s pool"
                )
            device = volume.device_name or "vdb"
            disks = guest.setdefault("volumes", {})
            if disks.get(device) not in (None, volume.id):
                raise exceptions.VolumeBackendError(
                    volume=volume.id, reason=f"device {device} of {instance.uuid} holds another disk"
                )
            disks[device] = volume.id
            known.update(attached_to=instance.uuid, device=device)
            if guest["power_state"] == PowerState.RUNNING:
                _console(guest, _disk_line(device, known["size_gb"]))

    def detach_volume(self, instance: InstanceSpec, volume: VolumeSpec) -> None:
        with self._locked_state() as state:
            guest = state["instances"].get(instance.uuid) or {}
            disks = guest.get("volumes") or {}
            for device in [d for d, v in disks.items() if v == volume.id]:
                del disks[device]
            known = state["volumes"].get(volume.id)
            if known is not None and known.get("attached_to") == instance.uuid:
                known.update(attached_to=None, device=None)

    def volumes(self) -> dict[str, dict[str, Any]]:
        """The host's pool as the fake keeps it: volume id -> size, format, attachment."""
        with self._locked_state(readonly=True) as state:
            return dict(state["volumes"])

    # --- interfaces -----------------------------------------------------------

    def attach_interface(self, instance: InstanceSpec, nic: NetworkSpec) -> None:
        if self.failure_mode() == "fail_interface_attach":
            raise exceptions.ComputeError(reason=f"fake failure: interface attaches on host {self.host} fail")
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            ports = _nic_ports(guest)
            if nic.port_id in ports:
                return  # attached already (a repeated request)
            ports.append(nic.port_id)
            fixed = [_with_prefix(ip.address, ip.cidr) for ip in nic.fixed_ips]
            known = list(guest.get("fixed_ips") or [])[: len(ports) - 1]
            guest["fixed_ips"] = [*known, *([[]] * (len(ports) - 1 - len(known))), fixed]
            guest["ports"] = ports
            guest["networks"] = len(ports)
            if self.port_filter_mode() == "enforced" and nic.port_id and nic.filter_rules is not None:
                rules = rules_to_json(rules_from_json(nic.filter_rules))
                state["port_filters"][nic.port_id] = {"instance_uuid": instance.uuid, "rules": rules}
            if guest["power_state"] == PowerState.RUNNING:
                _console(guest, f"NOVAKIT-NIC {nic.mac} {' '.join(fixed)}".rstrip())

    def detach_interface(self, instance: InstanceSpec, nic: NetworkSpec) -> None:
        with self._locked_state() as state:
            state["port_filters"].pop(nic.port_id or "", None)
            guest = state["instances"].get(instance.uuid)
            if guest is None or guest.get("foreign"):
                return
            ports = _nic_ports(guest)
            if nic.port_id not in ports:
                return
            index = ports.index(nic.port_id)
            fixed = list(guest.get("fixed_ips") or [])
            if index < len(fixed):
                del fixed[index]
            del ports[index]
            guest.update(ports=ports, fixed_ips=fixed, networks=max(1, len(ports)))

    def interfaces(self, uuid: str) -> list[str | None]:
        """The port ids of a guest's NICs, in their order (None: a NIC of no port), for tests."""
        with self._locked_state(readonly=True) as state:
            return _nic_ports(self._guest(state, uuid))

    # --- moves ----------------------------------------------------------------

    def migrate_disk_and_power_off(
        self, instance: InstanceSpec, dest_host: str, flavor: FlavorSpec
    ) -> dict[str, Any]:
        if self.failure_mode() == "fail_migrate_source":
            raise exceptions.ComputeError(
                reason=f"fake failure: handing guests over on host {self.host} fails"
            )
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            was = guest["power_state"]
            guest["power_state"] = int(PowerState.SHUTDOWN)
            guest["resize_source"] = {"dest": dest_host, "power_state": was}
            _console(guest, f"reboot: Power down (moving to {dest_host})")
            handed = {k: v for k, v in guest.items() if k != "resize_source"}
        return {"guest": handed}

    def finish_migration(self, instance: InstanceSpec, disk_info: dict[str, Any], power_on: bool) -> None:
        if self.failure_mode() == "fail_migrate_dest":
            raise exceptions.ComputeError(
                reason=f"fake failure: bringing moved guests up on host {self.host} fails"
            )
        handed = dict(disk_info.get("guest") or {})
        with self._locked_state() as state:
            self._refuse_duplicate(state, instance.uuid)
            self._filter_ports(state, instance)
            self._define(state, instance, "none")
            guest = state["instances"][instance.uuid]
            # The same guest, moved: its story goes on, its new size is the flavor's.
            guest["console"] = list(handed.get("console") or []) + guest["console"]
            guest["created_at"] = handed.get("created_at", guest["created_at"])
            if not power_on:
                guest["power_state"] = int(PowerState.SHUTDOWN)
                _console(guest, "reboot: Power down")

    def pre_live_migration(self, instance: InstanceSpec) -> dict[str, Any]:
        if self.failure_mode() == "fail_migrate_dest":
            raise exceptions.ComputeError(reason=f"fake failure: host {self.host} cannot take guests live")
        with self._locked_state(readonly=True) as state:
            self._refuse_duplicate(state, instance.uuid)
        return {"host": self.host}

    def live_migration(
        self, instance: InstanceSpec, dest_host: str, dest_info: dict[str, Any]
    ) -> dict[str, Any]:
        if self.failure_mode() == "fail_migrate_source":
            raise exceptions.ComputeError(reason=f"fake failure: live migrations from host {self.host} fail")
        if self.failure_mode() == "slow_live_migration":
            self._migrate_slowly(instance, dest_host)
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            self._settle(guest)
            # Handed over as it runs: no power cycle, the console goes on where it was.
            _console(guest, f"novakit-fake: live migrated to {dest_host}, still running (no reboot)")
            handed = dict(guest)
            del state["instances"][instance.uuid]
        return {"guest": handed}

    def _job_files(self, uuid: str) -> tuple[Path, Path]:
        """A live migration's job here (its file exists while it runs) and an abort's request
        for it: files, so that an abort from another process reaches it."""
        stem = f"{_host_file_stem(self.host)}-live-{_host_file_stem(uuid)}"
        return self.state_dir / f"{stem}.job", self.state_dir / f"{stem}.abort"

    def _migrate_slowly(self, instance: InstanceSpec, dest_host: str) -> None:
        """``slow_live_migration``: the job runs ``live_migration_delay`` seconds, or until an
        abort asks it to stop; then it raises ComputeError (the live flow's failure), the guest
        running on here."""
        job, abort = self._job_files(instance.uuid)
        files.private_dir(self.state_dir)
        abort.unlink(missing_ok=True)  # an abort of an earlier job that had ended meanwhile
        job.touch()
        try:
            ends = time.monotonic() + self.live_migration_delay
            while time.monotonic() < ends:
                if abort.exists():
                    abort.unlink(missing_ok=True)
                    raise exceptions.ComputeError(
                        reason=f"live migration of instance {instance.uuid} to {dest_host} was aborted; "
                        f"the guest runs on {self.host}"
                    )
                time.sleep(0.05)
        finally:
            job.unlink(missing_ok=True)

    def live_migration_running(self, uuid: str) -> bool:
        """Whether a live migration of ``uuid`` runs from here now (for tests)."""
        return self._job_files(uuid)[0].exists()

    def abort_live_migration(self, instance: InstanceSpec) -> None:
        """Ask the running job to stop; no job (it ended just now, or never was) is not an error,
        as libvirt's "no job" is not for Nova's abort."""
        job, abort = self._job_files(instance.uuid)
        if job.exists():
            files.private_dir(self.state_dir)
            abort.touch()

    def post_live_migration_at_destination(self, instance: InstanceSpec, handed: dict[str, Any]) -> None:
        with self._locked_state() as state:
            self._refuse_duplicate(state, instance.uuid)
            state["instances"][instance.uuid] = dict(handed["guest"])

    def rollback_live_migration_at_destination(self, instance: InstanceSpec) -> None:
        """pre_live_migration made nothing on the fake: nothing to remove."""

    def confirm_migration(self, instance: InstanceSpec) -> None:
        with self._locked_state() as state:
            guest = state["instances"].get(instance.uuid)
            if guest is not None and guest.get("resize_source"):
                del state["instances"][instance.uuid]

    def finish_revert_migration(self, instance: InstanceSpec, power_on: bool) -> None:
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            if guest.pop("resize_source", None) is None:
                return  # back already
            if power_on:
                guest["power_state"] = int(PowerState.RUNNING)
                _boot_console(guest, instance.uuid)

    # --- images of a server, rescue -------------------------------------------------

    def snapshot(self, instance: InstanceSpec, image_id: str) -> dict[str, Any]:
        """The fake's "disk" is the guest's record: written as the image file, with its sha256."""
        with self._locked_state(readonly=True) as state:
            guest = dict(self._guest(state, instance.uuid))
        store = self.state_dir / "images"
        files.private_dir(store)
        path = store / f"{image_id}.img"
        data = json.dumps(
            {"snapshot_of": instance.uuid, "image_id": guest.get("image_id"), "console": guest["console"]},
            sort_keys=True,
        ).encode()
        # A server's disk is its project's: the image file is private (0600) as the state's files.
        with files.open_private(path, "wb") as f:
            f.write(data)
        return {
            "location": str(path),
            "checksum": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "disk_format": "raw",
        }

    def delete_image(self, image: ImageSpec) -> None:
        path = Path(image.location)
        if path.parent == self.state_dir / "images":
            path.unlink(missing_ok=True)

    def rescue(self, instance: InstanceSpec, rescue_image: ImageSpec) -> None:
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            guest["rescue"] = {"image_id": rescue_image.id, "power_state": guest["power_state"]}
            guest["power_state"] = int(PowerState.RUNNING)
            _console(guest, f"novakit-init: rescue image {rescue_image.id}, own disk as vdb")
            _console(guest, _disk_line("vdb", guest["disk_gb"]))

    def unrescue(self, instance: InstanceSpec) -> None:
        with self._locked_state() as state:
            guest = self._guest(state, instance.uuid)
            if guest.pop("rescue", None) is None:
                return
            guest["power_state"] = int(PowerState.RUNNING)
            _boot_console(guest, instance.uuid)

    # --- test helpers -------------------------------------------------------

    def crash(self, uuid: str) -> None:
        """Make a guest CRASHED, as a kernel panic or a killed QEMU would."""
        with self._locked_state() as state:
            guest = self._guest(state, uuid)
            guest["power_state"] = int(PowerState.CRASHED)
            guest.pop("crash_pending", None)
            _console(guest, "Kernel panic - not syncing: fake crash (novakit fake driver)")

    def define_foreign(
        self,
        name: str,
        *,
        vcpus: int = 1,
        memory_mb: int = 1024,
        root_gb: int = 10,
        ephemeral_gb: int = 0,
        power_state: PowerState = PowerState.RUNNING,
        uuid: str | None = None,
    ) -> str:
        """Define a guest novakit did not create (as ``virt-install`` would); returns its uuid."""
        import uuid as uuidlib

        uuid = uuid or str(uuidlib.uuid4())
        with self._locked_state() as state:
            self._refuse_duplicate(state, uuid)
            state["instances"][uuid] = {
                "foreign": True,
                "name": name,
                "hostname": name,
                "project_id": "",
                "user_id": "",
                "image_id": "",
                "flavor": "",
                "vcpus": vcpus,
                "memory_mb": memory_mb,
                "disk_gb": root_gb + ephemeral_gb,
                "ephemeral_gb": ephemeral_gb,
                "networks": 1,
                "config_drive": False,
                "power_state": int(power_state),
                "created_at": _now(),
                "console": [],
            }
        return uuid

    def host_boot_id(self) -> str | None:
        with self._locked_state(readonly=True) as state:
            return str(state["boot_id"])

    def reboot_host(self) -> None:
        """The host went down and came back (a kernel update): every guest is shut off, as a
        host's guests are after its boot until something starts them, and the boot id is new."""
        with self._locked_state() as state:
            state["boot_id"] = str(uuid_mod.uuid4())
            for guest in state["instances"].values():
                if guest["power_state"] != int(PowerState.SHUTDOWN):
                    guest["power_state"] = int(PowerState.SHUTDOWN)
                    _console(guest, "reboot: the host went down")

    def vanish(self, uuid: str) -> None:
        """Delete a guest behind novakit's back (someone ran ``virsh undefine``)."""
        with self._locked_state() as state:
            self._guest(state, uuid)
            del state["instances"][uuid]


def _nic_ports(guest: dict[str, Any]) -> list[str | None]:
    """The port id of each of the guest's NICs (a guest defined before the fake recorded them:
    none known, as many as it has NICs)."""
    ports = guest.get("ports")
    if ports is None:
        return [None] * len(guest.get("fixed_ips") or [])
    return list(ports)


def _disk_line(device: str, size_gb: int) -> str:
    """What the tiny guest prints for a disk that appears: its device and 512-byte sectors."""
    return f"NOVAKIT-DISK {device} {size_gb * 1024 * 1024 * 2}"


def _delivered_keys(instance: InstanceSpec) -> dict[str, Any]:
    from novakit.virt.libvirt.configdrive import ConfigDrive
    from novakit.virt.userdata import authorized_keys_in

    drive = ConfigDrive.from_instance(instance, [])
    return {
        "public_keys": json.loads(drive.meta_data_json()).get("public_keys", {}),
        "ssh_authorized_keys": authorized_keys_in(drive.user_data_file()),
    }


def _console(guest: dict[str, Any], line: str) -> None:
    guest["console"].append(line)
    del guest["console"][:-_CONSOLE_LINES]


def _boot_console(guest: dict[str, Any], uuid: str) -> None:
    """What the tiny test guest prints while it boots, ending with its marker."""
    _console(guest, "Linux version 6.1.0-fake (novakit fake driver)")
    if guest.get("config_drive", True):
        _console(guest, "novakit-init: config drive cidata found")
        _console(guest, f"novakit-init: hostname {guest['hostname']}")
        if guest.get("admin_password_hash"):
            _console(guest, admin_password_line(guest["admin_password_hash"]))
        static = [a for nic in guest.get("fixed_ips") or [] for a in nic]
        keys = list((guest.get("public_keys") or {}).values())
        fingerprint = key_fingerprint(keys[0]) if keys else None
        _console(guest, guest_ready_line(guest["hostname"], uuid, static, fingerprint))
    else:
        _console(guest, "novakit-init: no config drive")
        _console(guest, guest_ready_line("localhost", "none"))
