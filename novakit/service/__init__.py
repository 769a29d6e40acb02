"""The HTTP face, ``novakit serve``: OpenStack's APIs over the library, for the clients people
already use (``openstack``, openstacksdk, keystoneauth, the openstack.cloud collection).

An ASGI application (FastAPI on Starlette) served by uvicorn. Why these: both are the mainstream,
well-kept Python choice for a JSON API; uvicorn serves HTTP/1.1 and TLS itself and forks
``--workers`` processes, so a small fleet needs no web server in front (a larger one puts any
reverse proxy there); handlers are plain functions over the blocking library, which Starlette
runs in its thread pool, while the conductor's part of a create or an action runs in a pool of
the service's own (``work``) after the 202. pydantic, already the library's schema language,
is FastAPI's. A WSGI stack (Flask, gunicorn) would serve as well; Keystone and Nova run as WSGI
applications, but nothing in their protocol needs it.

- ``app``: builds the application, its request-id middleware, its error handlers;
- ``errors``: the one table from the library's exceptions to HTTP answers (Keystone's and
  Nova's shapes);
- ``body``: request bodies read with a size limit and parsed as JSON objects;
- ``auth``: the caller of a request, from its token; ``microversion``: Nova's version headers;
- ``work``: the pool of the conductor's part of creates and actions;
- one router per OpenStack API: ``identity`` (Keystone v3, ``/identity``), ``compute``,
  ``servers`` and ``compute_extras`` (Nova's v2.1, ``/compute``), ``images`` (Glance v2's reads,
  ``/image``).
"""
