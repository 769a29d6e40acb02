"""A library call's arguments, bound the one way both paths bind them.

The front-door functions the catalog modules call take the database, the configuration and the
caller by the names ``db``, ``conf`` and ``ctx``, wherever those stand in their signatures
(``networks.show(db, ref, ctx=None)``, ``keypairs.registry.create(db, conf, ctx, data)``); a
change to security groups or ports takes ``on_change``, which sends the filters it changed to
their hosts; a call that reaches a host takes the conductor's services (``svc``) or the API
(``api``). A caller gives only the rest; ``bind`` puts these in by name: in the module's
process its own, in ``novakit serve`` (``/novakit/v1/call``) the service's database,
configuration and hosts and the token's caller, which no caller can give instead
(``ValidationError``). An optional ``ctx`` is always given, so a look-up is always the caller's
view.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from novakit import exceptions

#: the names a library call's own parameters have for the database, the configuration, the
#: caller, what to do with the ports whose filters it changed (send them to their hosts), the
#: conductor's services (``svc``: a volume's calls, which reach a host), the library's API
#: (``api``: an attachment's, which go through a server's state machine) and the pool a call may
#: hand its host's part to (``later``: none for the tools, whose calls end with their work)
PROVIDED = ("db", "conf", "ctx", "on_change", "svc", "api", "later")


def call_name(fn: Callable[..., Any]) -> str:
    """How a call is named on the wire: ``novakit.network.networks.show``."""
    return f"{fn.__module__}.{fn.__qualname__}"


def bind(
    fn: Callable[..., Any], provided: Mapping[str, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> inspect.BoundArguments:
    """``fn``'s arguments: ``provided`` by name where ``fn`` takes them, ``args`` into its other
    positional parameters in order, ``kwargs`` by name."""
    taken = [k for k in kwargs if k in PROVIDED]
    if taken:
        raise exceptions.ValidationError(taken[0], "is the caller's own: it cannot be given")
    signature = inspect.signature(fn)
    given = list(args)
    out: dict[str, Any] = {}
    for name, param in signature.parameters.items():
        if name in PROVIDED:
            out[name] = provided[name]
        elif given and param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            out[name] = given.pop(0)
    if given:
        raise exceptions.ValidationError("args", f"{call_name(fn)} takes fewer arguments")
    try:
        return signature.bind(**out, **kwargs)
    except TypeError as exc:
        raise exceptions.ValidationError("kwargs", f"{call_name(fn)}: {exc}") from None


def run_here(
    fn: Callable[..., Any],
    provide: Mapping[str, Callable[[], Any]],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Any:
    """``fn`` called in this process: ``provide`` makes the database, configuration and caller it
    takes (only those it takes: a call that needs no database opens none)."""
    wants = inspect.signature(fn).parameters
    provided = {name: provide[name]() for name in PROVIDED if name in wants}
    bound = bind(fn, provided, args, kwargs)
    return fn(*bound.args, **bound.kwargs)
