"""Retrying writes, and the buffered sample writer the runner uses.

Contract: ``SampleWriter`` owns the batching of samples (``BATCH_SIZE``, or the buffer's age
``flush_interval_s``) for every writer of samples: the runner's async sink (``put``) and
synchronous callers (``add``). A sample handed to it stays in memory until a write of it has
been committed; a lost database delays writes but never drops samples. A write due to the
buffer's age is one attempt (on failure it keeps buffering); a full batch, ``flush`` and
``flushed`` retry with exponential backoff up to ``retry_seconds`` and raise
``DatabaseUnavailable`` with the samples still buffered (so a runner that outpaces a lost
database stops, instead of growing its buffer without bound). The async sink writes one batch at
a time in a thread while the requests go on, and waits for the store only past ``BACKLOG``
pending samples (bounded memory whatever the database's speed).
Only ``DatabaseUnavailable`` is retried: other errors are bugs or bad data, and retrying them
would only hide them; ``DatabaseWriteRefused`` (read-only, disk full) is raised at once, with
the number of samples still buffered.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
    wait_random,
)

from evalsvc.domain import Sample

from ._errors import DatabaseUnavailable, DatabaseWriteRefused
from ._store import Store

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_RETRY_SECONDS = 300.0
#: Samples per write: one transaction per 32 samples keeps SQLite's single writer lock short
#: while the per-commit cost (an fsync) stays a small share of a run's time.
BATCH_SIZE = 32
#: Pending samples past which the async sink waits for the write in flight: a synchronous
#: commit on the event loop (or a wait on every full batch) stalled the requests in flight
#: (docs/benchmarks.md, "Evaluator speed"); each pending sample is one response held in memory.
BACKLOG = 2048


def retry_transient(
    fn: Callable[[], T], *, retry_seconds: float = DEFAULT_RETRY_SECONDS, max_wait: float = 10.0
) -> T:
    """Call ``fn`` until it stops raising DatabaseUnavailable or ``retry_seconds`` pass.

    For idempotent store calls only (``add_samples``, ``save_*``, ``update_progress``,
    ``heartbeat``): a commit whose acknowledgement was lost is executed twice.
    """
    retrying = Retrying(
        retry=retry_if_exception_type(DatabaseUnavailable),
        stop=stop_after_delay(retry_seconds),
        # jitter: workers that lost the same database must not retry in lockstep
        wait=wait_exponential(multiplier=0.2, max=max_wait) + wait_random(0, 0.2),
        reraise=True,
        before_sleep=lambda state: log.warning(
            "database unavailable (attempt %d), retrying: %s",
            state.attempt_number,
            state.outcome.exception() if state.outcome else "",
        ),
    )
    return retrying(fn)


class SampleWriter:
    """Buffers samples of one run and writes them in batches.

    Thread-safe: the runner may call ``add`` from several threads. Usable as a context manager
    (flushes on exit, also on error so that completed samples are kept for resume).
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        *,
        batch_size: int = BATCH_SIZE,
        flush_interval_s: float = 2.0,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.retry_seconds = retry_seconds
        self.written = 0
        self._buffer: list[Sample] = []
        #: ids of the buffered samples that replace a stored one (``put_replacing``)
        self._replacing: set[int] = set()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # one write in flight: keeps batches in order
        self._last_flush = time.monotonic()
        self._in_flight: asyncio.Future[None] | None = None  # the async sink's write

    @property
    def pending(self) -> int:
        """Samples not yet committed."""
        with self._lock:
            return len(self._buffer)

    def _buffer_sample(self, sample: Sample) -> tuple[bool, bool]:
        """Append; return (batch full, buffer old)."""
        with self._lock:
            self._buffer.append(sample)
            full = len(self._buffer) >= self.batch_size
            old = time.monotonic() - self._last_flush >= self.flush_interval_s
        return full, old

    def add(self, sample: Sample) -> None:
        """Buffer a sample; write the buffer when it is full or ``flush_interval_s`` old (one
        attempt: during an outage the samples stay buffered for the next add or flush)."""
        full, old = self._buffer_sample(sample)
        if full or old:
            self._write_deferring()

    async def put(self, sample: Sample) -> None:
        """The runner's sink: buffer a sample; a full batch (written with retries) or an old
        buffer (one attempt) goes to the store in a thread, one write at a time, while the
        caller goes on. Past ``BACKLOG`` pending samples it waits for that write; a write that
        failed raises here (or in ``flushed``). The event loop never waits on the database."""
        full, old = self._buffer_sample(sample)
        task = self._in_flight
        if task is not None and task.done():
            self._in_flight = None
            task.result()
        if (full or old) and self._in_flight is None:
            self._in_flight = asyncio.ensure_future(
                asyncio.to_thread(self.flush if full else self._write_deferring)
            )
        if self._in_flight is not None and self.pending >= BACKLOG:
            await asyncio.shield(self._in_flight)

    async def put_replacing(self, sample: Sample) -> None:
        """``put`` for a sample that replaces one of the same key put earlier (the runner's
        rescoring after both sides answered, ``Suite.after_pairs``): written after the
        samples buffered with it, so it lands over the one it replaces, whichever was first
        committed."""
        with self._lock:
            self._replacing.add(id(sample))
        await self.put(sample)

    def flush(self) -> None:
        """Write everything buffered, retrying while the database is unavailable."""
        retry_transient(self._write_once, retry_seconds=self.retry_seconds)

    def flushed(self, read: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """``read`` preceded by a flush: whoever reads the stored samples sees every one."""

        async def flushed_read() -> T:
            task, self._in_flight = self._in_flight, None
            if task is not None:
                await task
            await asyncio.to_thread(self.flush)
            return await read()

        return flushed_read

    def _write_deferring(self) -> None:
        try:
            self._write_once()
        except DatabaseUnavailable as err:
            # Keep running; the samples stay buffered for the next write or flush().
            log.warning("sample write deferred (%d buffered): %s", self.pending, err)

    def _write_once(self) -> None:
        with self._write_lock:
            with self._lock:
                batch = list(self._buffer)
            with self._lock:
                later = [s for s in batch if id(s) in self._replacing]
            if batch:
                plain = [s for s in batch if id(s) not in self._replacing] if later else batch
                try:
                    self.store.add_samples(self.run_id, plain)
                    if later:  # after the plain ones: a replacement lands over its original
                        self.store.add_samples(self.run_id, later, replace=True)
                except DatabaseWriteRefused as err:
                    # Not retried: a full disk or a read-only database does not heal in the
                    # retry window, and waiting only delays the one-line error.
                    raise DatabaseWriteRefused(
                        f"{err} ({self.pending} samples of run {self.run_id} not saved)"
                    ) from err
            with self._lock:
                # Only what was written leaves the buffer; add() may have appended meanwhile.
                del self._buffer[: len(batch)]
                self._replacing.difference_update(id(s) for s in later)
                self.written += len(batch)
                self._last_flush = time.monotonic()

    def __enter__(self) -> SampleWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.flush()
