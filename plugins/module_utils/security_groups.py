"""What the security group modules share: the ports whose filters a change altered go to their
hosts at once (``novakit.network.filter_sync.push_filters``); a host that could not take one is a
warning of the task (heal applies it later), not a failure: the records changed."""

from __future__ import annotations

from typing import Any

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import CatalogModule


class FilteringModule(CatalogModule):
    """A catalog module whose changes alter ports' filters: its library's delete (``deleter``)
    takes the ``on_change`` that pushes them."""

    def deleter(self) -> Any:
        """The library's delete of the resource by id (with ``dry_run`` and ``on_change``)."""
        raise NotImplementedError

    def delete(self, current: dict[str, Any], dry_run: bool) -> None:
        self.call(self.deleter(), current["id"], dry_run=dry_run)

    def provided(self) -> dict[str, Any]:
        return {**super().provided(), "on_change": self.push_filters}

    def push_filters(self) -> Any:
        """The ``on_change`` of the library's calls (``provided``; through a cloud, the service's)."""
        context = self.context()
        compute = self.api()
        self.filter_warnings: list[str] = []

        def push(port_uuids: list[str]) -> None:
            from novakit.network import filter_sync

            failed = filter_sync.push_filters(compute.conductor.rpc, context.request_id, port_uuids)
            for port, why in sorted(failed.items()):
                self.filter_warnings.append(
                    f"the filter of port {port} was not applied on its host ({why}); heal applies it"
                )

        return push

    def result(self, changed: bool, before: Any, after: Any, shown: Any = None) -> dict[str, Any]:
        out = super().result(changed, before, after, shown)
        if getattr(self, "filter_warnings", None):
            out["warnings"] = list(self.filter_warnings)
        return out
