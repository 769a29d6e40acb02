"""The HTTP face, ``novakit serve``: OpenStack's APIs over the library, for the clients people
already use (``openstack``, openstacksdk, keystoneauth, the openstack.cloud collection).

An ASGI application (FastAPI on Starlette) served by uvicorn: asynchronous request handling
with a thread pool for the library's blocking database calls, several worker processes with
``--workers``, TLS, and no web server in front needed for a small fleet.

- ``app``: builds the application, its request-id middleware, its error handlers;
- ``errors``: the one table from the library's exceptions to HTTP answers (Keystone's shape);
- ``body``: request bodies read with a size limit and parsed as JSON objects;
- one router per OpenStack service: ``identity`` (Keystone v3, ``/identity``) now; compute
  (``/compute``) and the others follow.
"""
