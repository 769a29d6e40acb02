#!/usr/bin/python
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
author: novakit developers (@novakit)
options:
  requests:
    description: Requests for this host (from C(novakit.cloud.conductor) or the lifecycle playbooks).
    type: list
    elements: dict
    default: []
  operation:
    description:
      - Run one operation without instances instead, such as C(get_available_resource).
      - V(cache_images) fetches O(images) into the host's image cache (Nova's image pre-caching),
        so that the first boot from them needs no copy; it returns RV(resources) with the cached images.
    type: str
    choices: [get_available_resource, list_instances, cache_images]
  images:
    description: Images to cache, for O(operation=cache_images) (C(novakit.cloud.conductor) RV(novakit.cloud.conductor#module:image_specs)).
    type: list
    elements: dict
    default: []
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
  description: What the driver reports about the host, for O(operation=get_available_resource) and O(operation=cache_images).
  returned: when operation is get_available_resource or cache_images
  type: dict
cached:
  description: For O(operation=cache_images), the ids of the images that were not in the cache before.
  returned: when operation is cache_images
  type: list
  elements: str
"""

import os  # noqa: E402

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class ComputeModule(NovakitModule):
    needs_database = False
    argument_spec = {
        "requests": {"type": "list", "elements": "dict", "default": []},
        "operation": {"type": "str", "choices": ["get_available_resource", "list_instances", "cache_images"]},
        "images": {"type": "list", "elements": "dict", "default": []},
        "host": {"type": "str", "required": True},
        "driver": {"type": "str", "default": "fake", "choices": ["fake", "libvirt"]},
        "driver_options": {"type": "dict", "default": {}},
        "max_concurrent_builds": {"type": "int", "default": 10},
    }
    module_kwargs = {"supports_check_mode": True}

    def run(self):
        from novakit.compute.manager import ComputeManager
        from novakit.compute.messages import ComputeRequest
        from novakit.virt.driver import load_driver

        host = self.params["host"]
        options = dict(self.params["driver_options"])
        state_dir = os.environ.get("NOVAKIT_STATE_DIR")
        if self.params["driver"] == "fake" and "state_dir" not in options and state_dir:
            options["state_dir"] = os.path.join(state_dir, "fake")
        driver = load_driver(self.params["driver"], host, options)
        manager = ComputeManager(host, driver, self.params["max_concurrent_builds"])
        if self.params["operation"] == "cache_images":
            return self._cache_images(driver)
        if self.params["operation"]:
            req = ComputeRequest(request_id="local", host=host, operation=self.params["operation"])
            res = manager.handle(req).model_dump(mode="json")
            return {"changed": False, "results": [res], "resources": res.get("resources")}
        if self.check_mode:
            # What a host would do depends on its hypervisor's answer; the controller steps
            # already said in check mode what would be asked of it.
            return {"changed": bool(self.params["requests"]), "results": []}
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

    def _cache_images(self, driver):
        from novakit.compute.messages import ImageSpec

        if not hasattr(driver, "cache_image"):
            self.fail(
                f"the {self.params['driver']} driver cannot pre-cache images: it has no "
                "cache_image(image) method (novakit/virt must provide it)"
            )
        before = set(driver.get_available_resource().cached_images)
        for raw in self.params["images"]:
            if self.check_mode:
                continue
            driver.cache_image(ImageSpec.model_validate(raw))
        resources = driver.get_available_resource().model_dump(mode="json")
        fetched = [i["id"] for i in self.params["images"] if i["id"] not in before]
        return {"changed": bool(fetched), "cached": fetched, "resources": resources}


def main():
    ComputeModule()()


if __name__ == "__main__":
    main()
