"""``/baselines``: blessed baselines (``evalsvc.services.baselines``). Reads need ``read``;
blessing and revoking need ``admin``, as every other write that changes what later runs do
(endpoints, schedules). A blessing that cannot be made is 422 with the fix; an unknown run or
blessing 404.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, ConfigDict, Field

from evalsvc import limits
from evalsvc.api._schemas import PathKey, Problem
from evalsvc.services import baselines
from evalsvc.web.auth import AdminScope, ReadScope, StoreDep

router = APIRouter(prefix="/baselines", tags=["baselines"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Problem}}

RunId = Annotated[str, Field(min_length=1, max_length=limits.MAX_NAME)]
SuiteName = Annotated[str, Field(min_length=1, max_length=limits.MAX_NAME)]


class BlessingCreate(BaseModel):
    """``POST /baselines``: the runs to bless (one, or at least three of the same baseline)."""

    model_config = ConfigDict(extra="forbid")

    runs: list[RunId] = Field(min_length=1, max_length=limits.MAX_SUITES)
    """Completed runs; the first's baseline samples are reused, all of them give the noise floor."""
    suites: list[SuiteName] | None = Field(default=None, max_length=limits.MAX_SUITES)
    """Only these suites of the runs (default: every suite whose baseline can be reused)."""
    note: str | None = Field(default=None, max_length=2000)


class BlessingRead(BaseModel):
    """A blessed baseline (docs/api.md, "Blessed baselines")."""

    model_config = ConfigDict(extra="forbid")

    id: str
    fingerprint: str
    """The key later runs are matched by (endpoint provenance, suite snapshot, seed, decoding)."""
    suite: str
    endpoint_url: str
    endpoint: str | None = None
    """The identity of the endpoint the blessing was measured on (its registered name, or its
    normalized base URL): only runs whose baseline is this endpoint reuse it. Null on blessings
    made before identities were recorded, which no run reuses (bless again)."""
    key: dict[str, Any]
    """The key's parts, so a mismatch names what changed."""
    run_id: str
    """The run whose baseline samples are reused."""
    run_ids: list[str]
    items: int
    noise: dict[str, Any] | None
    """Between-run noise floor over ``run_ids`` (``sd`` of the mean score, ``discordance``);
    null for a blessing of one run."""
    note: str | None
    blessed_by: str | None
    created_at: datetime
    revoked_at: datetime | None
    revoked_by: str | None
    age_s: float
    stale: bool
    """Older than ``EVALSVC_BASELINE_MAX_AGE``: runs re-run the baseline and warn."""


def _read(blessing: dict[str, Any]) -> BlessingRead:
    view = baselines.view(blessing)
    view.update(created_at=blessing["created_at"], revoked_at=blessing["revoked_at"])
    return BlessingRead.model_validate(view)


@router.get("", response_model=list[BlessingRead])
def list_blessings(
    store: StoreDep,
    _: ReadScope,
    suite: Annotated[str | None, Query(max_length=limits.MAX_NAME)] = None,
    revoked: bool = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[BlessingRead]:
    """Blessings newest first (``revoked=true``: revoked ones too)."""
    return [_read(b) for b in store.blessed.list_all(include_revoked=revoked, suite=suite,
                                                     limit=limit)]


@router.post(
    "",
    response_model=list[BlessingRead],
    status_code=status.HTTP_201_CREATED,
    responses={**_NOT_FOUND, 422: {"model": Problem, "description": "Cannot be blessed: why, "
                                   "with the fix (unfinished run, two runs, differing keys)."}},
)
def bless(body: BlessingCreate, store: StoreDep, who: AdminScope) -> list[BlessingRead]:
    """Bless the runs' baseline samples, one blessing per suite."""
    try:
        made = baselines.bless(store, body.runs, suites=body.suites, note=body.note, by=who.name)
    except LookupError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    except baselines.UsageError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    return [_read(b) for b in made]


@router.get("/{blessing_id}", response_model=BlessingRead, responses=_NOT_FOUND)
def get_blessing(blessing_id: PathKey, store: StoreDep, _: ReadScope) -> BlessingRead:
    try:
        return _read(baselines.get(store, blessing_id))
    except LookupError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc


@router.post("/{blessing_id}/revoke", response_model=BlessingRead, responses=_NOT_FOUND)
def revoke(blessing_id: PathKey, store: StoreDep, who: AdminScope) -> BlessingRead:
    """Stop reusing a blessing (kept, so reports that reused it still resolve)."""
    try:
        return _read(baselines.revoke(store, blessing_id, by=who.name))
    except LookupError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
