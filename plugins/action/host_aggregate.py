"""The ``novakit.cloud.host_aggregate`` module run in Ansible's worker process when its task runs on
the controller (``plugin_utils/in_process.py`` says how and why); elsewhere, the module itself."""

from __future__ import annotations

from ansible_collections.novakit.cloud.plugins.modules.host_aggregate import HostAggregateModule
from ansible_collections.novakit.cloud.plugins.plugin_utils.in_process import in_process

ActionModule = in_process(HostAggregateModule)
