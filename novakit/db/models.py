"""SQLAlchemy 2 models: Nova's tables, trimmed to what novakit uses.

Column names follow Nova's (``instances.vm_state``, ``instance_actions_events``,
``instance_faults``, ``services.last_seen_up``) so that people who know Nova's
schema find their way. Soft delete works as in Nova: ``deleted`` is 0 for a
live row and the row's own id once deleted, which lets a unique constraint
include ``deleted`` and still allow a name to be reused after a delete.
The schema is created and changed only by the Alembic migrations in
``migrations/``; a test checks that the models and the migrations agree.

Cells v2, as Nova has it: the tables of ``CELL_TABLES`` (an instance and its audit trail)
live in a cell's database, everything else in the API database, which also maps cells,
hosts and instances to their cell (``CellMapping``, ``HostMapping``, ``InstanceMapping``).
The names are disjoint, so one database can be the API database and a cell at once: the
embedded default is, and so is a database that predates cells (``novakit.cells``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class TimestampMixin:
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[dt.datetime | None] = mapped_column(DateTime, onupdate=utcnow)


class SoftDeleteMixin:
    deleted_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    deleted: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class Instance(TimestampMixin, SoftDeleteMixin, Base):
    __tablename__ = "instances"
    __table_args__ = (
        UniqueConstraint("uuid"),
        # Names are unique per project among live servers: that is what
        # makes the Ansible modules idempotent by name.
        UniqueConstraint("project_id", "display_name", "deleted"),
        Index("ix_instances_host_deleted", "host", "deleted"),
        Index("ix_instances_project_deleted", "project_id", "deleted"),
        Index("ix_instances_vm_state", "vm_state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    display_name: Mapped[str] = mapped_column(String(255))
    hostname: Mapped[str] = mapped_column(String(255))
    project_id: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[str] = mapped_column(String(255))
    host: Mapped[str | None] = mapped_column(String(255))
    node: Mapped[str | None] = mapped_column(String(255))
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    reservation_id: Mapped[str | None] = mapped_column(String(255))
    launch_index: Mapped[int] = mapped_column(Integer, default=0)
    # The flavor as it was at boot (Nova keeps it in instance_extra).
    flavor: Mapped[dict[str, Any]] = mapped_column(JSON)
    instance_type_id: Mapped[int | None] = mapped_column(Integer)
    vcpus: Mapped[int] = mapped_column(Integer, default=0)
    memory_mb: Mapped[int] = mapped_column(Integer, default=0)
    root_gb: Mapped[int] = mapped_column(Integer, default=0)
    ephemeral_gb: Mapped[int] = mapped_column(Integer, default=0)
    image_ref: Mapped[str | None] = mapped_column(String(255))
    vm_state: Mapped[str] = mapped_column(String(255))
    task_state: Mapped[str | None] = mapped_column(String(255))
    # The request that owns the running task and how long its lease lasts (migration 0004).
    task_owner: Mapped[str | None] = mapped_column(String(255))
    task_lease_until: Mapped[dt.datetime | None] = mapped_column(DateTime)
    power_state: Mapped[int] = mapped_column(Integer, default=0)
    locked: Mapped[bool] = mapped_column(Boolean, default=False)
    locked_by: Mapped[str | None] = mapped_column(String(255))  # "owner" or "admin", as Nova
    locked_reason: Mapped[str | None] = mapped_column(String(255))
    instance_metadata: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    # Base64 user data, as the request gave it. Never logged.
    user_data: Mapped[str | None] = mapped_column(Text)
    # The admin (root) password as a SHA-512 crypt hash, never the clear text (migration 0005,
    # ``novakit.compute.passwords``): what the config drive hands the guest. Never logged or shown.
    admin_password_hash: Mapped[str | None] = mapped_column(String(255))
    config_drive: Mapped[bool] = mapped_column(Boolean, default=True)
    key_name: Mapped[str | None] = mapped_column(String(255))
    # The key pair's public key as it was at boot (Nova's key_data): a later delete of the pair
    # does not change what the server was given (migrations 0010 and c0002).
    key_data: Mapped[str | None] = mapped_column(Text)
    addresses: Mapped[list[Any]] = mapped_column(JSON, default=list)
    networks: Mapped[list[Any]] = mapped_column(JSON, default=list)
    launched_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    terminated_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    scheduled_at: Mapped[dt.datetime | None] = mapped_column(DateTime)

    faults: Mapped[list[InstanceFault]] = relationship(
        primaryjoin="Instance.uuid == foreign(InstanceFault.instance_uuid)",
        order_by="InstanceFault.id.desc()",
        viewonly=True,
    )


class RequestSpec(Base):
    """What the scheduler was asked for one instance, and the alternates it kept.

    Rescheduling happens in a later play than scheduling, so the alternates
    must live somewhere every play can read.
    """

    __tablename__ = "request_specs"
    __table_args__ = (UniqueConstraint("instance_uuid"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_uuid: Mapped[str] = mapped_column(String(36))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    alternates: Mapped[list[Any]] = mapped_column(JSON, default=list)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    tried_hosts: Mapped[list[Any]] = mapped_column(JSON, default=list)


class Flavor(TimestampMixin, Base):
    __tablename__ = "flavors"
    __table_args__ = (UniqueConstraint("name"), UniqueConstraint("flavorid"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    flavorid: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    vcpus: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    root_gb: Mapped[int] = mapped_column(Integer)
    ephemeral_gb: Mapped[int] = mapped_column(Integer, default=0)
    swap: Mapped[int] = mapped_column(Integer, default=0)
    extra_specs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    is_public: Mapped[bool] = mapped_column(Boolean, default=True)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    description: Mapped[str | None] = mapped_column(Text)


class FlavorProject(TimestampMixin, Base):
    """A project given access to a private flavor (Nova's ``flavor_projects``): it lists, shows
    and boots the flavor as a public one (``novakit.catalog.flavors``)."""

    __tablename__ = "flavor_projects"
    __table_args__ = (UniqueConstraint("flavor_id", "project_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    flavor_id: Mapped[int] = mapped_column(Integer, ForeignKey("flavors.id", ondelete="CASCADE"))
    project_id: Mapped[str] = mapped_column(String(255))


class Image(TimestampMixin, Base):
    __tablename__ = "images"
    __table_args__ = (UniqueConstraint("uuid"), Index("ix_images_name", "name"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(255))
    disk_format: Mapped[str] = mapped_column(String(32), default="qcow2")
    container_format: Mapped[str] = mapped_column(String(32), default="bare")
    checksum: Mapped[str | None] = mapped_column(String(64))  # sha256
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    location: Mapped[str] = mapped_column(Text, default="")
    min_disk: Mapped[int] = mapped_column(Integer, default=0)
    min_ram: Mapped[int] = mapped_column(Integer, default=0)
    properties: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(32), default="active")
    project_id: Mapped[str | None] = mapped_column(String(255))  # its owner (Glance's ``owner``)
    # Glance's: public, private, shared (with ImageMember rows), community (novakit.catalog.images)
    visibility: Mapped[str] = mapped_column(String(32), default="public")


class ImageMember(TimestampMixin, Base):
    """A project a shared image is shared with (Glance's image members): the owner adds it
    (``pending``), the member project accepts or rejects it; only ``accepted`` lets it use it."""

    __tablename__ = "image_members"
    __table_args__ = (
        UniqueConstraint("image_id", "member"),
        Index("ix_image_members_member_status", "member", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    image_id: Mapped[str] = mapped_column(String(36), ForeignKey("images.uuid", ondelete="CASCADE"))
    member: Mapped[str] = mapped_column(String(255))  # a project id
    status: Mapped[str] = mapped_column(String(20), default="pending")


class Service(TimestampMixin, SoftDeleteMixin, Base):
    __tablename__ = "services"
    __table_args__ = (UniqueConstraint("host", "binary", "deleted"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    host: Mapped[str] = mapped_column(String(255))
    binary: Mapped[str] = mapped_column(String(255), default="novakit-compute")
    topic: Mapped[str | None] = mapped_column(String(255), default="compute")
    report_count: Mapped[int] = mapped_column(Integer, default=0)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    disabled_reason: Mapped[str | None] = mapped_column(String(255))
    last_seen_up: Mapped[dt.datetime | None] = mapped_column(DateTime)
    forced_down: Mapped[bool] = mapped_column(Boolean, default=False)
    # When novakit last reached the host (a request, heal, a heartbeat), and why it is down
    # when that contact failed or an admin said so (migration 0004).
    last_contact_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    down_reason: Mapped[str | None] = mapped_column(String(255))
    version: Mapped[int] = mapped_column(Integer, default=1)


class ComputeNode(TimestampMixin, SoftDeleteMixin, Base):
    """A hypervisor as its driver reported it, and how to reach it."""

    __tablename__ = "compute_nodes"
    __table_args__ = (UniqueConstraint("host", "hypervisor_hostname", "deleted"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    host: Mapped[str] = mapped_column(String(255))
    hypervisor_hostname: Mapped[str] = mapped_column(String(255))
    hypervisor_type: Mapped[str] = mapped_column(String(255))
    hypervisor_version: Mapped[int] = mapped_column(Integer, default=0)
    cpu_arch: Mapped[str] = mapped_column(String(32), default="x86_64")
    cpu_info: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    vcpus: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    local_gb: Mapped[int] = mapped_column(Integer)
    cpu_allocation_ratio: Mapped[float] = mapped_column(Float, default=4.0)
    ram_allocation_ratio: Mapped[float] = mapped_column(Float, default=1.0)
    disk_allocation_ratio: Mapped[float] = mapped_column(Float, default=1.0)
    reserved_host_memory_mb: Mapped[int] = mapped_column(Integer, default=512)
    reserved_host_cpus: Mapped[int] = mapped_column(Integer, default=0)
    reserved_host_disk_mb: Mapped[int] = mapped_column(Integer, default=0)
    # Images the host's cache holds (ImageLocalityWeigher), reported at
    # registration and after each build.
    cached_images: Mapped[list[Any]] = mapped_column(JSON, default=list)
    # How the controller reaches the host: {"driver": "fake", "transport": "local", ...}
    driver: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    stats: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The libvirt networks and bridges the host has, by name, as its driver reported them
    # (migration 0007); None: every network (the fake driver's hosts). The network filter reads it.
    networks: Mapped[list[Any] | None] = mapped_column(JSON)


# --- placement ---------------------------------------------------------------


class ResourceProvider(TimestampMixin, Base):
    __tablename__ = "resource_providers"
    __table_args__ = (UniqueConstraint("uuid"), UniqueConstraint("name"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(200))
    generation: Mapped[int] = mapped_column(Integer, default=0)


class Inventory(TimestampMixin, Base):
    __tablename__ = "inventories"
    __table_args__ = (
        UniqueConstraint("resource_provider_id", "resource_class"),
        Index("ix_inventories_rc_rp", "resource_class", "resource_provider_id"),
        # The scheduler walks this index in order of free capacity and stops after the pool it needs
        # (migration 0003), instead of summing allocations for every provider.
        Index("ix_inventories_rc_free_rp", "resource_class", "free", "resource_provider_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    resource_provider_id: Mapped[int] = mapped_column(ForeignKey("resource_providers.id", ondelete="CASCADE"))
    resource_class: Mapped[str] = mapped_column(String(255))
    total: Mapped[int] = mapped_column(Integer)
    reserved: Mapped[int] = mapped_column(Integer, default=0)
    min_unit: Mapped[int] = mapped_column(Integer, default=1)
    max_unit: Mapped[int] = mapped_column(Integer)
    step_size: Mapped[int] = mapped_column(Integer, default=1)
    allocation_ratio: Mapped[float] = mapped_column(Float, default=1.0)
    # SUM(allocations.used) of this provider and class, and capacity minus that. Kept exact by
    # triggers on allocations (migration 0003), so every writer of allocations keeps them right;
    # set_inventory recomputes ``free`` when the capacity changes.
    used: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    free: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class Allocation(TimestampMixin, Base):
    __tablename__ = "allocations"
    __table_args__ = (
        Index("ix_allocations_rp_rc", "resource_provider_id", "resource_class"),
        Index("ix_allocations_consumer", "consumer_id"),
        # Quota usage is counted per project from allocations (migration 0002).
        Index("ix_allocations_project_id", "project_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    resource_provider_id: Mapped[int] = mapped_column(ForeignKey("resource_providers.id", ondelete="CASCADE"))
    consumer_id: Mapped[str] = mapped_column(String(36))
    resource_class: Mapped[str] = mapped_column(String(255))
    used: Mapped[int] = mapped_column(Integer)
    project_id: Mapped[str | None] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))


class Trait(Base):
    __tablename__ = "traits"
    __table_args__ = (UniqueConstraint("name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))


class ResourceProviderTrait(Base):
    __tablename__ = "resource_provider_traits"

    resource_provider_id: Mapped[int] = mapped_column(
        ForeignKey("resource_providers.id", ondelete="CASCADE"), primary_key=True
    )
    trait_id: Mapped[int] = mapped_column(ForeignKey("traits.id", ondelete="CASCADE"), primary_key=True)


class PlacementAggregate(Base):
    """An aggregate of providers; an availability zone is an aggregate with ``availability_zone`` set."""

    __tablename__ = "placement_aggregates"
    __table_args__ = (UniqueConstraint("uuid"), UniqueConstraint("name"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(255))
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    aggregate_metadata: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)


class ResourceProviderAggregate(Base):
    __tablename__ = "resource_provider_aggregates"

    resource_provider_id: Mapped[int] = mapped_column(
        ForeignKey("resource_providers.id", ondelete="CASCADE"), primary_key=True
    )
    aggregate_id: Mapped[int] = mapped_column(
        ForeignKey("placement_aggregates.id", ondelete="CASCADE"), primary_key=True
    )


# --- audit trail ---------------------------------------------------------------


class InstanceAction(TimestampMixin, SoftDeleteMixin, Base):
    __tablename__ = "instance_actions"
    __table_args__ = (
        Index("ix_instance_actions_instance_uuid_request_id", "instance_uuid", "request_id"),
        UniqueConstraint("instance_uuid", "request_id", "action"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    action: Mapped[str] = mapped_column(String(255))
    instance_uuid: Mapped[str] = mapped_column(String(36))
    request_id: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))
    project_id: Mapped[str | None] = mapped_column(String(255))
    start_time: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    finish_time: Mapped[dt.datetime | None] = mapped_column(DateTime)
    message: Mapped[str | None] = mapped_column(String(255))

    events: Mapped[list[InstanceActionEvent]] = relationship(
        back_populates="action", order_by="InstanceActionEvent.id"
    )


class InstanceActionEvent(TimestampMixin, SoftDeleteMixin, Base):
    __tablename__ = "instance_actions_events"
    __table_args__ = (Index("ix_instance_actions_events_action_id", "action_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    event: Mapped[str] = mapped_column(String(255))
    action_id: Mapped[int] = mapped_column(ForeignKey("instance_actions.id"))
    start_time: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    finish_time: Mapped[dt.datetime | None] = mapped_column(DateTime)
    result: Mapped[str | None] = mapped_column(String(255))
    traceback: Mapped[str | None] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(String(255))
    details: Mapped[str | None] = mapped_column(Text)

    action: Mapped[InstanceAction] = relationship(back_populates="events")


class InstanceFault(TimestampMixin, SoftDeleteMixin, Base):
    __tablename__ = "instance_faults"
    __table_args__ = (Index("ix_instance_faults_instance_uuid", "instance_uuid"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_uuid: Mapped[str] = mapped_column(String(36))
    code: Mapped[int] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(String(255))
    details: Mapped[str | None] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(String(255))


# --- key pairs ---------------------------------------------------------------------


class KeyPair(TimestampMixin, Base):
    """A user's SSH public key (Nova's os-keypairs, API database): names are unique per user.
    The private key of a generated pair is never stored (``novakit.keypairs``)."""

    __tablename__ = "key_pairs"
    __table_args__ = (UniqueConstraint("user_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[str] = mapped_column(String(255))
    type: Mapped[str] = mapped_column(String(10), default="ssh")
    fingerprint: Mapped[str] = mapped_column(String(255))
    public_key: Mapped[str] = mapped_column(Text)


# --- quotas and server groups ------------------------------------------------------


class Quota(TimestampMixin, Base):
    __tablename__ = "quotas"
    __table_args__ = (UniqueConstraint("project_id", "resource"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[str] = mapped_column(String(255))
    resource: Mapped[str] = mapped_column(String(255))
    hard_limit: Mapped[int] = mapped_column(Integer)


class InstanceGroup(TimestampMixin, SoftDeleteMixin, Base):
    __tablename__ = "instance_groups"
    __table_args__ = (UniqueConstraint("uuid"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(255))
    project_id: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[str] = mapped_column(String(255))
    # affinity, anti-affinity, soft-affinity, soft-anti-affinity
    policy: Mapped[str] = mapped_column(String(255))
    rules: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    members: Mapped[list[InstanceGroupMember]] = relationship(back_populates="group")


class InstanceGroupMember(TimestampMixin, Base):
    __tablename__ = "instance_group_member"
    __table_args__ = (
        UniqueConstraint("group_id", "instance_uuid"),
        Index("ix_igm_instance", "instance_uuid"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_id: Mapped[int] = mapped_column(ForeignKey("instance_groups.id"))
    instance_uuid: Mapped[str] = mapped_column(String(36))

    group: Mapped[InstanceGroup] = relationship(back_populates="members")


# --- cells v2 (API database) ---------------------------------------------------------


class CellMapping(TimestampMixin, Base):
    """A cell and how to reach its database.

    ``database_url`` None means "derived from the API database's": cell1 of a database that
    holds both (the embedded default, a pre-cells database), and cell0 next to it
    (``novakit.cells.registry``). ``disabled``: no new servers are scheduled into it.
    """

    __tablename__ = "cell_mappings"
    __table_args__ = (UniqueConstraint("uuid"), UniqueConstraint("name"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(255))
    database_url: Mapped[str | None] = mapped_column(Text)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)


class HostMapping(TimestampMixin, Base):
    """The cell a compute host's servers live in (one cell a host)."""

    __tablename__ = "host_mappings"
    __table_args__ = (UniqueConstraint("host"), Index("ix_host_mappings_cell_id", "cell_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cell_id: Mapped[int] = mapped_column(ForeignKey("cell_mappings.id"))
    host: Mapped[str] = mapped_column(String(255))


class InstanceMapping(TimestampMixin, SoftDeleteMixin, Base):
    """Where an instance lives, and enough of it to answer for it while its cell is down.

    ``cell_id`` None: not scheduled yet, the instance is in the API database's own instance
    tables (Nova keeps a build request there). The name and project make server names
    unique per project across every cell (the modules are idempotent by name) and give the
    minimal record a down cell's server is listed with.
    """

    __tablename__ = "instance_mappings"
    __table_args__ = (
        UniqueConstraint("instance_uuid"),
        UniqueConstraint("project_id", "display_name", "deleted"),
        Index("ix_instance_mappings_cell_id", "cell_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_uuid: Mapped[str] = mapped_column(String(36))
    cell_id: Mapped[int | None] = mapped_column(ForeignKey("cell_mappings.id"))
    project_id: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))
    display_name: Mapped[str] = mapped_column(String(255))


# --- networks (Neutron-shaped, API database; migration 0007) --------------------------
#
# Networks, subnets, ports and their addresses are global, as Neutron's are: a port and its
# fixed IPs exist before the server is scheduled and outlive a move between cells. Rows are
# deleted outright, as Neutron deletes them; the unique keys are what make an address or a
# MAC taken at most once, whatever process asks.


class Network(TimestampMixin, Base):
    """A network the hosts offer: a libvirt network (``provider`` "network") or a bridge."""

    __tablename__ = "networks"
    __table_args__ = (
        UniqueConstraint("uuid"),
        UniqueConstraint("name"),
        # At most one default network, kept by the database against two concurrent creates.
        Index(
            "uq_networks_is_default",
            "is_default",
            unique=True,
            sqlite_where=text("is_default"),
            postgresql_where=text("is_default"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(255))
    project_id: Mapped[str | None] = mapped_column(String(255))
    shared: Mapped[bool] = mapped_column(Boolean, default=True)
    # The network a server gets when its request names none (at most one, checked on write).
    is_default: Mapped[bool] = mapped_column(Boolean, default=False)
    provider: Mapped[str] = mapped_column(String(32), default="network")  # "network" | "bridge"
    # The libvirt network's or the bridge's name on the hosts.
    source: Mapped[str] = mapped_column(String(255))
    mtu: Mapped[int | None] = mapped_column(Integer)


class Subnet(TimestampMixin, Base):
    __tablename__ = "subnets"
    __table_args__ = (
        UniqueConstraint("uuid"),
        UniqueConstraint("name"),
        Index("ix_subnets_network_id", "network_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(255))
    network_id: Mapped[int] = mapped_column(ForeignKey("networks.id", ondelete="CASCADE"))
    project_id: Mapped[str | None] = mapped_column(String(255))
    ip_version: Mapped[int] = mapped_column(Integer, default=4)
    cidr: Mapped[str] = mapped_column(String(64))
    gateway_ip: Mapped[str | None] = mapped_column(String(64))
    dns_nameservers: Mapped[list[Any]] = mapped_column(JSON, default=list)
    # [{"start": "10.0.0.10", "end": "10.0.0.20"}, ...]
    allocation_pools: Mapped[list[Any]] = mapped_column(JSON, default=list)
    enable_dhcp: Mapped[bool] = mapped_column(Boolean, default=True)


class Port(TimestampMixin, Base):
    """A NIC: its MAC (chosen once, never changed), its server and the host it is bound to."""

    __tablename__ = "ports"
    __table_args__ = (
        UniqueConstraint("uuid"),
        UniqueConstraint("mac_address"),
        Index("ix_ports_device_id", "device_id"),
        Index("ix_ports_network_id", "network_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str | None] = mapped_column(String(255))
    network_id: Mapped[int] = mapped_column(ForeignKey("networks.id"))
    project_id: Mapped[str | None] = mapped_column(String(255))
    mac_address: Mapped[str] = mapped_column(String(17))
    # The server (instance uuid) and Neutron's device_owner ("compute:nova" for a server's port).
    device_id: Mapped[str | None] = mapped_column(String(36))
    device_owner: Mapped[str | None] = mapped_column(String(255))
    binding_host: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16), default="DOWN")  # DOWN | ACTIVE | BUILD
    # A port the user made and handed to a boot is kept (unbound) when the server goes; one
    # made for the boot goes with the server (Nova's preserve_on_delete).
    preserve_on_delete: Mapped[bool] = mapped_column(Boolean, default=True)
    # Neutron's port security: enabled, the port's groups decide its traffic (no group: nothing
    # passes); disabled, nothing is filtered and the port carries no group.
    port_security_enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())


class IPAllocation(Base):
    """One fixed IP of a port; unique per network, so two ports never share an address."""

    __tablename__ = "ip_allocations"
    __table_args__ = (
        UniqueConstraint("network_id", "ip_address"),
        Index("ix_ip_allocations_port_id", "port_id"),
        Index("ix_ip_allocations_subnet_id", "subnet_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    port_id: Mapped[int] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"))
    subnet_id: Mapped[int] = mapped_column(ForeignKey("subnets.id"))
    network_id: Mapped[int] = mapped_column(ForeignKey("networks.id"))
    ip_address: Mapped[str] = mapped_column(String(64))


# --- security groups (Neutron's, API database beside the ports; migration 0011) ----------


class SecurityGroup(TimestampMixin, Base):
    """A project's named set of allow rules; a port carries a list of them.
    Names are unique per project (Neutron allows twins; novakit finds groups by name)."""

    __tablename__ = "security_groups"
    __table_args__ = (UniqueConstraint("uuid"), UniqueConstraint("project_id", "name"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(255))
    description: Mapped[str | None] = mapped_column(String(255))
    project_id: Mapped[str] = mapped_column(String(255))


class SecurityGroupRule(TimestampMixin, Base):
    """One allow rule of a group. ``fingerprint`` is the rule's fields in one spelling: unique per
    group, so that two concurrent creates of the same rule cannot both succeed (Neutron's 409)."""

    __tablename__ = "security_group_rules"
    __table_args__ = (
        UniqueConstraint("uuid"),
        UniqueConstraint("security_group_id", "fingerprint"),
        Index("ix_security_group_rules_remote_group_id", "remote_group_id"),
        Index("ix_security_group_rules_project_id", "project_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    security_group_id: Mapped[int] = mapped_column(ForeignKey("security_groups.id", ondelete="CASCADE"))
    project_id: Mapped[str] = mapped_column(String(255))
    direction: Mapped[str] = mapped_column(String(16))  # ingress | egress
    ethertype: Mapped[str] = mapped_column(String(8))  # IPv4 | IPv6
    protocol: Mapped[str | None] = mapped_column(String(40))  # a name, a number, None: any
    port_range_min: Mapped[int | None] = mapped_column(Integer)
    port_range_max: Mapped[int | None] = mapped_column(Integer)
    remote_ip_prefix: Mapped[str | None] = mapped_column(String(64))
    remote_group_id: Mapped[int | None] = mapped_column(ForeignKey("security_groups.id", ondelete="CASCADE"))
    description: Mapped[str | None] = mapped_column(String(255))
    fingerprint: Mapped[str] = mapped_column(String(255))


class SecurityGroupPortBinding(Base):
    """A port carries a group (Neutron's securitygroupportbindings). The group's key has no
    cascade: a group a port carries cannot be deleted (SecurityGroupInUse)."""

    __tablename__ = "security_group_port_bindings"
    __table_args__ = (Index("ix_security_group_port_bindings_security_group_id", "security_group_id"),)

    port_id: Mapped[int] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), primary_key=True)
    security_group_id: Mapped[int] = mapped_column(ForeignKey("security_groups.id"), primary_key=True)


# --- volumes (Cinder-shaped, API database; migration 0007) ----------------------------


class Volume(TimestampMixin, SoftDeleteMixin, Base):
    """A disk in a storage pool of one host, which outlives the servers it is attached to.

    ``status`` is Cinder's (creating, available, reserved, attaching, in-use, detaching,
    deleting, error, error_deleting), written compare-and-swap as instance states are.
    """

    __tablename__ = "volumes"
    __table_args__ = (
        UniqueConstraint("uuid"),
        UniqueConstraint("project_id", "name", "deleted"),
        Index("ix_volumes_host", "host"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(255))
    description: Mapped[str | None] = mapped_column(String(255))
    project_id: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(Integer)  # GiB
    status: Mapped[str] = mapped_column(String(32))
    host: Mapped[str | None] = mapped_column(String(255))
    pool: Mapped[str] = mapped_column(String(255), default="novakit-volumes")
    format: Mapped[str] = mapped_column(String(16), default="qcow2")  # qcow2 | raw (dir pool), raw (LVM)
    image_id: Mapped[str | None] = mapped_column(String(36))
    bootable: Mapped[bool] = mapped_column(Boolean, default=False)
    # Why the volume is in error / error_deleting (the host's fault message), else None.
    status_reason: Mapped[str | None] = mapped_column(String(255))


class VolumeAttachment(TimestampMixin, SoftDeleteMixin, Base):
    """A volume attached to a server: Cinder's attachment and Nova's block device mapping in one.

    Nova keeps block device mappings in the cell database; here they stay in the API database
    beside the volume (as Cinder keeps its attachments), so that attaching is one transaction
    with the volume's status and a server's move between cells leaves them where they are.
    A volume is attached once at most (no multi-attach); a device name once per server.
    """

    __tablename__ = "volume_attachments"
    __table_args__ = (
        UniqueConstraint("uuid"),
        UniqueConstraint("volume_id", "deleted"),
        UniqueConstraint("instance_uuid", "device_name", "deleted"),
        Index("ix_volume_attachments_instance_uuid", "instance_uuid"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    volume_id: Mapped[int] = mapped_column(ForeignKey("volumes.id"))
    instance_uuid: Mapped[str] = mapped_column(String(36))
    device_name: Mapped[str] = mapped_column(String(32))  # vdb, vdc, ...; vda for a root volume
    boot_index: Mapped[int | None] = mapped_column(Integer)  # 0: the server's root disk
    delete_on_termination: Mapped[bool] = mapped_column(Boolean, default=False)
    # attaching | attached | detaching
    attach_status: Mapped[str] = mapped_column(String(32), default="attaching")


# --- moves of servers between hosts (API database; migration 0008) ------------------------


class Migration(TimestampMixin, Base):
    """A server's move between hosts: a resize, a cold or live migration, an evacuation.

    Nova's statuses and types. Nova keeps migrations in the cell database; here they live in
    the API database beside placement, because during a move the migration is a consumer
    of allocations (it holds the source host's claim while the instance holds the
    destination's), and handing a claim from one consumer to the other is one transaction
    with the migration's status. ``old_vm_state`` is where a revert or a rollback returns
    the server to (active or stopped).
    """

    __tablename__ = "migrations"
    __table_args__ = (
        UniqueConstraint("uuid"),
        Index("ix_migrations_instance_uuid_status", "instance_uuid", "status"),
        Index("ix_migrations_source_compute_status", "source_compute", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36))
    instance_uuid: Mapped[str] = mapped_column(String(36))
    project_id: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[str] = mapped_column(String(255))
    request_id: Mapped[str] = mapped_column(String(255))
    # resize | migration | live-migration | evacuation
    migration_type: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(32))
    source_compute: Mapped[str | None] = mapped_column(String(255))
    dest_compute: Mapped[str | None] = mapped_column(String(255))
    old_flavor: Mapped[dict[str, Any]] = mapped_column(JSON)
    new_flavor: Mapped[dict[str, Any]] = mapped_column(JSON)
    old_vm_state: Mapped[str] = mapped_column(String(255))


# --- identity (a Keystone v3 subset, API database; migration 0013) ----------------------------


class IdentityUser(TimestampMixin, Base):
    """A user of the service path (Keystone's ``user`` and ``password`` in one row).

    ``password_hash`` is an argon2 hash, never the password. ``password_changed_at`` is when
    the password was last set, ``tokens_revoked_at`` when the user was last disabled: a token
    issued before either no longer validates, even once the user is enabled again (as Keystone
    revokes a disabled user's tokens). Users live in the one fixed ``default`` domain for now
    (``novakit.identity``)."""

    __tablename__ = "identity_users"
    __table_args__ = (UniqueConstraint("uuid"), UniqueConstraint("domain_id", "name"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    domain_id: Mapped[str] = mapped_column(String(64))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    password_hash: Mapped[str | None] = mapped_column(String(255))
    password_changed_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    tokens_revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime)


class IdentityProject(TimestampMixin, Base):
    """A project (Keystone's ``project``): what a token is scoped to and roles are given on."""

    __tablename__ = "identity_projects"
    __table_args__ = (UniqueConstraint("uuid"), UniqueConstraint("domain_id", "name"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    domain_id: Mapped[str] = mapped_column(String(64))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    description: Mapped[str | None] = mapped_column(Text)


class IdentityRole(TimestampMixin, Base):
    """A global role (Keystone's ``role`` with no domain): admin, member, reader, ..."""

    __tablename__ = "identity_roles"
    __table_args__ = (UniqueConstraint("uuid"), UniqueConstraint("name"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))


class IdentityRoleAssignment(Base):
    """A user has a role on a project (Keystone's ``assignment``, type UserProject). Deleting the
    user, the project or the role takes its assignments with it."""

    __tablename__ = "identity_role_assignments"
    __table_args__ = (
        Index("ix_identity_role_assignments_project_id", "project_id"),
        Index("ix_identity_role_assignments_role_id", "role_id"),
    )

    user_id: Mapped[int] = mapped_column(
        ForeignKey("identity_users.id", ondelete="CASCADE"), primary_key=True
    )
    project_id: Mapped[int] = mapped_column(
        ForeignKey("identity_projects.id", ondelete="CASCADE"), primary_key=True
    )
    role_id: Mapped[int] = mapped_column(
        ForeignKey("identity_roles.id", ondelete="CASCADE"), primary_key=True
    )
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class IdentityRevokedToken(Base):
    """A revoked token, by its audit id (Keystone's revocation event, narrowed to one audit id):
    every token carrying that audit id is refused until ``expires_at``, after which the token
    would be refused anyway and the row can go."""

    __tablename__ = "identity_revoked_tokens"
    __table_args__ = (Index("ix_identity_revoked_tokens_expires_at", "expires_at"),)

    audit_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime)
    revoked_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class IdentityEndpoint(TimestampMixin, Base):
    """One endpoint of the service catalog (Keystone's ``service`` and ``endpoint`` in one row):
    a service's URL for one interface in one region. ``service_id`` is the same for every
    endpoint of one service."""

    __tablename__ = "identity_endpoints"
    __table_args__ = (UniqueConstraint("uuid"), UniqueConstraint("service_type", "interface", "region_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(64))
    service_id: Mapped[str] = mapped_column(String(64))
    service_type: Mapped[str] = mapped_column(String(255))
    service_name: Mapped[str] = mapped_column(String(255))
    interface: Mapped[str] = mapped_column(String(16))  # public | internal | admin
    region_id: Mapped[str] = mapped_column(String(255))
    url: Mapped[str] = mapped_column(Text)


class IdentityApplicationCredential(Base):
    """An application credential (Keystone's): a user's delegation of some of its roles on one
    project to a job, proven by a secret instead of the user's password (migration 0014).

    ``secret_hash`` is an argon2 hash, never the secret, which only the create answer shows.
    Deleting the user or the project takes the credential with it."""

    __tablename__ = "identity_application_credentials"
    __table_args__ = (
        UniqueConstraint("uuid"),
        UniqueConstraint("user_id", "name"),
        Index("ix_identity_application_credentials_project_id", "project_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[int] = mapped_column(ForeignKey("identity_users.id", ondelete="CASCADE"))
    project_id: Mapped[int] = mapped_column(ForeignKey("identity_projects.id", ondelete="CASCADE"))
    secret_hash: Mapped[str] = mapped_column(String(255))
    description: Mapped[str | None] = mapped_column(Text)
    expires_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    unrestricted: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class IdentityApplicationCredentialRole(Base):
    """A role an application credential carries (one of its user's roles on its project when it
    was made). Deleting the credential or the role takes the row with it."""

    __tablename__ = "identity_application_credential_roles"
    __table_args__ = (Index("ix_identity_application_credential_roles_role_id", "role_id"),)

    application_credential_id: Mapped[int] = mapped_column(
        ForeignKey("identity_application_credentials.id", ondelete="CASCADE"), primary_key=True
    )
    role_id: Mapped[int] = mapped_column(
        ForeignKey("identity_roles.id", ondelete="CASCADE"), primary_key=True
    )


class IdentityRevision(Base):
    """One row: a number every change of the identity tables raises in its own transaction
    (``novakit.identity.revision``). A service process keeps the tokens it validated with the
    number they were validated at, and checks a token again only when the number moved."""

    __tablename__ = "identity_revision"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    revision: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)


#: The tables a cell's database holds; every other table is the API database's.
CELL_TABLES = frozenset({"instances", "instance_actions", "instance_actions_events", "instance_faults"})
