"""The compute API: what a caller may ask of novakit, checked before anything moves.

Every request is validated (``schemas``), scoped to the caller's project
(another project's server looks "not found"), checked against locks and the
state table (``states.ACTIONS``), and then started with one guarded write
that also records the instance action. A refused request changes nothing.
The work itself is the conductor's.
"""

from __future__ import annotations

import builtins
import re
import uuid as uuidlib
from typing import Any, cast

from sqlalchemy import Table, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.compute import actions, flavors, images, schemas
from novakit.compute.messages import ComputeRequest
from novakit.compute.states import (
    ACTIONS,
    POWER_STATE_NAMES,
    PowerState,
    TaskState,
    VmState,
    status_from_state,
)
from novakit.config import Config, load_config
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.engine import Database
from novakit.db.models import Instance, InstanceAction, InstanceGroup, InstanceGroupMember, RequestSpec


def hostname_for(name: str) -> str:
    """An RFC 952 hostname from a display name, as Nova sanitizes it."""
    host = re.sub(r"[^\w.-]+", "-", name.lower().replace("_", "-"))
    host = re.sub(r"[.-]{2,}", "-", host).strip(".-")
    return host[:63] or "server"


class API:
    def __init__(
        self, db: Database | None = None, conf: Config | None = None, conductor: Any | None = None
    ) -> None:
        self.conf = conf or load_config()
        self.db = db or Database(self.conf.database_url)
        self._conductor = conductor

    @property
    def conductor(self) -> Any:
        if self._conductor is None:
            from novakit.conductor import Conductor

            self._conductor = Conductor(self.db, self.conf)
        return self._conductor

    # ------------------------------------------------------------------ reads

    def get(self, ctx: RequestContext, ref: str) -> dict[str, Any]:
        with self.db.reader() as session:
            return server_view(db_api.instance_get_by_name_or_uuid(session, ctx, ref), ctx)

    def list(self, ctx: RequestContext, **filters: Any) -> builtins.list[dict[str, Any]]:
        with self.db.reader() as session:
            return [server_view(i, ctx) for i in db_api.instance_get_all(session, ctx, **filters)]

    def list_actions(self, ctx: RequestContext, ref: str) -> builtins.list[dict[str, Any]]:
        """The instance's actions with their events (Nova's os-instance-actions)."""
        with self.db.reader() as session:
            inst = db_api.instance_get_by_name_or_uuid(session, ctx, ref, include_deleted=True)
            out = []
            for a in actions.list_actions(session, inst.uuid):
                out.append(
                    {
                        "action": a.action,
                        "request_id": a.request_id,
                        "user_id": a.user_id,
                        "project_id": a.project_id,
                        "start_time": a.start_time,
                        "finish_time": a.finish_time,
                        "message": a.message,
                        "events": [
                            {
                                "event": e.event,
                                "start_time": e.start_time,
                                "finish_time": e.finish_time,
                                "result": e.result,
                                "host": e.host,
                                "details": e.details,
                                **({"traceback": e.traceback} if ctx.is_admin and e.traceback else {}),
                            }
                            for e in a.events
                        ],
                    }
                )
            return out

    # ------------------------------------------------------------------ create

    def create(
        self, ctx: RequestContext, data: dict[str, Any] | schemas.ServerCreate, *, build: bool = True
    ) -> builtins.list[dict[str, Any]]:
        """Record the servers (building/scheduling) and, unless ``build`` is False, build them.

        With ``build=False`` the caller (the boot playbook) drives the conductor itself.
        """
        req = data if isinstance(data, schemas.ServerCreate) else schemas.parse(schemas.ServerCreate, data)
        uuids, records = self._create_records(ctx, req)
        if build:
            # The conductor starts from the records just written instead of reading them back.
            self.conductor.build_instances(ctx, uuids, records=records)
        with self.db.reader() as session:
            return [server_view(i, ctx) for i in db_api.instance_get_all(session, ctx, uuids=uuids)]

    def create_records(self, ctx: RequestContext, req: schemas.ServerCreate) -> builtins.list[str]:
        """Record the servers of ``req`` (building/scheduling, action ``create``); their uuids."""
        return self._create_records(ctx, req)[0]

    def _create_records(
        self, ctx: RequestContext, req: schemas.ServerCreate
    ) -> tuple[builtins.list[str], dict[str, tuple[Instance, RequestSpec]]]:
        from novakit import quota
        from novakit.scheduler.request_spec import RequestSpec as SchedSpec

        count = int(req.max_count or req.min_count)
        names = [req.name] if count == 1 else [f"{req.name}-{i + 1}" for i in range(count)]
        uuids = [str(uuidlib.uuid4()) for _ in names]
        reservation = f"r-{uuidlib.uuid4().hex[:8]}"

        def write(session: Session) -> tuple[builtins.list[dict[str, Any]], dict[str, Any]]:
            # The look-ups, the early quota check and the inserts in one transaction.
            flavor = flavors.get(session, req.flavor)
            image = images.get(session, req.image)
            group = self._group(session, ctx, req.server_group or req.scheduler_hints.group)
            if req.availability_zone is not None:
                self._check_az(session, req.availability_zone)
            for ref in [*req.scheduler_hints.same_host, *req.scheduler_hints.different_host]:
                db_api.instance_get(session, ctx, ref)
            if image.min_ram and flavor.memory_mb < image.min_ram:
                raise exceptions.ValidationError(
                    "flavor", f"image {image.name} needs at least {image.min_ram} MB of RAM"
                )
            if image.min_disk and flavor.root_gb < image.min_disk:
                raise exceptions.ValidationError(
                    "flavor", f"image {image.name} needs at least {image.min_disk} GB of disk"
                )
            quota.check_quota(
                session,
                self.conf,
                ctx.project_id,
                {"instances": count, "cores": count * flavor.vcpus, "ram": count * flavor.memory_mb},
            )
            snapshot = flavors.snapshot(flavor)
            spec = SchedSpec(
                request_id=ctx.request_id,
                project_id=ctx.project_id,
                user_id=ctx.user_id,
                flavor=self._flavor_spec(snapshot),
                image=images.spec(image),
                availability_zone=req.availability_zone,
                num_instances=count,
                min_count=req.min_count,
                instance_group=None,
                scheduler_hints=req.scheduler_hints.model_dump(exclude_none=True),
            ).model_dump(mode="json")
            if group is not None:
                spec["instance_group"] = {
                    "uuid": group.uuid,
                    "policy": group.policy,
                    "rules": dict(group.rules or {}),
                }
            common = {
                "project_id": ctx.project_id,
                "user_id": ctx.user_id,
                "availability_zone": req.availability_zone,
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
                "power_state": int(PowerState.NOSTATE),
                "instance_metadata": dict(req.metadata),
                "user_data": req.user_data.get_secret_value() if req.user_data else None,
                "config_drive": req.config_drive,
                "key_name": req.key_name,
                "networks": [n.model_dump() for n in req.networks],
                "addresses": [],
            }
            rows = [
                {
                    **common,
                    "uuid": uuid,
                    "display_name": name,
                    "hostname": hostname_for(name),
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
            actions.actions_start_new(session, ctx, uuids, "create")
            if group is not None:
                session.execute(
                    insert(InstanceGroupMember),
                    [{"group_id": group.id, "instance_uuid": uuid} for uuid in uuids],
                )
            return rows, spec

        try:
            rows, spec = self.db.run_in_transaction(write)
        except IntegrityError:
            with self.db.reader() as session:
                taken = session.execute(
                    select(Instance.display_name).where(
                        Instance.project_id == ctx.project_id,
                        Instance.deleted == 0,
                        Instance.display_name.in_(names),
                    )
                ).first()
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

    @staticmethod
    def _flavor_spec(snapshot: dict[str, Any]) -> Any:
        from novakit.compute.messages import FlavorSpec

        return FlavorSpec(
            name=snapshot["name"],
            vcpus=snapshot["vcpus"],
            memory_mb=snapshot["memory_mb"],
            root_gb=snapshot["root_gb"],
            ephemeral_gb=snapshot["ephemeral_gb"],
            swap=snapshot["swap"],
            extra_specs={k: str(v) for k, v in snapshot["extra_specs"].items()},
        )

    def _group(self, session: Session, ctx: RequestContext, ref: str | None) -> InstanceGroup | None:
        if ref is None:
            return None
        stmt = select(InstanceGroup).where(InstanceGroup.deleted == 0)
        stmt = stmt.where((InstanceGroup.uuid == ref) | (InstanceGroup.name == ref))
        if not ctx.is_admin:
            stmt = stmt.where(InstanceGroup.project_id == ctx.project_id)
        group = session.execute(stmt).scalars().first()
        if group is None:
            raise exceptions.ServerGroupNotFound(group_id=ref)
        return group

    def _check_az(self, session: Session, zone: str) -> None:
        from novakit.db.models import PlacementAggregate

        known = (
            session.execute(
                select(PlacementAggregate.availability_zone).where(
                    PlacementAggregate.availability_zone.isnot(None)
                )
            )
            .scalars()
            .all()
        )
        zones = {z for z in known if z}
        if zone not in zones | {"nova"}:
            raise exceptions.ValidationError(
                "availability_zone",
                f"unknown availability zone {zone!r}; known: {', '.join(sorted(zones)) or 'none'}",
            )

    # ------------------------------------------------------------------ actions

    def start_action(
        self, ctx: RequestContext, ref: str, action: str, extra: dict[str, Any] | None = None
    ) -> tuple[str, bool]:
        """Check lock and state table; make the guarded write that starts ``action``.

        Returns (uuid, changed). ``changed`` is False for a repeat that is already
        in effect (a second delete of a deleting instance).
        """
        t = ACTIONS[action]
        record_as = "reboot" if action == "reboot_hard" else action

        def write(session: Session) -> tuple[str, bool]:
            inst = db_api.instance_get_by_name_or_uuid(session, ctx, ref)
            if action == "delete" and inst.task_state == TaskState.DELETING.value:
                return inst.uuid, False
            self._check_lock(session, ctx, inst, action)
            if not t.allows(inst.vm_state, inst.task_state):
                raise exceptions.InstanceInvalidState(
                    action=action, instance_uuid=inst.uuid, vm_state=inst.vm_state, task_state=inst.task_state
                )
            values: dict[str, Any] = dict(extra or {})
            if t.passes:
                values["task_state"] = t.passes[0]
            if values:
                db_api.instance_update(
                    session,
                    inst.uuid,
                    values,
                    expected_task_state=inst.task_state,
                    expected_vm_state=inst.vm_state,
                )
            actions.action_start(session, ctx, inst.uuid, record_as)
            return inst.uuid, True

        try:
            return self.db.run_in_transaction(write)
        except IntegrityError:
            raise exceptions.DuplicateName(
                name=(extra or {}).get("display_name", ref), project_id=ctx.project_id
            ) from None

    def _check_lock(self, session: Session, ctx: RequestContext, inst: Instance, action: str) -> None:
        if not inst.locked or ctx.is_admin:
            if action == "unlock" and inst.locked_by == "admin" and not ctx.is_admin:
                raise exceptions.InstanceIsLocked(inst.uuid, "locked by an admin")
            return
        if inst.locked_by == "admin":
            raise exceptions.InstanceIsLocked(inst.uuid, "locked by an admin")
        locker = session.execute(
            select(InstanceAction.user_id)
            .where(InstanceAction.instance_uuid == inst.uuid, InstanceAction.action == "lock")
            .order_by(InstanceAction.id.desc())
            .limit(1)
        ).scalar_one_or_none()
        if locker != ctx.user_id:
            raise exceptions.InstanceIsLocked(inst.uuid, inst.locked_reason)

    def _act(
        self,
        ctx: RequestContext,
        ref: str,
        action: str,
        options: dict[str, Any] | None = None,
        *,
        defer: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any] | ComputeRequest | None:
        from novakit.conductor import notify_name

        uuid, changed = self.start_action(ctx, ref, action, extra)
        t = ACTIONS[action]
        if changed:
            # Announced once the guarded write is committed, whichever way the action goes on.
            self.conductor.notifier.emit(f"instance.{notify_name(action)}.start", uuid)
        if changed and not t.compute:
            self._finish_local(ctx, uuid, action)
            self.conductor.notifier.emit(f"instance.{notify_name(action)}.end", uuid)
        elif changed:
            if defer:
                request = self.conductor.prepare_action(ctx, uuid, action, options)
                if request is not None:
                    return request
                self.conductor.finish_action(ctx, uuid, action, None)
            else:
                self.conductor.run_action(ctx, uuid, action, options)
        if action == "delete":
            with self.db.reader() as session:
                return server_view(db_api.instance_get(session, ctx, uuid, include_deleted=True), ctx)
        return self.get(ctx, uuid)

    def _finish_local(self, ctx: RequestContext, uuid: str, action: str) -> None:
        with actions.instance_event(self.db, ctx, uuid, f"api_{action}", fault_on_error=False):
            pass

        def write(session: Session) -> None:
            actions.action_finish(session, ctx, uuid, action)

        self.db.run_in_transaction(write)

    def delete(self, ctx: RequestContext, ref: str, *, defer: bool = False) -> Any:
        return self._act(ctx, ref, "delete", defer=defer)

    def stop(self, ctx: RequestContext, ref: str, *, timeout: int | None = None, defer: bool = False) -> Any:
        req = schemas.parse(schemas.Stop, {"timeout": timeout})
        opts = {"timeout": req.timeout if req.timeout is not None else self.conf.compute.shutdown_timeout}
        return self._act(ctx, ref, "stop", opts, defer=defer)

    def start(self, ctx: RequestContext, ref: str, *, defer: bool = False) -> Any:
        return self._act(ctx, ref, "start", defer=defer)

    def reboot(self, ctx: RequestContext, ref: str, reboot_type: str = "SOFT", *, defer: bool = False) -> Any:
        req = schemas.parse(schemas.Reboot, {"type": reboot_type})
        action = "reboot_hard" if req.type == "HARD" else "reboot"
        return self._act(ctx, ref, action, {"reboot_type": req.type}, defer=defer)

    def pause(self, ctx: RequestContext, ref: str, *, defer: bool = False) -> Any:
        return self._act(ctx, ref, "pause", defer=defer)

    def unpause(self, ctx: RequestContext, ref: str, *, defer: bool = False) -> Any:
        return self._act(ctx, ref, "unpause", defer=defer)

    def suspend(self, ctx: RequestContext, ref: str, *, defer: bool = False) -> Any:
        return self._act(ctx, ref, "suspend", defer=defer)

    def resume(self, ctx: RequestContext, ref: str, *, defer: bool = False) -> Any:
        return self._act(ctx, ref, "resume", defer=defer)

    def rebuild(self, ctx: RequestContext, ref: str, data: dict[str, Any], *, defer: bool = False) -> Any:
        req = schemas.parse(schemas.Rebuild, data)
        with self.db.reader() as session:
            image = images.get(session, req.image)
            inst = db_api.instance_get_by_name_or_uuid(session, ctx, ref)
        extra: dict[str, Any] = {"image_ref": image.uuid}
        if req.name is not None:
            extra["display_name"] = req.name
        if req.metadata is not None:
            extra["instance_metadata"] = req.metadata
        if req.user_data is not None:
            extra["user_data"] = req.user_data.get_secret_value()
        opts = {"image": image.uuid, "preserve_power_off": inst.vm_state == VmState.STOPPED.value}
        return self._act(ctx, ref, "rebuild", opts, defer=defer, extra=extra)

    def lock(self, ctx: RequestContext, ref: str, reason: str | None = None) -> Any:
        req = schemas.parse(schemas.Lock, {"reason": reason})
        extra = {
            "locked": True,
            "locked_by": "admin" if ctx.is_admin else "owner",
            "locked_reason": req.reason,
        }
        return self._act(ctx, ref, "lock", extra=extra)

    def unlock(self, ctx: RequestContext, ref: str) -> Any:
        return self._act(
            ctx, ref, "unlock", extra={"locked": False, "locked_by": None, "locked_reason": None}
        )

    def rename(self, ctx: RequestContext, ref: str, name: str) -> Any:
        req = schemas.parse(schemas.Rename, {"name": name})
        with self.db.reader() as session:
            inst = db_api.instance_get_by_name_or_uuid(session, ctx, ref)
            clash = session.execute(
                select(Instance.uuid).where(
                    Instance.project_id == inst.project_id,
                    Instance.display_name == req.name,
                    Instance.deleted == 0,
                    Instance.uuid != inst.uuid,
                )
            ).first()
        if clash is not None:
            raise exceptions.DuplicateName(name=req.name, project_id=inst.project_id)
        return self._act(
            ctx, inst.uuid, "rename", extra={"display_name": req.name, "hostname": hostname_for(req.name)}
        )


# Built once: building an insert costs more than running it.
_INSERT_INSTANCE = cast(Table, Instance.__table__).insert()
_INSERT_REQUEST_SPEC = cast(Table, RequestSpec.__table__).insert()


def server_view(inst: Instance, ctx: RequestContext) -> dict[str, Any]:
    """A server as the caller may see it (Nova's server show, trimmed)."""
    # Only a server in error shows its fault: the others never load their faults.
    fault = inst.faults[0] if inst.vm_state == "error" and inst.faults else None
    view: dict[str, Any] = {
        "id": inst.uuid,
        "name": inst.display_name,
        "hostname": inst.hostname,
        "status": status_from_state(inst.vm_state, inst.task_state),
        "vm_state": inst.vm_state,
        "task_state": inst.task_state,
        "power_state": inst.power_state,
        "power_state_name": POWER_STATE_NAMES.get(PowerState(inst.power_state), str(inst.power_state)),
        "host": inst.host,
        "node": inst.node,
        "availability_zone": inst.availability_zone,
        "flavor": dict(inst.flavor or {}),
        "image": inst.image_ref,
        "addresses": list(inst.addresses or []),
        "metadata": dict(inst.instance_metadata or {}),
        "locked": inst.locked,
        "locked_reason": inst.locked_reason,
        "project_id": inst.project_id,
        "user_id": inst.user_id,
        "reservation_id": inst.reservation_id,
        "created": inst.created_at,
        "updated": inst.updated_at,
        "launched_at": inst.launched_at,
        "terminated_at": inst.terminated_at,
    }
    if fault is not None:
        view["fault"] = actions.fault_view(fault, ctx)
    return view
