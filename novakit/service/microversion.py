"""Microversions: which version of an API a request asks for, and the headers that answer it.

A request names its version in ``OpenStack-API-Version: <service> X.Y`` (the API working
group's form, Nova's since 2.27) or in the service's legacy header (Nova's
``X-OpenStack-Nova-API-Version: X.Y``); the first wins when both are given, as in Nova.
``latest`` is the newest the service supports; no header means the oldest (2.1). A version
outside the service's range answers 406, a string that is no version 400. Every answer of a
microversioned route says which version it was given (both headers) and ``Vary`` on them,
so that a cache keeps the answers of two versions apart.

One ``Service`` per microversioned API (compute now; volume and placement later), each with its
own range: the routers compare versions (``requested(...) >= (2, 47)``), never strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from novakit import exceptions

_VERSION = re.compile(r"^([1-9]\d*)\.([1-9]\d*|0)$")


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)

    @classmethod
    def parse(cls, text: str) -> Version:
        found = _VERSION.match(text.strip())
        if found is None:
            raise InvalidVersionString(version=text.strip()[:20])
        return cls(int(found.group(1)), int(found.group(2)))


class InvalidVersionString(exceptions.Invalid):
    msg_fmt = "API Version String %(version)s is of invalid format. Must be of format MajorNum.MinorNum."


class VersionNotAcceptable(exceptions.NovakitError):
    msg_fmt = (
        "Version %(version)s is not supported by the API. Minimum is %(minimum)s and maximum is %(maximum)s."
    )
    code = 406


@dataclass(frozen=True)
class Service:
    """A microversioned API: its name in ``OpenStack-API-Version``, its legacy header (empty: it
    has none, as Cinder's and Placement's), its range."""

    name: str
    legacy_header: str
    minimum: Version
    maximum: Version

    def requested(self, request: Request) -> Version:
        """The version ``request`` asks for (its headers, the module docstring); 400 or 406
        (``InvalidVersionString``, ``VersionNotAcceptable``) when it cannot be served."""
        asked = self._asked(request)
        if asked is None:
            return self.minimum
        if asked.strip().lower() == "latest":
            return self.maximum
        version = Version.parse(asked)
        if not self.minimum <= version <= self.maximum:
            raise VersionNotAcceptable(version=str(version), minimum=self.minimum, maximum=self.maximum)
        return version

    def _asked(self, request: Request) -> str | None:
        for value in request.headers.getlist("openstack-api-version"):
            # "compute 2.47", possibly several services' in one header: "compute 2.47, volume 3.0"
            for part in value.split(","):
                words = part.split()
                if len(words) == 2 and words[0].lower() == self.name:
                    return words[1]
        return request.headers.get(self.legacy_header) if self.legacy_header else None

    def headers(self, version: Version) -> dict[str, str]:
        if not self.legacy_header:
            return {"OpenStack-API-Version": f"{self.name} {version}", "Vary": "OpenStack-API-Version"}
        return {
            "OpenStack-API-Version": f"{self.name} {version}",
            self.legacy_header: str(version),
            "Vary": f"OpenStack-API-Version, {self.legacy_header}",
        }

    def respond(
        self, content: Any, version: Version, status_code: int = 200, headers: dict[str, str] | None = None
    ) -> JSONResponse:
        """``content`` as JSON with the version's headers (and ``headers``)."""
        return JSONResponse(
            content, status_code=status_code, headers={**self.headers(version), **(headers or {})}
        )

    def accepted(
        self, version: Version, status_code: int = 202, headers: dict[str, str] | None = None
    ) -> Response:
        """No body, with the version's headers (and ``headers``): Nova's 202 for an action, 204
        for a delete."""
        return Response(status_code=status_code, headers={**self.headers(version), **(headers or {})})
