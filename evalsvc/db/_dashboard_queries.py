"""Read-only queries behind the web dashboard (``evalsvc.services.dashboard``).

Contract: every method is one read transaction and returns domain objects or plain dicts (ORM
rows never leave ``evalsvc.db``). The runs list pages by keyset on ``(created_at, id)`` (the
``created_at`` index), so a page costs the same at run 10 and run 10,000; its count is one
``COUNT(*)`` over the same filters. Filters that live in the run's JSON spec (labels, requested
suites) use the backend's JSON operators through SQLAlchemy's ``JSON`` type, on both SQLite and
PostgreSQL.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from evalsvc.domain import RunInfo, RunStatus, Sample

from . import _queue
from ._orm import (
    EndpointSnapshotRow,
    GateResultRow,
    RunCandidateRow,
    RunRow,
    SampleRow,
    SuiteSnapshotRow,
)
from ._session import Database


@dataclass(frozen=True)
class RunFilters:
    """What the runs list can be narrowed to (None: no constraint)."""

    endpoint: str | None = None
    """A base URL (normalised) or a registered/recorded endpoint name, baseline or candidate."""
    suite: str | None = None
    """A suite the run executed, or (not yet started) requested."""
    verdict: str | None = None
    status: str | None = None
    label: tuple[str, str] | None = None
    """``(key, value)`` of the run's labels."""
    since: datetime | None = None
    until: datetime | None = None
    """Created at or after ``since`` and strictly before ``until``."""
    schedule_id: str | None = None


def _conditions(f: RunFilters) -> list[sa.ColumnElement[bool]]:
    out: list[sa.ColumnElement[bool]] = []
    if f.status:
        out.append(RunRow.status == RunStatus(f.status).value)
    if f.verdict:
        out.append(RunRow.verdict == f.verdict)
    if f.since is not None:
        out.append(RunRow.created_at >= f.since)
    if f.until is not None:
        out.append(RunRow.created_at < f.until)
    if f.schedule_id:
        out.append(RunRow.schedule_id == f.schedule_id)
    if f.endpoint:
        value = f.endpoint.strip()
        url = _queue.normalize_url(value) if "://" in value else None
        cand = sa.exists().where(
            RunCandidateRow.run_id == RunRow.id,
            RunCandidateRow.url == url if url else RunCandidateRow.name == value,
        )
        if url:
            out.append(sa.or_(RunRow.baseline_url == url, cand))
        else:
            out.append(sa.or_(RunRow.spec["baseline"]["name"].as_string() == value, cand))
    if f.suite:
        executed = sa.exists().where(
            SuiteSnapshotRow.run_id == RunRow.id, SuiteSnapshotRow.name == f.suite
        )
        # Not started yet: no snapshot, so look at the names requested. The JSON text contains
        # the quoted name; the status condition keeps this scan to the (few) queued runs.
        quoted = '"' + f.suite.replace("\\", "\\\\").replace('"', '\\"') + '"'
        requested = sa.and_(
            RunRow.status == RunStatus.queued.value,
            sa.cast(RunRow.spec["suites"], sa.Text).contains(quoted, autoescape=True),
        )
        out.append(sa.or_(executed, requested))
    if f.label:
        key, value = f.label
        out.append(RunRow.spec["labels"][key].as_string() == value)
    return out


#: How a JSON field of a sample's ``data`` is cast by the database (``fields`` of the score reads).
_CAST = {"int": "as_integer", "float": "as_float", "str": "as_string"}


class DashboardQueries:
    """The dashboard's reads over one ``Database`` (``Store.dashboard``)."""

    def __init__(self, db: Database, run_info: Any, sample: Any) -> None:
        self._db = db
        self._run_info = run_info
        self._sample = sample

    def sample_scores(
        self, run_id: str, suite: str, fields: tuple[tuple[str, str], ...] = ()
    ) -> list[tuple[str, str, int, float | None, dict[str, Any]]]:
        """``(endpoint, item_id, repeat, score, {field: data[field]})`` of a suite's samples:
        only the columns and JSON fields asked for (a 5,000-sample run's heatmap and flips
        need the scores, not the outputs). ``fields`` are ``(name, "int"|"float"|"str")``:
        extracted and cast by the database, so no JSON is decoded in Python."""
        cols = [getattr(SampleRow.data[name], _CAST[kind])() for name, kind in fields]
        names = [name for name, _ in fields]
        stmt = sa.select(
            SampleRow.endpoint, SampleRow.item_id, SampleRow.repeat, SampleRow.score, *cols
        ).where(SampleRow.run_id == run_id, SampleRow.suite == suite).order_by(SampleRow.id)
        with self._db.session(write=False) as session:
            # Core execution: plain rows, without the ORM's per-row loading machinery.
            result = session.connection().execute(stmt)
            return [
                (e, i, int(r), s, dict(zip(names, rest, strict=True)))
                for e, i, r, s, *rest in result.all()
            ]

    def flipped_pairs(
        self,
        run_id: str,
        suite: str,
        role: str,
        threshold: float,
        fields: tuple[tuple[str, str], ...] = (),
    ) -> list[tuple[str, int, float, float, dict[str, Any]]]:
        """``(item_id, repeat, baseline score, candidate score, {field: baseline data[field]})``
        of the pairs whose outcome differs at ``threshold`` (a score at or above it is correct),
        ordered by item and repeat. The database pairs the two roles and compares the scores, so
        only flipped pairs are read: the flips page of a 100,000-sample run read every score and
        slice field in Python before (docs/benchmarks.md).

        One scan of the run's suite grouped by item, not a self-join: right after a large run is
        written PostgreSQL's statistics still describe the table before it, and with them the
        planner ran the join as a nested loop over the (run, suite) index, reading the run's
        rows once per row (over 20 s, then minutes, for 100,000 samples; 0.05 s once ANALYZE had
        run). The grouped form is linear whatever the statistics (0.2 s on the same rows)."""
        sample = SampleRow

        def of(endpoint: str, col: Any) -> Any:
            return sa.func.max(sa.case((sample.endpoint == endpoint, col), else_=None))

        sb, sc = of("baseline", sample.score), of(role, sample.score)
        cols = [of("baseline", getattr(sample.data[name], _CAST[kind])()) for name, kind in fields]
        names = [name for name, _ in fields]
        flipped = sa.or_(
            sa.and_(sb >= threshold, sc < threshold),
            sa.and_(sb < threshold, sc >= threshold),
        )
        stmt = (
            sa.select(sample.item_id, sample.repeat, sb, sc, *cols)
            .where(
                sample.run_id == run_id,
                sample.suite == suite,
                sample.endpoint.in_(("baseline", role)),
            )
            .group_by(sample.item_id, sample.repeat)
            .having(flipped)
            .order_by(sample.item_id, sample.repeat)
        )
        with self._db.session(write=False) as session:
            result = session.connection().execute(stmt)
            return [
                (i, int(r), float(b), float(c), dict(zip(names, rest, strict=True)))
                for i, r, b, c, *rest in result.all()
            ]

    def sample_index(
        self, run_id: str, suite: str, fields: tuple[tuple[str, str], ...] = ()
    ) -> list[tuple[str, str, int, float | None, bool, dict[str, Any]]]:
        """``(endpoint, item_id, repeat, score, errored, {field: data[field]})`` of a suite's
        samples, in stored order: what the samples browser filters and pages on, without
        outputs or prompts (those are read for the shown page only, ``samples_of_items``)."""
        cols = [getattr(SampleRow.data[name], _CAST[kind])() for name, kind in fields]
        names = [name for name, _ in fields]
        stmt = sa.select(
            SampleRow.endpoint, SampleRow.item_id, SampleRow.repeat, SampleRow.score,
            SampleRow.error.is_not(None), *cols,
        ).where(SampleRow.run_id == run_id, SampleRow.suite == suite).order_by(SampleRow.id)
        with self._db.session(write=False) as session:
            result = session.connection().execute(stmt)
            return [
                (e, i, int(r), s, bool(err), dict(zip(names, rest, strict=True)))
                for e, i, r, s, err, *rest in result.all()
            ]

    def endpoints_of(self, run_ids: list[str]) -> dict[str, dict[str, dict[str, str | None]]]:
        """``{run_id: {role: {"name", "url", "model"}}}`` from the runs' endpoint snapshots
        (``model``: the one asked for, else the one the engine served when probed), in one
        query: what the views label endpoints with."""
        if not run_ids:
            return {}
        served = EndpointSnapshotRow.provenance["model"].as_string()
        stmt = sa.select(
            EndpointSnapshotRow.run_id, EndpointSnapshotRow.role, EndpointSnapshotRow.name,
            EndpointSnapshotRow.url, EndpointSnapshotRow.model, served,
        ).where(EndpointSnapshotRow.run_id.in_(run_ids))
        out: dict[str, dict[str, dict[str, str | None]]] = defaultdict(dict)
        with self._db.session(write=False) as session:
            for run_id, role, name, url, model, probed in session.execute(stmt):
                out[run_id][role] = {"name": name, "url": url, "model": model or probed}
        return dict(out)

    def suite_names(self, run_ids: list[str]) -> dict[str, list[str]]:
        """``{run_id: [suite name, ...]}`` of the suites the runs executed (their snapshots),
        in snapshot order."""
        if not run_ids:
            return {}
        stmt = (
            sa.select(SuiteSnapshotRow.run_id, SuiteSnapshotRow.name)
            .where(SuiteSnapshotRow.run_id.in_(run_ids))
            .order_by(SuiteSnapshotRow.id)
        )
        out: dict[str, list[str]] = defaultdict(list)
        with self._db.session(write=False) as session:
            for run_id, name in session.execute(stmt):
                out[run_id].append(name)
        return dict(out)

    def items_matching(self, run_id: str, suite: str, text: str, endpoints: list[str]) -> set[str]:
        """Item ids of a suite whose id or output on one of ``endpoints`` contains ``text``
        (case-insensitive; ``%``/``_`` match literally): the samples browser's search, in SQL so
        no output is read into memory."""
        stmt = sa.select(SampleRow.item_id).distinct().where(
            SampleRow.run_id == run_id,
            SampleRow.suite == suite,
            SampleRow.endpoint.in_(endpoints),
            sa.or_(
                SampleRow.item_id.icontains(text, autoescape=True),
                SampleRow.output.icontains(text, autoescape=True),
            ),
        )
        with self._db.session(write=False) as session:
            return set(session.scalars(stmt))

    def samples_of_items(self, run_id: str, suite: str, item_ids: list[str]) -> list[Sample]:
        """Full samples (outputs included) of some items of a suite."""
        out: list[Sample] = []
        with self._db.session(write=False) as session:
            for start in range(0, len(item_ids), 500):
                chunk = item_ids[start : start + 500]
                stmt = (
                    sa.select(SampleRow)
                    .where(
                        SampleRow.run_id == run_id,
                        SampleRow.suite == suite,
                        SampleRow.item_id.in_(chunk),
                    )
                    .order_by(SampleRow.id)
                )
                out.extend(self._sample(row) for row in session.scalars(stmt))
        return out

    def runs_page(
        self,
        filters: RunFilters,
        *,
        limit: int = 50,
        older_than: tuple[datetime, str] | None = None,
        newer_than: tuple[datetime, str] | None = None,
        with_total: bool = True,
    ) -> tuple[list[RunInfo], int, bool]:
        """``(runs newest first, total matching, more in the paging direction)``.

        ``older_than``/``newer_than`` are keyset cursors ``(created_at, id)`` of the last/first
        run of the neighbouring page; at most one is given. ``with_total=False`` skips the
        count (reported as -1).
        """
        conds = _conditions(filters)
        stmt = sa.select(RunRow).where(*conds)
        if newer_than is not None:
            t, rid = newer_than
            stmt = stmt.where(sa.tuple_(RunRow.created_at, RunRow.id) > sa.tuple_(t, rid))
            stmt = stmt.order_by(RunRow.created_at.asc(), RunRow.id.asc())
        else:
            if older_than is not None:
                t, rid = older_than
                stmt = stmt.where(sa.tuple_(RunRow.created_at, RunRow.id) < sa.tuple_(t, rid))
            stmt = stmt.order_by(RunRow.created_at.desc(), RunRow.id.desc())
        stmt = stmt.limit(limit + 1)
        count = sa.select(sa.func.count()).select_from(RunRow).where(*conds)
        with self._db.session(write=False) as session:
            rows = list(session.scalars(stmt))
            total = int(session.scalar(count) or 0) if with_total else -1
            more = len(rows) > limit
            rows = rows[:limit]
            if newer_than is not None:
                rows.reverse()
            return [self._run_info(r) for r in rows], total, more

    def sample_progress(self, run_ids: list[str]) -> dict[str, dict[str, dict[str, list[int]]]]:
        """``{run_id: {suite: {endpoint: [stored, errored]}}}`` of the runs' samples (one
        GROUP BY on the ``(run_id, suite)`` index)."""
        if not run_ids:
            return {}
        stmt = (
            sa.select(
                SampleRow.run_id,
                SampleRow.suite,
                SampleRow.endpoint,
                sa.func.count(),
                sa.func.count(SampleRow.error),
            )
            .where(SampleRow.run_id.in_(run_ids))
            .group_by(SampleRow.run_id, SampleRow.suite, SampleRow.endpoint)
        )
        out: dict[str, dict[str, dict[str, list[int]]]] = defaultdict(lambda: defaultdict(dict))
        with self._db.session(write=False) as session:
            for run_id, suite, endpoint, n, errors in session.execute(stmt):
                out[run_id][suite][endpoint] = [int(n), int(errors)]
        return {k: dict(v) for k, v in out.items()}

    def gate_rows(self, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The gate outcomes of several runs: ``{run_id: [payload, ...]}`` (the list's badges)."""
        if not run_ids:
            return {}
        stmt = (
            sa.select(GateResultRow.run_id, GateResultRow.payload)
            .where(GateResultRow.run_id.in_(run_ids))
            .order_by(GateResultRow.id)
        )
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        with self._db.session(write=False) as session:
            for run_id, payload in session.execute(stmt):
                out[run_id].append(dict(payload))
        return dict(out)

    def gate_history(
        self, *, baseline_url: str, suite: str, limit: int = 500
    ) -> list[dict[str, Any]]:
        """Completed gates of ``suite`` in runs with this baseline, oldest first:
        ``[{"run_id", "created_at", "schedule_id", "payload"}]`` (the caller picks the
        candidate URL)."""
        stmt = (
            sa.select(
                GateResultRow.run_id, RunRow.created_at, RunRow.schedule_id, GateResultRow.payload
            )
            .join(RunRow, RunRow.id == GateResultRow.run_id)
            .where(
                RunRow.baseline_url == _queue.normalize_url(baseline_url),
                GateResultRow.suite == suite,
                RunRow.status == RunStatus.completed.value,
            )
            .order_by(RunRow.created_at.desc(), RunRow.id.desc())
            .limit(limit)
        )
        with self._db.session(write=False) as session:
            rows = [
                {"run_id": r, "created_at": t, "schedule_id": sid, "payload": dict(p)}
                for r, t, sid, p in session.execute(stmt)
            ]
        rows.reverse()
        return rows

    def gate_pairs(self, *, limit: int = 200) -> list[dict[str, Any]]:
        """Distinct (baseline URL, candidate URL, suite) with completed gates, most recent
        first: ``[{"baseline_url", "candidate_url", "suite", "runs", "last", "run_id"}]``
        (``run_id``: one run of the pair, whose endpoint snapshots label it)."""
        cand_url = GateResultRow.payload["candidate_url"].as_string()
        stmt = (
            sa.select(
                RunRow.baseline_url,
                cand_url,
                GateResultRow.suite,
                sa.func.count(),
                sa.func.max(RunRow.created_at),
                sa.func.max(RunRow.id),
            )
            .join(RunRow, RunRow.id == GateResultRow.run_id)
            .where(RunRow.status == RunStatus.completed.value)
            .group_by(RunRow.baseline_url, cand_url, GateResultRow.suite)
            .order_by(sa.func.max(RunRow.created_at).desc())
            .limit(limit)
        )
        with self._db.session(write=False) as session:
            return [
                {
                    "baseline_url": b,
                    "candidate_url": c,
                    "suite": s,
                    "runs": int(n),
                    "last": last,
                    "run_id": run_id,
                }
                for b, c, s, n, last, run_id in session.execute(stmt)
            ]
