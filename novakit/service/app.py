"""The ASGI application of ``novakit serve``: routers, the request id, the error table.

``create_app`` is uvicorn's factory (each worker process builds its own app, its own
database engine). It reads its settings from the environment ``novakit serve`` sets: the
configuration (``NOVAKIT_SERVE_CONFIG``, else as every command loads it) and the identity
settings (``novakit.identity.settings``). It fails at start-up when the key repository is not set up.

Every response carries ``x-openstack-request-id`` (``req-<uuid>``, ``novakit.context``'s
request id); handlers find it as ``request.state.request_id`` for the context they build.
"""

from __future__ import annotations

import json
import logging
import os

from fastapi import FastAPI
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from novakit import exceptions
from novakit.compute.api import API
from novakit.config import Config, load_config
from novakit.context import generate_request_id
from novakit.db.engine import Database
from novakit.identity.keys import KeyRepository
from novakit.identity.settings import IdentitySettings
from novakit.service import (
    compute,
    compute_extras,
    errors,
    identity,
    images,
    native,
    server_resources,
    servers,
)
from novakit.service import image_members as image_member_routes
from novakit.service import network as network_api
from novakit.service import placement as placement_api
from novakit.service import volumes as volume_api
from novakit.service.work import WorkPool, threads_from_env

LOG = logging.getLogger(__name__)
REQUEST_ID_HEADER = "x-openstack-request-id"


class RequestIdMiddleware:
    """Names every request (``req-<uuid>``) and puts the name on its response, an error's too:
    an exception nothing handled becomes the 500 answer here, where the header is added."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = generate_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        started = False

        async def send_named(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        try:
            await self.app(scope, receive, send_named)
        except Exception as exc:
            what = (request_id, scope.get("method"), scope.get("path"), type(exc).__name__)
            LOG.exception("%s: %s %s failed: %s", *what)
            if started:
                raise
            shape = errors.shape_of(str(scope.get("path", "")))
            body = json.dumps(errors.error_body(500, errors.INTERNAL_MESSAGE, shape)).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (REQUEST_ID_HEADER.encode(), request_id.encode()),
            ]
            await send({"type": "http.response.start", "status": 500, "headers": headers})
            await send({"type": "http.response.body", "body": body})


#: the configuration ``novakit serve`` was given (``--config``, ``--db-url``, ...), as JSON, for its
#: worker processes; without it they load the configuration as any command does
CONFIG_ENV = "NOVAKIT_SERVE_CONFIG"


def _config() -> Config:
    given = os.environ.get(CONFIG_ENV)
    return Config.model_validate_json(given) if given else load_config()


def create_app(conf: Config | None = None, settings: IdentitySettings | None = None) -> FastAPI:
    conf = conf or _config()
    settings = settings or IdentitySettings.from_env(conf)
    keys = KeyRepository(settings.key_repository)
    keys.fernet()  # fails now, at start-up, when the repository is not set up
    db = Database(conf.database_url)
    # The conductor's part of creates and actions runs here, after their 202 (``service.work``).
    pool = WorkPool(threads_from_env())
    app = FastAPI(
        title="novakit",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        on_shutdown=[pool.shutdown, db.dispose],
    )
    app.state.identity = identity.IdentityService(db, keys, settings)
    app.state.compute = compute.ComputeService(API(db, conf, later=pool), db, conf)
    app.include_router(identity.router)
    app.include_router(compute.router)
    app.include_router(servers.router)
    app.include_router(compute_extras.router)
    app.include_router(server_resources.router)
    app.include_router(images.router)
    app.include_router(image_member_routes.router)
    app.include_router(network_api.router)
    app.include_router(volume_api.router)
    app.include_router(placement_api.router)
    app.include_router(native.router)
    app.add_exception_handler(exceptions.NovakitError, errors.novakit_error)
    app.add_exception_handler(HTTPException, errors.http_error)
    app.add_middleware(RequestIdMiddleware)
    return app
