"""The body of ``POST /v3/auth/tokens`` (Keystone's ``auth`` request), checked field by field:
a malformed body is refused naming the field, never echoing a value (a password)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from novakit.identity import DEFAULT_DOMAIN_ID
from novakit.identity.passwords import MAX_PASSWORD_LENGTH

#: no token a client hands over is longer (Keystone's limit on a Fernet token: 255 is usual)
MAX_TOKEN_LENGTH = 8192

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


class CredentialUserRef(_Strict):
    id: str | None = Field(default=None, min_length=1, max_length=64)
    name: str | None = Field(default=None, min_length=1, max_length=255)
    domain: DomainRef | None = None

    @model_validator(mode="after")
    def _named(self) -> CredentialUserRef:
        if self.id is None and (self.name is None or self.domain is None):
            raise ValueError("a user needs its id, or its name and domain")
        return self


class ApplicationCredentialRef(_Strict):
    """The ``application_credential`` method: by id, or by name and its user; and the secret."""

    id: str | None = Field(default=None, min_length=1, max_length=64)
    name: str | None = Field(default=None, min_length=1, max_length=255)
    user: CredentialUserRef | None = None
    secret: str = Field(min_length=1, max_length=MAX_PASSWORD_LENGTH)

    @model_validator(mode="after")
    def _named(self) -> ApplicationCredentialRef:
        if self.id is None and (self.name is None or self.user is None):
            raise ValueError("an application credential needs its id, or its name and user")
        return self


class Identity(_Strict):
    methods: list[Literal["password", "token", "application_credential"]] = Field(min_length=1, max_length=1)
    password: PasswordMethod | None = None
    token: TokenMethod | None = None
    application_credential: ApplicationCredentialRef | None = None

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


# --- application credentials and the identity CRUD -----------------------------------------


class RoleRef(_Strict):
    id: str | None = Field(default=None, min_length=1, max_length=64)
    name: str | None = Field(default=None, min_length=1, max_length=255)
    domain_id: None = None

    @model_validator(mode="after")
    def _named(self) -> RoleRef:
        if self.id is None and self.name is None:
            raise ValueError("a role needs its id or its name")
        return self


class ApplicationCredentialSpec(_Strict):
    name: str = Field(min_length=1, max_length=255)
    description: str | None = Field(default=None, max_length=65535)
    secret: str | None = Field(default=None, min_length=1, max_length=MAX_PASSWORD_LENGTH)
    expires_at: dt.datetime | None = None
    roles: list[RoleRef] = Field(default_factory=list, max_length=64)
    unrestricted: bool = False
    #: Keystone's access rules are not supported: only none (what the clients send by default)
    access_rules: list[dict[str, str]] = Field(default_factory=list, max_length=0)


class ApplicationCredentialCreate(_Strict):
    application_credential: ApplicationCredentialSpec


def _default_domain(value: str | None) -> str | None:
    if value is not None and value != DEFAULT_DOMAIN_ID:
        raise ValueError("only the default domain exists")
    return value


class UserSpec(_Strict):
    name: str = Field(min_length=1, max_length=255)
    password: str | None = Field(default=None, max_length=MAX_PASSWORD_LENGTH)
    enabled: bool = True
    domain_id: str | None = None

    _domain = field_validator("domain_id")(_default_domain)


class UserCreate(_Strict):
    user: UserSpec


class UserChanges(_Strict):
    name: str | None = Field(default=None, min_length=1, max_length=255)
    password: str | None = Field(default=None, max_length=MAX_PASSWORD_LENGTH)
    enabled: bool | None = None
    domain_id: str | None = None

    _domain = field_validator("domain_id")(_default_domain)


class UserUpdate(_Strict):
    user: UserChanges


class ProjectSpec(_Strict):
    name: str = Field(min_length=1, max_length=255)
    description: str | None = Field(default=None, max_length=65535)
    enabled: bool = True
    domain_id: str | None = None
    is_domain: Literal[False] = False

    _domain = field_validator("domain_id")(_default_domain)


class ProjectCreate(_Strict):
    project: ProjectSpec
