"""Leases on running runs, renewed by one heartbeat thread per holder.

Contract: ``Leases(store, owner=..., lease_seconds=...)`` renews, every ``lease_seconds / 3``,
the lease of each run it holds (``hold``) until the run is dropped (``drop``) or the keeper is
closed. When the store refuses a renewal (the run was cancelled, or reaped and handed to
another worker) the run's ``on_lost`` is called once and the run is dropped. A renewal that
fails (the database unreachable) is retried at the next beat; with ``give_up_after`` set, a run
that has gone that long without a successful renewal counts as lost too (its lease has expired
by then, and the reaper may have handed it on). Both the queue worker (all its runs, one thread)
and the in-process ``evalsvc compare`` (its one run) use this object; ``renew`` makes it keep
leases of another aggregate (the worker's sweeps: ``store.sweeps.heartbeat``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._store import Store

log = logging.getLogger(__name__)


@dataclass
class _Held:
    on_lost: Callable[[], None]
    last_ok: float


class Leases:
    """The leases one owner (a worker id, or ``cli:<host>:<pid>``) holds, and their heartbeat."""

    def __init__(
        self,
        store: Store,
        *,
        owner: str,
        lease_seconds: float,
        give_up_after: float | None = None,
        renew: Callable[..., bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.store, self.owner, self.lease_seconds = store, owner, lease_seconds
        self.give_up_after = give_up_after
        self._renew_one = renew
        self._clock = clock  # injectable: tests step time instead of sleeping against a load
        # A third of the lease: two beats may fail (a database restart) before it expires.
        self.interval = lease_seconds / 3
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, run_id: str, *, on_lost: Callable[[], None]) -> None:
        """Renew ``run_id``'s lease from now on; ``on_lost`` when it is lost."""
        with self._lock:
            self._held[run_id] = _Held(on_lost=on_lost, last_ok=self._clock())

    def drop(self, run_id: str) -> None:
        """Stop renewing ``run_id`` (its execution returned)."""
        with self._lock:
            self._held.pop(run_id, None)

    def start(self) -> Leases:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="evalsvc-leases", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float | None = None) -> None:
        """Stop the heartbeat (waits for a renewal in flight, up to ``timeout``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> Leases:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(timeout=5)

    def renew_all(self) -> None:
        """One beat: renew every held lease (the thread calls this every ``interval``)."""
        with self._lock:
            held = list(self._held.items())
        for run_id, entry in held:
            self._renew(run_id, entry)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.renew_all()

    def _renew(self, run_id: str, entry: _Held) -> None:
        try:
            renew = self._renew_one or self.store.heartbeat
            ok = renew(run_id, worker_id=self.owner, lease_seconds=self.lease_seconds)
        except Exception as err:  # noqa: BLE001 - the database briefly down: retry at the next beat
            silent = self._clock() - entry.last_ok
            if self.give_up_after is None or silent < self.give_up_after:
                log.warning("heartbeat for run %s failed, retrying: %s", run_id, err)
                return
            log.error("run %s: no heartbeat for %.0f s; assuming its lease lost", run_id, silent)
            ok = False
        if ok:
            entry.last_ok = self._clock()
            return
        with self._lock:
            if self._held.get(run_id) is not entry:
                return  # dropped meanwhile: the execution already returned
            del self._held[run_id]
        entry.on_lost()
