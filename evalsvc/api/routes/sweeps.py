"""``/sweeps``: queue sweeps for workers and read them (docs/api.md, Sweeps).

Scopes: ``submit`` to queue or cancel (only the submitting token, or an admin token, may
cancel), ``read`` for the rest. The body is the sweep spec
(``evalsvc.services.sweeps.SweepSpec``, what ``evalsvc sweep --spec`` reads). A sweep submitted
here may only use existing endpoints: one that would launch servers on the worker (``local`` or
``command`` configurations, a ``local`` baseline) is refused with 403 unless the server sets
``EVALSVC_SWEEP_ALLOW_LAUNCH`` and the caller has the ``admin`` scope (docs/security.md).
Everything else the service refuses (file paths, URLs outside the egress policy, unknown suites)
is 422 with its message.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status

from evalsvc.api._schemas import (
    PathKey,
    Problem,
    SweepRead,
    SweepSubmitted,
    SweepSummaryRead,
)
from evalsvc.domain import RunStatus
from evalsvc.reports import redact_report
from evalsvc.services import sweep_views
from evalsvc.services import sweeps as sweep_service
from evalsvc.services.runs import UsageError
from evalsvc.settings import Settings
from evalsvc.web.auth import ReadScope, StoreDep, SubmitScope

router = APIRouter(prefix="/sweeps", tags=["sweeps"])


@router.post(
    "",
    response_model=SweepSubmitted,
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        403: {"model": Problem, "description": "The sweep would launch servers on the worker."},
        422: {"model": Problem, "description": "Unknown suite, a file path, a refused URL."},
    },
)
def submit_sweep(
    body: sweep_service.SweepSpec, store: StoreDep, caller: SubmitScope
) -> SweepSubmitted:
    """Queue a sweep; poll ``GET /sweeps/{id}`` until it is finished."""
    launching = body.baseline == "local" or any(
        c.kind in sweep_service.LAUNCHING for c in body.configs
    )
    if launching and not (Settings().sweep_allow_launch and "admin" in caller.scopes):
        try:
            sweep_service.check_server_sweep(body, store=store, allow_launch=False)
        except UsageError as exc:
            detail = str(exc)
        else:  # pragma: no cover - check_server_sweep always refuses a launching sweep here
            detail = "launching sweeps are refused"
        if Settings().sweep_allow_launch:
            detail += "; the server allows it for admin tokens only"
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail)
    created = sweep_service.submit_sweep(
        body, store=store, submitted_by=caller.name, allow_launch=launching
    )
    return SweepSubmitted(id=created["id"], status=RunStatus(created["status"]))


@router.get("", response_model=list[SweepSummaryRead])
def list_sweeps(
    store: StoreDep,
    _: ReadScope,
    status_: Annotated[RunStatus | None, Query(alias="status")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[SweepSummaryRead]:
    """Sweeps, newest first."""
    found = store.sweeps.list_sweeps(limit=limit, status=status_.value if status_ else None)
    return [SweepSummaryRead.model_validate(sweep_views.summary(s)) for s in found]


@router.get("/{sweep_id}", response_model=SweepRead, responses={404: {"model": Problem}})
def get_sweep(sweep_id: PathKey, store: StoreDep, _: ReadScope) -> SweepRead:
    """Status, per-configuration verdicts, quality Δ and capacity, frontier, recommendation."""
    found = store.sweeps.get_sweep(sweep_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no sweep {sweep_id!r}")
    detail: dict[str, Any] = redact_report(sweep_views.detail(found))
    return SweepRead.model_validate(detail)


@router.post(
    "/{sweep_id}/cancel",
    response_model=SweepRead,
    responses={
        404: {"model": Problem},
        403: {"model": Problem, "description": "Not the sweep's submitter nor an admin."},
        409: {"model": Problem, "description": "Already finished."},
    },
)
def cancel_sweep(sweep_id: PathKey, store: StoreDep, caller: SubmitScope) -> SweepRead:
    """Cancel a queued or running sweep. Its worker sees the lost lease at its next heartbeat
    and stops between two configurations (the configuration being measured is finished and
    stored; nothing after it starts); what the sweep launched is stopped. Only the token that
    submitted it, or an admin token, may (scheduled sweeps: admins only)."""
    found = store.sweeps.get_sweep(sweep_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no sweep {sweep_id!r}")
    owner = found.get("submitted_by")
    if "admin" not in caller.scopes and (owner is None or owner != caller.name):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"sweep {sweep_id} was not submitted by this token: only its submitter or an admin "
            "token may cancel it",
        )
    if not store.sweeps.cancel_sweep(sweep_id):
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"sweep {sweep_id} has already finished ({found['status']})")
    after = store.sweeps.get_sweep(sweep_id)
    assert after is not None  # sweeps are never deleted
    return SweepRead.model_validate(redact_report(sweep_views.detail(after)))
