"""A server's console log (Nova's ``os-getConsoleOutput``), read from its host through its driver.

The controller asks the server's host with a ``console_output`` request over the
host's own transport (``ComputeRPC``: in-process, SSH or a libvirt URI), the way
every other operation reaches it; the host's driver reads the guest's serial log
(the libvirt driver: the log virtlogd appends to; the fake driver: what its guest
"printed"). Reading changes nothing, so no action is recorded.

Policy, as Nova's ``os_compute_api:os-console-output`` (owner): a member reads the
consoles of its own project's servers; another project's server looks not found.
A host's error reaches an admin as the host said it; a member learns only that the
host did not answer (host names and driver errors are the operator's).
"""

from __future__ import annotations

from typing import Any

from novakit import exceptions, policy
from novakit.cells.registry import locate
from novakit.compute.rpc import ComputeRPC, instance_spec
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.host.messages import ComputeRequest

#: the most lines a caller may ask for (the libvirt driver returns at most the log's last 100 KiB)
MAX_LINES = 10000


def console_output(db: Any, rpc: ComputeRPC, ctx: RequestContext, ref: str, lines: int | None = None) -> str:
    """The console log of server ``ref`` so far, or its last ``lines`` lines."""
    if lines is not None and not 1 <= lines <= MAX_LINES:
        raise exceptions.ValidationError("lines", f"must be from 1 to {MAX_LINES}, got {lines}")
    with db.target_cell(locate(db.cells, ctx, ref)), db.reader() as session:
        inst = db_api.instance_get_by_name_or_uuid(session, ctx, ref)
        if not inst.host:
            raise exceptions.Invalid(
                reason=f"server {inst.display_name} has no console yet: it is on no host "
                f"(vm_state {inst.vm_state})"
            )
        request = ComputeRequest(
            request_id=ctx.request_id,
            host=inst.host,
            operation="console_output",
            instances=[instance_spec(session, inst)],
        )
        name = inst.display_name
    result = rpc.send(request)
    answer = result.results[0] if result.results else None
    if answer is None or not answer.ok or answer.console is None:
        fault = (answer.fault if answer is not None else None) or result.error
        if fault is not None and policy.allowed(ctx, "server:fault_details"):
            raise exceptions.ComputeError(reason=f"console of {name} on {request.host}: {fault.message}")
        raise exceptions.ComputeError(reason=f"the host of server {name} did not give its console log")
    text = answer.console
    if lines is not None:
        text = "".join(text.splitlines(keepends=True)[-lines:])
    return text
