"""The body of ``POST /v3/auth/tokens`` (Keystone's ``auth`` request), checked field by field:
a malformed body is refused naming the field, never echoing a value (a password)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from novakit.identity.passwords import MAX_PASSWORD_LENGTH
from novakit.identity.tokens import MAX_TOKEN_LENGTH

Name = Field(min_length=1, max_length=255)
Id = Field(min_length=1, max_length=64)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DomainRef(_Strict):
    id: str | None = Field(default=None, min_length=1, max_length=64)
    name: str | None = Field(default=None, min_length=1, max_length=255)

    @model_validator(mode="after")
    def _named(self) -> DomainRef:
        if self.id is None and self.name is None:
            raise ValueError("a domain needs its id or its name")
        return self


class UserRef(_Strict):
    id: str | None = Field(default=None, min_length=1, max_length=64)
    name: str | None = Field(default=None, min_length=1, max_length=255)
    domain: DomainRef | None = None
    password: str = Field(max_length=MAX_PASSWORD_LENGTH)

    @model_validator(mode="after")
    def _named(self) -> UserRef:
        if self.id is None and self.name is None:
            raise ValueError("a user needs its id, or its name and domain")
        if self.id is None and self.domain is None:
            raise ValueError("a user named by name needs its domain")
        return self


class PasswordMethod(_Strict):
    user: UserRef


class TokenMethod(_Strict):
    id: str = Field(min_length=1, max_length=MAX_TOKEN_LENGTH)


class Identity(_Strict):
    methods: list[Literal["password", "token"]] = Field(min_length=1, max_length=1)
    password: PasswordMethod | None = None
    token: TokenMethod | None = None

    @model_validator(mode="after")
    def _sections(self) -> Identity:
        for method in self.methods:
            if getattr(self, method) is None:
                raise ValueError(f"method {method!r} needs its {method!r} section")
        return self


class ProjectRef(_Strict):
    id: str | None = Field(default=None, min_length=1, max_length=64)
    name: str | None = Field(default=None, min_length=1, max_length=255)
    domain: DomainRef | None = None

    @model_validator(mode="after")
    def _named(self) -> ProjectRef:
        if self.id is None and self.name is None:
            raise ValueError("a project needs its id, or its name and domain")
        if self.id is None and self.domain is None:
            raise ValueError("a project named by name needs its domain")
        return self


class Scope(_Strict):
    """Project scope only for now (no domain or system scope)."""

    project: ProjectRef


class Auth(_Strict):
    identity: Identity
    scope: Scope | Literal["unscoped"] | None = None


class AuthRequest(_Strict):
    auth: Auth
