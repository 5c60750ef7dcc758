"""Persistence of evalsvc: the store, its migrations, the run queue, leases, the sample writer.

Contract: everything above this package sees domain objects (``evalsvc.domain``) and plain
dicts, never ORM rows or SQLAlchemy errors. ``Store`` is the only entry point to the database;
the queue (claim/heartbeat/release/reap) is part of it because runs ARE the queue.
May import: ``evalsvc.domain``, ``evalsvc.settings``. Must not import the runner, suites,
services or views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._dashboard_queries import DashboardQueries, RunFilters
from ._errors import (
    Conflict,
    DatabaseConfigError,
    DatabaseNotAtHead,
    DatabaseUnavailable,
    DatabaseWriteRefused,
    InvalidData,
    StoreError,
)
from ._lease import Leases
from ._metrics import GateFigure, Histogram, MetricsSnapshot, metrics_snapshot
from ._queue import IN_PROCESS_PREFIX
from ._session import redact_url
from ._store import API_SCOPES, Store
from ._writer import BATCH_SIZE, SampleWriter, retry_transient

if TYPE_CHECKING:
    from ._export import EXPORT_FORMATS, ExportFormat, export_samples, samples_frame

__all__ = [
    "API_SCOPES",
    "BATCH_SIZE",
    "EXPORT_FORMATS",
    "IN_PROCESS_PREFIX",
    "Conflict",
    "DashboardQueries",
    "DatabaseConfigError",
    "DatabaseNotAtHead",
    "DatabaseUnavailable",
    "DatabaseWriteRefused",
    "InvalidData",
    "Leases",
    "ExportFormat",
    "GateFigure",
    "Histogram",
    "MetricsSnapshot",
    "RunFilters",
    "SampleWriter",
    "Store",
    "StoreError",
    "export_samples",
    "metrics_snapshot",
    "redact_url",
    "retry_transient",
    "samples_frame",
]

_LAZY = {"EXPORT_FORMATS", "ExportFormat", "export_samples", "samples_frame"}


def __getattr__(name: str) -> Any:
    # pandas/pyarrow are only needed for exports; keep them out of worker and CLI start-up.
    if name in _LAZY:
        from . import _export

        return getattr(_export, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
