"""Creating servers: the API's half of a boot, checked before anything moves.

``CreateAPI.create_servers`` validates a create request, checks quota, the
image, the flavor, networks and volumes (``_checked_request``, the one place
for those checks, shared by the dry run), names the servers (``names``) and
writes their records with their request specs in one transaction; the
conductor schedules and builds them. ``novakit.compute.api.API`` is this plus
the actions and the reads.
"""

from __future__ import annotations

import builtins
import functools
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dc_field
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import Table, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.catalog import flavors, images
from novakit.cells import instances as cell_instances
from novakit.cells import mappings
from novakit.cells.registry import UNSCHEDULED, grouped
from novakit.compute import actions, listing, passwords, schemas
from novakit.compute import names as naming
from novakit.compute.states import (
    PowerState,
    TaskState,
    VmState,
)
from novakit.compute.views import host_shown, server_view
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.engine import Database
from novakit.db.models import Instance, InstanceGroup, InstanceGroupMember, RequestSpec
from novakit.keypairs import registry as keypairs
from novakit.placement import aggregates as placement_aggregates
from novakit.placement.providers import find_provider


class CreateAPI:
    db: Database
    conf: Config
    conductor: Any
    later: Callable[..., None] | None

    # ------------------------------------------------------------------ create

    def create(
        self,
        ctx: RequestContext,
        data: dict[str, Any] | schemas.ServerCreate,
        *,
        build: bool = True,
        dry_run: bool = False,
    ) -> builtins.list[dict[str, Any]]:
        """Record the servers (building/scheduling) and, unless ``build`` is False, build them
        (with ``later`` set, there: the servers are returned as recorded).

        With ``build=False`` the caller drives the conductor itself (the boot
        playbook) or hands the build to a worker. ``dry_run`` runs every check of
        the real create and then the scheduler's dry run, writes and claims
        nothing, and returns ``{"name", "host"}`` per server: where it would go
        (``host`` None for one that would not fit although ``min_count`` did).
        """
        try:
            outcome = self.create_servers(ctx, data, dry_run=dry_run)
        except exceptions.NoValidHost as exc:
            shown = no_valid_host_shown(ctx, exc)
            if shown is exc:
                raise
            raise shown from None
        if dry_run:
            return [{"name": n, "host": h} for n, h in outcome.would_schedule_to.items()]
        if build and outcome.unbuilt and not self.build_later(ctx, outcome):
            # The conductor starts from the records just written instead of reading them back,
            # and hands back the rows of the servers that built as it recorded them.
            rows: dict[str, Instance] = {}
            self.conductor.build_instances(ctx, outcome.unbuilt, records=outcome.records, built=rows)
            missing = [u for u in outcome.uuids if u not in rows]
            read = {i.uuid: i for i in cell_instances.get_many(self.db, ctx, missing)} if missing else {}
            built = [i for i in (rows.get(u) or read.get(u) for u in outcome.uuids) if i is not None]
            # Shown as a listing shows them: the image by its name (the one the create checked).
            names = _image_names(outcome.records)
            unknown = {i.image_ref for i in built if i.image_ref and i.image_ref not in names}
            if unknown:
                with self.db.reader() as session:
                    names.update(listing.image_names(session, unknown))
            return [server_view(i, ctx, names.get(i.image_ref or "")) for i in built]
        return outcome.servers

    def build_later(self, ctx: RequestContext, outcome: CreateOutcome) -> bool:
        """Hand the build of the servers ``outcome`` recorded and left unbuilt to ``later``
        (``novakit serve``'s pool), starting from the records just written; False when there is
        no ``later``: the caller builds."""
        if self.later is None:
            return False
        if outcome.unbuilt:
            self.conductor.build_later(self.later, ctx, outcome.unbuilt, outcome.records)
        return True

    def create_servers(
        self,
        ctx: RequestContext,
        data: dict[str, Any] | schemas.ServerCreate,
        *,
        dry_run: bool = False,
        declarative: bool = False,
    ) -> CreateOutcome:
        """Check and record a create request; building is the caller's (``unbuilt``).

        Names follow ``names``: ``name`` without a count, ``name-1`` ... ``name-N``
        with one. A name taken is a DuplicateName.

        ``declarative`` (the boot playbook, the ``server`` module): the request is
        what should exist (``_converge``): the missing servers are recorded, those
        that exist are left alone, except those recorded but never scheduled whose
        owner is gone (a run killed before its schedule step, its lease run out),
        which this request takes over and returns in ``unbuilt`` for the caller to
        build, and, with a count, those numbered
        above it are returned in ``surplus`` for the caller to delete.
        """
        req = data if isinstance(data, schemas.ServerCreate) else schemas.parse(schemas.ServerCreate, data)
        ceiling = self.conf.compute.max_count
        if int(req.max_count or req.min_count) > ceiling:
            raise exceptions.ValidationError(
                "max_count", f"must be at most {ceiling} (the configuration's compute.max_count)"
            )
        if declarative:
            return self._converge(ctx, req, dry_run=dry_run)
        names = _names(req)
        if dry_run:
            return self._plan(ctx, req, names)
        uuids, records = self._create_records(ctx, req, names)
        views = [server_view(inst, ctx) for inst, _ in records.values()]
        return CreateOutcome(
            servers=views, uuids=uuids, changed=True, unbuilt=uuids, records=records, created=uuids
        )

    def _converge(self, ctx: RequestContext, req: schemas.ServerCreate, *, dry_run: bool) -> CreateOutcome:
        """The declarative create: have the request's servers (``names``), no more, no fewer.

        With a count, the servers numbered 1..N that are missing are recorded (gaps
        filled) and those numbered above N come back in ``surplus`` for the caller
        to delete through its delete path; without one, the one server ``name``.
        ``min_count`` is the fewest of the N that must exist afterwards: the new
        ones are all-or-nothing down to what that leaves to create.

        A run that loses the race for a name (another run recorded it between
        this one's read and its insert: the unique key refuses the insert) plans
        again and finds it there: the servers exist once, and the winner builds
        them, so the second plan picks up nothing.
        """
        count = naming.count_of(req)
        for attempt in (1, 2):
            live = self._family(ctx, req.name)
            if count is None:
                plan = naming.ScalePlan(
                    wanted=[req.name], missing=[] if req.name in live else [req.name], extra=[]
                )
            else:
                plan = naming.plan(req.name, count, live)
            existing = [live[n] for n in plan.existing]
            kept = [server_view(i, ctx) for i in existing]
            surplus = [server_view(live[n], ctx) for n in plan.extra]
            picked_up = self._take_over_unscheduled(ctx, existing, dry_run) if attempt == 1 else []
            outcome = CreateOutcome(
                servers=kept,
                uuids=[i.uuid for i in existing],
                changed=bool(picked_up),
                unbuilt=picked_up,
                would_schedule_to={i.display_name: i.host for i in existing},
                surplus=surplus,
            )
            if not plan.missing:
                return outcome
            fewest = max(1, min(len(plan.missing), req.min_count - len(existing)))
            batch = req.model_copy(update={"max_count": len(plan.missing), "min_count": fewest})
            if dry_run:
                planned = self._plan(ctx, batch, plan.missing)
                outcome.would_schedule_to.update(planned.would_schedule_to)
                outcome.changed = True
                return outcome
            try:
                uuids, records = self._create_records(ctx, batch, plan.missing)
            except exceptions.DuplicateName:
                if attempt == 1:
                    continue
                raise
            new = {uuid: server_view(inst, ctx) for uuid, (inst, _) in records.items()}
            by_name = {v["name"]: v for v in [*kept, *new.values()]}
            outcome.servers = [by_name[n] for n in plan.wanted]
            outcome.uuids = [v["id"] for v in outcome.servers]
            outcome.unbuilt = [*picked_up, *uuids]
            outcome.created = uuids
            outcome.changed = True
            # The conductor may start from the records just written only when they are all it builds.
            outcome.records = None if picked_up else records
            return outcome
        raise AssertionError("unreachable")  # pragma: no cover - the second attempt returns or raises

    def _take_over_unscheduled(
        self, ctx: RequestContext, existing: builtins.list[Instance], dry_run: bool
    ) -> builtins.list[str]:
        """The servers of ``existing`` recorded but never scheduled whose owner is gone, made this
        request's (a guarded write that expects the owner read and its lease run out, as heal's
        take-over): the uuids now ``ctx``'s to build.

        A server whose owner is alive is left to it: its run is between recording and
        scheduling it (the same moment, in another process), and two runs building one
        server would each claim a host for it.
        """
        now = self.conductor.clock()
        stale = now - timedelta(seconds=self.conf.compute.build_timeout)
        orphaned = [i for i in existing if _never_scheduled(i) and db_api.owner_gone(i, now, stale)]
        if dry_run or not orphaned:
            return [i.uuid for i in orphaned]
        lease = self.conductor.lease_until()

        def take(session: Session, group: builtins.list[str]) -> builtins.list[str]:
            taken = []
            for inst in [i for i in orphaned if i.uuid in group]:
                try:
                    db_api.instance_update(
                        session,
                        inst.uuid,
                        {"task_owner": ctx.request_id, "task_lease_until": lease},
                        expected_task_state=[TaskState.SCHEDULING],
                        expected_vm_state=[VmState.BUILDING],
                        expected_owner=inst.task_owner,
                        lease_expired_at=now,
                        fetch=False,
                    )
                except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound):
                    continue  # taken over, scheduled or deleted meanwhile: not ours
                taken.append(inst.uuid)
            return taken

        taken: builtins.list[str] = []
        for _cell, group in grouped(self.db, [i.uuid for i in orphaned]):
            taken.extend(self.db.run_in_transaction(functools.partial(take, group=group)))
        return taken

    def create_records(self, ctx: RequestContext, req: schemas.ServerCreate) -> builtins.list[str]:
        """Record the servers of ``req`` (building/scheduling, action ``create``); their uuids."""
        return self._create_records(ctx, req, _names(req))[0]

    def _checked_request(
        self, session: Session, ctx: RequestContext, req: schemas.ServerCreate, count: int
    ) -> tuple[Any, Any, InstanceGroup | None, dict[str, Any], builtins.list[Any], str | None]:
        """Every check of a create that reads the database, the request spec it makes, the
        servers' NICs (``network.allocation.plan``: networks, ports, fixed IPs, free addresses)
        and the public key of ``key_name`` (the caller's pair, as Nova looks it up).

        The real create runs it in the transaction that inserts the records, the
        dry run in a read: the two cannot disagree.
        """
        from novakit import quota
        from novakit.network import allocation, security_groups
        from novakit.scheduler.request_spec import RequestSpec as SchedSpec
        from novakit.volume import boot

        flavor = flavors.usable(session, ctx, req.flavor)
        if req.image is None and req.boot_volume is None:
            raise exceptions.ValidationError(
                "image", "is required unless the server boots from an existing volume (boot_volume)"
            )
        image = images.usable(session, ctx, req.image) if req.image is not None else None
        # The root disk as a volume (Nova's block_device_mapping_v2, boot index 0), checked.
        root_volume, boot_volume = boot.request_fields(session, ctx, req, image)
        if boot_volume is not None:
            # Its image is the server's (Nova ignores the request's image for a volume source).
            image = images.by_uuid(session, boot_volume.image_id or "")
            if image is None:
                raise exceptions.ValidationError(
                    "boot_volume",
                    f"volume {boot_volume.name}'s image {boot_volume.image_id} no longer exists; "
                    "a server boots from a volume whose image is known",
                )
        assert image is not None  # given, or the boot volume's
        group = self._group(session, ctx, req.server_group or req.scheduler_hints.group)
        key_data = None if req.key_name is None else keypairs.for_boot(session, ctx, req.key_name).public_key
        where = self._requested_zone(session, ctx, req.availability_zone)
        for ref in [*req.scheduler_hints.same_host, *req.scheduler_hints.different_host]:
            # Wherever the server lives: its mapping says it is one the caller may see.
            if (
                not mappings.find(session, ctx, ref)
                or mappings.find(session, ctx, ref)[0].instance_uuid != ref
            ):
                raise exceptions.InstanceNotFound(instance_id=ref)
        if image.min_ram and flavor.memory_mb < image.min_ram:
            raise exceptions.ValidationError(
                "flavor", f"image {image.name} needs at least {image.min_ram} MB of RAM"
            )
        if image.min_disk and not root_volume and flavor.root_gb < image.min_disk:
            raise exceptions.ValidationError(
                "flavor", f"image {image.name} needs at least {image.min_disk} GB of disk"
            )
        if req.admin_password is not None:
            passwords.check_deliverable(session, "admin_password", req.config_drive)
        nics = allocation.plan(session, ctx, req.networks, count)
        groups = security_groups.for_boot(session, ctx, req.security_groups, nics)
        sched = SchedSpec(
            request_id=ctx.request_id,
            project_id=ctx.project_id,
            user_id=ctx.user_id,
            flavor=flavors.spec(flavors.snapshot(flavor)),
            image=images.spec(image),
            availability_zone=where.zone,
            requested_host=where.host,
            num_instances=count,
            min_count=req.min_count,
            instance_group=None,
            scheduler_hints=req.scheduler_hints.model_dump(exclude_none=True),
            # Only a host whose driver hands the password to the guest may take the instance.
            required_traits=[passwords.ADMIN_PASSWORD_TRAIT] if req.admin_password is not None else [],
            networks=allocation.sources(nics),
            security_groups=groups,
            **root_volume,
        )
        each = quota.per_instance(sched.resources())
        if sched.new_root_volume_gb is not None:  # a new volume per server counts as Cinder's
            each.update(volumes=1, gigabytes=sched.new_root_volume_gb)
        quota.check_quota(session, self.conf, ctx.project_id, {k: count * v for k, v in each.items()})
        spec = sched.model_dump(mode="json")
        if group is not None:
            spec["instance_group"] = {
                "uuid": group.uuid,
                "policy": group.policy,
                "rules": dict(group.rules or {}),
            }
        return flavor, image, group, spec, nics, key_data

    def _plan(
        self, ctx: RequestContext, req: schemas.ServerCreate, names: builtins.list[str]
    ) -> CreateOutcome:
        """The dry run of a create: its checks, the name check, then the scheduler's dry run."""
        from novakit.scheduler.request_spec import RequestSpec as SchedSpec

        with self.db.reader() as session:
            spec = self._checked_request(session, ctx, req, len(names))[3]
        taken = self._existing(ctx, names)
        if taken:
            raise exceptions.DuplicateName(name=taken[0], project_id=ctx.project_id)
        # Placeholder consumers: nothing is written, they only keep the instances apart.
        uuids = [f"00000000-0000-4000-8000-{i:012d}" for i in range(len(names))]
        selections = self.conductor.scheduler.select_destinations(
            SchedSpec.model_validate(spec), uuids, dry_run=True
        )
        chosen = {
            name: (host_shown(ctx, ctx.project_id, sel[0].host) if sel else None)
            for name, sel in zip(names, selections, strict=True)
        }
        return CreateOutcome(servers=[], uuids=[], changed=True, would_schedule_to=chosen)

    def _create_records(
        self, ctx: RequestContext, req: schemas.ServerCreate, names: builtins.list[str]
    ) -> tuple[builtins.list[str], dict[str, tuple[Instance, RequestSpec]]]:
        count = len(names)
        uuids = [str(uuidlib.uuid4()) for _ in names]
        reservation = f"r-{uuidlib.uuid4().hex[:8]}"
        # The build is this request's: its owner and lease start with the records (see conductor).
        lease = self.conductor.lease_until()
        # Hashed before anything is written: the clear text is never stored (``passwords``).
        password_hash = (
            passwords.hash_admin_password(req.admin_password.get_secret_value())
            if req.admin_password is not None
            else None
        )

        from novakit.network import allocation
        from novakit.volume import boot

        def write(session: Session) -> tuple[builtins.list[dict[str, Any]], dict[str, Any]]:
            # The look-ups, the early quota check, the ports and the inserts in one transaction.
            flavor, image, group, spec, nics, key_data = self._checked_request(session, ctx, req, count)
            snapshot = flavors.snapshot(flavor)
            common = {
                "project_id": ctx.project_id,
                "user_id": ctx.user_id,
                # The zone asked for until the scheduler places it (then its host's zone).
                "availability_zone": spec["availability_zone"],
                "reservation_id": reservation,
                "flavor": snapshot,
                "instance_type_id": flavor.id,
                "vcpus": flavor.vcpus,
                "memory_mb": flavor.memory_mb,
                "root_gb": flavor.root_gb,
                "ephemeral_gb": flavor.ephemeral_gb,
                "image_ref": image.uuid,
                "vm_state": VmState.BUILDING.value,
                "task_state": TaskState.SCHEDULING.value,
                "task_owner": ctx.request_id,
                "task_lease_until": lease,
                "power_state": int(PowerState.NOSTATE),
                "instance_metadata": dict(req.metadata),
                "user_data": req.user_data.get_secret_value() if req.user_data else None,
                "admin_password_hash": password_hash,
                "config_drive": req.config_drive,
                "key_name": req.key_name,
                "key_data": key_data,
                "addresses": [],
            }
            rows = [
                {
                    **common,
                    # Its ports made or taken, with their MACs and fixed IPs: a refusal (pool full,
                    # address or port taken) rolls the whole request back, ports and all.
                    "networks": allocation.allocate(
                        session, ctx, nics, uuid, security_groups=req.security_groups
                    ),
                    "uuid": uuid,
                    "display_name": name,
                    "hostname": naming.hostname_for(name),
                    "launch_index": index,
                }
                for index, (uuid, name) in enumerate(zip(uuids, names, strict=True))
            ]
            # A name already taken fails the insert on the (project, name, deleted) unique key.
            # One statement per table for the whole request: a burst of 100 costs what one does.
            session.execute(
                _INSERT_INSTANCE,
                [{**row, "metadata": row["instance_metadata"]} for row in rows],
            )
            session.execute(
                _INSERT_REQUEST_SPEC,
                [
                    {"instance_uuid": uuid, "spec": spec, "alternates": [], "attempts": 0, "tried_hosts": []}
                    for uuid in uuids
                ],
            )
            # Mapped with the records, not scheduled yet: in the API database's own instance tables.
            # A name taken in any cell fails the mapping's insert on its unique key.
            mappings.add_instances(session, rows)
            actions.actions_start_new(session, ctx, uuids, "create")
            # An existing root volume is taken with the record (one server: the schema's rule).
            boot.reserve(session, spec, uuids[0])
            if group is not None:
                session.execute(
                    insert(InstanceGroupMember),
                    [{"group_id": group.id, "instance_uuid": uuid} for uuid in uuids],
                )
            return rows, spec

        try:
            with self.db.target_cell(UNSCHEDULED):
                rows, spec = self.db.run_in_transaction(write)
        except IntegrityError:
            taken = self._existing(ctx, names)
            raise exceptions.DuplicateName(
                name=taken[0] if taken else names[0], project_id=ctx.project_id
            ) from None
        records = {
            str(row["uuid"]): (
                Instance(**row),
                RequestSpec(instance_uuid=row["uuid"], spec=spec, alternates=[], attempts=0, tried_hosts=[]),
            )
            for row in rows
        }
        return uuids, records

    def _group(self, session: Session, ctx: RequestContext, ref: str | None) -> InstanceGroup | None:
        if ref is None:
            return None
        stmt = select(InstanceGroup).where(InstanceGroup.deleted == 0)
        stmt = stmt.where((InstanceGroup.uuid == ref) | (InstanceGroup.name == ref))
        stmt = policy.scope(ctx, stmt, InstanceGroup.project_id)
        group = session.execute(stmt).scalars().first()
        if group is None:
            raise exceptions.ServerGroupNotFound(group_id=ref)
        return group

    def _requested_zone(
        self, session: Session, ctx: RequestContext, value: str | None
    ) -> placement_aggregates.RequestedZone:
        """Nova's ``availability_zone``: ``zone`` (known by the scheduler's own answer,
        ``resolve_zone``), ``zone:host`` or ``zone::node`` (a named host: admin only, and in that
        zone); none asked is ``scheduler.default_schedule_zone``."""
        where = placement_aggregates.parse_requested_zone(value, self.conf.scheduler.default_schedule_zone)
        if where.host is not None:
            policy.authorize(ctx, "server:forced_host")
            if find_provider(session, where.host) is None:
                raise exceptions.ValidationError("availability_zone", f"no compute host {where.host!r}")
        if where.zone is not None:
            default = self.conf.scheduler.default_availability_zone
            placement_aggregates.resolve_zone(session, where.zone, default)
            if where.host is not None:
                zone = placement_aggregates.zone_of_provider(session, where.host, default)
                if zone != where.zone:
                    raise exceptions.ValidationError(
                        "availability_zone", f"host {where.host} is in zone {zone}, not {where.zone}"
                    )
        return where

    def _family(self, ctx: RequestContext, name: str) -> dict[str, Instance]:
        """The caller's live servers named ``name`` or ``name-<anything>``, by name, in every cell
        (``naming.plan`` sorts)."""
        uuids = cell_instances.names_of_project(self.db, ctx.project_id, family=name)
        return {i.display_name: i for i in cell_instances.get_many(self.db, ctx, list(uuids.values()))}

    def _existing(self, ctx: RequestContext, names: builtins.list[str]) -> builtins.list[str]:
        """The names of ``names`` the caller's project has live servers of, in that order."""
        taken = cell_instances.names_of_project(self.db, ctx.project_id, names=names)
        return [n for n in names if n in taken]


def no_valid_host_shown(ctx: RequestContext, exc: exceptions.NoValidHost) -> exceptions.NoValidHost:
    """``exc`` as ``ctx`` may see it: the scheduler's reasons name hosts, which only those who
    may see hosts read; anyone else gets what the real run's fault shows them (no hosts, no
    reasons)."""
    return exc if policy.allowed(ctx, "host:show") else exceptions.NoValidHost()


@dataclass
class CreateOutcome:
    """What ``API.create_servers`` recorded (or, as a dry run, where the servers would go)."""

    servers: builtins.list[dict[str, Any]]
    uuids: builtins.list[str]
    changed: bool
    unbuilt: builtins.list[str] = dc_field(default_factory=builtins.list)  # recorded, never scheduled
    records: dict[str, tuple[Instance, RequestSpec]] | None = None  # as just written (for the conductor)
    would_schedule_to: dict[str, str | None] = dc_field(default_factory=dict)
    created: builtins.list[str] = dc_field(default_factory=builtins.list)  # recorded by this call
    # declarative, with a count: the live servers numbered above it, highest first, for the caller to delete
    surplus: builtins.list[dict[str, Any]] = dc_field(default_factory=builtins.list)


def _names(req: schemas.ServerCreate) -> builtins.list[str]:
    """The servers' names (the rule is ``names``'s): ``name``, or ``name-1`` ... ``name-N`` with a count."""
    return naming.names_for(req.name, naming.count_of(req))


def _image_names(records: dict[str, tuple[Instance, RequestSpec]] | None) -> dict[str, str]:
    """Image uuid -> name, as the request specs just written keep the image the create checked."""
    out: dict[str, str] = {}
    for _inst, rs in (records or {}).values():
        image = (rs.spec or {}).get("image") or {}
        if image.get("id") and image.get("name"):
            out[image["id"]] = image["name"]
    return out


def _never_scheduled(inst: Instance) -> bool:
    return (
        inst.vm_state == VmState.BUILDING.value
        and inst.task_state == TaskState.SCHEDULING.value
        and inst.host is None
    )


# Built once: building an insert costs more than running it.
_INSERT_INSTANCE = cast(Table, Instance.__table__).insert()
_INSERT_REQUEST_SPEC = cast(Table, RequestSpec.__table__).insert()
