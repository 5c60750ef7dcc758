"""The composition of the web app: one store, one state, the API and the dashboard mounted on it.

Contract: ``create_app`` builds an app whose store is opened at startup and closed at shutdown,
whose auth mode is decided here (``EVALSVC_API_AUTH``, or the ``auth`` argument) and applied by
the dependencies of ``evalsvc.web.auth`` on every API route and dashboard page, and whose
requests are counted for ``/metrics`` by handler name. A database that is unreachable or not at
head does not stop the server: ``/healthz`` says 503 and so does every route that needs the
database, until it is fixed (``AppState``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response

from evalsvc import api, dashboard
from evalsvc.api import make_registry, method_label
from evalsvc.db import Store, StoreError
from evalsvc.web.auth import AppState, auth_enabled_from_env

log = logging.getLogger("evalsvc.api")


def create_app(database_url: str | None = None, *, auth: bool | None = None) -> FastAPI:
    """The REST API and the dashboard over the database at ``database_url`` (None:
    ``EVALSVC_DATABASE_URL`` or the embedded SQLite database). ``auth=None`` reads
    ``EVALSVC_API_AUTH`` (default on)."""
    auth_on = auth_enabled_from_env() if auth is None else auth

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = Store.from_url(database_url)
        registry, requests = make_registry(store)
        state = AppState(store=store, auth=auth_on, registry=registry)
        try:
            # Same rule as `evalsvc compare`: a brand-new SQLite file is created at head; any
            # other database must be migrated by an operator (`evalsvc db upgrade`).
            store.ensure_ready(upgrade_fresh_sqlite=True)
            state.ready = True
        except StoreError as err:
            state.ready_error = str(err)
            log.warning("database not ready (serving 503 until it is): %s", err)
        if not auth_on:
            log.warning("API authentication is OFF (EVALSVC_API_AUTH=off): local use only")
        app.state.evalsvc = state
        app.state.requests_counter = requests
        try:
            yield
        finally:
            store.close()

    app = FastAPI(
        title="evalsvc",
        summary="Quality evaluation and release gates for quantized LLM serving endpoints.",
        description=(
            "Queue runs that compare candidate endpoints with a baseline, follow them, and read "
            "their reports and gates. Bearer tokens carry the scopes `read`, `submit` and "
            "`admin` (admin implies submit implies read)."
        ),
        version="1",
        lifespan=lifespan,
        # Served by api.install from vendored assets instead of FastAPI's CDN defaults.
        docs_url=None,
        redoc_url=None,
    )
    # The API first: its body limit is the innermost middleware, as the request counter
    # below must see the 413s it answers.
    api.install(app)

    @app.middleware("http")
    async def count_requests(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        counter = getattr(request.app.state, "requests_counter", None)
        if counter is not None:
            # The handler's name, not the path, and a closed set of methods: bounded label
            # values whatever ids, paths or invented methods are requested.
            handler = getattr(request.scope.get("endpoint"), "__name__", None) or "unmatched"
            counter.labels(
                method_label(request.method), handler, str(response.status_code)
            ).inc()
        return response

    # The web dashboard at "/" (pages, /static), over the same store and auth.
    dashboard.install(app)
    return app
