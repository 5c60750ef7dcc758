"""``/runs``: queue runs for workers, follow them, read their report and gate.

Scopes: ``submit`` to queue or cancel, ``read`` for the rest. A run is only queued here
(``evalsvc.services.runs.submit``, which refuses unknown suites); workers execute it. Unknown
suites or endpoint names are 422 with the service's message.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status

from evalsvc import limits
from evalsvc.api._schemas import (
    URL_PATTERN,
    GateRead,
    PathKey,
    Problem,
    ReasonRead,
    RunCreate,
    RunEndpoint,
    RunRead,
    RunSubmitted,
)
from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunInfo, RunSpec, RunStatus, RunVerdict
from evalsvc.endpoints import redact_text, redact_url
from evalsvc.reports import redact_report
from evalsvc.services import history
from evalsvc.services import runs as run_service
from evalsvc.web.auth import ReadScope, StoreDep, SubmitScope

router = APIRouter(prefix="/runs", tags=["runs"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Problem}}


def _endpoint(value: RunEndpoint, store: Store) -> EndpointRef:
    if value.url is None:
        assert value.name is not None  # RunEndpoint's validator guarantees one of them
        return run_service.resolve_endpoint(value.name, store)  # UsageError when unknown
    # egress: an inline endpoint never carries credentials (RunEndpoint refuses api_key_env)
    return EndpointRef(url=value.url, model=value.model, name=value.name)


def run_spec(body: RunCreate, store: Store) -> RunSpec:
    """The domain spec of a request: registered endpoint names resolved to their URLs."""
    return RunSpec(
        baseline=_endpoint(body.baseline, store),
        candidates=[_endpoint(c, store) for c in body.candidates],
        suites=body.suites,
        options=body.options,
        labels=body.labels,
        priority=body.priority,
    )


def _read(run: RunInfo) -> RunRead:
    fields = run.model_dump(exclude={"lease_owner", "lease_expires_at", "spec"})
    # egress: runs stored before the userinfo rule may hold credentials in URLs or errors
    if fields.get("error"):
        fields["error"] = redact_text(fields["error"])
    spec = run.spec  # as stored (stored_spec), possibly predating a bound
    spec = spec.model_copy(
        update={
            "baseline": spec.baseline.model_copy(update={"url": redact_url(spec.baseline.url)}),
            "candidates": [
                c.model_copy(update={"url": redact_url(c.url)}) for c in spec.candidates
            ],
        }
    )
    if fields.get("progress"):  # the roles it is keyed by, as people name the endpoints
        fields["progress"] = {**fields["progress"], "labels": history.role_labels(run)}
    return RunRead.model_validate({**fields, "spec": spec})


def _get(store: Store, run_id: str) -> RunInfo:
    """The run by id or unique id prefix (``evalsvc.services.history``, as the CLI does)."""
    try:
        return history.find_run(store, run_id)
    except history.RunNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    except history.AmbiguousRunId as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc


@router.post(
    "",
    response_model=RunSubmitted,
    status_code=status.HTTP_202_ACCEPTED,
    responses={422: {"model": Problem, "description": "Unknown suite or endpoint name."}},
)
def submit_run(body: RunCreate, store: StoreDep, caller: SubmitScope) -> RunSubmitted:
    """Queue a run for workers; poll ``GET /runs/{id}`` until it is finished."""
    run = run_service.submit(run_spec(body, store), store=store, submitted_by=caller.name,
                             admin="admin" in caller.scopes)
    return RunSubmitted(id=run.id, status=run.status)


@router.get("", response_model=list[RunRead])
def list_runs(
    store: StoreDep,
    _: ReadScope,
    status_: Annotated[RunStatus | None, Query(alias="status")] = None,
    verdict: RunVerdict | None = None,
    endpoint: Annotated[
        str | None,
        Query(
            description="Base URL used as baseline or candidate.",
            max_length=limits.MAX_URL,
            pattern=URL_PATTERN,
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[RunRead]:
    """Runs, newest first."""
    found = store.list_runs(limit=limit, status=status_, verdict=verdict, endpoint_url=endpoint)
    return [_read(run) for run in found]


@router.get("/{run_id}", response_model=RunRead, responses=_NOT_FOUND)
def get_run(run_id: PathKey, store: StoreDep, _: ReadScope) -> RunRead:
    """Status, verdict, error, progress and timestamps of a run; a queued one says how many
    workers are alive and, when none is, how to start one (``queue_note``)."""
    run = _get(store, run_id)
    read = _read(run)
    waiting = history.queue_state(store, run)
    if waiting is not None:
        read.workers_alive, read.queue_note = waiting.workers_alive, waiting.message
    return read


@router.get(
    "/{run_id}/report",
    response_model=dict[str, Any],
    responses={
        **_NOT_FOUND,
        409: {"model": Problem, "description": "The run has no report (yet)."},
    },
)
def get_report(run_id: PathKey, store: StoreDep, _: ReadScope) -> dict[str, Any]:
    """The JSON report (docs/report.md), as ``evalsvc compare --json`` writes it."""
    run = _get(store, run_id)
    report = store.get_report(run.id)
    if report is None:
        ended = f": {redact_text(run.error)}" if run.error else ""
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"run {run.id} is {run.status.value}; no report{ended}"
        )
    redacted: dict[str, Any] = redact_report(report)  # egress: reports stored before the rule
    return redacted


@router.get(
    "/{run_id}/gate",
    response_model=GateRead,
    responses={**_NOT_FOUND, 409: {"model": Problem, "description": "Not finished yet."}},
)
def get_gate(
    run_id: PathKey,
    store: StoreDep,
    _: ReadScope,
    max_reuse_age: Annotated[
        str | None,
        Query(max_length=32, pattern=r"^[0-9]{1,12}(\.[0-9]{1,6})?[smhdw]?$",
              description="Refuse a pass that rests on a blessed baseline older than this age "
              "(30s, 15m, 12h, 3d, 2w, or seconds): exit_code 1, as `runs gate "
              "--max-reuse-age`."),
    ] = None,
    allowed_differences: Annotated[
        bool,
        Query(description="false: refuse a pass that rests on any allowed difference "
              "(exit_code 1), as `runs gate --no-allowed-differences`."),
    ] = True,
) -> GateRead:
    """The run's overall verdict and the exit code ``evalsvc compare`` would have returned;
    with the policy parameters, a pass whose basis they refuse reads exit code 1 and says why
    (``refused_by_policy``)."""
    from evalsvc.reports import parse_age, policy_refusals

    # The query's pattern admits only what parse_age reads (a bad age is the schema's 422).
    limit = parse_age(max_reuse_age) if max_reuse_age is not None else None
    try:
        g = history.gate(_get(store, run_id), store.get_report(run_id))
    except history.RunNotFinished as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc
    refused = (policy_refusals(g.basis, max_reuse_age_s=limit,
                               allowed_differences=allowed_differences)
               if g.basis is not None else [])
    code = 1 if refused and g.exit_code == 0 else g.exit_code
    return GateRead(run_id=g.run_id, status=g.status, verdict=g.verdict, exit_code=code,
                    reasons=[ReasonRead.model_validate(r) for r in g.reasons], basis=g.basis,
                    refused_by_policy=refused)


@router.get(
    "/{run_id}/attestation",
    response_model=dict[str, Any],
    responses={
        404: {"model": Problem, "description": "No such run, or no signing key is configured "
              "(EVALSVC_ATTEST_KEY)."},
        409: {"model": Problem, "description": "The run is not finished yet."},
    },
)
def get_attestation(run_id: PathKey, store: StoreDep, _: ReadScope) -> dict[str, Any]:
    """The run's verdict as an in-toto Statement in a DSSE envelope signed with the service's
    Ed25519 key (``evalsvc attest verify FILE --key PUB`` checks it; docs/api.md)."""
    from evalsvc.services import attest

    run = _get(store, run_id)
    try:
        key = attest.service_key()
    except attest.AttestKeyMissing as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    except ValueError as exc:  # a key that cannot be read: the operator's to fix
        raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR,
                            f"the signing key cannot be used: {exc}") from exc
    try:
        return attest.attest_run(store, run.id, key)
    except history.RunNotFinished as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc


@router.post(
    "/{run_id}/resume",
    response_model=RunRead,
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        **_NOT_FOUND,
        403: {"model": Problem, "description": "Not the run's submitter nor an admin."},
        409: {"model": Problem, "description": "Still queued or running."},
        422: {"model": Problem, "description": "A run that gated uploaded logs."},
    },
)
def resume_run(run_id: PathKey, store: StoreDep, caller: SubmitScope) -> RunRead:
    """Queue a finished run again (docs/api.md): its worker sends only what errored or never
    ran (a suite that ended in error, an errored request) and gates the run anew. Only the
    token that submitted it, or an admin token, may."""
    run = _get(store, run_id)
    if "admin" not in caller.scopes and (run.submitted_by is None or run.submitted_by != caller.name):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"run {run.id} was not submitted by this token: only its submitter or an admin "
            "token may resume it",
        )
    try:
        return _read(run_service.requeue(store, run))
    except history.RunNotFinished as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc
    except run_service.UsageError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, str(exc)) from exc


@router.post(
    "/{run_id}/cancel",
    response_model=RunRead,
    responses={
        **_NOT_FOUND,
        403: {"model": Problem, "description": "Not the run's submitter nor an admin."},
        409: {"model": Problem, "description": "Already finished."},
    },
)
def cancel_run(run_id: PathKey, store: StoreDep, caller: SubmitScope) -> RunRead:
    """Cancel a queued or running run (a worker stops it at its next heartbeat). Only the
    token that submitted it, or an admin token, may (scheduled runs: admins only)."""
    run = _get(store, run_id)
    if "admin" not in caller.scopes and (run.submitted_by is None or run.submitted_by != caller.name):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"run {run.id} was not submitted by this token: only its submitter or an admin "
            "token may cancel it",
        )
    try:
        return _read(history.cancel(store, run))
    except history.RunAlreadyFinished as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc
