"""``/alerts``: what finished runs raised (``evalsvc.services.alerts``). Reads need ``read``;
acknowledging needs ``submit`` (whoever acts on a regression), and records the token's name.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, ConfigDict

from evalsvc.api._schemas import PathKey, Problem
from evalsvc.services import alerts
from evalsvc.web.auth import ReadScope, StoreDep, SubmitScope

router = APIRouter(prefix="/alerts", tags=["alerts"])

AlertKind = Literal["verdict_change", "margin_trend", "error_streak", "stale_baseline"]


class AlertRead(BaseModel):
    """An alert (docs/api.md, "Alerts")."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: str
    """``verdict_change``, ``margin_trend``, ``error_streak`` or ``stale_baseline``."""
    severity: str
    """``critical``, ``warning`` or ``info``."""
    status: str
    """``open`` or ``acknowledged``."""
    baseline_url: str | None
    candidate_url: str | None
    suite: str | None
    run_id: str | None
    """The run that raised it (``null`` once that run is deleted)."""
    previous_run_id: str | None
    message: str
    details: dict[str, Any]
    created_at: datetime
    acknowledged_at: datetime | None
    acknowledged_by: str | None
    delivery: str
    """Webhooks: ``none`` (none configured), ``pending``, ``sending``, ``delivered``, ``failed``."""
    delivered_at: datetime | None
    deliveries: list[dict[str, Any]]
    """Per webhook: its format and host (never its path), status, attempts, error."""


@router.get("", response_model=list[AlertRead])
def list_alerts(
    store: StoreDep,
    _: ReadScope,
    status_: Annotated[Literal["open", "acknowledged"] | None, Query(alias="status")] = None,
    kind: AlertKind | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[AlertRead]:
    """Alerts newest first, optionally only open or acknowledged ones, or of one kind."""
    return [AlertRead.model_validate(a)
            for a in alerts.list_alerts(store, status=status_, kind=kind, limit=limit)]


@router.post(
    "/{alert_id}/acknowledge",
    response_model=AlertRead,
    responses={404: {"model": Problem}, 409: {"model": Problem,
                                               "description": "Already acknowledged."}},
)
def acknowledge(alert_id: PathKey, store: StoreDep, who: SubmitScope) -> AlertRead:
    """Acknowledge an open alert: it stays listed, and ``evalsvc_alerts_open`` drops it."""
    try:
        return AlertRead.model_validate(alerts.acknowledge(store, alert_id, by=who.name))
    except alerts.AlertNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    except alerts.AlertNotOpen as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc
