"""Background loops over the store: the worker (claim, execute under a lease, settle) and the
cron scheduler (fire due schedules).

Contract: all coordination goes through ``evalsvc.db.Store`` (runs ARE the queue), so any
number of workers and schedulers on any number of hosts may share one PostgreSQL database.
May import: ``evalsvc.db``, ``evalsvc.domain``; the service layer only lazily (the default
executor).
"""

from __future__ import annotations

from ._cron import Scheduler
from ._worker import (
    Executor,
    SweepExecutor,
    Worker,
    default_executor,
    default_sweep_executor,
    load_executor,
    make_worker_id,
)

__all__ = [
    "Executor",
    "Scheduler",
    "SweepExecutor",
    "Worker",
    "default_executor",
    "default_sweep_executor",
    "load_executor",
    "make_worker_id",
]
