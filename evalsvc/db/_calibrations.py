"""Noise-floor calibrations: ordinary runs with a purpose label, found by endpoint and suite.

Contract: a calibration (``evalsvc calibrate``, ``POST /api/v1/calibrations``) is a run whose
spec carries the label ``CALIBRATION_LABEL = CALIBRATION`` and whose every candidate is its
baseline (an A/A run). Its only row of its own is its adoption (``calibration_adoptions``,
migration 0009): a calibration an admin adopted, or that an admin or the local operator ran.
``latest_calibration`` finds the newest completed, **adopted** one (not past its error budget)
measured on the given endpoint identity (``endpoint_snapshots.identity``: a registered name or a
normalized URL; NULL on runs from before, never found) whose baseline's provenance fingerprint
(``evalsvc.domain.provenance_fingerprint`` of the stored endpoint snapshot) is the given one
and whose report gated the given suite, scanning the labelled runs newest first in pages (the
label is filtered in SQL: SQLite ``json_extract``, PostgreSQL ``->>``). Results are plain
dicts: ``run_id``, ``finished_at``, ``fingerprint``, ``baseline_url``, ``endpoint`` (the
identity), ``submitted_by``, ``adopted_by``, ``adopted_at``, ``adopted``, ``suites`` (and
``report`` from ``latest_calibration``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from evalsvc.domain import RunStatus, provenance_fingerprint

from . import _queue
from ._orm import CalibrationAdoptionRow, EndpointSnapshotRow, ReportRow, RunRow, utcnow

#: The label that marks a run as a calibration (``RunSpec.labels``).
CALIBRATION_LABEL = "evalsvc.purpose"
CALIBRATION = "calibration"

#: Labelled runs read per page while looking for a fingerprint.
_PAGE = 50


def _labelled(
    session: Session,
    *,
    after: tuple[Any, str] | None,
    endpoint: str | None = None,
    adopted: bool = False,
) -> list[tuple[Any, ...]]:
    label = RunRow.spec[("labels", CALIBRATION_LABEL)].as_string()
    stmt = (
        sa.select(RunRow.id, RunRow.finished_at, RunRow.spec, EndpointSnapshotRow.provenance,
                  EndpointSnapshotRow.identity, RunRow.submitted_by,
                  CalibrationAdoptionRow.adopted_by, CalibrationAdoptionRow.adopted_at)
        .join(
            EndpointSnapshotRow,
            sa.and_(EndpointSnapshotRow.run_id == RunRow.id, EndpointSnapshotRow.role == "baseline"),
        )
        .outerjoin(CalibrationAdoptionRow, CalibrationAdoptionRow.run_id == RunRow.id)
        .where(
            RunRow.status == RunStatus.completed.value,
            # A run past its error budget measured the failures, not the noise.
            sa.or_(RunRow.verdict.is_(None), RunRow.verdict != "error"),
            label == CALIBRATION,
        )
        .order_by(RunRow.finished_at.desc(), RunRow.id.desc())
        .limit(_PAGE)
    )
    if endpoint is not None:
        stmt = stmt.where(EndpointSnapshotRow.identity == endpoint)
    if adopted:
        stmt = stmt.where(CalibrationAdoptionRow.run_id.is_not(None))
    if after is not None:
        at, rid = after
        stmt = stmt.where(
            sa.or_(RunRow.finished_at < at, sa.and_(RunRow.finished_at == at, RunRow.id < rid))
        )
    return [tuple(r) for r in session.execute(stmt)]


def is_aa(spec: dict[str, Any]) -> bool:
    """Every candidate is the baseline (same URL and model): an A/A run, whatever its label."""
    base = spec.get("baseline") or {}
    url = _queue.normalize_url(str(base.get("url") or ""))
    cands = spec.get("candidates") or []
    return bool(cands) and all(
        _queue.normalize_url(str(c.get("url") or "")) == url and c.get("model") == base.get("model")
        for c in cands
    )


def calibrations(
    session: Session,
    *,
    fingerprint: str | None = None,
    endpoint: str | None = None,
    adopted: bool = False,
) -> Iterator[dict[str, Any]]:
    """Completed A/A calibration runs, newest first, with their baseline's fingerprint, identity
    and adoption (those of ``fingerprint`` and ``endpoint`` only, when given; adopted ones only
    with ``adopted``); the report is not read here."""
    after: tuple[Any, str] | None = None
    while True:
        rows = _labelled(session, after=after, endpoint=endpoint, adopted=adopted)
        for rid, finished, spec, prov, identity, submitted_by, adopted_by, adopted_at in rows:
            if not is_aa(dict(spec or {})):
                continue  # a label alone does not make an A/A run
            fp = provenance_fingerprint(dict(prov or {}))
            if fingerprint is None or fp == fingerprint:
                yield {
                    "run_id": rid,
                    "finished_at": finished,
                    "fingerprint": fp,
                    "baseline_url": (spec.get("baseline") or {}).get("url"),
                    "endpoint": identity,
                    "submitted_by": submitted_by,
                    "adopted": adopted_at is not None,
                    "adopted_by": adopted_by,
                    "adopted_at": adopted_at,
                    "suites": list(spec.get("suites") or []),
                }
        if len(rows) < _PAGE:
            return
        after = (rows[-1][1], rows[-1][0])


def adoption(session: Session, run_id: str) -> dict[str, Any] | None:
    """``{"adopted_by", "adopted_at"}`` of a calibration, or None when it is not adopted."""
    row = session.get(CalibrationAdoptionRow, run_id)
    return None if row is None else {"adopted_by": row.adopted_by, "adopted_at": row.adopted_at}


def adopt(session: Session, run_id: str, *, by: str | None) -> dict[str, Any]:
    """Adopt a calibration (idempotent: adopting twice keeps the first adoption)."""
    row = session.get(CalibrationAdoptionRow, run_id)
    if row is None:
        row = CalibrationAdoptionRow(run_id=run_id, adopted_by=by, adopted_at=utcnow())
        session.add(row)
        session.flush()
    return {"adopted_by": row.adopted_by, "adopted_at": row.adopted_at}


def report_suites(report: dict[str, Any]) -> set[str]:
    return {
        str(s.get("suite"))
        for c in report.get("candidates") or []
        for s in c.get("suites") or []
    }


def latest_calibration(
    session: Session, *, fingerprint: str, suite: str, endpoint: str
) -> dict[str, Any] | None:
    """The newest completed, adopted calibration measured on ``endpoint`` (an identity) with
    the provenance ``fingerprint`` whose report gated ``suite``."""
    for found in calibrations(session, fingerprint=fingerprint, endpoint=endpoint, adopted=True):
        row = session.get(ReportRow, found["run_id"])
        report = dict(row.report) if row is not None else None
        if report is not None and suite in report_suites(report):
            return {**found, "report": report}
    return None
