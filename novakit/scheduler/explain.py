""" "No valid host" that explains itself: per step, hosts in and out, and why each rejected host went.

The explanation is plain JSON (it goes into the fault's details and to the
caller); ``summary`` turns it into the one paragraph a person reads first.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Step:
    name: str
    hosts_in: int
    hosts_out: int = 0
    rejected: dict[str, str] = field(default_factory=dict)
    # How many rejections were not listed (the list is capped, the counts are not).
    not_listed: int = 0
    reason_counts: Counter[str] = field(default_factory=Counter)
    # The SQL prefilter's step: how many providers passed, while hosts_in (every provider) is not
    # counted yet. A successful decision never needs the count, so it is taken on failure only.
    uncounted_passed: int | None = None

    def reject(self, host: str, reason: str, cap: int) -> None:
        self.hosts_out += 1
        self.reason_counts[_shape(reason)] += 1
        if len(self.rejected) < cap:
            self.rejected[host] = reason
        else:
            self.not_listed += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.name,
            "hosts_in": self.hosts_in,
            "hosts_out": self.hosts_out,
            "rejected": self.rejected,
            "not_listed": self.not_listed,
        }


def _shape(reason: str) -> str:
    """Group reasons that differ only in numbers ("free 2 of 16" and "free 3 of 16")."""
    return "".join("#" if ch.isdigit() else ch for ch in reason).replace("##", "#")


def summary(steps: list[Step], *, placed: int, wanted: int, needed: int) -> str:
    parts = [f"Placed {placed} of {wanted} instance(s), {needed} needed."]
    for step in steps:
        if not step.hosts_out and step.hosts_in:
            continue
        text = f"{step.name}: {step.hosts_in} host(s) in, {step.hosts_out} out"
        if step.reason_counts:
            common = "; ".join(
                f"{next(r for r in step.rejected.values() if _shape(r) == shape) if step.rejected else shape}"
                f" ({count})"
                for shape, count in step.reason_counts.most_common(3)
                if any(_shape(r) == shape for r in step.rejected.values())
            )
            if common:
                text += f" (e.g. {common})"
        parts.append(text + ".")
    last = steps[-1] if steps else None
    if last is not None and last.hosts_in - last.hosts_out <= 0:
        parts.append("No host passed every step.")
    return " ".join(parts)
