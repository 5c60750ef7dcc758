"""``/calibrations``: an endpoint's noise floor on file (``evalsvc.services.calibration``).

``POST`` queues the A/A run (the endpoint against itself) for workers, with the same checks as
``POST /runs`` (scope ``submit``); ``GET /calibrations/{id}`` returns its status and, once it
completed, its stored figures per suite; ``GET /calibrations`` lists the completed ones, newest
first (scope ``read``); ``POST /calibrations/{id}/adopt`` (scope ``admin``) makes a submitter's
calibration the one gates and ``plan`` use (an admin's own is adopted when queued).
docs/api.md, "Calibrations".
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalsvc import limits
from evalsvc.api._schemas import PathKey, Problem, RunCreate, RunEndpoint, RunSubmitted
from evalsvc.domain import RunOptions
from evalsvc.endpoints import redact_text, redact_url
from evalsvc.limits import SuiteNameText
from evalsvc.services import calibration
from evalsvc.web.auth import AdminScope, ReadScope, StoreDep, SubmitScope

from .runs import _endpoint

router = APIRouter(prefix="/calibrations", tags=["calibrations"])


class CalibrationCreate(BaseModel):
    """Queue an A/A calibration of one endpoint (what ``evalsvc calibrate`` runs in-process)."""

    model_config = ConfigDict(extra="forbid")

    endpoint: RunEndpoint
    suites: list[SuiteNameText] = Field(min_length=1, max_length=limits.MAX_SUITES)
    """Catalog suite or set names (``GET /suites``), as for ``POST /runs``."""
    runs: int = Field(default=1, ge=1, le=limits.MAX_CANDIDATES)
    """A/A passes against the baseline pass (each a candidate of the run; pooled)."""
    options: RunOptions = Field(default_factory=RunOptions)

    @field_validator("suites")
    @classmethod
    def _catalog_names_only(cls, names: list[str]) -> list[str]:
        result: list[str] = RunCreate._catalog_names_only(names)  # the same refusal of paths
        return result


class NoiseFloorRead(BaseModel):
    """One suite's stored noise floor (``evalsvc.gates.NoiseFloor``)."""

    calibration: str
    measured_at: str
    fingerprint: str
    discordance: float | None
    """Share of gated pairs whose score differed between a candidate pass and the baseline pass."""
    pairs: int
    instability: float | None
    """Share of answers under load that differ from their prompt's modal answer (determinism)."""
    varying_clusters: float | None
    """Share of prompts with at least one such answer (determinism)."""
    clusters: int | None
    endpoint: str | None = None
    """The identity of the endpoint it was measured on (a registered name or a base URL)."""
    adopted_by: str | None = None
    """Who adopted it for gates and ``plan`` (null: not adopted, used by nothing)."""
    submitted_by: str | None = None


class CalibrationRead(BaseModel):
    """A calibration: its run's status and, once completed, its figures per suite."""

    id: str
    status: str
    endpoint: str
    model: str | None
    runs: int
    suites: list[str]
    created_at: str
    finished_at: str | None
    error: str | None
    fingerprint: str | None
    """The endpoint's provenance fingerprint the figures are stored under."""
    identity: str | None = None
    """The endpoint's identity the figures belong to (registered name or normalized base URL;
    null until probed, or for a calibration recorded before identities)."""
    submitted_by: str | None = None
    adopted: bool = False
    """Whether gates and ``plan`` use it (an admin adopted it, or ran it)."""
    adopted_by: str | None = None
    adopted_at: str | None = None
    floors: dict[str, NoiseFloorRead]


class CalibrationListed(BaseModel):
    id: str
    endpoint: str | None
    fingerprint: str
    identity: str | None = None
    submitted_by: str | None = None
    adopted: bool = False
    adopted_by: str | None = None
    suites: list[str]
    finished_at: str | None


@router.post(
    "",
    response_model=RunSubmitted,
    status_code=status.HTTP_202_ACCEPTED,
    responses={422: {"model": Problem, "description": "Unknown suite or endpoint name."}},
)
def submit_calibration(
    body: CalibrationCreate, store: StoreDep, caller: SubmitScope
) -> RunSubmitted:
    """Queue the endpoint against itself; poll ``GET /calibrations/{id}`` for the figures."""
    ref = _endpoint(body.endpoint, store)
    run = calibration.submit(
        ref, body.suites, store=store, runs=body.runs, options=body.options,
        submitted_by=caller.name, admin="admin" in caller.scopes,
    )
    return RunSubmitted(id=run.id, status=run.status)


@router.post(
    "/{calibration_id}/adopt",
    response_model=CalibrationRead,
    responses={404: {"model": Problem}, 422: {"model": Problem}},
)
def adopt_calibration(
    calibration_id: PathKey, store: StoreDep, caller: AdminScope
) -> dict[str, Any]:
    """Adopt a calibration (scope ``admin``): from now on its floor is attached to the gates of
    runs on its endpoint with its fingerprint and sizes ``plan --endpoint``. A submitter's
    calibration is stored but used only once adopted."""
    try:
        out = calibration.adopt(store, calibration_id, by=caller.name)
    except calibration.CalibrationNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    out["endpoint"] = redact_url(out["endpoint"])
    out["error"] = out["error"] and redact_text(out["error"])
    return out


@router.get("", response_model=list[CalibrationListed])
def list_calibrations(
    store: StoreDep, _: ReadScope, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> list[dict[str, Any]]:
    """Completed calibrations, newest first."""
    found = calibration.list_calibrations(store, limit=limit)
    return [{**c, "endpoint": c["endpoint"] and redact_url(c["endpoint"])} for c in found]


@router.get("/{calibration_id}", response_model=CalibrationRead,
            responses={404: {"model": Problem}})
def get_calibration(calibration_id: PathKey, store: StoreDep, _: ReadScope) -> dict[str, Any]:
    """A calibration's status and stored figures (``floors``: empty until it completed)."""
    try:
        out = calibration.get(store, calibration_id)
    except calibration.CalibrationNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    # egress: a stored URL or error may hold credentials (as GET /runs/{id} redacts them)
    out["endpoint"] = redact_url(out["endpoint"])
    out["error"] = out["error"] and redact_text(out["error"])
    return out
