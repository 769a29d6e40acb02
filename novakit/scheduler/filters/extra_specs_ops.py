"""Matching a requirement such as ``>= 4`` or ``<in> avx2`` against a host value (Nova's extra_specs_ops).

Operators: ``=`` (numeric, at least), ``==`` ``!=`` ``>=`` ``<=`` (numeric), ``s==`` ``s!=``
``s<`` ``s<=`` ``s>`` ``s>=`` (string), ``<in>`` (substring), ``<all-in>`` (all listed in a
collection), ``<or>`` (any of several values). Without an operator: string equality.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any


def _num(op: Callable[[float, float], bool]) -> Callable[[Any, str], bool]:
    def match(value: Any, wanted: str) -> bool:
        try:
            return op(float(value), float(wanted))
        except (TypeError, ValueError):
            return False

    return match


def _str(op: Callable[[str, str], bool]) -> Callable[[Any, str], bool]:
    return lambda value, wanted: op(str(value), wanted)


def _all_in(value: Any, wanted: str) -> bool:
    have = {str(v) for v in value} if isinstance(value, list | set | tuple) else set(str(value).split())
    return set(wanted.split()) <= have


def _in(value: Any, wanted: str) -> bool:
    if isinstance(value, list | set | tuple):
        return wanted in {str(v) for v in value}
    return wanted in str(value)


_OPS: dict[str, Callable[[Any, str], bool]] = {
    "=": _num(operator.ge),
    "==": _num(operator.eq),
    "!=": _num(operator.ne),
    ">=": _num(operator.ge),
    "<=": _num(operator.le),
    "s==": _str(operator.eq),
    "s!=": _str(operator.ne),
    "s<": _str(operator.lt),
    "s<=": _str(operator.le),
    "s>": _str(operator.gt),
    "s>=": _str(operator.ge),
    "<in>": _in,
    "<all-in>": _all_in,
}


def match(value: Any, requirement: str) -> bool:
    words = requirement.split()
    if not words:
        return str(value) == requirement
    op = words[0]
    if op == "<or>":
        return any(str(value) == alt for alt in words[1:] if alt != "<or>")
    if op in _OPS:
        return _OPS[op](value, " ".join(words[1:]))
    return str(value) == requirement
