"""The one shape of novakit's catalog modules (flavor, image, network, subnet, port, volume,
server_group, quota): find by name or id, compare what is wanted with what is there, then create,
update or delete, or nothing.

A module says only what differs between resources: how to find one (``find``), which of its
fields the task asks for (``wanted``), and the library calls (``create``, ``update``, ``delete``),
each of which takes ``dry_run``. A resource whose library module has the usual three calls
(``show`` by name or id, ``create`` of the wanted fields, ``delete`` by id, over the API database)
names that module (``library``) and writes none of them. Check mode is that same call with ``dry_run=True``: the library
runs every check it would run for real, in a read, and writes nothing, so a task that the real
run would refuse is refused in check mode with the same message. ``--diff`` is one helper
(``diff_of``): the resource before and after, as plain views.

A second identical run finds the resource as wanted and reports ``changed: false``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule

# Documented once, in the novakit.cloud.catalog doc fragment (O(name) in its NAME).
STATE_ARG: dict[str, Any] = {"type": "str", "choices": ["present", "absent"], "default": "present"}
NAME_ARG: dict[str, Any] = {"type": "str", "required": True}


def lookup(show: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any] | None:
    """``show(*args)`` (a library look-up by name or id), or None when there is no such resource."""
    from novakit import exceptions

    try:
        return show(*args)
    except exceptions.NotFound:
        return None


def named(listed: list[dict[str, Any]], ref: str) -> dict[str, Any] | None:
    """The view in ``listed`` whose name or id is ``ref``, or None."""
    return next((view for view in listed if ref in (view["name"], view["id"])), None)


def differences(
    current: dict[str, Any] | None, wanted: dict[str, Any], *, unset_is_wanted: bool = False
) -> dict[str, tuple[Any, Any]]:
    """``{field: (now, wanted)}`` for each wanted field the current view has otherwise.

    A field the task leaves unset (None) is not asked for and never differs, unless
    ``unset_is_wanted`` (an image given no checksum asks for none).
    """
    if current is None:
        return {}
    return {
        k: (current.get(k), v)
        for k, v in wanted.items()
        if (v is not None or unset_is_wanted) and current.get(k) != v
    }


def diff_of(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """Ansible's ``diff`` of two views; a resource that does not exist is an empty one."""
    return {"before": before or {}, "after": after or {}}


class CatalogModule(NovakitModule):
    """Subclass: set ``resource`` (the result's key), ``argument_spec`` (the options besides O(name)
    and O(state)); implement ``wanted``, and
    ``library`` or those of ``find``, ``create`` and ``delete`` whose library calls are not the
    usual ones (and ``update`` for a resource that can change)."""

    resource = ""
    family_args = {"name": NAME_ARG, "state": STATE_ARG}
    #: what the refusal of a change says to do, for a resource that cannot change in place
    cannot_change = "delete it first to change them"
    #: whether an option left unset asks for the field to be unset (``differences``)
    unset_is_wanted = False
    #: in check mode, whether a new resource's planned view is returned under ``resource``
    #: (the flavor, image and network family document that it is not)
    plan_in_result = False

    # --- what a resource says -----------------------------------------------------------

    def library(self) -> Any:
        """The library module whose ``show``, ``create`` and ``delete`` the usual calls are."""
        raise NotImplementedError

    def find(self) -> dict[str, Any] | None:
        """The resource as it is, by the task's name (or id), as the caller may see it, or None."""
        return lookup(self.call, self.library().show, self.params["name"])

    def wanted(self) -> dict[str, Any]:
        """The fields the task asks for, under the view's keys."""
        return {}

    def compare(self, current: dict[str, Any], wanted: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
        return differences(current, wanted, unset_is_wanted=self.unset_is_wanted)

    def create(self, dry_run: bool) -> dict[str, Any] | None:
        """The new resource (in a dry run, as planned), made of the task's name and wanted fields."""
        data = {"name": self.params["name"], **self.wanted()}
        made: dict[str, Any] | None = self.call(self.library().create, data, dry_run=dry_run)
        return made

    def update(
        self, current: dict[str, Any], changes: dict[str, tuple[Any, Any]], dry_run: bool
    ) -> dict[str, Any] | None:
        """Change ``current``; by default a catalog resource cannot change in place (as in Nova)."""
        self.fail(
            f"{self.resource.replace('_', ' ')} {self.params['name']} exists with other values "
            f"{changes}; {self.cannot_change}"
        )
        return None

    def delete(self, current: dict[str, Any], dry_run: bool) -> None:
        self.call(self.library().delete, current["id"], dry_run=dry_run)

    # --- the cycle ----------------------------------------------------------------------

    def result(self, changed: bool, before: Any, after: Any, shown: Any = None) -> dict[str, Any]:
        out: dict[str, Any] = {"changed": changed}
        if shown is not None:
            out[self.resource] = shown
        if self.ansible._diff:
            out["diff"] = diff_of(before, after)
        return out

    def run(self) -> dict[str, Any]:
        current = self.find()
        if self.params.get("state", "present") == "absent":
            if current is not None:
                self.delete(current, dry_run=self.check_mode)
            return self.result(current is not None, current, None)
        wanted = self.wanted()
        if current is None:
            made = self.create(dry_run=self.check_mode)
            if made is None:
                planned = {"name": self.params.get("name"), **wanted}
            elif self.check_mode:  # a dry run's id is only an example: the real one is made later
                planned = {k: v for k, v in made.items() if k != "id"}
            else:
                planned = made
            shown = planned if not self.check_mode or self.plan_in_result else None
            return self.result(True, None, planned, shown)
        changes = self.compare(current, wanted)
        if not changes:
            return self.result(False, current, current, current)
        updated = self.update(current, changes, dry_run=self.check_mode)
        after = updated if updated is not None else {**current, **{k: pair[1] for k, pair in changes.items()}}
        return self.result(True, current, after, after)
