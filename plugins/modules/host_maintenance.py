#!/usr/bin/python
"""Host maintenance: drain a host, evacuate a dead one, enable it again."""

from __future__ import annotations

DOCUMENTATION = r"""
module: host_maintenance
short_description: Drain a novakit compute host, evacuate a dead one, or enable it again
description:
  - O(state=drained) disables the host and moves every server off it, live where possible and
    cold otherwise (O(live)), each placed by the scheduler as a boot is (server groups, networks,
    capacity); cold moves are confirmed at once. The task fails, after moving what it can, when a
    server is left on the host, and says which and why.
  - O(state=evacuated) is for a host that is down; its servers are rebuilt on other hosts from their
    images, with their ports. Heal removes their old guests when the host comes back.
  - O(state=enabled) enables the host again (after its maintenance).
  - A host already drained (disabled, no servers) or enabled reports no change.
version_added: 0.2.0
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common, novakit.cloud.cloud]
attributes:
  check_mode:
    details:
      - Each server's move is the API's dry run (the state table, the policy, the host's liveness);
        where it would go is the scheduler's choice at the real run.
  diff_mode:
    support: none
options:
  host:
    description: The compute host.
    type: str
    required: true
  state:
    description: What the host should be.
    type: str
    choices: [drained, evacuated, enabled]
    default: drained
  live:
    description:
      - How to move running servers when draining. V(auto) tries a live migration and falls back to a
        cold one; V(live) only live; V(cold) only cold.
    type: str
    choices: [auto, live, cold]
    default: auto
  reason:
    description: Why the host is disabled (shown by C(novakit host list)).
    type: str
"""

EXAMPLES = r"""
- name: Empty a host before its kernel update
  novakit.cloud.host_maintenance:
    host: kvm-07
    state: drained
    reason: kernel update

- name: Take it back
  novakit.cloud.host_maintenance:
    host: kvm-07
    state: enabled
"""

RETURN = r"""
servers:
  description: One row per server that was on the host.
  returned: when state is drained or evacuated
  type: list
  elements: dict
  contains:
    id:
      description: The server's uuid.
      type: str
    name:
      description: Its name.
      type: str
    result:
      description: V(moved), V(failed), V(skipped), or in check mode V(would move).
      type: str
    to:
      description: The host it went to.
      type: str
    how:
      description: V(live), V(cold) or V(evacuate).
      type: str
    reason:
      description: Why it failed or was skipped.
      type: str
  sample: [{id: 0b7f..., name: web-1, result: moved, to: kvm-03, how: live, reason: null}]
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402

_LIVE = {"auto": None, "live": True, "cold": False}


class HostMaintenanceModule(NovakitModule):
    takes_cloud = True
    argument_spec = {
        "host": {"type": "str", "required": True},
        "state": {"type": "str", "choices": ["drained", "evacuated", "enabled"], "default": "drained"},
        "live": {"type": "str", "choices": ["auto", "live", "cold"], "default": "auto"},
        "reason": {"type": "str"},
    }

    def run(self):
        from novakit.fleet import hosts
        from novakit.moves import drain

        p = self.params
        known = {h["host"]: h for h in self.call(hosts.list_hosts)}
        if p["host"] not in known:
            self.fail(f"no compute host named {p['host']!r}")
        enabled = known[p["host"]]["status"] == "enabled"
        if p["state"] == "enabled":
            if not enabled and not self.check_mode:
                self.call(hosts.set_disabled, p["host"], False)
            return {"changed": not enabled}
        if p["state"] == "drained":
            out = self.call(
                drain.drain_host,
                p["host"],
                live=_LIVE[p["live"]],
                reason=p["reason"],
                dry_run=self.check_mode,
            )
        else:
            out = self.call(drain.evacuate_host, p["host"], dry_run=self.check_mode)
        left = [r for r in out["servers"] if r["result"] in ("failed", "skipped")]
        changed = enabled or any(r["result"] in ("moved", "would move") for r in out["servers"])
        result = {"changed": changed, "servers": out["servers"], "host": p["host"]}
        if left:
            names = ", ".join(f"{r['name']} ({r['result']}: {r['reason']})" for r in left)
            self.fail(f"{len(left)} server(s) left on {p['host']}: {names}", **result)
        return result


def main():
    HostMaintenanceModule()()


if __name__ == "__main__":
    main()
