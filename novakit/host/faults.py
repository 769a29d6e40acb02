"""Faults shaped from exceptions, as Nova's exception_to_dict does.

Kept apart from the audit trail's writers because compute hosts shape faults
too and must not import the database layer.
"""

from __future__ import annotations

import json
import traceback as tb

from novakit import exceptions
from novakit.host.messages import ComputeRequest, ComputeResult, Fault, InstanceResult

MAX_MESSAGE = 255
TRACEBACK_PREFIX = "Traceback (most recent call last)"


def fault_from_exception(exc: BaseException, host: str | None = None) -> Fault:
    """Turn an exception into a fault the way Nova's exception_to_dict does."""
    if isinstance(exc, exceptions.NovakitError):
        code, message = exc.code, exc.format_message()
        details = None
        explanation = getattr(exc, "explanation", None)
        if explanation:
            details = json.dumps(explanation, indent=1, sort_keys=True, default=str)
        elif code == 500:
            details = _traceback(exc)
    else:
        # Internal error: the text may carry anything, so only admins see it.
        code, message = 500, exc.__class__.__name__
        details = _traceback(exc)
    return Fault(
        code=code,
        message=_truncate(message),
        exception_class=exc.__class__.__name__,
        details=details,
        host=host,
        reschedule=not isinstance(exc, exceptions.BuildAbortError | exceptions.Invalid),
    )


def _traceback(exc: BaseException) -> str:
    """The traceback text; an exception that was never raised gets an empty one, so that
    internal faults are always recognisable by their details."""
    text = "".join(tb.format_exception(exc))
    if not text.startswith(TRACEBACK_PREFIX):
        text = f"{TRACEBACK_PREFIX}:\n  (not raised)\n{text}"
    return text


def _truncate(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def fault_is_internal(details: str | None) -> bool:
    return bool(details) and details.startswith(TRACEBACK_PREFIX)  # type: ignore[union-attr]


def unusable(request: ComputeRequest, exc: BaseException, host: str) -> ComputeResult:
    """The answer for a host that could not run ``request`` at all: every instance failed there,
    with ``exc`` as the fault, and another host may do better (``reschedule``)."""
    fault = fault_from_exception(exc, host)
    fault.reschedule = True
    return ComputeResult(
        request_id=request.request_id,
        host=host,
        operation=request.operation,
        error=fault,
        results=[InstanceResult(uuid=i.uuid, ok=False, fault=fault) for i in request.instances],
    )
