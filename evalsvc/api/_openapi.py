"""The error half of the API contract: a request-body size limit, and every error status the
API can answer, documented on each route of ``/openapi.json``.

Contract: ``document_errors(app)`` makes the OpenAPI document list, on every operation, each
status the API can return besides the route's own: 401 and 403 (routes that take a token),
404 (routes with path parameters), 400 (an unreadable body), 413 (a body over the limit), 422
(an invalid request: ``Problem`` with ``errors``, not FastAPI's default shape), 503 (the
database unavailable, not at head or refusing writes). Every one of them has the ``Problem``
shape. ``RunCreate.suites`` enumerates the catalog. ``BodyLimit`` answers 413 before a body
over ``max_bytes`` is read into memory. ``known_query_params`` (a dependency of every API
router) answers 422 to a query parameter the route does not declare, naming the ones it takes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._schemas import Problem

_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}

_STATUSES: dict[str, str] = {
    "400": "The body could not be read (not UTF-8, not JSON the route can parse).",
    "401": "Missing, invalid or revoked bearer token.",
    "403": "The token lacks the scope this route needs.",
    "404": "No such resource.",
    "413": "The body is larger than the API accepts.",
    "422": "The request is invalid: `detail` says why, `errors` lists each invalid field.",
    "503": "The database is unavailable, not at the migration head, or refuses writes.",
}


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``max_bytes`` (declared or streamed)."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, paths: dict[str, int] | None = None
    ) -> None:
        """``paths``: a larger bound for these exact paths (the log upload)."""
        self.app, self.max_bytes, self.paths = app, max_bytes, dict(paths or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bound = self.paths.get(str(scope.get("path", "")).rstrip("/"), self.max_bytes)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > bound):
            await _send_problem(send, 413, self._message(bound))
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > bound:
                    # FastAPI re-raises an HTTPException from reading the body as is.
                    raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, self._message(bound))
            return message

        await self.app(scope, limited, send)

    def _message(self, bound: int | None = None) -> str:
        return f"request body too large: at most {bound or self.max_bytes} bytes"


async def _send_problem(send: Send, code: int, message: str) -> None:
    import json

    body = json.dumps({"detail": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _problem_response(code: str, existing: dict[str, Any] | None) -> dict[str, Any]:
    description = (existing or {}).get("description")
    if not description or description == "Validation Error":  # FastAPI's default text
        description = _STATUSES[code]
    response: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": _PROBLEM_REF}},
    }
    if code == "401":
        response["headers"] = {
            "WWW-Authenticate": {
                "description": "`Bearer`",
                "schema": {"type": "string"},
            }
        }
    return response


def _catalog_enum(components: dict[str, Any]) -> None:
    """``RunCreate.suites``, ``SweepSpec.suites`` and ``CalibrationCreate.suites`` list the
    catalog's names (read when the document is built; the CLI's sweep spec may also name files,
    the server's may not)."""
    from evalsvc.services.catalog import suite_rows
    from evalsvc.suites import SuiteError

    try:
        names = sorted(str(row["name"]) for row in suite_rows())
    except SuiteError:  # a broken catalog: the routes say so; the document stays usable
        return
    # POST /runs, POST /sweeps, POST /calibrations
    for model in ("RunCreate", "SweepSpec", "CalibrationCreate"):
        items = components.get(model, {}).get("properties", {}).get("suites", {}).get("items")
        if isinstance(items, dict) and names:
            items["enum"] = names


def document_errors(app: FastAPI) -> None:
    """Replace ``app.openapi`` with one that documents every error status (see module doc)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(problem.pop("$defs", {}))
        components["Problem"] = problem
        # FastAPI's default 422 shape is never sent (see _app's handler).
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
        _catalog_enum(components)
        for path, item in schema.get("paths", {}).items():
            for operation in item.values():
                responses = operation.setdefault("responses", {})
                codes = ["422"]
                if operation.get("security"):
                    codes += ["401", "403"]
                if "{" in path:
                    codes.append("404")
                if "requestBody" in operation:
                    codes += ["400", "413"]
                if not path.endswith("/healthz"):
                    codes.append("503")
                for code in codes:
                    responses[code] = _problem_response(code, responses.get(code))
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def known_query_params(prefix: str) -> Callable[[Request], None]:
    """A dependency: 422 for a query parameter the operation does not take. FastAPI ignores
    unknown ones, so a misspelt filter (``GET /runs?stauts=failed``) would list every run as if
    the filter had been applied, and a pipeline would act on runs it never asked for. The
    parameters the route's signature and its dependencies declare (what ``/openapi.json``
    documents) are the accepted ones: one rule for every route, nothing listed by hand beside a
    signature. The message names the path under ``prefix`` (the router's mount point)."""

    def refuse_unknown(request: Request) -> None:
        if not request.query_params:
            return
        route = request.scope.get("route")
        if not isinstance(route, APIRoute):
            return
        takes = _query_names(route.dependant)
        unknown = sorted(set(request.query_params) - takes)
        if unknown:
            path = request.url.path.removeprefix(prefix)
            listed = ", ".join(sorted(takes)) if takes else "no query parameters"
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"unknown query parameter(s) {', '.join(map(repr, unknown))}: "
                f"{request.method} {path} takes {listed}",
            )

    return refuse_unknown


def _query_names(dependant: Dependant) -> frozenset[str]:
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return frozenset(names)
