"""The run aggregate: a run's row and candidates, its snapshots, gate results and report.

Contract: methods take and return domain objects (``RunInfo``, ``EndpointRef``, ``Provenance``)
or the report/gate dicts the report module defines; each is one transaction. The queue's side
of a run (claim, lease, reap) is ``_queue.QueueStore``; its samples are ``_samples.SampleStore``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from evalsvc.domain import EndpointRef, Provenance, RunInfo, RunSpec, RunStatus

from . import _calibrations, _queue
from ._orm import (
    EndpointSnapshotRow,
    GateResultRow,
    ReportRow,
    RunCandidateRow,
    RunRow,
    SuiteSnapshotRow,
    utcnow,
)
from ._rows import TERMINAL, dialect_insert, new_id, run_info
from ._session import Database


def add_run_row(
session: Session,
    spec: RunSpec,
    *,
    status: RunStatus,
    now: datetime,
    schedule_id: str | None,
    fire_time: datetime | None,
) -> RunRow:
    """Add a run row and its candidate rows in ``session`` (creating a run, firing a schedule)."""
    row = RunRow(
        id=new_id(),
        status=status.value,
        priority=spec.priority,
        spec=spec.model_dump(mode="json"),
        baseline_url=_queue.normalize_url(spec.baseline.url),
        attempts=0,
        progress={},
        created_at=now,
        updated_at=now,
        started_at=now if status == RunStatus.running else None,
        finished_at=now if status.value in TERMINAL else None,
        schedule_id=schedule_id,
        fire_time=fire_time,
    )
    session.add(row)
    session.flush()  # no ORM relationships: the run row must exist before its candidates
    for position, candidate in enumerate(spec.candidates):
        session.add(
            RunCandidateRow(
                run_id=row.id,
                position=position,
                url=_queue.normalize_url(candidate.url),
                model=candidate.model,
                name=candidate.name,
            )
        )
    session.flush()
    return row


class RunStore:
    """Runs and what is stored with them (not their samples)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create_run(
        self,
        spec: RunSpec,
        *,
        status: RunStatus = RunStatus.queued,
        schedule_id: str | None = None,
        fire_time: datetime | None = None,
        lease_owner: str | None = None,
        lease_seconds: float | None = None,
        submitted_by: str | None = None,
    ) -> RunInfo:
        """Store a new run. ``status=running`` is for in-process runs; with ``lease_owner``
        (``cli:<host>:<pid>``) and ``lease_seconds`` the process keeps it alive with
        :meth:`heartbeat`, and the reaper marks it ``error`` if the process dies.
        ``submitted_by``: the API token's name that queued it."""
        now = utcnow()
        with self._db.session() as session:
            row = add_run_row(
                session, spec, status=status, now=now, schedule_id=schedule_id, fire_time=fire_time
            )
            row.submitted_by = submitted_by
            if lease_owner is not None and lease_seconds is not None:
                row.lease_owner = lease_owner
                row.lease_expires_at = now + timedelta(seconds=lease_seconds)
                session.flush()
            return run_info(row)

    def get_run(self, run_id: str) -> RunInfo | None:
        with self._db.session(write=False) as session:
            row = session.get(RunRow, run_id)
            return run_info(row) if row is not None else None

    def find_run_ids(self, prefix: str, *, limit: int = 2) -> list[str]:
        """Ids of runs starting with ``prefix`` (hex only, so no LIKE wildcard can sneak in),
        at most ``limit`` of them: callers ask for 2 to tell "unique" from "ambiguous"."""
        if not prefix or any(c not in "0123456789abcdef" for c in prefix):
            return []
        stmt = sa.select(RunRow.id).where(RunRow.id.startswith(prefix)).order_by(RunRow.id)
        with self._db.session(write=False) as session:
            return list(session.scalars(stmt.limit(limit)))

    def list_runs(
        self,
        *,
        limit: int = 50,
        status: RunStatus | None = None,
        verdict: str | None = None,
        endpoint_url: str | None = None,
        schedule_id: str | None = None,
    ) -> list[RunInfo]:
        """Newest first. ``endpoint_url`` matches the baseline or any candidate."""
        stmt = sa.select(RunRow).order_by(RunRow.created_at.desc(), RunRow.id.desc()).limit(limit)
        if status is not None:
            stmt = stmt.where(RunRow.status == RunStatus(status).value)
        if verdict is not None:
            stmt = stmt.where(RunRow.verdict == verdict)
        if schedule_id is not None:
            stmt = stmt.where(RunRow.schedule_id == schedule_id)
        if endpoint_url is not None:
            url = _queue.normalize_url(endpoint_url)
            as_candidate = sa.exists().where(
                RunCandidateRow.run_id == RunRow.id, RunCandidateRow.url == url
            )
            stmt = stmt.where(sa.or_(RunRow.baseline_url == url, as_candidate))
        with self._db.session(write=False) as session:
            return [run_info(row) for row in session.scalars(stmt)]

    def update_progress(self, run_id: str, progress: dict[str, Any]) -> None:
        """Replace the run's progress dict (whatever the runner wants dashboards to show)."""
        with self._db.session() as session:
            session.execute(
                sa.update(RunRow)
                .where(RunRow.id == run_id)
                .values(progress=progress, updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )

    def finish_run(
        self,
        run_id: str,
        *,
        status: RunStatus,
        verdict: str | None,
        error: str | None = None,
        worker_id: str | None = None,
    ) -> bool:
        """Record the end of a run; False when nothing was changed.

        With ``worker_id``: only while that worker holds the lease (status running). Without
        (in-process runs): only if the run is not already finished, so a cancel is never
        overwritten by a late completion.
        """
        now = utcnow()
        stmt = sa.update(RunRow).where(RunRow.id == run_id)
        if worker_id is not None:
            stmt = stmt.where(
                RunRow.lease_owner == worker_id, RunRow.status == RunStatus.running.value
            )
        else:
            stmt = stmt.where(RunRow.status.not_in(TERMINAL))
        stmt = stmt.values(
            status=RunStatus(status).value,
            verdict=verdict,
            error=error,
            finished_at=now,
            updated_at=now,
            lease_expires_at=None,
        ).execution_options(synchronize_session=False)
        with self._db.session() as session:
            return _queue.rowcount(session.execute(stmt)) == 1

    def cancel_run(self, run_id: str) -> bool:
        """Cancel a queued or running run. A running run's worker learns it at its next
        heartbeat (which then returns False) and stops."""
        now = utcnow()
        with self._db.session() as session:
            result = session.execute(
                sa.update(RunRow)
                .where(
                    RunRow.id == run_id,
                    RunRow.status.in_([RunStatus.queued.value, RunStatus.running.value]),
                )
                .values(
                    status=RunStatus.cancelled.value,
                    finished_at=now,
                    updated_at=now,
                    lease_expires_at=None,
                )
                .execution_options(synchronize_session=False)
            )
            cancelled = _queue.rowcount(result) == 1
            if cancelled:  # an upload's files go with it (never gated now)
                _queue.drop_uploads(session, [run_id])
            return cancelled

    def reopen_run(self, run_id: str, *, lease_owner: str, lease_seconds: float) -> bool:
        """Take a finished run (completed, error or cancelled) back to ``running`` under
        ``lease_owner``'s lease, its verdict and error cleared, to resume it in this process
        (``evalsvc runs resume``); False when it is queued or running (or absent). Its samples,
        snapshots and report stay until the resumed attempt replaces them."""
        return self._restart(
            run_id, status=RunStatus.running.value, lease_owner=lease_owner,
            lease_expires_at=utcnow() + timedelta(seconds=lease_seconds),
        )

    def requeue_run(self, run_id: str) -> bool:
        """Queue a finished run (completed, error or cancelled) again for the workers, its
        verdict, error, lease and attempts cleared (``POST /runs/{id}/resume``): the worker that
        claims it skips every item stored without error, as for a run it takes over. False when
        it is queued or running (or absent)."""
        return self._restart(run_id, status=RunStatus.queued.value, lease_owner=None,
                             lease_expires_at=None, attempts=0)

    def _restart(self, run_id: str, **values: Any) -> bool:
        """A finished run set to ``values`` with its verdict, error and end cleared, in one
        compare-and-set on its status (False when it is not finished, or absent)."""
        with self._db.session() as session:
            result = session.execute(
                sa.update(RunRow)
                .where(RunRow.id == run_id, RunRow.status.in_(TERMINAL))
                .values(verdict=None, error=None, finished_at=None, updated_at=utcnow(),
                        **values)
                .execution_options(synchronize_session=False)
            )
            return _queue.rowcount(result) == 1

    def delete_run(self, run_id: str) -> bool:
        """Delete a run and everything stored with it (samples, snapshots, gates, report)."""
        with self._db.session() as session:
            result = session.execute(sa.delete(RunRow).where(RunRow.id == run_id))
            return _queue.rowcount(result) == 1

    def save_endpoint_snapshot(
        self,
        run_id: str,
        *,
        role: str,
        endpoint: EndpointRef,
        provenance: Provenance,
        identity: str | None = None,
    ) -> None:
        """Record (or replace) which endpoint played ``role``, what the probe found, and the
        endpoint's identity (``evalsvc.services.identity``: what reuse is bound to)."""
        values = {
            "identity": identity,
            "run_id": run_id,
            "role": role,
            "url": endpoint.url,
            "model": endpoint.model,
            "name": endpoint.name,
            "api_key_env": endpoint.api_key_env,
            "provenance": provenance.model_dump(mode="json"),
            "created_at": utcnow(),
        }
        stmt = dialect_insert(self._db, EndpointSnapshotRow.__table__).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "role"],
            set_={k: stmt.excluded[k] for k in values if k not in ("run_id", "role")},
        )
        with self._db.session() as session:
            session.execute(stmt)

    def get_endpoint_snapshots(self, run_id: str) -> dict[str, tuple[EndpointRef, Provenance]]:
        """``{role: (endpoint, provenance)}`` of a run."""
        stmt = sa.select(EndpointSnapshotRow).where(EndpointSnapshotRow.run_id == run_id)
        with self._db.session(write=False) as session:
            return {
                row.role: (
                    EndpointRef(
                        url=row.url, model=row.model, name=row.name, api_key_env=row.api_key_env
                    ),
                    Provenance.model_validate(row.provenance),
                )
                for row in session.scalars(stmt)
            }

    def get_endpoint_identities(self, run_id: str) -> dict[str, str | None]:
        """``{role: identity}`` of a run (None: recorded before identities, migration 0009)."""
        stmt = sa.select(EndpointSnapshotRow.role, EndpointSnapshotRow.identity).where(
            EndpointSnapshotRow.run_id == run_id
        )
        with self._db.session(write=False) as session:
            return {role: identity for role, identity in session.execute(stmt)}

    def save_suite_snapshot(
        self, run_id: str, *, name: str, kind: str, version: str, spec: dict[str, Any]
    ) -> None:
        """Record (or replace) the exact suite spec a run used."""
        values = {
            "run_id": run_id,
            "name": name,
            "kind": kind,
            "version": version,
            "spec": spec,
            "created_at": utcnow(),
        }
        stmt = dialect_insert(self._db, SuiteSnapshotRow.__table__).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "name"],
            set_={k: stmt.excluded[k] for k in ("kind", "version", "spec", "created_at")},
        )
        with self._db.session() as session:
            session.execute(stmt)

    def get_suite_snapshots(self, run_id: str) -> list[dict[str, Any]]:
        """``[{"name", "kind", "version", "spec"}]`` in the order they were saved."""
        stmt = (
            sa.select(SuiteSnapshotRow)
            .where(SuiteSnapshotRow.run_id == run_id)
            .order_by(SuiteSnapshotRow.id)
        )
        with self._db.session(write=False) as session:
            return [
                {"name": r.name, "kind": r.kind, "version": r.version, "spec": dict(r.spec)}
                for r in session.scalars(stmt)
            ]

    def save_gate_results(self, run_id: str, gates: list[dict[str, Any]]) -> None:
        """Replace the gate outcomes of a run. Each dict needs ``candidate`` and ``suite``;
        ``verdict``, ``metric`` and ``delta`` are copied into columns for queries and the whole
        dict is kept as the payload."""
        now = utcnow()
        with self._db.session() as session:
            session.execute(sa.delete(GateResultRow).where(GateResultRow.run_id == run_id))
            for gate in gates:
                delta = gate.get("delta")
                session.add(
                    GateResultRow(
                        run_id=run_id,
                        candidate=str(gate["candidate"]),
                        suite=str(gate["suite"]),
                        verdict=gate.get("verdict"),
                        metric=gate.get("metric"),
                        delta=float(delta) if delta is not None else None,
                        payload=gate,
                        created_at=now,
                    )
                )

    def get_gate_results(self, run_id: str) -> list[dict[str, Any]]:
        stmt = (
            sa.select(GateResultRow)
            .where(GateResultRow.run_id == run_id)
            .order_by(GateResultRow.id)
        )
        with self._db.session(write=False) as session:
            return [dict(row.payload) for row in session.scalars(stmt)]

    def save_report(self, run_id: str, report: dict[str, Any]) -> None:
        now = utcnow()
        stmt = dialect_insert(self._db, ReportRow.__table__).values(
            run_id=run_id, report=report, created_at=now, updated_at=now
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id"],
            set_={"report": stmt.excluded.report, "updated_at": stmt.excluded.updated_at},
        )
        with self._db.session() as session:
            session.execute(stmt)

    def get_report(self, run_id: str) -> dict[str, Any] | None:
        with self._db.session(write=False) as session:
            row = session.get(ReportRow, run_id)
            return dict(row.report) if row is not None else None

    def latest_calibration(
        self, *, fingerprint: str, suite: str, endpoint: str
    ) -> dict[str, Any] | None:
        """The newest completed, adopted A/A calibration run measured on the endpoint identity
        ``endpoint`` whose provenance fingerprint is ``fingerprint`` and that gated ``suite``
        (``_calibrations.latest_calibration``), with its report; ``None`` when there is none."""
        with self._db.session(write=False) as session:
            return _calibrations.latest_calibration(
                session, fingerprint=fingerprint, suite=suite, endpoint=endpoint
            )

    def calibration_adoption(self, run_id: str) -> dict[str, Any] | None:
        """How a calibration was adopted (``adopted_by``, ``adopted_at``), or None."""
        with self._db.session(write=False) as session:
            return _calibrations.adoption(session, run_id)

    def adopt_calibration(self, run_id: str, *, by: str | None) -> dict[str, Any]:
        """Adopt a calibration for gates and ``plan`` (the first adoption is kept)."""
        with self._db.session() as session:
            return _calibrations.adopt(session, run_id, by=by)

    def list_calibrations(
        self, *, fingerprint: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Completed calibration runs, newest first (of ``fingerprint`` when given)."""
        with self._db.session(write=False) as session:
            out = []
            for found in _calibrations.calibrations(session, fingerprint=fingerprint):
                out.append(found)
                if len(out) >= limit:
                    break
            return out
