#!/usr/bin/python
"""The controller steps of the orchestrated flows (boot, delete, lifecycle actions, image cache)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: conductor
short_description: Controller steps of the orchestrated boot and lifecycle flows
description:
  - Runs on the controller in C(novakit.cloud.boot). O(step=schedule) records the servers
    (vm_state C(building), task_state C(scheduling), action C(create)), checks quota, and
    claims a host for each with the scheduler, returning one build request per chosen host.
  - O(step=record) stores what the compute hosts returned (events, power state, addresses,
    faults), marks built servers C(active), frees the claims of failed builds and claims the
    next alternate, returning the reschedules for the next round. A host that Ansible could
    not reach counts as a failed build there.
  - O(step=summary) returns the servers of the request as they now are.
  - O(step=action) starts a lifecycle action (O(action)) on O(servers) the way the Python API does
    with C(defer=True) - the lock and the state table are checked and the guarded write is made;
    it returns one compute request per server for the server's host. Declarative actions already
    in effect (a stopped server to stop, a deleted server to delete) are skipped.
    O(step=record_action) records what the hosts returned (C(Conductor.record_action_result)).
  - O(step=images) returns what a compute host needs to fetch O(images) into its image cache.
  - In check mode, O(step=schedule) runs the scheduler as a dry run (nothing recorded or claimed)
    and returns RV(would_schedule_to); O(step=action) checks each server as a real run would and
    starts nothing; O(step=record) and O(step=record_action) do nothing.
  - Hosts the novakit callback plugin saw fail in this run (unreachable, or their compute task
    failed) count as failed there, with Ansible's message as the fault.
  - Build requests carry user data; tasks using this module should set C(no_log).
  - On the controller (a C(local) connection, with novakit importable by the Python that runs
    C(ansible-playbook)) the task runs in Ansible's own worker process through this collection's
    action plugin of the same name - no module is transferred and no interpreter started. Elsewhere
    (the task delegated to another host, or novakit missing next to Ansible) the action plugin runs
    this module on the target, with the same result.
version_added: 0.1.0
author: novakit developers (@novakit)
extends_documentation_fragment: [novakit.cloud.common]
options:
  step:
    description: Which step to run.
    type: str
    required: true
    choices: [schedule, record, summary, action, record_action, images]
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
      - What each host's C(compute) task returned (its registered result, or just its RV(novakit.cloud.compute#module:results)),
        by host, for O(step=record) and O(step=record_action). A host of O(requests) without
        results here failed there (unreachable, or its task failed) and its builds are rescheduled.
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
  action:
    description: The lifecycle action, for O(step=action).
    type: str
    choices: [delete, stop, start, reboot, pause, unpause, suspend, resume, rebuild, lock, unlock, rename]
  servers:
    description: Servers (names or uuids) for O(step=action).
    type: list
    elements: str
  options:
    description:
      - Options of the action, for O(step=action) - C(reboot_type) (V(SOFT), V(HARD)), C(timeout) (stop),
        C(image), C(name), C(metadata), C(user_data), C(admin_password) (rebuild), C(reason) (lock),
        C(name) (rename).
    type: dict
    default: {}
  images:
    description: Image names or ids, for O(step=images).
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
  returned: except for step images
  type: list
  elements: dict
published:
  description:
    - The servers of RV(servers) as the boot playbook publishes them with C(set_stats) - C(id), C(name),
      C(host), C(addresses) and C(status).
  returned: when step is schedule, record or summary
  type: list
  elements: dict
would_schedule_to:
  description: In check mode, for O(step=schedule), the host the scheduler would choose per server name.
  returned: in check mode, step schedule
  type: dict
failed:
  description: For O(step=record_action), the servers whose action failed, with the fault message.
  returned: when step is record_action
  type: list
  elements: dict
image_specs:
  description: For O(step=images), one image description per image, for the C(compute) module.
  returned: when step is images
  type: list
  elements: dict
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import (  # noqa: E402
    NovakitModule,
    host_failures_from_env,
)

STEPS = ["schedule", "record", "summary", "action", "record_action", "images"]


class ConductorModule(NovakitModule):
    argument_spec = {
        "step": {"type": "str", "required": True, "choices": STEPS},
        "server": {"type": "dict"},
        "requests": {"type": "list", "elements": "dict"},
        "results": {"type": "dict"},
        "unreachable": {"type": "list", "elements": "str", "default": []},
        "instances": {"type": "list", "elements": "str"},
        "action": {
            "type": "str",
            "choices": [
                "delete",
                "stop",
                "start",
                "reboot",
                "pause",
                "unpause",
                "suspend",
                "resume",
                "rebuild",
                "lock",
                "unlock",
                "rename",
            ],
        },
        "servers": {"type": "list", "elements": "str"},
        "options": {"type": "dict", "default": {}, "no_log": False},
        "images": {"type": "list", "elements": "str"},
    }
    module_kwargs = {
        "supports_check_mode": True,
        "required_if": [
            ("step", "schedule", ["server"]),
            ("step", "record", ["requests"]),
            ("step", "action", ["action", "servers"]),
            ("step", "record_action", ["requests"]),
            ("step", "images", ["images"]),
        ],
    }

    def run(self):
        from novakit import playflow

        return playflow.run_step(
            self.api(),
            self.context(),
            self.params,
            check_mode=self.check_mode,
            host_failures=host_failures_from_env(),
        )


def main():
    ConductorModule()()


if __name__ == "__main__":
    main()
