"""The schedule loop: every ``interval_seconds``, create the runs of due cron schedules.

Contract: firing is ``Store.fire_due_schedules`` (exactly one run per schedule and fire time,
missed fires collapse to the latest one: "catch-up: latest"); this module only decides when to
call it. Any number of schedulers (standalone or inside workers) may run at once. One schedule that
cannot fire never stops the others: the store skips it with ``last_error`` set.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from evalsvc.db import DatabaseUnavailable, Store, StoreError
from evalsvc.domain import RunInfo

log = logging.getLogger(__name__)


class Scheduler:
    """Fires due schedules at most every ``interval_seconds``."""

    def __init__(self, store: Store, *, interval_seconds: float = 30.0) -> None:
        self.store = store
        self.interval_seconds = interval_seconds
        self._last_tick: float | None = None

    def tick(self, now: datetime | None = None) -> list[RunInfo]:
        """Fire what is due at ``now`` (default: the current time) and return the new runs."""
        self._last_tick = time.monotonic()
        runs = self.store.fire_due_schedules(now=now or datetime.now(UTC))
        for run in runs:
            log.info("schedule %s fired: queued run %s", run.schedule_id, run.id)
        return runs

    def maybe_tick(self) -> list[RunInfo]:
        """``tick`` if ``interval_seconds`` passed since the last one (for the worker loop)."""
        if self._last_tick is not None and (
            time.monotonic() - self._last_tick < self.interval_seconds
        ):
            return []
        return self.tick()

    def run_forever(self, stop: threading.Event, *, once: bool = False) -> int:
        """Tick until ``stop`` is set (or once); returns the number of runs created.

        An unreachable database is logged and retried at the next tick: schedules are not lost,
        since a late tick still fires the latest missed time.
        """
        created = 0
        while not stop.is_set():
            try:
                created += len(self.tick())
            except DatabaseUnavailable as err:
                if once:
                    raise
                log.warning(
                    "scheduler tick failed, retrying in %.0fs: %s", self.interval_seconds, err
                )
            except StoreError as err:
                # A bad schedule is recorded on itself by the store; anything else the database
                # says must not end the loop that fires every other schedule.
                if once:
                    raise
                log.error(
                    "scheduler tick failed, retrying in %.0fs: %s", self.interval_seconds, err
                )
            if once:
                break
            stop.wait(self.interval_seconds)
        return created
