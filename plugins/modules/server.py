#!/usr/bin/python
"""Servers, declaratively, in direct mode."""

from __future__ import annotations

DOCUMENTATION = r"""
module: server
short_description: Create, delete, start, stop, pause or suspend a novakit server
description:
  - Makes sure a server exists in the state asked for, in direct mode - the API records it, the
    conductor schedules it and builds it on the chosen compute host (through the host's registered
    driver and transport), and records the result, reschedules included.
  - For many servers at once across inventory hosts, use the C(novakit.cloud.boot) playbook instead.
  - A server is found by uuid or by name; names are unique among a project's live servers, so the
    same task run twice creates one server and then reports no change.
  - The power states are reached through the actions of novakit's state table (a paused server to stop
    is unpaused, then stopped); RV(actions) lists them. A server in ERROR is refused, with its fault,
    whatever O(state) asks short of V(absent).
  - The work runs in a background process of its own (C(python -m novakit.worker)), started by the
    module once the request is recorded; O(wait) and O(timeout) say whether and how long the task
    waits for it, as for C(openstack.cloud.server). A server that is busy when the task starts (still
    building, say) is waited for first.
  - The options of an existing server (flavor, image) are not changed; a different value is an error
    that says what to do (rebuild with M(novakit.cloud.server_action), or a new server).
version_added: 0.1.0
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common, novakit.cloud.cloud, novakit.cloud.wait]
attributes:
  check_mode:
    details:
      - The API's dry runs - a server that does not exist yet is scheduled as a dry run (validation,
        quota, filters and weighers as in a real run, nothing claimed) and RV(would_schedule_to) names
        the host it would get; the first action of a power state and a delete are checked as a real
        run checks them (the lock, the state table). A refusal is the real run's, word for word.
options:
  name:
    description:
      - Server name (unique in the project) or uuid.
      - With O(count), the name of the family C(NAME-1) ... C(NAME-N).
    type: str
    required: true
  count:
    description:
      - The wanted number of servers named C(NAME-1) ... C(NAME-N) (C(count=1) is C(NAME-1)), each
        in O(state) - the missing numbers are created, the lowest first, in one request (all or
        nothing); the servers numbered above O(count) are deleted, the highest first; the same task
        again changes nothing. Without it, the task manages the one server named O(name), no suffix.
      - RV(created) and RV(deleted) name what was done (in check mode, what would be); RV(servers)
        lists the servers. Not with O(state=absent).
    type: int
  state:
    description:
      - V(present) makes sure it exists (built and, when new, running); V(absent) deletes it and frees
        its resources; V(started), V(stopped), V(paused) and V(suspended) also set its power state.
    type: str
    choices: [present, absent, started, stopped, paused, suspended]
    default: present
  flavor:
    description: Flavor name or id; required to create the server.
    type: str
  image:
    description: Image name or id; required to create the server.
    type: str
  availability_zone:
    description: Availability zone to boot in.
    type: str
  server_group:
    description: Server group (name or uuid) whose policy the server follows.
    type: str
  metadata:
    description: Server metadata (strings).
    type: dict
    default: {}
  user_data:
    description: Cloud-init user data as plain text (base64-encoded by the module). Never logged.
    type: str
  admin_password:
    description:
      - Password for the guest's root user. Never logged, never stored in clear - only a SHA-512
        crypt hash is kept, and the guest's cloud-init (22.2 or later) gets it from the config drive,
        merged into O(user_data).
      - Needs O(config_drive=true) and a host whose driver can set it; otherwise the request is refused.
    type: str
  networks:
    description: Networks, each with C(type) (V(user), V(network), V(bridge)) and C(source).
    type: list
    elements: dict
    default: []
  nics:
    description:
      - The server's ports, as openstack.cloud's C(nics) - each a mapping with C(net-id) or
        C(net-name) (a novakit network; a port is made with the first free address, or
        C(fixed_ip)), or C(port-id) (a port made before), or a string C(net-name=lan).
      - None given (and no O(networks)) - a port on the default network, if one is configured.
      - The MAC and fixed IPs are chosen once and kept for the server's life; its delete frees them.
    type: list
    elements: raw
    default: []
  boot_from_volume:
    description:
      - Boot from a new volume of O(volume_size) GiB, made from O(image) on the host the server
        is scheduled to (its root disk; the flavor's root disk is not claimed on top).
    type: bool
    default: false
  volume_size:
    description: The size in GiB of the new root volume; required with O(boot_from_volume=true).
    type: int
  boot_volume:
    description:
      - Boot from this existing bootable, available volume (name or id) of the project; the
        server is scheduled to the volume's host and its image is the volume's.
    type: str
    aliases: [boot_volume_id]
  terminate_volume:
    description:
      - Whether the root volume is deleted with the server. Unset - V(true) for a new volume
        (O(boot_from_volume)), V(false) for O(boot_volume), as Nova's API.
    type: bool
  config_drive:
    description: Attach a config drive.
    type: bool
    default: true
  security_groups:
    description:
      - The security groups (names or ids, of the caller's project) of the ports a new server gets
        on novakit networks; unset - the project's V(default) group. A port given in O(nics) keeps its own.
      - Only for a new server; M(novakit.cloud.security_group) makes groups.
    type: list
    elements: str
  key_name:
    description:
      - A key pair of the caller (M(novakit.cloud.keypair)) for a new server; its public key reaches the guest
        through the config drive (C(public_keys) in C(meta_data.json), C(ssh_authorized_keys) in the cloud-config).
      - One the caller does not have is refused (Nova's C(Invalid key_name provided)), with nothing created.
    type: str
  scheduler_hints:
    description:
      - Scheduler hints for a new server - C(same_host) and C(different_host) (server uuids), C(group)
        (a server group uuid).
    type: dict
  shutdown_timeout:
    description:
      - Seconds a graceful shutdown may take for O(state=stopped) before the power is cut
        (default the configuration's C(compute.shutdown_timeout)).
    type: int
"""

EXAMPLES = r"""
- name: A web server
  novakit.cloud.server:
    name: web-1
    flavor: m1.small
    image: tiny
    user_data: "{{ lookup('file', 'cloud-init.yml') }}"

- name: Where would it go?
  novakit.cloud.server:
    name: web-2
    flavor: m1.small
    image: tiny
  check_mode: true
  register: plan

- name: Three web servers, web-1 to web-3; run again with count 2 and web-3 is deleted
  novakit.cloud.server:
    name: web
    count: 3
    flavor: m1.small
    image: tiny

- name: Stop it
  novakit.cloud.server:
    name: web-1
    state: stopped

- name: Ask for three servers without waiting for each build
  novakit.cloud.server:
    name: "batch-{{ item }}"
    flavor: m1.small
    image: tiny
    wait: false
  loop: [1, 2, 3]

- name: Then wait for them, at most five minutes each (an existing server is waited for)
  novakit.cloud.server:
    name: "batch-{{ item }}"
    timeout: 300
  loop: [1, 2, 3]
"""

RETURN = r"""
server:
  description: The server as it now is (with O(wait=false), as the work started).
  returned: when it exists
  type: dict
  contains:
    id:
      description: The server's uuid.
      type: str
    name:
      description: Its name, unique among the project's live servers.
      type: str
    hostname:
      description: The guest's hostname, derived from the name.
      type: str
    status:
      description: The status a user sees (Nova's) - V(BUILD), V(ACTIVE), V(SHUTOFF), V(PAUSED), V(SUSPENDED), V(REBOOT), V(REBUILD), V(ERROR)...
      type: str
    vm_state:
      description: Nova's vm_state (C(building), C(active), C(stopped), C(error)...).
      type: str
    task_state:
      description: The task in progress (C(scheduling), C(spawning), C(powering-off)...), or null when none.
      type: str
    power_state:
      description: Nova's power state number (1 running, 4 shut down, 3 paused, 7 suspended).
      type: int
    power_state_name:
      description: The power state's name.
      type: str
    host:
      description: The compute host it runs on; null before it is scheduled.
      type: str
    node:
      description: The hypervisor node on that host.
      type: str
    availability_zone:
      description: The availability zone asked for, if any.
      type: str
    flavor:
      description: The flavor as it was when the server was created (name, flavorid, vcpus, memory_mb, root_gb, ephemeral_gb, swap, extra_specs).
      type: dict
    image:
      description: The uuid of the image it runs.
      type: str
    addresses:
      description: Its IP addresses.
      type: list
      elements: str
    metadata:
      description: Its metadata.
      type: dict
    locked:
      description: Whether it is locked.
      type: bool
    locked_reason:
      description: Why it was locked.
      type: str
    project_id:
      description: The project that owns it.
      type: str
    user_id:
      description: The user that created it.
      type: str
    reservation_id:
      description: The id shared by the servers of one create request.
      type: str
    created:
      description: When it was recorded.
      type: str
    updated:
      description: When its record last changed.
      type: str
    launched_at:
      description: When it was last built or rebuilt.
      type: str
    terminated_at:
      description: When it was deleted.
      type: str
    fault:
      description: In ERROR, its last fault (C(code), C(message), C(created), C(host), C(details) where the caller may see them).
      type: dict
      returned: when the server is in ERROR
  sample:
    id: 0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4
    name: web-1
    status: ACTIVE
    vm_state: active
    task_state: null
    power_state_name: Running
    host: compute-large
    flavor: {name: m1.small, vcpus: 1, memory_mb: 2048}
    image: 9d8bbd3c-5a69-4f4e-b6b4-0d2f3a1c9e11
    addresses: [10.0.0.5]
    locked: false
id:
  description: The server's uuid.
  returned: when it exists
  type: str
  sample: 0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4
would_schedule_to:
  description:
    - In check mode, the host the scheduler would choose for a new server.
    - With O(count), a dict of the new servers' names and the host each would get.
  returned: in check mode, when the server does not exist yet
  type: raw
  sample: compute-large
actions:
  description:
    - The lifecycle actions run (or, in check mode, that would run), in order.
    - With O(count), a dict of such lists by server name.
  returned: always
  type: raw
  sample: [unpause, stop]
servers:
  description: With O(count), the servers C(NAME-1) ... C(NAME-N) as they now are (in check mode, those that exist).
  returned: when count is given
  type: list
  elements: dict
created:
  description: With O(count), the servers created (in check mode, that would be), lowest first.
  returned: when count is given
  type: list
  elements: str
  sample: [web-3]
deleted:
  description: With O(count), the servers numbered above it that were deleted (in check mode, that would be), highest first.
  returned: when count is given
  type: list
  elements: str
  sample: [web-5, web-4]
worker_log:
  description:
    - The log of the background process that carries the work on (scheduling, building, the
      actions); it names servers, hosts and actions, never secrets.
  returned: when the task started work on a compute host
  type: str
  sample: /root/.local/state/novakit/workers/req-7c1d...-0b3f....log
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import (  # noqa: E402
    WAIT_ARGS,
    NovakitModule,
    desired_result,
)

# The options a new server is created with (``schemas.ServerCreate``'s fields).
CREATE = (
    "flavor",
    "image",
    "availability_zone",
    "server_group",
    "metadata",
    "networks",
    "security_groups",
    "config_drive",
    "key_name",
    "admin_password",
    "scheduler_hints",
)


class ServerModule(NovakitModule):
    takes_cloud = True
    argument_spec = {
        "name": {"type": "str", "required": True},
        "count": {"type": "int"},
        "state": {
            "type": "str",
            "default": "present",
            "choices": ["present", "absent", "started", "stopped", "paused", "suspended"],
        },
        "flavor": {"type": "str"},
        "image": {"type": "str"},
        "availability_zone": {"type": "str"},
        "server_group": {"type": "str"},
        "metadata": {"type": "dict", "default": {}},
        "user_data": {"type": "str", "no_log": True},
        "admin_password": {"type": "str", "no_log": True},
        "networks": {"type": "list", "elements": "dict", "default": []},
        "nics": {"type": "list", "elements": "raw", "default": []},
        "security_groups": {"type": "list", "elements": "str"},
        "boot_from_volume": {"type": "bool", "default": False},
        "volume_size": {"type": "int"},
        "boot_volume": {"type": "str", "aliases": ["boot_volume_id"]},
        "terminate_volume": {"type": "bool"},
        "config_drive": {"type": "bool", "default": True},
        "key_name": {"type": "str", "no_log": False},
        "scheduler_hints": {"type": "dict"},
        "shutdown_timeout": {"type": "int"},
        **WAIT_ARGS,
    }
    module_kwargs = {
        "required_if": [("boot_from_volume", True, ["volume_size"])],
    }

    def run(self):
        from novakit import desired
        from novakit.network.allocation import nic_requests

        p = self.params
        create = {k: p[k] for k in CREATE}
        create["networks"] = [*p["networks"], *nic_requests(p["nics"])]
        # openstack.cloud's names for schemas.ServerCreate's root volume fields.
        create["boot_from_volume"] = p["volume_size"] if p["boot_from_volume"] else None
        create["boot_volume"] = p["boot_volume"]
        create["delete_on_termination"] = p["terminate_volume"]
        create["user_data"] = desired.encode_user_data(p["user_data"])
        options = {"timeout": p["shutdown_timeout"]}
        if p["count"] is not None:
            return desired_result(
                self, desired.ensure_count, p["name"], p["count"], p["state"], create=create, options=options
            )
        return desired_result(self, desired.ensure, p["name"], p["state"], create=create, options=options)


def main():
    ServerModule()()


if __name__ == "__main__":
    main()
