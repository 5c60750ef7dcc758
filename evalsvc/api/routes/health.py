"""``/healthz`` and ``/metrics``: no authentication (probes and Prometheus scrapers carry no
token; neither exposes more than aggregate counts and URLs without credentials: userinfo and
``?password=``-like parameters are redacted by ``evalsvc.endpoints.redact_url``).
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from evalsvc.api._schemas import Health
from evalsvc.web.auth import StateDep

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    response_model=Health,
    responses={
        503: {
            "model": Health,
            "description": "Database unreachable, not at head, or refusing writes.",
        }
    },
)
def healthz(state: StateDep) -> Response:
    """200 when the database is reachable, at the migration head and accepts writes, else 503
    with the reason."""
    ok = state.check_serving()
    body = Health(
        status="ok" if ok else "unavailable",
        database=state.store.display_url,
        detail=state.ready_error,
    )
    return JSONResponse(
        body.model_dump(),
        status_code=status.HTTP_200_OK if ok else status.HTTP_503_SERVICE_UNAVAILABLE,
    )


@router.get("/metrics", response_class=Response)
def metrics(state: StateDep) -> Response:
    """Prometheus text format (see ``evalsvc.api._metrics``)."""
    return Response(generate_latest(state.registry), media_type=CONTENT_TYPE_LATEST)
