"""Stored runs for the views: look a run up by id or unique id prefix, its gate, cancelling it.

Contract: the one place that decides what ``evalsvc runs ...`` and ``/api/v1/runs/{id}...``
answer for an existing run, so the CLI and the REST API cannot disagree. Raises
:class:`RunNotFound` (the views map it to exit 2 / HTTP 404), :class:`AmbiguousRunId` (exit 2 /
HTTP 409) and :class:`RunNotFinished` / :class:`RunAlreadyFinished` (exit 2 / HTTP 409).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from evalsvc.domain import EXIT_CODES, RunInfo, RunStatus, RunVerdict

if TYPE_CHECKING:  # the store loads SQLAlchemy; callers bring one
    from evalsvc.db import Store

#: The shortest prefix accepted: 8 hex digits, as ``runs list`` prints (4.3e9 values: a
#: collision among a store's runs is unlikely, and one is reported as ambiguous, never guessed).
MIN_PREFIX = 8

_UNFINISHED = (RunStatus.queued, RunStatus.running)


class RunNotFound(LookupError):
    """No run has this id (or id prefix)."""


class AmbiguousRunId(ValueError):
    """Several runs start with this prefix."""


class RunNotFinished(RuntimeError):
    """The run has no verdict yet."""


class RunAlreadyFinished(RuntimeError):
    """Only queued or running runs can be cancelled."""


def find_run(store: Store, ref: str) -> RunInfo:
    """The run whose id is ``ref``, else the one run whose id starts with ``ref``."""
    ref = ref.strip().lower()
    run = store.get_run(ref) if ref else None
    if run is not None:
        return run
    if len(ref) < MIN_PREFIX:
        looks_like_prefix = ref and all(c in "0123456789abcdef" for c in ref)
        hint = f" (id prefixes need at least {MIN_PREFIX} characters)" if looks_like_prefix else ""
        raise RunNotFound(f"no run {ref!r}{hint}")
    ids = store.find_run_ids(ref, limit=2)
    if not ids:
        raise RunNotFound(f"no run {ref!r}")
    if len(ids) > 1:
        raise AmbiguousRunId(f"run id prefix {ref!r} is ambiguous ({ids[0]}, {ids[1]}, ...)")
    found = store.get_run(ids[0])
    if found is None:  # deleted between the two reads
        raise RunNotFound(f"no run {ref!r}")
    return found


@dataclass(frozen=True)
class Progress:
    """Items done / planned for one (suite, endpoint role) of a run; ``label`` is the endpoint
    as every view names it (``role_labels``)."""

    suite: str
    role: str
    done: int
    planned: int | None
    label: str = ""


def role_labels(run: RunInfo) -> dict[str, str]:
    """``{role: label}`` of a run's endpoints: ``baseline`` and ``candidate:N`` (the keys of
    stored progress and samples) as users name them: the registered name, else host:port,
    with the model asked for (``reports.endpoint_label``; URLs redacted). A role is a key,
    never what a person reads (``candidate:0`` showed in `runs show`, REST progress and
    exports)."""
    from evalsvc.endpoints import redact_url
    from evalsvc.reports import endpoint_label

    refs = [("baseline", run.spec.baseline),
            *((f"candidate:{i}", c) for i, c in enumerate(run.spec.candidates))]
    return {role: endpoint_label({"name": r.name, "url": redact_url(r.url), "model": r.model})
            for role, r in refs}


def progress(run: RunInfo) -> list[Progress]:
    """The run's progress as the runner's reporter stores it (``{"items": {suite: n},
    "done": {suite: {role: n}}}``), sorted by suite then role, each with its label."""
    raw = run.progress or {}
    items = raw.get("items") or {}
    done = raw.get("done") or {}
    labels = role_labels(run)
    rows = []
    for suite in sorted(set(items) | set(done)):
        planned = items.get(suite)
        for role, n in sorted((done.get(suite) or {"baseline": 0}).items()):
            rows.append(
                Progress(suite, role, int(n), int(planned) if planned is not None else None,
                         labels.get(role, role))
            )
    return rows


#: How long a queued run waits for an idle worker to claim it before "no worker is alive" is
#: said: an idle worker polls the queue every 2 s (``evalsvc worker --poll``); 15 s leaves room
#: for a slower poll and a busy database.
NO_WORKER_AFTER_S = 15.0


@dataclass(frozen=True)
class QueueState:
    """Why a queued run has not started: how many workers are alive, and what to do."""

    workers_alive: int | None
    """Queue workers alive (busy ones hold a lease; an idle one would have claimed the run);
    ``None`` during the first ``NO_WORKER_AFTER_S`` of a run with no busy worker (an idle
    worker may be about to claim it)."""
    message: str


def queue_state(store: Store, run: RunInfo, *, now: datetime | None = None) -> QueueState | None:
    """What the views say about a queued run (the API's run status, the dashboard's run page,
    ``compare --server``'s progress line); ``None`` for a run that is not queued."""
    if run.status != RunStatus.queued:
        return None
    busy = store.busy_workers()
    now = now or datetime.now(UTC)
    created = run.created_at if run.created_at.tzinfo else run.created_at.replace(tzinfo=UTC)
    waited = max(0.0, (now - created).total_seconds())
    if busy:
        plural = "worker is" if busy == 1 else "workers are"
        return QueueState(busy, f"queued: {busy} {plural} alive and busy; the run starts when "
                                "one is free (more workers: `evalsvc worker`)")
    if waited < NO_WORKER_AFTER_S:
        return QueueState(None, "queued: waiting for a worker to claim it")
    return QueueState(0, f"queued for {waited:.0f} s and no worker is alive: start one with "
                         "`evalsvc worker` on the same database (with the API's "
                         "EVALSVC_ALLOWED_ENDPOINTS)")


@dataclass(frozen=True)
class Gate:
    """A finished run's overall verdict and the exit code ``evalsvc compare`` gives for it."""

    run_id: str
    status: RunStatus
    verdict: RunVerdict
    exit_code: int
    reasons: tuple[dict[str, Any], ...] = ()
    """Why the run reads its verdict: the stored report's run-level ``reasons`` (``code``,
    ``suite``, ``candidate``, ``message``; docs/report.md), or one ``infrastructure_error``
    reason for a run that ended without a report."""
    basis: dict[str, Any] | None = None
    """What the verdict rests on (the report's ``basis``, derived for older reports); None
    without a report."""


def gate(run: RunInfo, report: dict[str, Any] | None = None) -> Gate:
    """The gate of a finished run; a cancelled or crashed run proves nothing and gates as an
    infrastructure error (exit 4), never as a pass. ``report`` (the stored one) supplies the
    reasons, the same ones ``compare`` prints; URLs in them are redacted."""
    from evalsvc.endpoints import redact_urls_in
    from evalsvc.reports import reasons_of

    if run.status in _UNFINISHED:
        raise RunNotFinished(f"run {run.id} is {run.status.value}: no verdict yet")
    verdict: RunVerdict = (
        run.verdict if run.status == RunStatus.completed and run.verdict else "error"
    )
    from evalsvc.reports import endpoint_label

    # Each reason names its candidate by the label every view shows, beside the role (the key).
    labels = {c.get("role"): endpoint_label(c) for c in (report or {}).get("candidates") or []}
    reasons = [
        {**r, "candidate_label": labels.get(r.get("candidate"))} if r.get("candidate") else dict(r)
        for r in reasons_of(report or {})
    ]
    if not reasons and verdict == "error":
        why = run.error or f"the run is {run.status.value}"
        reasons = [{"code": "infrastructure_error", "suite": None, "message": why}]
    from evalsvc.reports import basis

    return Gate(run_id=run.id, status=run.status, verdict=verdict, exit_code=EXIT_CODES[verdict],
                reasons=tuple(redact_urls_in(reasons)),
                basis=redact_urls_in(basis(report)) if report else None)


def cancel(store: Store, run: RunInfo) -> RunInfo:
    """Cancel a queued or running run (its worker stops at the next heartbeat)."""
    if not store.cancel_run(run.id):
        current = store.get_run(run.id) or run
        raise RunAlreadyFinished(
            f"run {run.id} is already {current.status.value}; only queued or running runs "
            "can be cancelled"
        )
    return store.get_run(run.id) or run
