"""What each action of the state table reads and writes before it starts.

``API.act`` calls the step of its action inside the transaction that checks it
(and, as a dry run, inside a read): ``(conf, session, ctx, instance, options) ->
(values written with the guarded write that starts the action, options for the
host)``. A step refuses with the field and the rule; it writes nothing itself.

The actions are the state table's (``states.ACTIONS``): an action with no look-up of its own
takes ``pass_options``, its options as its row's schema validated them go to its host. Only an
action that reads or writes something before it starts has a step here (``STEPS``, keyed by
rows of the table: a test keeps it so).
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from novakit import exceptions, policy, quota
from novakit.catalog import flavors, images
from novakit.cells import instances as cell_instances
from novakit.compute import names as naming
from novakit.compute import passwords
from novakit.compute.states import VmState
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.models import Image, Instance
from novakit.fleet import hosts
from novakit.keypairs import registry as keypairs
from novakit.moves import migrations
from novakit.volume import attachments, boot, volumes

# ``(conf, session, ctx, instance, options) -> (values written with the guarded write, host options)``

Prepare = Callable[
    [Config, Session, RequestContext, Instance, dict[str, Any]], tuple[dict[str, Any], dict[str, Any]]
]


def pass_options(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Nothing to look up or write: the options the row's schema validated go to the host
    (a reboot's ``reboot_type``; none for most)."""
    return {}, {k: v for k, v in opts.items() if v is not None}


def _prepare_stop(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    timeout = opts["timeout"] if opts.get("timeout") is not None else conf.compute.shutdown_timeout
    return {}, {"timeout": timeout}


def _prepare_rebuild(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    image = images.usable(session, ctx, opts["image"])
    boot.check_rebuild_image(session, inst, image)
    values: dict[str, Any] = {"image_ref": image.uuid}
    if opts.get("name") is not None:
        _check_name_free(session, inst, opts["name"])
        values["display_name"] = opts["name"]
    if opts.get("metadata") is not None:
        values["instance_metadata"] = opts["metadata"]
    if opts.get("user_data") is not None:
        values["user_data"] = opts["user_data"].get_secret_value()
    if opts.get("key_name") is not None:
        # Nova's rebuild with a key_name: the requesting user's pair, which replaces the key.
        pair = keypairs.for_boot(session, ctx, opts["key_name"], "options.key_name")
        values.update(key_name=pair.name, key_data=pair.public_key)
    if opts.get("admin_password") is not None:
        # The instance's host rebuilds it: that host's driver must be able to set it.
        passwords.check_deliverable(session, "options.admin_password", bool(inst.config_drive), inst.host)
        values["admin_password_hash"] = passwords.hash_admin_password(
            opts["admin_password"].get_secret_value()
        )
    # Without a new one the guest gets the stored hash again, as it gets its user data again.
    return values, {"image": image.uuid, "preserve_power_off": inst.vm_state == VmState.STOPPED.value}


def _prepare_volume(action: str) -> Prepare:
    """The step of attach_volume / detach_volume (``action``). The volume's checks and status
    are novakit.volume.attachments', made before the action; the action starts only on what
    they leave (the volume reserved for this server, or detaching from it), so that no call of
    ``act`` goes around them."""

    def step(
        conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        attachments.check_reserved(session, inst.uuid, opts["volume_id"], action)
        return {}, {"volume_id": opts["volume_id"]}

    return step


def _prepare_lock(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    return {
        "locked": True,
        "locked_by": "owner" if ctx.project_id == inst.project_id else "admin",
        "locked_reason": opts.get("reason"),
    }, {}


def _prepare_unlock(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"locked": False, "locked_by": None, "locked_reason": None}, {}


def _prepare_rename(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    _check_name_free(session, inst, opts["name"])
    return {"display_name": opts["name"], "hostname": naming.hostname_for(opts["name"])}, {}


def _prepare_resize(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    new = flavors.snapshot(flavors.usable(session, ctx, opts["flavor"]))
    old = dict(inst.flavor or {})
    sizes = ("vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap", "extra_specs")
    if new.get("name") == old.get("name") and all(new.get(k) == old.get(k) for k in sizes):
        raise exceptions.ValidationError(
            "options.flavor", f"{new['name']!r} is the server's flavor already: a resize changes it"
        )
    if new["root_gb"] < int(old.get("root_gb", inst.root_gb)):
        raise exceptions.ValidationError(
            "options.flavor",
            f"its root disk ({new['root_gb']} GB) is smaller than the server's "
            f"({old.get('root_gb', inst.root_gb)} GB): a disk never shrinks",
        )
    _check_movable(session, inst)
    # Nova's upsize check: the growth must fit the project's quota (both claims are held till confirm).
    grow = {
        "cores": max(0, new["vcpus"] - int(old.get("vcpus", inst.vcpus))),
        "ram": max(0, new["memory_mb"] - int(old.get("memory_mb", inst.memory_mb))),
    }
    quota.check_quota(session, conf, inst.project_id, {k: v for k, v in grow.items() if v})
    return {}, {"flavor": new}


def _prepare_migrate(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    policy.authorize(ctx, "server:migrate")
    host = opts.get("host")
    if host is not None:
        if host == inst.host:
            raise exceptions.ValidationError("options.host", f"{host!r} is the server's own host")
        hosts.node_in(session, host)  # ComputeHostNotFound names it
    _check_movable(session, inst)
    return {}, {"flavor": dict(inst.flavor or {}), "host": host}


def _prepare_live_migrate(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    _, host_options = _prepare_migrate(conf, session, ctx, inst, opts)
    return {}, {"host": host_options["host"]}


def _prepare_evacuate(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    _, host_options = _prepare_migrate(conf, session, ctx, inst, opts)
    state = hosts.is_up(hosts.service_in(session, str(inst.host)), conf)
    if state.up:
        raise exceptions.ValidationError(
            "server",
            f"its host {inst.host} is up: evacuate is for a server whose host is down "
            "(force the host down first if it is really gone, or migrate the server)",
        )
    return {}, {"host": host_options["host"]}


def _prepare_resize_answer(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """confirm_resize / revert_resize: only a resize that finished waits for an answer."""
    m = migrations.in_progress(session, inst.uuid)
    if m is None or m.status != "finished":
        raise exceptions.InstanceInvalidState(
            action="confirm or revert a resize",
            instance_uuid=inst.uuid,
            vm_state=inst.vm_state,
            task_state=f"migration {m.status if m is not None else 'missing'}",
        )
    return {}, {}


def _prepare_revert_resize(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A revert takes the server back to its old host: a volume attached while it waited in
    resized lives in the new host's pool and cannot go with it (confirm, or detach first)."""
    _check_movable(session, inst)
    return _prepare_resize_answer(conf, session, ctx, inst, opts)


def _prepare_rescue(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    # A rescue image the caller names must be one it may use; the server's own is its own.
    image: Image | None
    if opts.get("image"):
        image = images.usable(session, ctx, opts["image"])
    else:
        image = images.get(session, inst.image_ref) if inst.image_ref else None
    if image is None:
        raise exceptions.ValidationError("options.image", "the server has no image of its own: name one")
    return {}, {"rescue_image": images.spec(image).model_dump(mode="json")}


def _prepare_create_image(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    images.check_name_free(session, opts["name"], ctx=ctx)
    # The image's id is chosen now, so that the caller is told it before the snapshot is taken
    # (Nova's createImage answers it at once).
    image_id = str(uuidlib.uuid4())
    return {}, {"name": opts["name"], "metadata": opts.get("metadata") or {}, "image_id": image_id}


def _prepare_shelve_offload(
    conf: Config, session: Session, ctx: RequestContext, inst: Instance, opts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    _check_movable(session, inst)
    return {}, {}


def _check_movable(session: Session, inst: Instance) -> None:
    """A volume lives in one host's pool: a server with volumes attached stays on its host."""
    attached = volumes.specs_of_server(session, inst.uuid)
    if attached:
        names = ", ".join(f"{v.device_name}: {v.id}" for v in attached)
        raise exceptions.ValidationError(
            "server",
            f"has volumes attached ({names}); a volume lives in one host's storage pool, so a server "
            "with volumes does not move to another host: detach them first",
        )


def _check_name_free(session: Session, inst: Instance, name: str) -> None:
    if cell_instances.name_taken(session, inst.project_id, name, but=inst.uuid):
        raise exceptions.DuplicateName(name=name, project_id=inst.project_id)


STEPS: dict[str, Prepare] = {
    "stop": _prepare_stop,
    "rebuild": _prepare_rebuild,
    "lock": _prepare_lock,
    "unlock": _prepare_unlock,
    "rename": _prepare_rename,
    "attach_volume": _prepare_volume("attach_volume"),
    "detach_volume": _prepare_volume("detach_volume"),
    "resize": _prepare_resize,
    "migrate": _prepare_migrate,
    "confirm_resize": _prepare_resize_answer,
    "revert_resize": _prepare_revert_resize,
    "live_migrate": _prepare_live_migrate,
    "evacuate": _prepare_evacuate,
    "rescue": _prepare_rescue,
    "create_image": _prepare_create_image,
    "shelve_offload": _prepare_shelve_offload,
}


def step_for(action: str) -> Prepare:
    """The step the state table's ``action`` takes before it starts (most only pass their
    options on)."""
    return STEPS.get(action, pass_options)
