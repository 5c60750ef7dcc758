"""Noise floor on file (``evalsvc calibrate``, ``/api/v1/calibrations``): an endpoint against
itself, stored, and read back by ``plan`` and the gates.

Contract:
- A calibration is an ordinary run (docs/statistics.md, "Noise floor on file"): the endpoint is
  the baseline and each of ``runs`` candidates (an A/A run: every candidate pass answers the
  same items under the same traffic as the baseline pass), labelled
  ``evalsvc.purpose=calibration``; its id is the run's. ``calibrate`` runs it in-process through
  ``evalsvc.services.runs.compare``; ``submit`` queues it for a worker.
- Its figures per suite (:func:`figures`), read from the stored report: the **discordance** (the
  share of gated pairs whose score differed between a candidate pass and the baseline pass,
  pooled over the passes: the binary and determinism gates' ``details.discordance``, else
  counted from the stored samples' scores) and, for kinds that report ``details.noise``
  (determinism), the **batch instability**: the share of answers under load that differ from
  their prompt's modal answer, and the share of prompts with at least one such answer, pooled
  over every pass (the baseline's once); computed by ``evalsvc.services.noise_floor``.
- ``noise_floor.floor_for`` finds the latest **adopted** calibration measured on an endpoint
  (its identity: registered name or normalized URL, ``evalsvc.services.identity``) with a
  provenance fingerprint and suite (``Store.runs.latest_calibration``) as an
  ``evalsvc.gates.NoiseFloor``; ``noise_floor.attach_floors`` puts it on a run's suites once its
  baseline is probed (the runs service calls it), so the report's ``details.gate.noise_floor``
  carries it, and ``plan`` sizes with its discordance (:func:`floors_for_endpoint`).
- Adoption is the operator's policy (issue 47): a floor loosens nothing by itself, but it
  decides the determinism gate's below-floor check and ``plan``'s sizes, so a calibration a
  ``submit`` token queued is stored and shown but used only once an admin adopts it
  (:func:`adopt`; ``POST /api/v1/calibrations/{id}/adopt``, ``evalsvc calibrations adopt``).
  One an admin token queued, or the local operator ran in-process (:func:`calibrate`, adopted
  as ``local``), is adopted at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from evalsvc.domain import (
    EndpointRef,
    Provenance,
    RunInfo,
    RunOptions,
    RunSpec,
    provenance_fingerprint,
)
from evalsvc.gates import NoiseFloor
from evalsvc.services.noise_floor import figures, floor_for

if TYPE_CHECKING:
    from evalsvc.db import Store
    from evalsvc.runner import Progress

#: Who adopted what the local operator calibrated in-process (``evalsvc calibrate``).
LOCAL_OPERATOR = "local"

#: The purpose label of a calibration run (``evalsvc.db._calibrations``: the same pair).
CALIBRATION_LABEL = "evalsvc.purpose"
CALIBRATION = "calibration"


class CalibrationNotFound(LookupError):
    """No calibration with that id (HTTP 404, CLI exit 2)."""


def calibration_spec(
    endpoint: EndpointRef,
    suites: Sequence[str],
    *,
    runs: int = 1,
    options: RunOptions | None = None,
    labels: dict[str, str] | None = None,
) -> RunSpec:
    """The A/A run of ``endpoint``: it is the baseline and each of ``runs`` candidates."""
    from evalsvc.services.runs import UsageError

    if runs < 1:
        raise UsageError("--runs must be at least 1 (the number of A/A passes against the baseline)")
    try:
        return RunSpec(
            baseline=endpoint,
            candidates=[endpoint.model_copy() for _ in range(runs)],
            suites=list(suites),
            options=options or RunOptions(),
            labels={**(labels or {}), CALIBRATION_LABEL: CALIBRATION},
        )
    except ValueError as exc:  # pydantic: too many passes or suites
        raise UsageError(
            f"calibration refused: {exc.errors()[0]['msg'] if hasattr(exc, 'errors') else exc} "
            "(fewer --runs or suites)"
        ) from exc


def calibrate(
    endpoint: EndpointRef,
    suites: Sequence[str],
    *,
    store: Store,
    runs: int = 1,
    options: RunOptions | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the A/A calibration in-process and return what :func:`get` returns for it."""
    from evalsvc.services.runs import compare

    spec = calibration_spec(endpoint, suites, runs=runs, options=options)
    report = compare(spec, store=store, progress=progress)
    # The local operator's own measurement is policy already (as `compare --allow-difference`).
    store.runs.adopt_calibration(str(report["run_id"]), by=LOCAL_OPERATOR)
    return get(store, str(report["run_id"]))


def submit(
    endpoint: EndpointRef,
    suites: Sequence[str],
    *,
    store: Store,
    runs: int = 1,
    options: RunOptions | None = None,
    submitted_by: str | None = None,
    admin: bool = False,
) -> RunInfo:
    """Queue the A/A calibration for a worker (``POST /api/v1/calibrations``). An ``admin``
    caller's calibration is adopted at once; a submitter's waits for an admin (:func:`adopt`)."""
    from evalsvc.services.runs import submit as submit_run

    spec = calibration_spec(endpoint, suites, runs=runs, options=options)
    run = submit_run(spec, store=store, submitted_by=submitted_by, admin=admin)
    if admin:
        store.runs.adopt_calibration(run.id, by=submitted_by)
    return run


def adopt(store: Store, calibration_id: str, *, by: str | None) -> dict[str, Any]:
    """Adopt a calibration for gates and ``plan`` (admin scope over REST; the local operator on
    the CLI) and return what :func:`get` returns for it. Adopting twice keeps the first; a run
    that is not an A/A calibration, or one measured before endpoint identities were recorded
    (no run would use it), is refused (``UsageError``); a queued one may be adopted ahead."""
    from evalsvc.db._calibrations import is_aa
    from evalsvc.services.runs import UsageError

    run = _calibration_run(store, calibration_id)
    if not is_aa(run.spec.model_dump(mode="json")):
        raise UsageError(
            f"run {run.id} carries the calibration label but is not an endpoint against itself "
            "(A/A): it measured no noise floor; calibrate again: evalsvc calibrate ENDPOINT"
        )
    probed = "baseline" in store.get_endpoint_snapshots(run.id)
    if probed and store.get_endpoint_identities(run.id).get("baseline") is None:
        raise UsageError(
            f"calibration {run.id} was measured before evalsvc recorded the endpoint a "
            "calibration belongs to, so no run would use it: calibrate again (evalsvc calibrate "
            "ENDPOINT) and adopt that one"
        )
    store.runs.adopt_calibration(run.id, by=by)
    return get(store, run.id)


def _calibration_run(store: Store, calibration_id: str) -> RunInfo:
    run = store.get_run(calibration_id)
    if run is None or run.spec.labels.get(CALIBRATION_LABEL) != CALIBRATION:
        raise CalibrationNotFound(
            f"no calibration {calibration_id!r} (list them: evalsvc calibrations list)"
        )
    return run


def get(store: Store, calibration_id: str) -> dict[str, Any]:
    """A calibration's stored figures: its run's status and, once it completed, per suite the
    discordance and batch instability (:func:`figures`) under the baseline's fingerprint."""
    run = _calibration_run(store, calibration_id)
    adoption = store.runs.calibration_adoption(run.id)
    identity = store.get_endpoint_identities(run.id).get("baseline")
    out: dict[str, Any] = {
        "id": run.id,
        "status": run.status.value,
        "endpoint": run.spec.baseline.url,
        "model": run.spec.baseline.model,
        "runs": len(run.spec.candidates),
        "suites": list(run.spec.suites),
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "error": run.error,
        "fingerprint": None,
        "identity": identity,
        "submitted_by": run.submitted_by,
        "adopted": adoption is not None,
        "adopted_by": adoption["adopted_by"] if adoption else None,
        "adopted_at": adoption["adopted_at"].isoformat() if adoption else None,
        "floors": {},
    }
    snaps = store.get_endpoint_snapshots(run.id)
    if "baseline" in snaps:
        out["fingerprint"] = provenance_fingerprint(snaps["baseline"][1])
    report = store.get_report(run.id)
    # A run past its error budget measured the failures, not the noise: no floors.
    usable = run.verdict != "error" and run.finished_at is not None
    if report is not None and out["fingerprint"] is not None and usable:
        for suite in _suites_of(report):
            assert run.finished_at is not None
            floor = figures(
                store, report, suite, run_id=run.id, fingerprint=out["fingerprint"],
                measured_at=run.finished_at, endpoint=identity,
                adopted_by=out["adopted_by"], submitted_by=run.submitted_by,
            )
            out["floors"][suite] = floor.to_dict()
    return out


def _suites_of(report: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for cand in report.get("candidates") or []:
        for s in cand.get("suites") or []:
            if s.get("suite") not in names:
                names.append(str(s.get("suite")))
    return names

def floors_for_endpoint(
    store: Store, endpoint: EndpointRef, suites: Sequence[str]
) -> tuple[str, dict[str, NoiseFloor]]:
    """Probe ``endpoint`` (its provenance fingerprint) and return the fingerprint and the latest
    adopted calibration's floor on this endpoint (its identity) of each suite (names, sets or
    YAML paths) that has one, by suite name (``evalsvc plan --endpoint``). An unreachable
    endpoint raises the client's error."""
    from evalsvc.endpoints import EndpointClient, probe
    from evalsvc.services.identity import endpoint_identity

    async def probed() -> Provenance:
        client = EndpointClient(endpoint, concurrency=1, timeout_s=30.0)
        try:
            return await probe(client)
        finally:
            await client.aclose()

    from evalsvc.services.runs import UsageError
    from evalsvc.suites import SuiteError, resolve

    try:
        names = [s.name for s in resolve(list(suites), allow_paths=True)]
    except SuiteError as exc:
        raise UsageError(str(exc)) from exc
    fingerprint = provenance_fingerprint(asyncio.run(probed()))
    identity = endpoint_identity(store, endpoint)
    floors = {}
    for name in names:
        floor = floor_for(store, fingerprint, name, endpoint=identity)
        if floor is not None:
            floors[name] = floor
    return fingerprint, floors


def list_calibrations(store: Store, *, limit: int = 50) -> list[dict[str, Any]]:
    """Completed calibrations, newest first: id, endpoint, fingerprint, suites, finished."""
    return [
        {
            "id": c["run_id"],
            "endpoint": c["baseline_url"],
            "fingerprint": c["fingerprint"],
            "identity": c["endpoint"],
            "submitted_by": c["submitted_by"],
            "adopted": c["adopted"],
            "adopted_by": c["adopted_by"],
            "suites": c["suites"],
            "finished_at": c["finished_at"].isoformat() if c["finished_at"] else None,
        }
        for c in store.runs.list_calibrations(limit=limit)
    ]
