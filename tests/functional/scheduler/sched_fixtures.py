"""Builders for the scheduler functional tests: a small fleet, instances, server groups, request specs."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from novakit.cells.registry import UNSCHEDULED
from novakit.db.engine import Database
from novakit.db.models import Instance, InstanceGroup, InstanceGroupMember
from novakit.host.messages import FlavorSpec, ImageSpec
from novakit.placement.fake_fleet import FakeHost, register_fleet
from novakit.scheduler.request_spec import RequestSpec


def fleet(db: Database, count: int, **host_fields: Any) -> list[str]:
    names = [f"cn{n}" for n in range(count)]
    register_fleet(db, [FakeHost(name, **host_fields) for name in names])
    return names


def request(**overrides: Any) -> RequestSpec:
    flavor = overrides.pop("flavor", None) or FlavorSpec(name="m1.small", vcpus=2, memory_mb=1024, root_gb=10)
    data: dict[str, Any] = {
        "request_id": "req-test",
        "project_id": "p1",
        "user_id": "u1",
        "flavor": flavor,
        "image": ImageSpec(id="img-1", name="cirros"),
    }
    data.update(overrides)
    return RequestSpec(**data)


def uuids(n: int) -> list[str]:
    return [str(uuidlib.uuid4()) for _ in range(n)]


def add_instance(db: Database, host: str, *, task_state: str | None = None, uuid: str | None = None) -> str:
    uuid = uuid or str(uuidlib.uuid4())
    with db.target_cell(UNSCHEDULED), db.writer() as session:
        session.add(
            Instance(
                uuid=uuid,
                display_name=uuid,
                hostname=uuid,
                project_id="p1",
                user_id="u1",
                host=host,
                node=host,
                flavor={},
                vm_state="active",
                task_state=task_state,
            )
        )
    return uuid


def add_group(db: Database, policy: str, members: list[str] | None = None, **rules: int) -> str:
    group_uuid = str(uuidlib.uuid4())
    with db.target_cell(UNSCHEDULED), db.writer() as session:
        group = InstanceGroup(
            uuid=group_uuid, name="g", project_id="p1", user_id="u1", policy=policy, rules=dict(rules)
        )
        session.add(group)
        session.flush()
        for member in members or []:
            session.add(InstanceGroupMember(group_id=group.id, instance_uuid=member))
    return group_uuid
