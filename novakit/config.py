"""novakit's configuration: one model, read from a TOML file and the environment.

Precedence, lowest first: defaults here; the TOML file (``NOVAKIT_CONFIG``, or
``~/.config/novakit/novakit.toml`` when it exists); environment variables
``NOVAKIT_DB_URL`` and ``NOVAKIT_STATE_DIR``; values the caller passes.
Unknown keys are an error that names them, so a typo cannot silently fall
back to a default.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from novakit import exceptions


def default_state_dir() -> Path:
    env = os.environ.get("NOVAKIT_STATE_DIR")
    if env:
        return Path(env)
    return builtin_state_dir()


def builtin_state_dir() -> Path:
    """Where novakit keeps its state when nobody says otherwise: ``$XDG_STATE_HOME/novakit``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "novakit"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SchedulerConfig(_Section):
    # Filters run in this order; names are looked up in novakit.scheduler.filters.registry.FILTERS, and
    # checked there (``check_filter_names``, run by ``load_config`` through ``register_check``).
    enabled_filters: list[str] = Field(
        default_factory=lambda: [
            "ComputeFilter",
            "ComputeCapabilitiesFilter",
            "ImagePropertiesFilter",
            "ServerGroupAntiAffinityFilter",
            "ServerGroupAffinityFilter",
            "SameHostFilter",
            "DifferentHostFilter",
            "NetworkFilter",
            "VolumeHostFilter",
            "SecurityGroupFilter",
            # Runs only for a flavor with aggregate_instance_extra_specs: keys (issue 31).
            "AggregateInstanceExtraSpecsFilter",
        ]
    )
    # Names of novakit.scheduler.weights.registry.WEIGHERS (checked there), or ["all"].
    weighers: list[str] = Field(default_factory=lambda: ["all"])
    ram_weight_multiplier: float = Field(default=1.0, allow_inf_nan=False)
    cpu_weight_multiplier: float = Field(default=1.0, allow_inf_nan=False)
    disk_weight_multiplier: float = Field(default=1.0, allow_inf_nan=False)
    io_ops_weight_multiplier: float = Field(default=-1.0, allow_inf_nan=False)
    build_failure_weight_multiplier: float = Field(default=1000000.0, allow_inf_nan=False)
    soft_affinity_weight_multiplier: float = Field(default=1.0, allow_inf_nan=False)
    soft_anti_affinity_weight_multiplier: float = Field(default=1.0, allow_inf_nan=False)
    image_locality_weight_multiplier: float = Field(default=1.0, allow_inf_nan=False)
    host_subset_size: int = Field(default=1, ge=1)
    max_attempts: int = Field(default=3, ge=1, le=100)
    max_placement_results: int = Field(default=1000, ge=1)
    max_instances_per_host: int = Field(default=50, ge=1)
    max_io_ops_per_host: int = Field(default=8, ge=1)
    claim_retries: int = Field(default=10, ge=1, le=1000)
    # Hosts in no availability-zone aggregate are in this zone (Nova: default_availability_zone).
    default_availability_zone: str = "nova"
    # The zone a create that names none is placed in (Nova: default_schedule_zone); None: any.
    default_schedule_zone: str | None = None
    # "No valid host" lists at most this many rejected hosts per step (counts are always complete).
    explain_max_hosts: int = Field(default=200, ge=1)


class PlacementConfig(_Section):
    # Nova's defaults today.
    cpu_allocation_ratio: float = Field(default=4.0, gt=0, le=1000, allow_inf_nan=False)
    ram_allocation_ratio: float = Field(default=1.0, gt=0, le=1000, allow_inf_nan=False)
    disk_allocation_ratio: float = Field(default=1.0, gt=0, le=1000, allow_inf_nan=False)
    reserved_host_memory_mb: int = Field(default=512, ge=0, le=2147483647)
    reserved_host_cpus: int = Field(default=0, ge=0, le=4096)
    reserved_host_disk_mb: int = Field(default=0, ge=0, le=2147483647)


class QuotaConfig(_Section):
    # Nova's default quotas; -1 is unlimited.
    instances: int = Field(default=10, ge=-1, le=2147483647)
    cores: int = Field(default=20, ge=-1, le=2147483647)
    ram: int = Field(default=51200, ge=-1, le=2147483647)
    # Cinder's default quotas: volumes per project, and their sizes together in GiB.
    volumes: int = Field(default=10, ge=-1, le=2147483647)
    gigabytes: int = Field(default=1000, ge=-1, le=2147483647)
    # Nova's key pairs per user (``novakit.keypairs``).
    key_pairs: int = Field(default=100, ge=-1, le=2147483647)
    # Neutron's default quotas: security groups per project, and their rules together.
    security_groups: int = Field(default=10, ge=-1, le=2147483647)
    security_group_rules: int = Field(default=100, ge=-1, le=2147483647)


class ComputeConfig(_Section):
    max_concurrent_builds: int = Field(default=10, ge=1, le=1000)
    # No agent runs on a compute host, so by default a host is down only when its last contact
    # failed or an admin forced it down, however long it has been idle. With heartbeats on
    # (something runs `novakit host heartbeat` or playbooks/heartbeat.yml on a schedule), a host
    # whose last successful contact is older than service_down_time seconds is down as well
    # (Nova: service_down_time). See novakit.fleet.hosts.is_up.
    heartbeats: bool = False
    service_down_time: int = Field(default=60, ge=1)
    # Heal reaps builds stuck in "building" for longer than this.
    build_timeout: int = Field(default=600, ge=1)
    shutdown_timeout: int = Field(default=60, ge=0, le=3600)
    # The most servers one create request may ask for (max_count), checked before any
    # per-server work; quotas still apply below it.
    max_count: int = Field(default=1000, ge=1, le=100000)
    # Moves (novakit.moves), Nova's options: a shelved server leaves its host after this many
    # seconds (0: at once, -1: never; heal offloads the ones whose time has come), and a
    # resize waiting for its confirm is confirmed by heal after this many seconds (0: never).
    shelved_offload_time: int = Field(default=0, ge=-1)
    resize_confirm_window: int = Field(default=0, ge=0)
    # Nova's option: the guests of a host that booted are started again by heal when their
    # servers are recorded running (novakit.heal.host_boot); false: recorded stopped instead.
    # Nova's default is false (its hosts have libvirt's autostart to lean on); novakit's guests
    # have none, and a maintenance reboot is the everyday case, so here it is on.
    resume_guests_state_on_host_boot: bool = True


class IdentityConfig(_Section):
    """Who the caller is, as the operator says (``novakit.context``): the configuration file's
    ``[identity]``, under the environment's NOVAKIT_PROJECT, NOVAKIT_USER and NOVAKIT_ROLES."""

    project: str | None = None
    user: str | None = None
    roles: list[str] | None = None
    # Whether identity options given by the call itself (a task's project/user/roles, the CLI's
    # --project/--user/--role) are honoured for a caller that is not an admin. Off: such a
    # caller acts as the operator's identity for it and no other.
    trust_given_identity: bool = False


class Config(_Section):
    db_url: str = ""
    state_dir: Path = Field(default_factory=default_state_dir)
    notifications_file: Path | None = None
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    quota: QuotaConfig = Field(default_factory=QuotaConfig)
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    identity: IdentityConfig = Field(default_factory=IdentityConfig)

    @field_validator("db_url")
    @classmethod
    def _known_database(cls, url: str) -> str:
        """A URL SQLAlchemy can open (its dialect and driver exist), or empty for the default."""
        if not url:
            return url
        # Here, not at the top: the host side reads this module and never loads SQLAlchemy.
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        try:
            make_url(url).get_dialect()
        except (ArgumentError, NoSuchModuleError, ValueError) as exc:
            raise ValueError(
                f"{url.split('://')[0]!r} is not a database URL novakit can open ({exc}); "
                "use sqlite:///<path> or postgresql+psycopg://<user>:<password>@<host>/<database>"
            ) from None
        return url

    @property
    def database_url(self) -> str:
        """``db_url``, else the embedded default: ``novakit.db`` in the state directory.

        Only the default's directory is made when missing (``Database.from_config``); the
        directory of an explicit SQLite URL must exist, so that a typo fails instead of
        migrating an empty database somewhere nobody looks.
        """
        return self.db_url or f"sqlite:///{self.state_dir / 'novakit.db'}"


#: Checks of the configuration that other packages own: the scheduler's registries check the
#: filter and weigher names (``novakit.scheduler.filters.check_filter_names``, ``...weights``).
#: Each registers itself here when its module is imported, so that this module, which every
#: other imports, imports none of them; ``load_config`` runs them all, raising ConfigError.
_CHECKS: list[Callable[[Config], None]] = []


def register_check(check: Callable[[Config], None]) -> None:
    """Have ``load_config`` run ``check`` on every configuration it builds (once per check)."""
    if check not in _CHECKS:
        _CHECKS.append(check)


def config_file_path() -> Path | None:
    env = os.environ.get("NOVAKIT_CONFIG")
    if env:
        return Path(env)
    candidate = Path.home() / ".config" / "novakit" / "novakit.toml"
    return candidate if candidate.exists() else None


def load_config(path: Path | None = None, **overrides: Any) -> Config:
    """Build the configuration; raises ConfigError naming the bad key."""
    data: dict[str, Any] = {}
    path = path or config_file_path()
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise exceptions.ConfigError(option=str(path), reason="file does not exist") from None
        except UnicodeDecodeError as exc:
            raise exceptions.ConfigError(
                option=str(path), reason=f"not UTF-8 text (byte {exc.start}); TOML files are UTF-8"
            ) from None
        except OSError as exc:
            raise exceptions.ConfigError(option=str(path), reason=f"cannot be read: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise exceptions.ConfigError(option=str(path), reason=f"not valid TOML: {exc}") from None
    if os.environ.get("NOVAKIT_DB_URL"):
        data["db_url"] = os.environ["NOVAKIT_DB_URL"]
    if os.environ.get("NOVAKIT_STATE_DIR"):
        data["state_dir"] = os.environ["NOVAKIT_STATE_DIR"]
    if os.environ.get("NOVAKIT_NOTIFICATIONS_FILE"):
        data["notifications_file"] = os.environ["NOVAKIT_NOTIFICATIONS_FILE"]
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        conf = Config.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        option = ".".join(str(p) for p in err["loc"])
        raise exceptions.ConfigError(option=option, reason=err["msg"].removeprefix("Value error, ")) from None
    for check in _CHECKS:
        check(conf)
    return conf
