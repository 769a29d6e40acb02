#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The compute side, on the host it runs on."""

from __future__ import annotations

DOCUMENTATION = r"""
module: compute
short_description: Run build and lifecycle requests on this compute host
description:
  - The compute side of novakit (Nova's nova-compute), on the host the task runs on. It takes the
    JSON requests the controller prepared (builds, power operations, destroy, resource reports) and
    runs them through the host's hypervisor driver, returning for each instance its events with their
    times, its power state, its addresses and a fault if it failed.
  - It never opens the database and needs no database credentials.
  - A failed build is a result, not a task failure, so that the controller can reschedule it.
version_added: 0.1.0
author: novakit developers
options:
  requests:
    description: Requests for this host (from C(novakit.cloud.conductor) or the lifecycle playbooks).
    type: list
    elements: dict
    default: []
  operation:
    description: Run one operation without instances instead, such as C(get_available_resource).
    type: str
    choices: [get_available_resource, list_instances]
  host:
    description: This host's name as novakit knows it (its inventory name).
    type: str
    required: true
  driver:
    description: Hypervisor driver.
    type: str
    default: fake
    choices: [fake, libvirt]
  driver_options:
    description:
      - Driver options, for example C(uri) for libvirt or C(vcpus), C(memory_mb), C(local_gb) and
        C(failure_mode) for the fake driver.
    type: dict
    default: {}
  max_concurrent_builds:
    description: Builds run at once on this host.
    type: int
    default: 10
requirements:
  - python >= 3.11
  - novakit (with the C(libvirt) extra for the libvirt driver)
"""

EXAMPLES = r"""
- name: Build what the controller scheduled here
  novakit.cloud.compute:
    host: "{{ inventory_hostname }}"
    driver: libvirt
    driver_options: {uri: "qemu:///system"}
    requests: "{{ novakit_build_requests }}"
  register: novakit_build
  no_log: true
"""

RETURN = r"""
results:
  description: One compute result per request, in order (request_id, host, operation, results per instance).
  returned: always
  type: list
  elements: dict
resources:
  description: What the driver reports about the host, for O(operation=get_available_resource).
  returned: when operation is get_available_resource
  type: dict
"""

import os  # noqa: E402

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class ComputeModule(NovakitModule):
    needs_database = False
    argument_spec = {
        "requests": {"type": "list", "elements": "dict", "default": []},
        "operation": {"type": "str", "choices": ["get_available_resource", "list_instances"]},
        "host": {"type": "str", "required": True},
        "driver": {"type": "str", "default": "fake", "choices": ["fake", "libvirt"]},
        "driver_options": {"type": "dict", "default": {}},
        "max_concurrent_builds": {"type": "int", "default": 10},
    }
    module_kwargs = {"supports_check_mode": False}

    def run(self):
        from novakit.compute.manager import ComputeManager
        from novakit.compute.messages import ComputeRequest
        from novakit.virt.driver import load_driver

        host = self.params["host"]
        options = dict(self.params["driver_options"])
        if self.params["driver"] == "fake" and "state_dir" not in options and os.environ.get("NOVAKIT_STATE_DIR"):
            options["state_dir"] = os.path.join(os.environ["NOVAKIT_STATE_DIR"], "fake")
        manager = ComputeManager(host, load_driver(self.params["driver"], host, options),
                                 self.params["max_concurrent_builds"])
        if self.params["operation"]:
            req = ComputeRequest(request_id="local", host=host, operation=self.params["operation"])
            res = manager.handle(req).model_dump(mode="json")
            return {"changed": False, "results": [res], "resources": res.get("resources")}
        results = []
        changed = False
        for raw in self.params["requests"]:
            request = ComputeRequest.model_validate(raw)
            if request.host != host:
                self.ansible.fail_json(msg=f"request for host {request.host} reached host {host}")
            result = manager.handle(request)
            changed = changed or any(r.ok for r in result.results)
            results.append(result.model_dump(mode="json"))
        return {"changed": changed, "results": results}


def main():
    ComputeModule()()


if __name__ == "__main__":
    main()
