"""The worker loop: reap, (fire schedules), claim, execute under a lease, settle.

Contract with the executor (``evalsvc.services.runs.execute_stored_run`` by default):
- it is called as ``executor(store, run, cancel, worker_id)`` in a worker thread;
- it resumes from ``store.done_keys(run.id)`` and ends a run it completes with
  ``store.finish_run(..., worker_id=worker_id)``;
- when ``cancel`` is set (user cancel, lease lost, or worker shutdown) it stops starting new
  requests, lets in-flight ones finish and write their samples, and RETURNS WITHOUT calling
  ``finish_run``: the worker decides what happens to the run (released back to the queue on
  shutdown; nothing on cancel or lost lease, since the database already says what happened).
The worker settles what the executor left: an exception marks the run ``error``; returning
without finishing (and without a cancel) is also an ``error``, never a silent pass.

After settling a run it finished (not one released or whose lease was lost), the worker calls
``after_run(store, run_id, worker_id)`` (default with the default executor:
``evalsvc.services.alerts.after_run``, which raises and delivers the run's alerts and never
raises); the run's verdict is stored before it.

On shutdown the worker waits ``shutdown_grace_seconds`` for executions to return; one that
ignores its cancel that long (a suite still planning) has its run released to the queue, and
the worker stops anyway. A failure to fire schedules is logged and never stops the loop.

Sweeps (``store.sweeps``, queued by ``POST /api/v1/sweeps`` and sweep schedules) are claimed when
no run is claimable and executed by the sweep executor
(``evalsvc.services.sweeps.execute_stored_sweep`` by default; same call shape, a sweep dict in
place of the run), which finishes the sweep itself (``store.sweeps.finish_sweep``) and stops
between configurations when ``cancel`` is set. They are settled like runs: an exception or a
return without finishing is ``error``; on shutdown the sweep goes back to the queue (and starts
again from its first configuration).

One heartbeat thread per worker (``evalsvc.db.Leases``) extends the leases of its executing runs
every ``lease_seconds / 3`` (a second one those of its sweeps). If a heartbeat says the lease is
lost (reaped, or the run was cancelled), or the database has been unreachable for longer than a
lease, that run's ``cancel`` event is set.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalsvc.db import DatabaseUnavailable, Leases, Store, StoreError, retry_transient
from evalsvc.domain import RunInfo, RunStatus

from ._cron import Scheduler

log = logging.getLogger(__name__)

Executor = Callable[[Store, RunInfo, threading.Event, str], None]
SweepExecutor = Callable[[Store, dict[str, Any], threading.Event, str], None]


def default_executor(store: Store, run: RunInfo, cancel: threading.Event, worker_id: str) -> None:
    """Run ``evalsvc.services.runs.execute_stored_run`` (imported lazily: the service layer
    pulls in the runner, suites and HTTP clients, which the queue itself does not need).
    A run with stored uploads (``POST /gate-logs``) is gated by
    ``evalsvc.services.gatelogs.execute_upload_run`` instead: only the upload route stores
    uploads, so no client can make another run take that path."""
    if store.log_uploads.has_upload(run.id):
        from evalsvc.services.gatelogs import execute_upload_run  # type: ignore[import-not-found,unused-ignore]

        execute_upload_run(store, run, cancel=cancel, worker_id=worker_id)
        return
    from evalsvc.services.runs import execute_stored_run  # type: ignore[import-not-found,unused-ignore]

    execute_stored_run(store, run, cancel=cancel, worker_id=worker_id)


def default_after_run(store: Store, run_id: str, worker_id: str) -> None:
    """Raise and deliver the alerts of a run the worker finished
    (``evalsvc.services.alerts.after_run``, imported lazily as above; it never raises), then,
    when ``EVALSVC_ATTEST_KEY`` is set, write its signed verdict
    (``evalsvc.services.attest.write_after_run``; it never raises either)."""
    from evalsvc.services.alerts import after_run  # type: ignore[import-not-found,unused-ignore]
    from evalsvc.services.attest import write_after_run  # type: ignore[import-not-found,unused-ignore]

    after_run(store, run_id, owner=worker_id)
    write_after_run(store, run_id)


def default_sweep_executor(
    store: Store, sweep: dict[str, Any], cancel: threading.Event, worker_id: str
) -> None:
    """Run ``evalsvc.services.sweeps.execute_stored_sweep`` (imported lazily, as above)."""
    from evalsvc.services.sweeps import execute_stored_sweep  # type: ignore[import-not-found,unused-ignore]

    execute_stored_sweep(store, sweep, cancel=cancel, worker_id=worker_id)


def load_executor(spec: str) -> Executor:
    """Import an executor given as ``package.module:function``."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"executor must look like 'package.module:function', got {spec!r}")
    executor: Executor = getattr(importlib.import_module(module_name), attr)
    return executor


def make_worker_id() -> str:
    """Host, pid and a random suffix: unique even when pids are reused across containers."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class _Execution:
    run: RunInfo
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    lease_lost: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def lose_lease(self) -> None:
        """The lease is gone (reaped, cancelled, or no heartbeat for a whole lease): stop, and
        leave the run alone (the database already says what happened to it)."""
        self.lease_lost.set()
        self.cancel.set()


@dataclass
class _SweepExecution:
    sweep: dict[str, Any]
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    lease_lost: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def lose_lease(self) -> None:
        self.lease_lost.set()
        self.cancel.set()


class Worker:
    """Claims queued runs and executes up to ``concurrency`` of them at once."""

    def __init__(
        self,
        store: Store,
        *,
        executor: Executor | None = None,
        worker_id: str | None = None,
        concurrency: int = 1,
        lease_seconds: float = 60.0,
        poll_seconds: float = 2.0,
        max_attempts: int = 3,
        scheduler: Scheduler | None = None,
        settle_retry_seconds: float = 60.0,
        shutdown_grace_seconds: float | None = None,
        sweep_executor: SweepExecutor | None = None,
        sweeps: bool = True,
        after_run: Callable[[Store, str, str], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.store = store
        self.executor: Executor = executor or default_executor
        self.sweep_executor: SweepExecutor = sweep_executor or default_sweep_executor
        self.sweeps = sweeps
        # Alerts after each finished run: by default with the default executor only (a test's
        # executor that writes no gates has nothing to alert on).
        self.after_run = after_run or (default_after_run if executor is None else None)
        """Also claim queued sweeps (when no run is claimable)."""
        self.worker_id = worker_id or make_worker_id()
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.max_attempts = max_attempts
        self.scheduler = scheduler
        self.settle_retry_seconds = settle_retry_seconds
        self.shutdown_grace_seconds = shutdown_grace_seconds
        """After stop(), how long executions may take to return; then their runs are released
        to the queue and ``run`` returns anyway (None: wait for ever, the old behaviour)."""
        self.reap_interval = min(max(lease_seconds / 4, poll_seconds), 15.0)
        self._last_reap: float | None = None
        self.executed = 0
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._active: dict[str, _Execution | _SweepExecution] = {}
        # Reentrant: stop() runs in a signal handler, which may interrupt the main thread
        # while it holds this lock.
        self._lock = threading.RLock()
        self._leases = Leases(
            store, owner=self.worker_id, lease_seconds=lease_seconds, give_up_after=lease_seconds
        )
        self._sweep_leases = Leases(
            store, owner=self.worker_id, lease_seconds=lease_seconds,
            give_up_after=lease_seconds, renew=store.sweeps.heartbeat,
        )

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM): stop claiming, ask executing runs to stop; their
        leases are released when they return. Safe to call from a signal handler."""
        self._stopping.set()
        with self._lock:
            for execution in self._active.values():
                execution.cancel.set()
        self._wake.set()

    # ------------------------------------------------------------------ main loop

    def run(self, *, once: bool = False, max_runs: int | None = None) -> int:
        """Work until stopped; returns the number of runs executed.

        ``once``: exit as soon as nothing is executing and nothing can be claimed.
        ``max_runs``: claim at most this many runs, then exit when they are done.
        """
        claimed = 0
        log.info(
            "worker %s started (concurrency %d, lease %.0fs)",
            self.worker_id,
            self.concurrency,
            self.lease_seconds,
        )
        self._leases.start()
        self._sweep_leases.start()
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                queue_empty = False
                try:
                    self._housekeeping()
                    while (
                        self._free_slots() > 0
                        and not self._stopping.is_set()
                        and (max_runs is None or claimed < max_runs)
                    ):
                        run = self.store.claim_run(
                            worker_id=self.worker_id, lease_seconds=self.lease_seconds
                        )
                        if run is None:
                            sweep = self._claim_sweep()
                            if sweep is None:
                                queue_empty = True
                                break
                            claimed += 1
                            self._start_sweep(sweep)
                            continue
                        claimed += 1
                        self._start(run)
                except DatabaseUnavailable as err:
                    # Keep executing what we have; claims resume when the database is back.
                    log.warning("worker %s: database unavailable: %s", self.worker_id, err)
                idle = self._free_slots() == self.concurrency
                if idle and (
                    (once and queue_empty) or (max_runs is not None and claimed >= max_runs)
                ):
                    break
                self._wake.wait(self.poll_seconds)
        finally:
            self.stop()
            self._join_all(self.shutdown_grace_seconds)
            self._leases.close()
            self._sweep_leases.close()
            log.info("worker %s stopped after %d runs", self.worker_id, self.executed)
        return self.executed

    def _housekeeping(self) -> None:
        # Reaping is a write; leases expire on a scale of lease_seconds, so checking every
        # loop iteration (up to hundreds per second when busy) would only add contention.
        now = time.monotonic()
        if self._last_reap is None or now - self._last_reap >= self.reap_interval:
            self._last_reap = now
            reaped = self.store.reap_expired(max_attempts=self.max_attempts)
            if self.sweeps:
                reaped += self.store.sweeps.reap_expired(max_attempts=self.max_attempts)
            if reaped:
                log.info("reaped expired leases: %s", ", ".join(reaped))
        if self.scheduler is not None:
            try:
                self.scheduler.maybe_tick()
            except DatabaseUnavailable:
                raise
            except Exception:  # noqa: BLE001 - firing schedules never stops executing runs
                log.exception("worker %s: firing schedules failed; retrying later", self.worker_id)

    def _free_slots(self) -> int:
        with self._lock:
            return self.concurrency - len(self._active)

    def _join_all(self, grace_seconds: float | None = None) -> None:
        deadline = None if grace_seconds is None else time.monotonic() + grace_seconds
        while True:
            with self._lock:
                threads = [e.thread for e in self._active.values() if e.thread is not None]
            if not threads:
                return
            for thread in threads:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                thread.join(left)
            if deadline is not None and time.monotonic() >= deadline:
                self._abandon_stuck()
                return

    def _abandon_stuck(self) -> None:
        """Executions that ignored the cancel for the whole grace (a suite still planning, a
        call that never yields): release their runs to the queue so another worker resumes
        them from the stored samples, and leave the daemon threads to die with the process."""
        with self._lock:
            stuck = [e for e in self._active.values() if not e.done.is_set()]
        for execution in stuck:
            execution.lease_lost.set()  # the thread must not settle the run if it ever returns
            if isinstance(execution, _SweepExecution):
                try:
                    self.store.sweeps.release_sweep(execution.sweep["id"], worker_id=self.worker_id)
                except StoreError as err:
                    log.error("sweep %s: could not release (%s)", execution.sweep["id"], err)
                continue
            try:
                self.store.release_run(execution.run.id, worker_id=self.worker_id)
                log.warning(
                    "run %s did not stop within %.0fs of the shutdown; released to the queue",
                    execution.run.id,
                    self.shutdown_grace_seconds or 0,
                )
            except StoreError as err:
                log.error("run %s: could not release (%s); the reaper will", execution.run.id, err)

    # ------------------------------------------------------------------ one run

    def _start(self, run: RunInfo) -> None:
        execution = _Execution(run=run)
        execution.thread = threading.Thread(
            target=self._execute, args=(execution,), name=f"run-{run.id[:8]}", daemon=True
        )
        with self._lock:
            self._active[run.id] = execution
        self._leases.hold(run.id, on_lost=execution.lose_lease)
        log.info("worker %s claimed run %s (attempt %d)", self.worker_id, run.id, run.attempts)
        execution.thread.start()

    def _execute(self, execution: _Execution) -> None:
        failure: BaseException | None = None
        try:
            self.executor(self.store, execution.run, execution.cancel, self.worker_id)
        except BaseException as err:  # noqa: BLE001 - any failure of a run is recorded on it
            failure = err
            log.exception("run %s failed in worker %s", execution.run.id, self.worker_id)
        finally:
            execution.done.set()
            self._leases.drop(execution.run.id)
        try:
            self._settle(execution, failure)
            self._log_outcome(execution.run.id)
            # Not on shutdown: the run went back to the queue, and a webhook's retries must
            # not hold the worker past its grace.
            if self.after_run is not None and not (execution.lease_lost.is_set()
                                                   or self._stopping.is_set()):
                self.after_run(self.store, execution.run.id, self.worker_id)
        except StoreError as err:
            # Could not record the outcome: the lease will expire and the reaper re-queues the
            # run; resume then skips the samples already stored.
            log.error(
                "run %s: could not settle (%s); leaving it to the reaper", execution.run.id, err
            )
        finally:
            with self._lock:
                self._active.pop(execution.run.id, None)
                self.executed += 1
            self._wake.set()

    def _log_outcome(self, run_id: str) -> None:
        """One line per executed run, with its verdict or its error and the reason: an operator
        reading the worker's log sees why a run failed (an endpoint the egress policy refuses,
        an unreachable server) without querying the API."""
        run = self.store.get_run(run_id)
        if run is None:
            return
        if run.status == RunStatus.completed:
            log.info("run %s: completed, verdict %s", run_id, run.verdict)
        elif run.status == RunStatus.queued:
            log.info("run %s: back in the queue", run_id)
        elif run.status != RunStatus.running:
            log.warning("run %s: %s: %s", run_id, run.status.value, run.error or "no reason recorded")

    def _settle(self, execution: _Execution, failure: BaseException | None) -> None:
        run_id = execution.run.id
        if execution.lease_lost.is_set():
            log.info("run %s: lease lost or run cancelled; not touching it", run_id)
            return
        if self._stopping.is_set():
            # Shutdown wins over the executor's outcome: the run goes back to the queue unless
            # the executor already finished it (release only acts on a running, owned run).
            retry_transient(
                lambda: self.store.release_run(run_id, worker_id=self.worker_id),
                retry_seconds=self.settle_retry_seconds,
            )
            log.info("run %s released back to the queue", run_id)
            return
        if failure is None:
            # A read, not a conditional write: the common case (the executor finished the run)
            # then costs no write transaction (SQLite has a single writer).
            current = retry_transient(
                lambda: self.store.get_run(run_id), retry_seconds=self.settle_retry_seconds
            )
            if (
                current is None
                or current.status != RunStatus.running
                or current.lease_owner != self.worker_id
            ):
                return
        if failure is not None:
            message = f"worker {self.worker_id}: {type(failure).__name__}: {failure}"
        else:
            message = f"worker {self.worker_id}: executor returned without finishing the run"
        finished = retry_transient(
            lambda: self.store.finish_run(
                run_id,
                status=RunStatus.error,
                verdict="error",
                error=message,
                worker_id=self.worker_id,
            ),
            retry_seconds=self.settle_retry_seconds,
        )
        if finished:
            log.warning("run %s marked error: %s", run_id, message)

    # ------------------------------------------------------------------ one sweep

    def _claim_sweep(self) -> dict[str, Any] | None:
        if not self.sweeps:
            return None
        return self.store.sweeps.claim_sweep(
            worker_id=self.worker_id, lease_seconds=self.lease_seconds
        )

    def _start_sweep(self, sweep: dict[str, Any]) -> None:
        execution = _SweepExecution(sweep=sweep)
        execution.thread = threading.Thread(
            target=self._execute_sweep, args=(execution,), name=f"sweep-{sweep['id'][:8]}",
            daemon=True,
        )
        with self._lock:
            self._active[sweep["id"]] = execution
        self._sweep_leases.hold(sweep["id"], on_lost=execution.lose_lease)
        log.info("worker %s claimed sweep %s", self.worker_id, sweep["id"])
        execution.thread.start()

    def _execute_sweep(self, execution: _SweepExecution) -> None:
        sweep_id = execution.sweep["id"]
        failure: BaseException | None = None
        try:
            self.sweep_executor(self.store, execution.sweep, execution.cancel, self.worker_id)
        except BaseException as err:  # noqa: BLE001 - any failure of a sweep is recorded on it
            failure = err
            log.exception("sweep %s failed in worker %s", sweep_id, self.worker_id)
        finally:
            execution.done.set()
            self._sweep_leases.drop(sweep_id)
        try:
            self._settle_sweep(execution, failure)
        except StoreError as err:
            log.error("sweep %s: could not settle (%s); leaving it to the reaper", sweep_id, err)
        finally:
            with self._lock:
                self._active.pop(sweep_id, None)
                self.executed += 1
            self._wake.set()

    def _settle_sweep(self, execution: _SweepExecution, failure: BaseException | None) -> None:
        sweep_id = execution.sweep["id"]
        if execution.lease_lost.is_set():
            return
        sweeps = self.store.sweeps
        if self._stopping.is_set():
            retry_transient(lambda: sweeps.release_sweep(sweep_id, worker_id=self.worker_id),
                            retry_seconds=self.settle_retry_seconds)
            return
        if failure is not None:
            message = f"worker {self.worker_id}: {type(failure).__name__}: {failure}"
        else:
            message = f"worker {self.worker_id}: executor returned without finishing the sweep"
        # Only acts while the sweep is still running under this worker's lease.
        if retry_transient(
            lambda: sweeps.finish_sweep(sweep_id, status=RunStatus.error, error=message,
                                        worker_id=self.worker_id),
            retry_seconds=self.settle_retry_seconds,
        ):
            log.warning("sweep %s marked error: %s", sweep_id, message)
