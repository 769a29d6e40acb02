"""The controller steps of the orchestrated flows, run inside Ansible's worker process.

The ``novakit.cloud.conductor`` module's ``run()`` called without a module process of its own
(``plugin_utils/in_process.py`` says how and why); a boot pays two steps or more.
"""

from __future__ import annotations

from ansible_collections.novakit.cloud.plugins.modules.conductor import ConductorModule
from ansible_collections.novakit.cloud.plugins.plugin_utils.in_process import in_process

ActionModule = in_process(ConductorModule)
