#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The controller steps of the orchestrated boot (playbooks/boot.yml)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: conductor
short_description: Controller steps of the orchestrated boot flow
description:
  - Runs on the controller in C(novakit.cloud.boot). O(step=schedule) records the servers
    (vm_state C(building), task_state C(scheduling), action C(create)), checks quota, and
    claims a host for each with the scheduler, returning one build request per chosen host.
  - O(step=record) stores what the compute hosts returned (events, power state, addresses,
    faults), marks built servers C(active), frees the claims of failed builds and claims the
    next alternate, returning the reschedules for the next round. A host that Ansible could
    not reach counts as a failed build there.
  - O(step=summary) returns the servers of the request as they now are.
  - Build requests carry user data; tasks using this module should set C(no_log).
version_added: 0.1.0
author: novakit developers
extends_documentation_fragment: [novakit.cloud.common]
options:
  step:
    description: Which step to run.
    type: str
    required: true
    choices: [schedule, record, summary]
  server:
    description:
      - The servers to create, for O(step=schedule). Keys as the C(server) module's options.
      - C(name), C(flavor) and C(image) are required; C(count) makes names C(name-1), C(name-2)...
    type: dict
  requests:
    description: Build requests of this round (the previous step's RV(requests)), for O(step=record).
    type: list
    elements: dict
  results:
    description:
      - Compute results by host (the C(compute) module's RV(results)), for O(step=record).
        A host of O(requests) missing here is treated as unreachable.
    type: dict
  unreachable:
    description: Hosts Ansible could not reach in this round.
    type: list
    elements: str
    default: []
  instances:
    description: Server uuids for O(step=summary).
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Record, schedule and claim
  novakit.cloud.conductor:
    step: schedule
    server: {name: web, flavor: m1.small, image: tiny, count: 3}
  register: novakit_schedule
  no_log: true
"""

RETURN = r"""
request_id:
  description: The request id of the run (the audit trail's key).
  returned: always
  type: str
instances:
  description: Uuids of the servers of this request.
  returned: always
  type: list
  elements: str
requests:
  description: Build requests for the next round, one per compute host.
  returned: when step is schedule or record
  type: list
  elements: dict
hosts:
  description: The compute hosts that have a build request in RV(requests).
  returned: when step is schedule or record
  type: list
  elements: str
servers:
  description: The servers as they are now (status, host, addresses, fault).
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class ConductorModule(NovakitModule):
    argument_spec = {
        "step": {"type": "str", "required": True, "choices": ["schedule", "record", "summary"]},
        "server": {"type": "dict"},
        "requests": {"type": "list", "elements": "dict"},
        "results": {"type": "dict"},
        "unreachable": {"type": "list", "elements": "str", "default": []},
        "instances": {"type": "list", "elements": "str"},
    }
    module_kwargs = {
        "required_if": [("step", "schedule", ["server"]), ("step", "record", ["requests"])],
    }

    def run(self):
        from novakit.compute.messages import ComputeRequest, ComputeResult
        from novakit.playflow import record_round, schedule, summary

        api, ctx = self.api(), self.context()
        step = self.params["step"]
        if step == "schedule":
            return schedule(api, ctx, self.params["server"])
        if step == "record":
            requests = [ComputeRequest.model_validate(r) for r in self.params["requests"]]
            results = {}
            for host, value in (self.params.get("results") or {}).items():
                if isinstance(value, list):
                    results[host] = [ComputeResult.model_validate(v) for v in value if isinstance(v, dict)]
            return record_round(api, ctx, requests, results, set(self.params["unreachable"]))
        return summary(api, ctx, self.params.get("instances") or [])


def main():
    ConductorModule()()


if __name__ == "__main__":
    main()
