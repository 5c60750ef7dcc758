"""``/gate-logs``: queue two uploaded evaluation logs to be gated as ``evalsvc gate-logs`` does
(``submit``).

Contract: a ``multipart/form-data`` upload of the baseline's and the candidate's log files
(``baseline`` and ``candidate``, each repeatable: one samples file, Inspect log or promptfoo
results file, or the files of an lm-eval ``--output_path`` directory) with the CLI's options as
form fields (``baseline_provider``/``candidate_provider`` pick a promptfoo file's providers).
The route only stores: ``evalsvc.services.gatelogs.submit_upload`` checks what is cheap (names,
counts, the format each name implies, a ``.eval``'s member count, the options) and stores the
files with a queued run; the answer is **202** with the run's id and where to follow it
(``GET /runs/{id}``, then ``GET /runs/{id}/report``: the JSON report of ``evalsvc gate-logs
--json``). A worker reads, pairs and gates the logs; a log it refuses ends the run ``error``
with the reason. The API never parses a log. The whole body is bounded by
``evalsvc.limits.MAX_UPLOAD_BYTES`` (413 past it, before it is read), each side by
``MAX_UPLOAD_FILES`` files, a token's waiting uploads by ``MAX_PENDING_UPLOADS`` (429), and
uploads being written to the database at once by ``_WRITING`` (503 with ``Retry-After`` when
they stay busy): each is read in 1 MiB chunks, so the API's memory does not grow with uploads.
Refusals name the upload's own file names and the form fields, never a server path or a CLI flag.
"""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import APIRouter, File, Form, HTTPException, UploadFile, status

from evalsvc import limits
from evalsvc.api._schemas import Problem, RunSubmitted
from evalsvc.services import gatelogs
from evalsvc.services.runs import UsageError
from evalsvc.web.auth import StoreDep, SubmitScope

router = APIRouter(prefix="/gate-logs", tags=["gate-logs"])

#: Every refusal of an upload's content starts with this: what is in a log cannot be said in
#: the OpenAPI schema, so clients (and the schema tests) tell these 422s from malformed requests.
_REFUSED = "uploaded logs refused: "

#: Uploads written to the database at once by this process; more wait up to _WAIT_S, then 503.
#: The database's write path (SQLite has one writer) is the bottleneck, not memory.
_WRITING = threading.BoundedSemaphore(4)
_WAIT_S = 30.0


class GateLogsQueued(RunSubmitted):
    """The answer to ``POST /gate-logs``: the uploaded logs are stored and queued as a run."""

    run_id: str
    """The same as ``id`` (the name the report uses)."""
    status_url: str
    """``GET`` it until the run's status is ``completed`` or ``error``."""
    report_url: str
    """The JSON report once the run has completed."""


@router.post(
    "",
    response_model=GateLogsQueued,
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        413: {"model": Problem, "description": "The upload is larger than the server accepts."},
        422: {"model": Problem, "description": "Files or options refused before storing them."},
        429: {"model": Problem, "description": "Too many uploads of this token still waiting."},
        503: {"model": Problem, "description": "Too many uploads being stored; retry."},
    },
)
def gate_uploaded_logs(
    store: StoreDep,
    caller: SubmitScope,
    baseline: Annotated[
        list[UploadFile], File(min_length=1, description="The baseline's log file(s).")
    ],
    candidate: Annotated[
        list[UploadFile], File(min_length=1, description="The candidate's log file(s).")
    ],
    # Optional fields are absent when unset, never null: a multipart form has no null, and a
    # nullable schema would invite clients to send one (as an empty string).
    metric: Annotated[str, Form(min_length=1, max_length=200, pattern=limits.NO_NUL_PATTERN)] = None,  # type: ignore[assignment]
    slice: Annotated[list[str], Form(max_length=64)] = None,  # type: ignore[assignment]  # noqa: A002 - the CLI's name
    filter: Annotated[str, Form(min_length=1, max_length=200, pattern=limits.NO_NUL_PATTERN)] = None,  # type: ignore[assignment]  # noqa: A002
    margin: Annotated[float, Form(ge=0, le=1)] = None,  # type: ignore[assignment]
    alpha: Annotated[float, Form(gt=0, lt=0.5)] = None,  # type: ignore[assignment]
    recovery_min: Annotated[float, Form(gt=0, le=1)] = None,  # type: ignore[assignment]
    baseline_floor: Annotated[float, Form(ge=0, lt=1)] = None,  # type: ignore[assignment]
    max_error_rate: Annotated[float, Form(ge=0, le=1)] = 0.05,
    baseline_provider: Annotated[str, Form(min_length=1, max_length=200, pattern=limits.NO_NUL_PATTERN)] = None,  # type: ignore[assignment]
    candidate_provider: Annotated[str, Form(min_length=1, max_length=200, pattern=limits.NO_NUL_PATTERN)] = None,  # type: ignore[assignment]
) -> GateLogsQueued:
    """Store two uploaded lm-eval, Inspect or promptfoo logs and queue them as a run; a worker
    pairs them by document id and gates them with the paired gate (or a recovery floor), as
    ``evalsvc gate-logs`` does. Poll ``status_url`` (``GET /runs/{id}``) until the run has
    ended, then read ``report_url`` (docs/report.md); a log the worker refuses ends the run
    ``error`` with the reason."""
    if not _WRITING.acquire(timeout=_WAIT_S):
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "too many uploads are being stored at once; retry shortly",
            headers={"Retry-After": "5"},
        )
    try:
        run = gatelogs.submit_upload(
            store,
            baseline=[(f.filename, f.file) for f in baseline],
            candidate=[(f.filename, f.file) for f in candidate],
            metric=metric,
            slices=list(slice or []),
            filter_name=filter,
            gate=gatelogs.gate_overrides(margin, alpha, recovery_min, baseline_floor),
            max_error_rate=max_error_rate,
            providers=(baseline_provider, candidate_provider),
            submitted_by=caller.name[:200],
        )
    except gatelogs.UploadsPending as exc:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS, str(exc), headers={"Retry-After": "30"}
        ) from None
    except UsageError as exc:
        raise UsageError(f"{_REFUSED}{gatelogs.for_form(str(exc))}") from None
    finally:
        _WRITING.release()
    return GateLogsQueued(
        id=run.id,
        run_id=run.id,
        status=run.status,
        status_url=f"/api/v1/runs/{run.id}",
        report_url=f"/api/v1/runs/{run.id}/report",
    )
