"""The REST API (FastAPI): a thin layer over ``evalsvc.services`` and ``evalsvc.db.Store``.

Contract (docs/api.md): everything lives under ``/api/v1`` with OpenAPI at ``/docs``;
``POST /runs`` only queues a run (``services.runs.submit``) for workers, and the report and gate
it serves are the ones the worker stored, so the verdict has one code path. Routes see domain
objects and plain dicts, never ORM rows. Bearer tokens with scopes ``read`` ⊂ ``submit`` ⊂
``admin`` (``EVALSVC_API_AUTH=off`` disables auth for local development).
``install(app)`` adds it to the app that ``evalsvc.webapp.create_app`` composes; state, store
and auth come from ``evalsvc.web.auth``.
May import: ``evalsvc.db``, ``evalsvc.domain``, ``evalsvc.services``, ``evalsvc.suites``,
``evalsvc.web.auth``, ``evalsvc.web.static``; never the dashboard or ``evalsvc.webapp``.
"""

from __future__ import annotations

from ._app import API_PREFIX, install
from ._metrics import make_registry, method_label

__all__ = ["API_PREFIX", "install", "make_registry", "method_label"]
