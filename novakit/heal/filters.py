"""Port filters: each host's security-group filters made what the records say again.

A host's filters can drift from the records: the host lost them (rebuilt, or its libvirt's
filters were wiped), someone edited one by hand (``virsh nwfilter-edit``), or a rule change's
``push_filters`` could not reach the host. For each host heal asked (its guest list brings
the filters it holds: ``list_instances``; guest lists a playbook hands in bring none, and
nothing is compared), heal reads the records after the answer, and:

* a port bound to the host whose filter is missing or differs from its effective rules
  (``security_groups.effective_rules``, compared in one canonical form) gets its filter applied
  again (``port_filter`` correction, ``before``: what the host had);
* a filter whose port is no longer bound to the host (deleted, or moved elsewhere) is removed.

A port bound to the host without port security is left as it is (it is not filtered); one with
port security and no group gets a filter that drops everything, as the records say. A host
that does not filter (its driver cannot, or its operator marked it ``security_groups: none``)
has nothing to compare. The records are read after the host answered, so a port made since
is never taken for deleted; a rule changed between the read and the apply is pushed by its own
change, and the next heal settles a push that lost to heal's older apply.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import select

from novakit.db.models import Port
from novakit.heal.base import Correction, HealerBase
from novakit.network import filter_sync
from novakit.network.filter_rules import FilterRule, canonical, rules_from_json


def _count(rules: list[FilterRule] | None) -> str:
    return "none" if rules is None else f"{len(rules)} rule(s)"


#: port -> (its host, the server it is for, its MAC), for the ports bound to the hosts asked
_Bound = dict[str, tuple[str, str | None, str]]


class _Fix(NamedTuple):
    """One filter to make right: the rules a port's filter should have (None: remove it), where
    it is, and the correction that reports it."""

    port: str
    rules: list[FilterRule] | None
    target: tuple[str, str | None, str]
    correction: Correction


def _stale_filters(
    host: str, filters: dict[str, list[FilterRule]], bound: _Bound, wanted: dict[str, list[FilterRule]]
) -> list[_Fix]:
    """The ports bound to ``host`` whose filter there is missing or differs from the records."""
    fixes = []
    for port, (port_host, device, mac) in sorted(bound.items()):
        if port_host != host or port not in wanted:
            continue
        have = filters.get(port)
        if have is not None and canonical(have) == canonical(wanted[port]):
            continue
        correction = Correction(
            kind="port_filter",
            instance=device or port,
            host=host,
            before="missing" if have is None else f"differs: {_count(have)}",
            after=_count(wanted[port]),
            detail=f"port {port}: its filter applied again from its security groups",
        )
        fixes.append(_Fix(port, wanted[port], (host, device, mac), correction))
    return fixes


def _gone_port_filters(host: str, filters: dict[str, list[FilterRule]], bound: _Bound) -> list[_Fix]:
    """The filters ``host`` holds for ports no longer bound to it."""
    fixes = []
    for port in sorted(filters):
        if port in bound and bound[port][0] == host:
            continue
        correction = Correction(
            kind="port_filter",
            instance=port,
            host=host,
            before=_count(filters[port]),
            after="none",
            detail=f"port {port} is no longer on this host: its filter removed",
        )
        fixes.append(_Fix(port, None, (host, None, ""), correction))
    return fixes


class PortFilters(HealerBase):
    #: host -> the port filters it holds (FilterRule JSON), from its answer to ``list_instances``
    held_filters: dict[str, dict[str, list[dict[str, Any]]]]

    def _port_filters(
        self, answers: dict[str, dict[str, list[dict[str, Any]]]], dry_run: bool
    ) -> list[Correction]:
        """Apply again the filters that differ from the records, remove those of gone ports.
        ``answers``: what each host that filters holds (a host's guest list brings it)."""
        held = {h: {p: rules_from_json(r) for p, r in f.items()} for h, f in answers.items()}
        if not held:
            return []
        bound, wanted = self._bound_ports(sorted(held))
        found: list[_Fix] = []
        for host, filters in sorted(held.items()):
            found.extend(_stale_filters(host, filters, bound, wanted))
            found.extend(_gone_port_filters(host, filters, bound))
        if dry_run or not found:
            return [fix.correction for fix in found]
        # One fix per port is sent: a port found twice (moved between two hosts asked) gets its
        # last one, and the next heal finds the other again.
        changes = {fix.port: fix.rules for fix in found}
        targets = {fix.port: fix.target for fix in found}
        failed = filter_sync.deliver(
            self.rpc, filter_sync.requests_for(self.ctx.request_id, targets, changes)
        )
        for fix in found:
            fix.correction.applied = fix.port not in failed
            fix.correction.error = failed.get(fix.port)
        return [fix.correction for fix in found]

    def _bound_ports(self, hosts: list[str]) -> tuple[_Bound, dict[str, list[FilterRule]]]:
        """The ports bound to ``hosts``, and the rules each one's filter should have."""
        with self.db.reader() as session:
            rows = session.execute(
                select(Port.uuid, Port.binding_host, Port.device_id, Port.mac_address).where(
                    Port.binding_host.in_(hosts)
                )
            ).all()
            bound = {uuid: (str(host), device, mac) for uuid, host, device, mac in rows}
            return bound, filter_sync.effective_rules(session, list(bound))
