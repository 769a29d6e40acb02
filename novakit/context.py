"""Who is asking: the RequestContext that every API call carries.

novakit has no Keystone. The caller's identity comes from where the call
starts: Ansible/AWX variables, the CLI's options or environment
(``NOVAKIT_PROJECT``, ``NOVAKIT_USER``, ``NOVAKIT_ROLES``), or the Python
caller. A context with the ``admin`` role sees every project; any other sees
its own project only, and another project's instance looks exactly like one
that does not exist.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field


def generate_request_id() -> str:
    return f"req-{uuid.uuid4()}"


@dataclass(frozen=True)
class RequestContext:
    project_id: str
    user_id: str
    roles: list[str] = field(default_factory=list)
    request_id: str = field(default_factory=generate_request_id)

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles

    def with_request_id(self, request_id: str) -> RequestContext:
        return RequestContext(self.project_id, self.user_id, list(self.roles), request_id)

    @classmethod
    def from_env(cls, request_id: str | None = None) -> RequestContext:
        roles = [r for r in os.environ.get("NOVAKIT_ROLES", "admin").split(",") if r]
        return cls(
            project_id=os.environ.get("NOVAKIT_PROJECT", "admin"),
            user_id=os.environ.get("NOVAKIT_USER", os.environ.get("USER", "admin")),
            roles=roles,
            request_id=request_id or generate_request_id(),
        )

    @classmethod
    def admin(cls, request_id: str | None = None) -> RequestContext:
        return cls("admin", "admin", ["admin"], request_id or generate_request_id())
