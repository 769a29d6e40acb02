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
  - O(step=heartbeat) records each host's contact from what its C(compute) task returned for
    C(operation=get_available_resource) (O(results)), as C(playbooks/heartbeat.yml) does - a host that
    answered is up, one Ansible could not reach (or whose task failed) is down with Ansible's message,
    a host whose task did not run is left alone. It reports no change (a contact is bookkeeping);
    in check mode it records nothing.
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
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common, novakit.cloud.cloud]
attributes:
  check_mode:
    details:
      - O(step=schedule) runs the API's dry run of the create and the scheduler's (nothing recorded or
        claimed) and returns RV(would_schedule_to); O(step=action) runs the API's dry run of the action
        on each server; O(step=record) and O(step=record_action) record nothing, as there is no real
        round to record. A refusal is the real run's, word for word.
  diff_mode:
    support: full
    details:
      - With C(--diff), O(step=summary) and O(step=record_action) (given O(before)) and, in check
        mode, O(step=schedule) return each server's state (status, host, power state) before and after.
options:
  step:
    description: Which step to run.
    type: str
    required: true
    choices: [schedule, record, summary, action, record_action, images, heartbeat]
  server:
    description:
      - The servers to create, for O(step=schedule). Keys as the C(server) module's options.
      - C(name), C(flavor) and C(image) are required.
      - C(count) is the wanted number of servers C(name-1) ... C(name-N) - the missing numbers are
        created, the servers numbered above it deleted, the highest first; without it, the one
        server C(name). C(min_count) is the fewest of them that must exist once the step is done.
    type: dict
  requests:
    description: Build requests of this round (the previous step's RV(requests)), for O(step=record).
    type: list
    elements: dict
  results:
    description:
      - What each host's C(compute) task returned (its registered result, or just its RV(novakit.cloud.compute#module:results)),
        by host, for O(step=record) and O(step=record_action). A host of O(requests) without
        results here failed there (unreachable, its task failed, or it returned no result) and its builds
        are rescheduled.
      - For O(step=heartbeat), each host's registered C(compute) task result.
    type: dict
  unreachable:
    description: Hosts Ansible could not reach in this round.
    type: list
    elements: str
    default: []
  instances:
    description:
      - Server uuids for O(step=summary), and for O(step=record) all the servers of the boot (its
        RV(servers) and RV(published) then show every one of them, not only this round's).
    type: list
    elements: str
  action:
    description: The lifecycle action, for O(step=action).
    type: str
    choices: [delete, stop, start, reboot, pause, unpause, suspend, resume, rebuild, resize, migrate,
              confirm_resize, revert_resize, live_migrate, evacuate, create_image, shelve, shelve_offload,
              unshelve, rescue, unrescue, lock, unlock, rename]
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
  before:
    description:
      - For O(step=summary) and O(step=record_action) with C(--diff), each server's state before
        the run (RV(before) of the run's first step); the result's diff shows it against the
        servers as they now are.
    type: dict
  after:
    description:
      - For O(step=summary) with C(--diff) in check mode, the planned states (RV(after) of
        O(step=schedule)) to show instead of the servers as they are.
    type: dict
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
  sample: req-awx-42
instances:
  description: Uuids of the servers of this request.
  returned: always
  type: list
  elements: str
  sample: [0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4]
requests:
  description:
    - Compute requests for the hosts, one per host and operation - the builds of the next round
      (and, for O(step=schedule), the deletes of a scale-down), or the action's. Their secrets
      are in RV(secrets), not here.
  returned: when step is schedule, record or action
  type: list
  elements: dict
  contains:
    request_id:
      description: The run's request id.
      type: str
    host:
      description: The compute host that is to run it.
      type: str
    operation:
      description: C(build), or the action's operation (C(stop), C(reboot), C(destroy)...).
      type: str
    action:
      description: The state table's action it carries out (C(reboot_hard) for a hard reboot); null for builds.
      type: str
    instances:
      description: What the host needs of each instance (uuid, name, flavor, image, networks, user data...).
      type: list
      elements: dict
    options:
      description: The operation's options (C(reboot_type), C(timeout)...).
      type: dict
secrets:
  description:
    - The secrets of RV(requests) (user data, admin password hashes) by instance uuid, taken out of
      the requests; for the C(compute) task's O(novakit.cloud.compute#module:secrets), which hides
      them. O(step=record) returns none - its follow-ups build the servers of O(step=schedule)
      again, whose secrets the playbook keeps. Register the steps that return them with C(no_log).
  returned: when step is schedule or action
  type: dict
  sample: {0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4: {user_data: I2Nsb3VkLWNvbmZpZwo=}}
hosts:
  description: The compute hosts that have a request in RV(requests).
  returned: when step is schedule, record or action
  type: list
  elements: str
  sample: [compute-large, compute-small]
round_hosts:
  description:
    - For O(step=schedule), every host a round of this boot may send work to - the chosen hosts
      and the hosts of their alternates (the conductor reschedules only to those).
  returned: when step is schedule
  type: list
  elements: str
  sample: [compute-large, compute-small, compute-3]
servers:
  description: The servers as they are now, with the keys of RV(novakit.cloud.server#module:server).
  returned: except for steps images and heartbeat
  type: list
  elements: dict
  sample: [{id: 0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4, name: web-1, status: ACTIVE, host: compute-large, addresses: [10.0.0.5]}]
report:
  description: One line per server - C(name - STATUS on host), with the fault if any.
  returned: when step is schedule, record or summary, not in check mode
  type: list
  elements: str
  sample: ["web-1: ACTIVE on compute-large"]
published:
  description:
    - The servers of RV(servers) as the boot playbook publishes them with C(set_stats) - of each, the
      keys C(id), C(name), C(host), C(addresses) and C(status) of RV(novakit.cloud.server#module:server).
  returned: when step is schedule, record or summary
  type: list
  elements: dict
  sample: [{id: 0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4, name: web-1, host: compute-large, addresses: [10.0.0.5], status: ACTIVE}]
would_schedule_to:
  description: In check mode, for O(step=schedule), the host the scheduler would choose per server name (null where none would).
  returned: in check mode, step schedule
  type: dict
  sample: {web-1: compute-large, web-2: compute-medium}
before:
  description: For O(step=schedule) and O(step=action), each server's state before the step, by name.
  returned: when step is schedule or action
  type: dict
  sample: {web-1: {status: ACTIVE, host: compute-large, power_state: Running}}
after:
  description: In check mode, for O(step=schedule) and O(step=action), each server's state as the run would leave it, by name.
  returned: in check mode, step schedule or action
  type: dict
  sample: {web-1: {status: ACTIVE, host: compute-large, power_state: Running}, web-2: {status: ACTIVE, host: compute-small}}
would_create:
  description: In check mode, for O(step=schedule), the servers that would be created.
  returned: in check mode, step schedule
  type: list
  elements: str
  sample: [web-3]
would_delete:
  description: In check mode, for O(step=schedule), the servers numbered above the count that would be deleted.
  returned: in check mode, step schedule
  type: list
  elements: str
  sample: [web-5, web-4]
failed_servers:
  description:
    - For O(step=record_action), the servers whose action failed, with the fault message; for
      O(step=action), the servers whose move (resize, migration, shelve, snapshot, carried out
      in this step) failed, with its error; for O(step=schedule) and O(step=record), the
      servers of the boot that are in error.
    - Each is the server's C(id) and C(name), and the C(message) that says why it failed there.
  returned: when step is schedule, record, action or record_action
  type: list
  elements: dict
  sample:
    - id: 0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4
      name: web-1
      message: "Connection to the hypervisor on compute-large is broken: Ansible: host compute-large unreachable"
up:
  description: For O(step=heartbeat), the hosts that answered.
  returned: when step is heartbeat
  type: list
  elements: str
  sample: [compute-large, compute-small]
down:
  description: For O(step=heartbeat), each host that did not answer, with why.
  returned: when step is heartbeat
  type: dict
  sample: {compute-dead: "Ansible: host compute-dead unreachable: Failed to connect to the host via ssh"}
image_specs:
  description:
    - For O(step=images), one image description per image, for the C(compute) module's O(novakit.cloud.compute#module:images)
      - of each, the keys C(id), C(name), C(disk_format), C(checksum) and C(location) of RV(novakit.cloud.image#module:image).
  returned: when step is images
  type: list
  elements: dict
  sample: [{id: 9d8bbd3c-5a69-4f4e-b6b4-0d2f3a1c9e11, name: tiny, disk_format: qcow2, location: /var/lib/novakit/images/tiny.qcow2}]
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import (  # noqa: E402
    ACTION_NAMES,
    NovakitModule,
    host_failures_from_env,
)

STEPS = ["schedule", "record", "summary", "action", "record_action", "images", "heartbeat"]


class ConductorModule(NovakitModule):
    takes_cloud = True
    argument_spec = {
        "step": {"type": "str", "required": True, "choices": STEPS},
        "server": {"type": "dict"},
        "requests": {"type": "list", "elements": "dict"},
        "results": {"type": "dict"},
        "unreachable": {"type": "list", "elements": "str", "default": []},
        "instances": {"type": "list", "elements": "str"},
        "action": {"type": "str", "choices": ACTION_NAMES},
        "servers": {"type": "list", "elements": "str"},
        "options": {"type": "dict", "default": {}, "no_log": False},
        "images": {"type": "list", "elements": "str"},
        "before": {"type": "dict"},
        "after": {"type": "dict"},
    }
    module_kwargs = {
        "required_if": [
            ("step", "schedule", ["server"]),
            ("step", "record", ["requests"]),
            ("step", "action", ["action", "servers"]),
            ("step", "record_action", ["requests"]),
            ("step", "images", ["images"]),
            ("step", "heartbeat", ["results"]),
        ],
    }

    def run(self):
        from novakit import playflow

        if self.cloud() is not None:
            # The service runs the step, and the rounds it starts (``CloudAPI.run_step``).
            own = {name: self.params[name] for name in self.argument_spec}
            return self.api().run_step(
                self.context(), own, check_mode=self.check_mode, diff=self.ansible._diff
            )
        return playflow.run_step(
            self.api(),
            self.context(),
            self.params,
            check_mode=self.check_mode,
            host_failures=host_failures_from_env(),
            diff=self.ansible._diff,
        )


def main():
    ConductorModule()()


if __name__ == "__main__":
    main()
