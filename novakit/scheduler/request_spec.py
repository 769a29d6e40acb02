"""What the scheduler is asked: the request spec, stored with each instance for reschedules.

Derived facts (resources, traits, aggregate metadata requirements) are computed
from the flavor here, in one place, the way Nova's ``ResourceRequest`` derives
them from flavor extra specs: ``trait:NAME=required|forbidden``,
``resources:CLASS=N`` (override or add a class; 0 removes one),
``aggregate_instance_extra_specs:KEY=VALUE``, ``capabilities:KEY=VALUE``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from novakit import exceptions
from novakit.host.messages import FlavorSpec, ImageSpec

GroupPolicy = Literal["affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"]


class InstanceGroupSpec(BaseModel):
    """A server group as the scheduler sees it: its policy and where its members already run."""

    model_config = ConfigDict(extra="forbid")

    uuid: str
    policy: GroupPolicy
    rules: dict[str, Any] = Field(default_factory=dict)  # {"max_server_per_host": 2} for anti-affinity
    hosts: list[str] = Field(default_factory=list)  # hosts of existing members, one entry per member
    members: list[str] = Field(default_factory=list)  # instance uuids already in the group

    @property
    def max_server_per_host(self) -> int:
        return int(self.rules.get("max_server_per_host", 1))


class RequestSpec(BaseModel):
    """One scheduling request (possibly a multi-create); JSON-serialisable, rebuilt with model_validate."""

    model_config = ConfigDict(extra="forbid")

    request_id: str
    project_id: str
    user_id: str
    flavor: FlavorSpec
    image: ImageSpec
    availability_zone: str | None = None
    num_instances: int = 1
    min_count: int | None = None  # None: all of num_instances, or nothing
    instance_group: InstanceGroupSpec | None = None
    scheduler_hints: dict[str, Any] = Field(default_factory=dict)  # same_host / different_host: [uuid, ...]
    ignore_hosts: list[str] = Field(default_factory=list)  # already tried (reschedules)
    requested_host: str | None = None
    # Each inner list: the host must be in at least one of these aggregates (names or uuids).
    member_of: list[list[str]] = Field(default_factory=list)
    # Traits on top of those the flavor's extra specs ask for.
    required_traits: list[str] = Field(default_factory=list)
    forbidden_traits: list[str] = Field(default_factory=list)
    # The host-side names (libvirt network or bridge) of the novakit networks the servers' ports
    # are on: a host must have every one (``NetworkFilter``).
    networks: list[str] = Field(default_factory=list)
    # The security groups the servers' ports carry (names): a host must filter ports, or be
    # marked ``security_groups: none`` by its operator (``SecurityGroupFilter``).
    security_groups: list[str] = Field(default_factory=list)
    # Boot from volume (``novakit.volume.boot``): the root disk is a volume, so the flavor's
    # root_gb is not claimed (Nova). ``new_root_volume_gb``: a volume of that size is made from the
    # image on the chosen host; it is claimed as DISK_GB with the server and handed to the volume
    # once its row exists. ``boot_volume``: an existing volume ({id, name, host}), whose claim it
    # already holds and whose host the server must land on (``VolumeHostFilter``).
    new_root_volume_gb: int | None = None
    delete_root_volume_on_termination: bool = True
    boot_volume: dict[str, str] | None = None

    # --- derived from the flavor ------------------------------------------------------

    def resources(self) -> dict[str, int]:
        """Resource classes and amounts per instance, validated: sizes must be positive."""
        flavor = self.flavor
        for name in ("vcpus", "memory_mb"):
            if getattr(flavor, name) <= 0:
                raise exceptions.ValidationError(
                    f"flavor.{name}", f"must be a positive number, got {getattr(flavor, name)}"
                )
        for name in ("root_gb", "ephemeral_gb", "swap"):
            if getattr(flavor, name) < 0:
                raise exceptions.ValidationError(
                    f"flavor.{name}", f"must not be negative, got {getattr(flavor, name)}"
                )
        root = flavor.root_gb
        if self.boot_volume is not None:
            root = 0
        elif self.new_root_volume_gb is not None:
            root = self.new_root_volume_gb
        disk = root + flavor.ephemeral_gb + -(-flavor.swap // 1024)
        res = {"VCPU": flavor.vcpus, "MEMORY_MB": flavor.memory_mb, "DISK_GB": disk}
        for key, value in flavor.extra_specs.items():
            if key.startswith("resources:"):
                try:
                    amount = int(value)
                except ValueError:
                    raise exceptions.ValidationError(
                        f"flavor extra spec {key}", f"{value!r} is not an integer"
                    ) from None
                if amount < 0:
                    raise exceptions.ValidationError(f"flavor extra spec {key}", "must not be negative")
                res[key.split(":", 1)[1]] = amount
        return {rc: amount for rc, amount in res.items() if amount > 0}

    def traits(self) -> tuple[set[str], set[str]]:
        """(required, forbidden) trait names from extra specs and the explicit lists."""
        required, forbidden = set(self.required_traits), set(self.forbidden_traits)
        for key, value in self.flavor.extra_specs.items():
            if key.startswith("trait:"):
                name = key.split(":", 1)[1]
                if value == "required":
                    required.add(name)
                elif value == "forbidden":
                    forbidden.add(name)
                else:
                    raise exceptions.ValidationError(
                        f"flavor extra spec {key}", f"must be 'required' or 'forbidden', got {value!r}"
                    )
        for key, value in self.image.properties.items():
            if key.startswith("trait:") and value == "required":
                required.add(key.split(":", 1)[1])
        both = required & forbidden
        if both:
            raise exceptions.ValidationError("traits", f"{sorted(both)} both required and forbidden")
        return required, forbidden

    def scoped_extra_specs(self, scope: str) -> dict[str, str]:
        prefix = scope + ":"
        return {k[len(prefix) :]: v for k, v in self.flavor.extra_specs.items() if k.startswith(prefix)}

    def hint_list(self, name: str) -> list[str]:
        value = self.scheduler_hints.get(name) or []
        return [value] if isinstance(value, str) else [str(v) for v in value]

    @property
    def effective_min_count(self) -> int:
        return self.num_instances if self.min_count is None else self.min_count
