"""Noise-floor calibrations: ordinary runs with a purpose label, found by fingerprint and suite.

Contract: a calibration (``evalsvc calibrate``, ``POST /api/v1/calibrations``) is a run whose
spec carries the label ``CALIBRATION_LABEL = CALIBRATION`` and whose every candidate is its
baseline (an A/A run); no table of its own. ``latest_calibration`` finds the newest completed
one (not past its error budget) whose baseline's provenance fingerprint
(``evalsvc.domain.provenance_fingerprint`` of the stored endpoint snapshot) is the given one
and whose report gated the given suite, scanning the labelled runs newest first in pages (the
label is filtered in SQL: SQLite ``json_extract``, PostgreSQL ``->>``). Results are plain
dicts: ``run_id``, ``finished_at``, ``fingerprint``, ``baseline_url``, ``suites`` (and
``report`` from ``latest_calibration``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from evalsvc.domain import RunStatus, provenance_fingerprint

from . import _queue
from ._orm import EndpointSnapshotRow, ReportRow, RunRow

#: The label that marks a run as a calibration (``RunSpec.labels``).
CALIBRATION_LABEL = "evalsvc.purpose"
CALIBRATION = "calibration"

#: Labelled runs read per page while looking for a fingerprint.
_PAGE = 50


def _labelled(session: Session, *, after: tuple[Any, str] | None) -> list[tuple[Any, ...]]:
    label = RunRow.spec[("labels", CALIBRATION_LABEL)].as_string()
    stmt = (
        sa.select(RunRow.id, RunRow.finished_at, RunRow.spec, EndpointSnapshotRow.provenance)
        .join(
            EndpointSnapshotRow,
            sa.and_(EndpointSnapshotRow.run_id == RunRow.id, EndpointSnapshotRow.role == "baseline"),
        )
        .where(
            RunRow.status == RunStatus.completed.value,
            # A run past its error budget measured the failures, not the noise.
            sa.or_(RunRow.verdict.is_(None), RunRow.verdict != "error"),
            label == CALIBRATION,
        )
        .order_by(RunRow.finished_at.desc(), RunRow.id.desc())
        .limit(_PAGE)
    )
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


def calibrations(session: Session, *, fingerprint: str | None = None) -> Iterator[dict[str, Any]]:
    """Completed A/A calibration runs, newest first, with their baseline's fingerprint (those of
    ``fingerprint`` only, when given); the report is not read here."""
    after: tuple[Any, str] | None = None
    while True:
        rows = _labelled(session, after=after)
        for rid, finished, spec, prov in rows:
            if not is_aa(dict(spec or {})):
                continue  # a label alone does not make an A/A run
            fp = provenance_fingerprint(dict(prov or {}))
            if fingerprint is None or fp == fingerprint:
                yield {
                    "run_id": rid,
                    "finished_at": finished,
                    "fingerprint": fp,
                    "baseline_url": (spec.get("baseline") or {}).get("url"),
                    "suites": list(spec.get("suites") or []),
                }
        if len(rows) < _PAGE:
            return
        after = (rows[-1][1], rows[-1][0])


def report_suites(report: dict[str, Any]) -> set[str]:
    return {
        str(s.get("suite"))
        for c in report.get("candidates") or []
        for s in c.get("suites") or []
    }


def latest_calibration(
    session: Session, *, fingerprint: str, suite: str
) -> dict[str, Any] | None:
    """The newest completed calibration of ``fingerprint`` whose report gated ``suite``."""
    for found in calibrations(session, fingerprint=fingerprint):
        row = session.get(ReportRow, found["run_id"])
        report = dict(row.report) if row is not None else None
        if report is not None and suite in report_suites(report):
            return {**found, "report": report}
    return None
