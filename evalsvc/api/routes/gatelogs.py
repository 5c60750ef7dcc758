"""``/gate-logs``: gate two uploaded evaluation logs, as ``evalsvc gate-logs`` does (``submit``).

Contract: a ``multipart/form-data`` upload of the baseline's and the candidate's log files
(``baseline`` and ``candidate``, each repeatable: one samples file, Inspect log or promptfoo
results file, or the files of an lm-eval ``--output_path`` directory) with the CLI's options as
form fields (``baseline_provider``/``candidate_provider`` pick a promptfoo file's providers). The
files are written to a private temporary directory under their base names only, handed to
``evalsvc.services.gatelogs.gate_logs`` (which pairs, gates, stores the run and builds the
report) and removed; the answer is the same JSON report as the CLI's ``--json``. The whole
body is bounded by ``evalsvc.limits.MAX_UPLOAD_BYTES`` (413 past it, before it is read) and
each side by ``MAX_UPLOAD_FILES`` files; a log the service refuses is 422 with its reason.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, HTTPException, UploadFile, status

from evalsvc import limits
from evalsvc.api._schemas import Problem
from evalsvc.domain import RunOptions
from evalsvc.reports import redact_report
from evalsvc.services import gatelogs
from evalsvc.services.runs import UsageError
from evalsvc.web.auth import StoreDep, SubmitScope

router = APIRouter(prefix="/gate-logs", tags=["gate-logs"])

_UNSAFE = re.compile(r"[^A-Za-z0-9_.@+-]+")
#: Every refusal of an upload's content starts with this: what is in a log cannot be said in
#: the OpenAPI schema, so clients (and the schema tests) tell these 422s from malformed requests.
_REFUSED = "uploaded logs refused: "


def _save(files: list[UploadFile], where: Path, role: str) -> Path:
    """Write one side's files under ``where`` (base names only); the path the service reads:
    the file itself when there is one, else the directory (an lm-eval output directory)."""
    if not files:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"{_REFUSED}no {role} log uploaded")
    if len(files) > limits.MAX_UPLOAD_FILES:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"{_REFUSED}{role}: {len(files)} files; at most {limits.MAX_UPLOAD_FILES} per side",
        )
    where.mkdir()
    written: list[Path] = []
    for upload in files:
        # Never a path from the client: the base name, with anything unusual replaced.
        name = _UNSAFE.sub("_", Path(upload.filename or "").name).lstrip(".")
        if not name:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"{_REFUSED}{role}: a file without a usable name",
            )
        target = where / name
        if target.exists():
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"{_REFUSED}{role}: two files named {name!r}",
            )
        with target.open("wb") as out:
            while chunk := upload.file.read(1 << 20):
                out.write(chunk)
        written.append(target)
    return written[0] if len(written) == 1 else where


@router.post(
    "",
    status_code=status.HTTP_200_OK,
    responses={
        413: {"model": Problem, "description": "The upload is larger than the server accepts."},
        422: {"model": Problem, "description": "Logs that cannot be read or paired, or bad options."},
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
) -> dict[str, Any]:
    """Pair two uploaded lm-eval, Inspect or promptfoo logs by document id, gate them with the paired gate
    (or a recovery floor), store the run and return its JSON report (docs/report.md), exactly as
    ``evalsvc gate-logs --json`` does."""
    gate = gatelogs.gate_overrides(margin, alpha, recovery_min, baseline_floor)
    with tempfile.TemporaryDirectory(prefix="evalsvc-gate-logs-") as tmp:
        base = _save(baseline, Path(tmp) / "baseline", "baseline")
        cand = _save(candidate, Path(tmp) / "candidate", "candidate")
        try:
            report = gatelogs.gate_logs(
                base,
                cand,
                store=store,
                metric=metric,
                slices=list(slice or []),
                filter_name=filter,
                gate=gate,
                options=RunOptions(max_error_rate=max_error_rate),
                labels={"submitted_by": caller.name[:200]},
                names=(_label(baseline), _label(candidate)),
                uploaded=True,
                providers=(baseline_provider, candidate_provider),
            )
        except UsageError as exc:
            raise UsageError(f"{_REFUSED}{exc}") from None
    redacted: dict[str, Any] = redact_report(report)
    return redacted


def _label(files: list[UploadFile]) -> str:
    first = _UNSAFE.sub("_", Path(files[0].filename or "log").name) or "log"
    return first if len(files) == 1 else f"{first}+{len(files) - 1}"
