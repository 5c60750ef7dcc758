"""The REST API's part of the web app: the routers under ``/api/v1``, the error mapping, the docs.

Contract: ``install(app)`` adds them to the app ``evalsvc.webapp.create_app`` composes (which
owns the store, the state and auth). A database that is unreachable or not at head does not stop
the server: ``/healthz`` says 503 and so does every route that needs the database, until it is
fixed. Store and service errors
are answered with ``{"detail": message}``: unknown suite or endpoint name 422, duplicate 409,
database unavailable, not at head or refusing writes 503, a body over
``evalsvc.limits.MAX_BODY_BYTES`` 413, an invalid request 422 with ``errors`` per field;
nothing a client sends produces a 500. Every route's OpenAPI entry lists each of these
(``evalsvc.api._openapi``).
The interactive documentation (``/docs`` Swagger UI, ``/redoc`` ReDoc) is served from assets
vendored in the package (``evalsvc/api/static``, see its README), so it works offline.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import logging
from importlib import resources
from pathlib import Path

from fastapi import Depends, FastAPI, Request, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse, JSONResponse

from evalsvc import limits
from evalsvc.db import (
    Conflict,
    DatabaseNotAtHead,
    DatabaseUnavailable,
    DatabaseWriteRefused,
    InvalidData,
    StoreError,
)
from evalsvc.services.runs import UsageError
from evalsvc.suites import SuiteError
from evalsvc.web.static import CachedStatic, gzip_response

from ._openapi import BodyLimit, document_errors, known_query_params
from .routes import (
    alerts,
    baselines,
    calibrations,
    endpoints,
    gatelogs,
    health,
    runs,
    schedules,
    suites,
    sweeps,
)

log = logging.getLogger("evalsvc.api")

API_PREFIX = "/api/v1"


def _problem(code: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=code)


def _install_error_handlers(app: FastAPI) -> None:
    async def usage(_: Request, exc: Exception) -> Response:
        return _problem(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc))

    async def invalid_request(request: Request, exc: Exception) -> Response:
        # The same shape as every other error ({"detail": str}), plus each invalid field.
        assert isinstance(exc, RequestValidationError)
        errors = [
            {
                "loc": [p if isinstance(p, int) else str(p) for p in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in exc.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        detail = f"{where}: {first['msg']}{more}" if where else first["msg"]
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if first["loc"] == ["body"] and not kind.endswith("json"):
            # curl -d sends a form (application/x-www-form-urlencoded), which FastAPI reads as
            # no object at all: the fix is the header, not the fields.
            detail = (f"the body was sent as {kind or 'no content type'}, not JSON: send it "
                      "with `Content-Type: application/json` (curl: -H 'Content-Type: "
                      "application/json')")
        return JSONResponse(
            jsonable_encoder(
                {
                    "detail": detail,
                    "errors": errors,
                }
            ),
            status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
        )

    async def conflict(_: Request, exc: Exception) -> Response:
        return _problem(status.HTTP_409_CONFLICT, str(exc))

    async def unavailable(_: Request, exc: Exception) -> Response:
        return _problem(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc))

    async def store_error(_: Request, exc: Exception) -> Response:
        log.error("store error: %s", exc)
        return _problem(status.HTTP_500_INTERNAL_SERVER_ERROR, f"database error: {exc}")

    async def catalog_error(_: Request, exc: Exception) -> Response:
        # A broken file in the server's suite catalog: the operator's problem, not the client's.
        log.error("suite catalog: %s", exc)
        return _problem(status.HTTP_500_INTERNAL_SERVER_ERROR, f"suite catalog: {exc}")

    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(UsageError, usage)
    app.add_exception_handler(InvalidData, usage)  # the store's backstop for bounds
    app.add_exception_handler(Conflict, conflict)
    app.add_exception_handler(DatabaseUnavailable, unavailable)
    app.add_exception_handler(DatabaseNotAtHead, unavailable)
    app.add_exception_handler(DatabaseWriteRefused, unavailable)
    app.add_exception_handler(StoreError, store_error)
    app.add_exception_handler(SuiteError, catalog_error)


def install(app: FastAPI) -> None:
    """Add the REST API to the web app (``evalsvc.webapp``): the error mapping, the request body
    limit, the vendored API docs, the routers under ``/api/v1`` (and ``/healthz``, ``/metrics``
    at the root), and each route's documented errors."""
    _install_error_handlers(app)
    app.add_middleware(
        BodyLimit,
        max_bytes=limits.MAX_BODY_BYTES,
        paths={f"{API_PREFIX}/gate-logs": limits.MAX_UPLOAD_BYTES},
    )
    _install_docs(app)
    # Probes and scrapers may add parameters of their own; a person's misspelt filter must not
    # be ignored as if applied.
    app.include_router(health.router, prefix=API_PREFIX)
    refuse_unknown = [Depends(known_query_params(API_PREFIX))]
    for module in (
        endpoints, runs, suites, schedules, gatelogs, sweeps, alerts, baselines, calibrations
    ):
        app.include_router(module.router, prefix=API_PREFIX, dependencies=refuse_unknown)
    # Probes and scrapers conventionally look at the root too.
    app.add_api_route("/healthz", health.healthz, methods=["GET"], include_in_schema=False)
    app.add_api_route("/metrics", health.metrics, methods=["GET"], include_in_schema=False)
    document_errors(app)


DOCS_STATIC = "/static/api-docs"


def _static_dir() -> Path:
    root = resources.files("evalsvc.api") / "static"
    if not isinstance(root, Path):  # package data is on the file system in every supported install
        raise RuntimeError(f"evalsvc's API documentation assets are not on the file system: {root}")
    return root


#: ReDoc 2.x always draws its "API docs by Redocly" footer with this image from a CDN, which
#: fails offline and would send the reader's address out. The vendored bundle stays as shipped
#: (its checksum is tested); the copy served at /redoc/redoc.standalone.js has the URL replaced
#: by an empty data: URL, whose load error makes ReDoc drop the image (its own onError).
_REDOC_CDN_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
REDOC_JS = "/redoc/redoc.standalone.js"


@functools.cache
def _redoc_bundle() -> tuple[bytes, bytes, str]:
    """The ReDoc bundle without its CDN logo: (body, gzipped body, ETag)."""
    raw = (_static_dir() / "redoc" / "redoc.standalone.js").read_bytes()
    body = raw.replace(_REDOC_CDN_LOGO, b"data:,")
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    return body, gzip.compress(body, compresslevel=6, mtime=0), etag


def _install_docs(app: FastAPI) -> None:
    """Swagger UI at ``/docs`` and ReDoc at ``/redoc`` from vendored assets (FastAPI's recipe
    "Self-hosting JavaScript and CSS for docs"): no request leaves the cluster. The assets are
    gzipped and cached like the dashboard's (``evalsvc.web.static``)."""

    app.mount(DOCS_STATIC, CachedStatic(directory=_static_dir(), vendored=True),
              name="api-docs-static")
    openapi_url = app.openapi_url or "/openapi.json"
    oauth2_redirect = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API",
            oauth2_redirect_url=oauth2_redirect,
            swagger_js_url=f"{DOCS_STATIC}/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_STATIC}/swagger-ui/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_STATIC}/swagger-ui/favicon-32x32.png",
            # No badge from the public validator: it would send the spec's URL out.
            swagger_ui_parameters={"validatorUrl": None},
        )

    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API",
            redoc_js_url=REDOC_JS,
            redoc_favicon_url=f"{DOCS_STATIC}/swagger-ui/favicon-32x32.png",
            with_google_fonts=False,
        )

    app.add_api_route("/docs", swagger_ui, methods=["GET"], include_in_schema=False)
    app.add_api_route(oauth2_redirect, swagger_ui_redirect, methods=["GET"], include_in_schema=False)
    async def redoc_js(request: Request) -> Response:
        body, compressed, etag = _redoc_bundle()
        return gzip_response(body, compressed, media_type="text/javascript; charset=utf-8",
                             scope=request.scope, etag=etag)

    app.add_api_route("/redoc", redoc, methods=["GET"], include_in_schema=False)
    app.add_api_route(REDOC_JS, redoc_js, methods=["GET"], include_in_schema=False)
