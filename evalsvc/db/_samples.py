"""The sample aggregate: one row per (run, endpoint, suite, item, repeat).

Contract: samples go in and come out as ``evalsvc.domain.Sample``; the columns are
``_rows.SAMPLE_KEY`` + ``_rows.SAMPLE_VALUES`` (the export lays out the same list). Writes are
idempotent: a stored sample without error is never overwritten, an errored one is replaced (how
a retried item's result lands). Batching is the caller's: ``SampleWriter`` owns it.
``sample_page`` reads a run's samples in pages (keyset on the row id), so a reader of a large
run never holds it whole.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from evalsvc.domain import Sample

from ._orm import SampleRow, utcnow
from ._rows import SAMPLE_KEY, SAMPLE_VALUES, dialect_insert, sample, sample_row
from ._session import Database

# Rows per executemany call: bounds the driver's parameter buffers for a large batch.
_SAMPLE_CHUNK = 500


class SampleStore:
    """The samples of runs."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def add_samples(
        self, run_id: str, samples: Sequence[Sample], *, replace: bool = False
    ) -> None:
        """Insert samples; idempotent on (run, endpoint, suite, item, repeat).

        A stored sample WITHOUT error is never overwritten (a resumed or duplicate writer
        cannot change recorded results). A stored errored sample is replaced: that is how a
        retried item's result lands. ``replace=True`` overwrites any stored sample of the same
        key: the runner's own rescoring of a sample once both sides answered
        (``Suite.after_pairs``: a judge's verdict, a similarity), through
        ``SampleWriter.put_replacing`` only.
        """
        if not samples:
            return
        now = utcnow()
        # Within one call, the last sample for a key wins (ON CONFLICT cannot touch a row twice
        # in one statement on PostgreSQL).
        unique = {s.key: s for s in samples}
        rows = [sample_row(run_id, s, now) for s in unique.values()]
        table = SampleRow.__table__
        stmt = dialect_insert(self._db, table)
        stmt = stmt.on_conflict_do_update(
            index_elements=list(SAMPLE_KEY),
            set_={c: stmt.excluded[c] for c in (*SAMPLE_VALUES, "created_at")},
            where=None if replace else table.c.error.is_not(None),
        )
        with self._db.session() as session:
            # One statement executed with many parameter sets: compiled once and cached, the
            # driver batches the rows. A multi-row VALUES built per call was compiled anew
            # every time (one bind parameter per cell: ~2 ms of CPU per sample, 90 % of the
            # write; docs/benchmarks.md, "The store at scale").
            for start in range(0, len(rows), _SAMPLE_CHUNK):
                session.execute(stmt, rows[start : start + _SAMPLE_CHUNK])

    def get_samples(
        self, run_id: str, *, suite: str | None = None, endpoint: str | None = None
    ) -> list[Sample]:
        """Samples of a run in the order they were first written."""
        stmt = sa.select(SampleRow).where(SampleRow.run_id == run_id).order_by(SampleRow.id)
        if suite is not None:
            stmt = stmt.where(SampleRow.suite == suite)
        if endpoint is not None:
            stmt = stmt.where(SampleRow.endpoint == endpoint)
        with self._db.session(write=False) as session:
            return [sample(row) for row in session.scalars(stmt)]

    def sample_page(
        self,
        run_id: str,
        *,
        suite: str | None = None,
        after: int = 0,
        limit: int = 1000,
    ) -> tuple[list[Sample], int]:
        """At most ``limit`` samples of a run (of one suite) written after the cursor ``after``,
        in the order of ``get_samples``, and the cursor of the next page (``after`` again when
        none is left). A caller reads a run of any size page by page in bounded memory; each
        page is its own short read transaction."""
        stmt = (
            sa.select(SampleRow)
            .where(SampleRow.run_id == run_id, SampleRow.id > after)
            .order_by(SampleRow.id)
            .limit(max(1, limit))
        )
        if suite is not None:
            stmt = stmt.where(SampleRow.suite == suite)
        with self._db.session(write=False) as session:
            rows = list(session.scalars(stmt))
            return [sample(row) for row in rows], (rows[-1].id if rows else after)

    def count_samples(self, run_id: str) -> dict[str, int]:
        """``{"total": n, "errors": m}`` without loading the samples."""
        stmt = sa.select(
            sa.func.count(),
            sa.func.count(SampleRow.error),
        ).where(SampleRow.run_id == run_id)
        with self._db.session(write=False) as session:
            total, errors = session.execute(stmt).one()
            return {"total": int(total), "errors": int(errors)}

    def done_keys(self, run_id: str) -> set[tuple[str, str, str, int]]:
        """``Sample.key`` of stored samples without error: what a resumed run can skip."""
        stmt = sa.select(
            SampleRow.endpoint, SampleRow.suite, SampleRow.item_id, SampleRow.repeat
        ).where(SampleRow.run_id == run_id, SampleRow.error.is_(None))
        with self._db.session(write=False) as session:
            return {(e, s, i, int(r)) for e, s, i, r in session.execute(stmt)}
