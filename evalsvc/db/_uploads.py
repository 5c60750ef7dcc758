"""Uploaded logs waiting for a worker (``POST /gate-logs``): ``log_uploads`` + ``log_upload_chunks``.

Contract: :meth:`LogUploadStore.create_run` stores a queued run and its uploaded files in ONE
transaction (a worker can never claim the run before its files are there), reading each file
object in chunks of ``CHUNK_BYTES`` and inserting each chunk as it is read: neither the API nor
the database driver holds more than a chunk of an upload at a time. With ``max_pending`` it
counts the submitter's waiting uploads in that same transaction, under a lock per submitter
(PostgreSQL: a transaction-scoped advisory lock on the submitter; SQLite: the ``BEGIN
IMMEDIATE`` writer lock), so concurrent uploads of one token never pass the quota together
(``PendingUploadsFull``). :meth:`pending` counts a submitter's uploads still queued or running;
:meth:`purge_ended` drops the files of runs that ended without a worker dropping them. A run
that ends without its worker (cancelled: ``RunStore.cancel_run``; given up by the reaper:
``_queue.reap_expired``) has its files dropped in the transaction that ends it
(``_queue.drop_uploads``), so a cancelled upload's bytes do not wait for the next upload.
:meth:`write_files` copies a run's files to a directory, a chunk at a time (the worker reads them
from there); :meth:`delete` drops them once the run has ended. Rows also go with their run
(``ON DELETE CASCADE``).

Why the database and not a shared directory: a worker may run on another host (PostgreSQL
deployments); it reaches the database already, and a run and its files then commit together.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa

from evalsvc.domain import RunInfo, RunSpec, RunStatus

from ._orm import LogUploadChunkRow, LogUploadRow, RunRow, utcnow
from ._rows import run_info
from ._runs import add_run_row
from ._session import Database

#: Bytes per stored chunk: large enough that a 64 MiB upload is 64 rows, small enough that one
#: chunk in memory (and in the driver's buffers) is negligible.
CHUNK_BYTES = 1 << 20

__all__ = ["CHUNK_BYTES", "LogUploadStore", "PendingUploadsFull"]


class PendingUploadsFull(Exception):
    """The submitter already has ``max_pending`` uploads queued or running."""


def _submitter(submitted_by: str | None) -> sa.ColumnElement[bool]:
    return (
        LogUploadRow.submitted_by.is_(None)
        if submitted_by is None
        else LogUploadRow.submitted_by == submitted_by
    )


def _count_pending(session: Any, submitted_by: str | None) -> int:
    count = session.scalar(
        sa.select(sa.func.count())
        .select_from(LogUploadRow)
        .join(RunRow, RunRow.id == LogUploadRow.run_id)
        .where(
            _submitter(submitted_by),
            RunRow.status.in_([RunStatus.queued.value, RunStatus.running.value]),
        )
    )
    return int(count or 0)


class LogUploadStore:
    """Uploaded log files, stored with their queued run until a worker has gated them."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create_run(
        self,
        spec: RunSpec,
        *,
        files: Sequence[tuple[str, str, IO[bytes]]],
        params: dict[str, Any],
        submitted_by: str | None,
        max_pending: int | None = None,
    ) -> RunInfo:
        """Queue a run for ``spec`` with ``files`` (``(role, name, readable)``) and the gate
        options ``params``; one transaction (module docstring). ``max_pending``: refuse with
        ``PendingUploadsFull`` when the submitter already has that many uploads waiting,
        counted in this transaction, before any byte is stored."""
        now = utcnow()
        with self._db.session() as session:
            if max_pending is not None:
                if self._db.dialect == "postgresql":
                    # Two uploads of one token count, then insert: without a lock both would
                    # see the same count under READ COMMITTED (24 parallel uploads: 18 stored
                    # against a quota of 16). Held until this transaction ends.
                    session.execute(sa.select(sa.func.pg_advisory_xact_lock(
                        sa.func.hashtextextended(f"evalsvc-upload:{submitted_by or ''}", 0))))
                if _count_pending(session, submitted_by) >= max_pending:
                    raise PendingUploadsFull(max_pending)
            row = add_run_row(
                session, spec, status=RunStatus.queued, now=now, schedule_id=None, fire_time=None
            )
            row.submitted_by = submitted_by
            upload = LogUploadRow(
                run_id=row.id,
                submitted_by=submitted_by,
                params=params,
                files=[],
                total_bytes=0,
                created_at=now,
            )
            session.add(upload)
            session.flush()
            listing, total = [], 0
            for file_no, (role, name, stream) in enumerate(files):
                size, seq = 0, 0
                while chunk := stream.read(CHUNK_BYTES):
                    # Core inserts: the ORM's identity map would keep every chunk alive.
                    session.execute(
                        sa.insert(LogUploadChunkRow).values(
                            run_id=row.id, file_no=file_no, seq=seq, data=chunk
                        )
                    )
                    size += len(chunk)
                    seq += 1
                listing.append({"role": role, "name": name, "size": size})
                total += size
            upload.files = listing
            upload.total_bytes = total
            session.flush()
            return run_info(row)

    def pending(self, submitted_by: str | None) -> int:
        """Uploads of ``submitted_by`` whose run is still queued or running."""
        with self._db.session(write=False) as session:
            return _count_pending(session, submitted_by)

    def purge_ended(self) -> int:
        """Drop the files of uploads whose run has ended without a worker dropping them (a
        queued upload cancelled, a run deleted from under a worker); returns how many."""
        ended = sa.select(RunRow.id).where(
            RunRow.status.not_in([RunStatus.queued.value, RunStatus.running.value])
        )
        with self._db.session() as session:
            session.execute(
                sa.delete(LogUploadChunkRow).where(LogUploadChunkRow.run_id.in_(ended))
            )
            result = session.execute(sa.delete(LogUploadRow).where(LogUploadRow.run_id.in_(ended)))
            return int(getattr(result, "rowcount", 0))

    def manifest(self, run_id: str) -> dict[str, Any] | None:
        """``{"params", "files", "submitted_by", "total_bytes"}`` of a run's upload; None when the
        run has none (not an upload, or already gated)."""
        with self._db.session(write=False) as session:
            row = session.get(LogUploadRow, run_id)
            if row is None:
                return None
            return {
                "params": dict(row.params),
                "files": list(row.files),
                "submitted_by": row.submitted_by,
                "total_bytes": row.total_bytes,
            }

    def has_upload(self, run_id: str) -> bool:
        """Whether the run is an upload still waiting to be gated."""
        with self._db.session(write=False) as session:
            found = session.scalar(
                sa.select(LogUploadRow.run_id).where(LogUploadRow.run_id == run_id)
            )
            return found is not None

    def write_files(self, run_id: str, directory: Path) -> list[tuple[str, Path]]:
        """Copy the run's files to ``directory/<role>/<name>``, a chunk per query; returns
        ``(role, path)`` in upload order (empty when the run has no upload)."""
        manifest = self.manifest(run_id)
        if manifest is None:
            return []
        out = []
        for file_no, entry in enumerate(manifest["files"]):
            target = directory / str(entry["role"]) / Path(str(entry["name"])).name
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as fh:
                seq = 0
                while True:
                    with self._db.session(write=False) as session:
                        data = session.scalar(
                            sa.select(LogUploadChunkRow.data).where(
                                LogUploadChunkRow.run_id == run_id,
                                LogUploadChunkRow.file_no == file_no,
                                LogUploadChunkRow.seq == seq,
                            )
                        )
                    if data is None:
                        break
                    fh.write(data)
                    seq += 1
            out.append((str(entry["role"]), target))
        return out

    def delete(self, run_id: str) -> None:
        """Drop a run's uploaded files (the chunks go with the row)."""
        with self._db.session() as session:
            session.execute(
                sa.delete(LogUploadChunkRow).where(LogUploadChunkRow.run_id == run_id)
            )
            session.execute(sa.delete(LogUploadRow).where(LogUploadRow.run_id == run_id))
