"""A connection that runs commands on this machine as ``local`` does, under another name.

It stands in for SSH in the tests: a task on a host reached this way is not on the
controller as far as the novakit action plugins can tell, so they run their module there.
"""

from __future__ import annotations

DOCUMENTATION = """
    name: elsewhere
    short_description: ansible.builtin.local under another name (novakit's tests only)
    description:
        - Runs commands on this machine, as ansible.builtin.local does, but is not C(local).
    author: novakit developers (@novakit)
    options:
        become_success_timeout:
            type: int
            default: 10
            description: As ansible.builtin.local's option.
            vars:
                - name: ansible_local_become_success_timeout
        become_strip_preamble:
            type: bool
            default: true
            description: As ansible.builtin.local's option.
            vars:
                - name: ansible_local_become_strip_preamble
    extends_documentation_fragment:
        - connection_pipelining
"""

from ansible.plugins.connection.local import Connection as LocalConnection  # noqa: E402


class Connection(LocalConnection):
    transport = "elsewhere"
