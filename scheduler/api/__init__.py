"""The HTTP control plane (``ksched api``, docs/api.md): FastAPI on uvicorn, per-tenant by API key.

* ``app.py`` — :func:`create_app` and :func:`start_services` (one per process), health and metrics;
* ``schedules.py`` / ``reads.py`` — the routes (commands through the SDK, queries on the store);
* ``lag.py`` — ``/v1/lag``, a tenant's dispatch lag over a window, from the history store;
* ``console.py`` + ``static/`` — the read-only web console (``/console``), a page on the JSON API;
* ``router.py`` — the one command/result router of a process (the SDK's client, shared);
* ``keys.py`` — API keys checked against the followed registry, and the per-tenant rate;
* ``models.py`` — the bodies; ``problems.py`` / ``guard.py`` — errors as problem+json;
* ``server.py`` — running it (uvicorn), and the committed OpenAPI document.
"""

from __future__ import annotations
