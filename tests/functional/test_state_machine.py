"""Every action of the state table, from every vm_state, through the API, on both back ends.

The expected rules are written out here again, from Nova's compute API, rather
than read from ``states.ACTIONS``: the test checks the table against Nova's
behaviour, not against itself.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import pytest
from sqlalchemy import func, select, text

from novakit import exceptions
from novakit.cells.registry import UNSCHEDULED
from novakit.compute.states import ACTIONS, PowerState, VmState
from novakit.db import api as db_api
from novakit.db.models import InstanceAction
from tests.functional.cloud import Cloud, boot

ANY = "any"
ALLOW_REBOOT = {
    None,
    "rebooting",
    "reboot_pending",
    "reboot_started",
    "resuming",
    "rebooting_hard",
    "unpausing",
    "pausing",
    "suspending",
}
NOVA = {
    # action: (vm_states it may start from, task_states it may start from, vm_state it ends in)
    "delete": (ANY, ANY, "deleted"),
    "stop": ({"active", "error"}, {None}, "stopped"),
    "start": ({"stopped"}, {None}, "active"),
    "reboot": ({"active"}, {None}, "active"),
    "reboot_hard": ({"active", "stopped", "paused", "suspended", "error"}, ALLOW_REBOOT, "active"),
    "pause": ({"active"}, {None}, "paused"),
    "unpause": ({"paused"}, {None}, "active"),
    "suspend": ({"active"}, {None}, "suspended"),
    "resume": ({"suspended"}, {None}, "active"),
    "rebuild": ({"active", "stopped", "error"}, {None}, "active"),
    "lock": (ANY, ANY, None),
    "unlock": (ANY, ANY, None),
    "rename": ({s.value for s in VmState} - {"deleted", "soft-delete"}, ANY, None),
    # Nova's attach/detach states where novakit has them: no soft delete here, and not
    # shelved_offloaded (a volume lives in one host's pool; an offloaded server has no host).
    "attach_volume": ({"active", "paused", "stopped", "resized", "shelved"}, {None}, None),
    "detach_volume": ({"active", "paused", "stopped", "resized", "shelved"}, {None}, None),
    # nova/compute/api.py's attach_interface / detach_interface: active, paused, stopped, no task.
    "attach_interface": ({"active", "paused", "stopped"}, {None}, None),
    "detach_interface": ({"active", "paused", "stopped"}, {None}, None),
    # Moves: nova/compute/api.py's check_instance_state of resize, migrate, confirm_resize,
    # revert_resize, live_migrate, evacuate, shelve, shelve_offload, unshelve, snapshot, rescue.
    "resize": ({"active", "stopped"}, {None}, "resized"),
    "migrate": ({"active", "stopped"}, {None}, "resized"),
    "confirm_resize": ({"resized"}, {None}, "active"),
    "revert_resize": ({"resized"}, {None}, "active"),
    "live_migrate": ({"active", "paused"}, {None}, None),
    "evacuate": ({"active", "stopped", "error"}, ANY, "active"),
    # shelved_offload_time is 0 by default, as Nova's: a shelve offloads at once
    "shelve": ({"active", "stopped", "paused", "suspended"}, {None}, "shelved_offloaded"),
    "shelve_offload": ({"shelved"}, {None}, "shelved_offloaded"),
    "unshelve": ({"shelved", "shelved_offloaded"}, {None}, "active"),
    "create_image": ({"active", "stopped", "paused", "suspended"}, {None}, None),
    "rescue": ({"active", "stopped", "error"}, {None}, "rescued"),
    "unrescue": ({"rescued"}, {None}, "active"),
}
# Each of these needs more than a forced state (an admin, a host that is down, a finished resize, a
# shelved image): their transitions are walked in test_resize.py, test_shelve_snapshot_rescue.py and
# test_live_evacuate_drain.py.
NEEDS_HISTORY = {"migrate", "live_migrate", "evacuate", "confirm_resize", "revert_resize", "unshelve"}
OPTIONS = {"resize": {"flavor": "m1.large"}, "create_image": {"name": "snap-{uuid}"}}
END_POWER = {"stop": PowerState.SHUTDOWN, "pause": PowerState.PAUSED, "suspend": PowerState.SUSPENDED}
VM_STATES = [s.value for s in VmState if s != VmState.DELETED]
TASK_STATES = [None, "rebooting", "powering-off"]
# How the fake guest is put in the power state that goes with a vm_state.
GUEST_OP = {"stopped": "power_off", "paused": "pause", "suspended": "suspend"}


def test_table_is_novas() -> None:
    assert set(ACTIONS) - {"create"} == set(NOVA)
    for action, (vm_states, task_states, _end) in NOVA.items():
        for vm in VM_STATES:
            for task in [None, *sorted(ALLOW_REBOOT - {None}), "powering-off", "deleting", "spawning"]:
                expected = (vm_states == ANY or vm in vm_states) and (
                    task_states == ANY or task in task_states
                )
                assert ACTIONS[action].allows(vm, task) == expected, (action, vm, task)


def _put_in_state(cloud: Cloud, ctx: Any, name: str, vm_state: str, task_state: str | None) -> str:
    server = boot(cloud, ctx, name)
    uuid = server["id"]
    if vm_state in GUEST_OP:
        spec_host = server["host"]
        from novakit.compute.rpc import instance_spec

        with cloud.db.target_cell(UNSCHEDULED), cloud.db.reader() as session:
            spec = instance_spec(session, db_api.instance_get(session, cloud.admin, uuid))
        getattr(cloud.fake(spec_host), GUEST_OP[vm_state])(spec)
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.writer() as session:
        db_api.instance_update(session, uuid, {"vm_state": vm_state, "task_state": task_state})
    return uuid


def _call(cloud: Cloud, ctx: Any, action: str, uuid: str) -> dict[str, Any]:
    api = cloud.api
    if action == "reboot_hard":
        return api.reboot(ctx, uuid, "HARD")
    if action == "rebuild":
        return api.rebuild(ctx, uuid, {"image": "tiny-2"})
    if action == "rename":
        return api.rename(ctx, uuid, f"renamed-{uuid[:8]}")
    if action == "lock":
        return api.lock(ctx, uuid, "testing")
    if action in ("attach_volume", "detach_volume"):
        return _volume_action(cloud, ctx, action, uuid)
    if action in ("attach_interface", "detach_interface"):
        return _interface_action(cloud, ctx, action, uuid)
    if action in ACTIONS and not hasattr(api, action) or action in OPTIONS:
        options = {k: v.format(uuid=uuid[:8]) for k, v in OPTIONS.get(action, {}).items()}
        server = api.act(ctx, uuid, action, options).server
        assert server is not None
        return server
    return getattr(api, action)(ctx, uuid)


def _volume_action(cloud: Cloud, ctx: Any, action: str, uuid: str) -> dict[str, Any]:
    """attach_volume / detach_volume through novakit.volume, with a volume on the server's host
    (attached in the records first for a detach)."""
    from novakit import quota
    from novakit.compute import volume_attach
    from novakit.volume import volumes

    for resource in ("volumes", "gigabytes"):
        quota.set_quota(cloud.db, ctx.project_id, resource, -1)
    host = cloud.api.get(cloud.admin, uuid)["host"]
    vol = volumes.create(cloud.api.conductor, ctx, f"v-{uuid[:8]}", 1, host=host)
    if action == "attach_volume":
        volume_attach.attach(cloud.api, ctx, uuid, vol["id"])
    else:
        with cloud.db.writer() as session:
            session.execute(text("UPDATE volumes SET status = 'in-use' WHERE uuid = :v"), {"v": vol["id"]})
            session.execute(
                text(
                    "INSERT INTO volume_attachments (uuid, volume_id, instance_uuid, device_name, "
                    "delete_on_termination, attach_status, created_at, deleted) SELECT :a, id, :i, 'vdc', "
                    "false, 'attached', created_at, 0 FROM volumes WHERE uuid = :v"
                ),
                {"a": str(uuidlib.uuid4()), "i": uuid, "v": vol["id"]},
            )
        volume_attach.detach(cloud.api, ctx, uuid, vol["id"])
    return cloud.api.get(ctx, uuid)


def _interface_action(cloud: Cloud, ctx: Any, action: str, uuid: str) -> dict[str, Any]:
    """attach_interface / detach_interface through novakit.compute.interfaces, on a network of
    the test's (a port attached in the records first for a detach)."""
    from novakit.compute import interfaces
    from novakit.host.messages import NetworkSpec
    from novakit.network import networks, ports, subnets

    if not any(n["name"] == "sm-net" for n in networks.list_networks(cloud.db)):
        networks.create(cloud.db, cloud.admin, {"name": "sm-net"})
        subnets.create(
            cloud.db, cloud.admin, {"name": "sm-net-v4", "network": "sm-net", "cidr": "10.7.0.0/20"}
        )
    if action == "attach_interface":
        interfaces.attach(cloud.api, ctx, uuid, network="sm-net")
    else:
        port = ports.create(cloud.db, ctx, {"network": "sm-net"})
        assert port is not None
        nic = NetworkSpec(type="network", source="sm-net", mac=port["mac_address"], port_id=port["id"])
        host = cloud.api.get(cloud.admin, uuid)["host"]
        with cloud.db.target_cell(UNSCHEDULED), cloud.db.writer() as session:
            row = ports.get(session, ctx, port["id"])
            ports.bind_to_server(session, row, uuid, None, host)
            db_api.instance_update(session, uuid, {"networks": [nic.model_dump()]})
        interfaces.detach(cloud.api, ctx, uuid, port["id"])
    return cloud.api.get(ctx, uuid)


def _row(cloud: Cloud, uuid: str) -> tuple[Any, ...]:
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.reader() as session:
        inst = db_api.instance_get(session, cloud.admin, uuid, include_deleted=True)
        actions = session.execute(
            select(func.count()).select_from(InstanceAction).where(InstanceAction.instance_uuid == uuid)
        ).scalar_one()
        return (
            inst.vm_state,
            inst.task_state,
            inst.power_state,
            inst.display_name,
            inst.locked,
            inst.image_ref,
            inst.deleted,
            actions,
        )


@pytest.mark.parametrize("action", sorted(set(NOVA) - NEEDS_HISTORY))
def test_every_transition(cloud: Cloud, ctx: Any, action: str) -> None:
    vm_states, task_states, end = NOVA[action]
    wrong = []
    n = 0
    for vm in VM_STATES:
        for task in TASK_STATES:
            n += 1
            uuid = _put_in_state(cloud, ctx, f"{action}-{n}", vm, task)
            allowed = (vm_states == ANY or vm in vm_states) and (task_states == ANY or task in task_states)
            before = _row(cloud, uuid)
            try:
                view = _call(cloud, ctx, action, uuid)
            except exceptions.InstanceInvalidState as exc:
                if allowed:
                    wrong.append((vm, task, f"refused: {exc}"))
                elif _row(cloud, uuid) != before:
                    wrong.append((vm, task, "refused but changed the record"))
                elif action not in str(exc) or vm not in str(exc):
                    wrong.append((vm, task, f"message does not name action and state: {exc}"))
                continue
            if not allowed:
                wrong.append((vm, task, "allowed, Nova refuses it"))
                continue
            want_vm = end or vm
            if action == "rebuild" and vm == "stopped":
                want_vm = "stopped"  # Nova keeps a stopped server stopped after a rebuild
            if view["vm_state"] != want_vm or (
                view["task_state"] is not None
                and action != "lock"
                and action != "unlock"
                and action != "rename"
            ):
                wrong.append(
                    (vm, task, f"ended in {view['vm_state']}/{view['task_state']}, want {want_vm}/None")
                )
            if action in END_POWER and view["power_state"] != END_POWER[action]:
                wrong.append((vm, task, f"power state {view['power_state']}"))
            if end is None and view["task_state"] != task:
                wrong.append((vm, task, f"{action} changed task_state to {view['task_state']}"))
            if action == "delete" and view["status"] != "DELETED":
                wrong.append((vm, task, f"status {view['status']}"))
    assert not wrong, "\n".join(map(str, wrong))
