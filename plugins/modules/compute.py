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
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: partial
    details:
      - O(requests) are not run - what a host would do depends on its hypervisor's answer, so C(changed)
        only says whether there were requests (the controller steps say in check mode what would be
        asked of the host). O(operation=get_available_resource) and O(operation=list_instances) read
        the host as a real run does; O(operation=cache_images) fetches nothing and reports in
        RV(cached) what it would fetch.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  requests:
    description:
      - Requests for this host (from C(novakit.cloud.conductor) or the lifecycle playbooks).
      - They run side by side, at most O(max_concurrent_builds) at once; requests for the same
        instance run one after the other, in the order given.
    type: list
    elements: dict
    default: []
  secrets:
    description:
      - The requests' secrets (user data, admin password hashes) by instance uuid, as
        C(novakit.cloud.conductor) returns them apart from the requests (RV(novakit.cloud.conductor#module:secrets)),
        so that only they are hidden from the task's output (the option is C(no_log)) and the
        task's result, with why a host failed, shows.
    type: dict
    default: {}
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
    secrets: "{{ novakit_secrets }}"
  register: novakit_build
"""

RETURN = r"""
results:
  description: One compute result per request, in order.
  returned: always
  type: list
  elements: dict
  contains:
    request_id:
      description: The request id the controller gave the request.
      type: str
    host:
      description: The host that ran it.
      type: str
    operation:
      description: What it ran (C(build), C(stop), C(reboot), C(destroy), ...).
      type: str
    results:
      description: One result per instance of the request.
      type: list
      elements: dict
      contains:
        uuid:
          description: The instance.
          type: str
        ok:
          description: Whether the operation succeeded for it.
          type: bool
        power_state:
          description: Its power state afterwards (Nova's number).
          type: int
        addresses:
          description: Its IP addresses.
          type: list
          elements: str
        events:
          description: The steps on the host, each with C(event), C(start_time), C(finish_time), C(result), C(host).
          type: list
          elements: dict
        fault:
          description: Why it failed (C(code), C(message), C(exception_class), C(host), C(reschedule)); null when it did not.
          type: dict
    error:
      description: Why the whole request failed (the driver could not be used, say); null when it did not.
      type: dict
    instances_on_host:
      description: For O(operation=list_instances), each guest's uuid and power state.
      type: dict
  sample:
    - request_id: req-7c1d2f0e
      host: compute-large
      operation: build
      results:
        - uuid: 0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4
          ok: true
          power_state: 1
          addresses: [10.0.0.5]
          events: [{event: compute_build_and_run_instance, result: Success, host: compute-large}]
          fault: null
      error: null
resources:
  description: What the driver reports about the host, for O(operation=get_available_resource) and O(operation=cache_images).
  returned: when operation is get_available_resource or cache_images
  type: dict
  contains:
    hypervisor_hostname:
      description: The hypervisor's name for the host.
      type: str
    hypervisor_type:
      description: C(fake) or C(QEMU).
      type: str
    vcpus:
      description: vCPUs of the host.
      type: int
    memory_mb:
      description: RAM of the host, in MB.
      type: int
    local_gb:
      description: Disk for guests, in GB.
      type: int
    cached_images:
      description: The ids of the images in the host's image cache.
      type: list
      elements: str
  sample: {hypervisor_hostname: compute-large, hypervisor_type: fake, vcpus: 32, memory_mb: 32768, local_gb: 1600, cached_images: []}
cached:
  description: For O(operation=cache_images), the ids of the images that were not in the cache before.
  returned: when operation is cache_images
  type: list
  elements: str
  sample: [9d8bbd3c-5a69-4f4e-b6b4-0d2f3a1c9e11]
"""

import os  # noqa: E402

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class ComputeModule(NovakitModule):
    needs_database = False
    argument_spec = {
        "requests": {"type": "list", "elements": "dict", "default": []},
        "secrets": {"type": "dict", "default": {}, "no_log": True},
        "operation": {"type": "str", "choices": ["get_available_resource", "list_instances", "cache_images"]},
        "images": {"type": "list", "elements": "dict", "default": []},
        "host": {"type": "str", "required": True},
        "driver": {"type": "str", "default": "fake", "choices": ["fake", "libvirt"]},
        "driver_options": {"type": "dict", "default": {}},
        "max_concurrent_builds": {"type": "int", "default": 10},
    }

    def run(self):
        from novakit.host.manager import ComputeManager
        from novakit.host.messages import ComputeRequest, join_secrets
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
        secrets = self.params["secrets"]
        requests = [
            ComputeRequest.model_validate(join_secrets(raw, secrets)) for raw in self.params["requests"]
        ]
        for request in requests:
            if request.host != host:
                self.ansible.fail_json(msg=f"request for host {request.host} reached host {host}")
        # Side by side, each instance's requests in the order given (the manager's rule).
        results = manager.handle_all(requests)
        return {
            "changed": any(r.ok for result in results for r in result.results),
            "results": [result.model_dump(mode="json") for result in results],
        }

    def _cache_images(self, driver):
        from novakit.host.messages import ImageSpec

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
