"""The REST API (FastAPI): a thin layer over ``evalsvc.services`` and ``evalsvc.db.Store``.

Contract (docs/api.md): everything lives under ``/api/v1`` with OpenAPI at ``/docs``;
``POST /runs`` only queues a run (``services.runs.submit``) for workers, and the report and gate
it serves are the ones the worker stored, so the verdict has one code path. Routes see domain
objects and plain dicts, never ORM rows. Bearer tokens with scopes ``read`` ⊂ ``submit`` ⊂
``admin`` (``EVALSVC_API_AUTH=off`` disables auth for local development).
May import: ``evalsvc.db``, ``evalsvc.domain``, ``evalsvc.services``, ``evalsvc.suites``.
"""

from __future__ import annotations

from ._app import API_PREFIX, create_app
from ._deps import AUTH_ENV, IMPLIED_SCOPES

__all__ = ["API_PREFIX", "AUTH_ENV", "IMPLIED_SCOPES", "create_app"]
