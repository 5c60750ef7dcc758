"""Persistence of evalsvc: the store, its migrations, the run queue, leases, the sample writer.

Contract: everything above this package sees domain objects (``evalsvc.domain``) and plain
dicts, never ORM rows or SQLAlchemy errors. ``Store`` is the only entry point to the database;
the queue (claim/heartbeat/release/reap) is part of it because runs ARE the queue.
May import: ``evalsvc.domain``, ``evalsvc.settings``. Must not import the runner, suites,
services or views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The errors are light and every layer catches them; the rest (SQLAlchemy, alembic) loads on
# first use, so ``from evalsvc.db import StoreError`` keeps ``evalsvc --help`` fast.
from ._errors import (
    Conflict,
    DatabaseConfigError,
    DatabaseNotAtHead,
    DatabaseUnavailable,
    DatabaseWriteRefused,
    InvalidData,
    StoreError,
)

if TYPE_CHECKING:
    from ._dashboard_queries import DashboardQueries, RunFilters
    from ._export import EXPORT_FORMATS, ExportFormat, export_samples, samples_frame
    from ._lease import Leases
    from ._metrics import GateFigure, Histogram, MetricsSnapshot, metrics_snapshot
    from ._queue import IN_PROCESS_PREFIX
    from ._session import redact_url
    from ._store import API_SCOPES, Store
    from ._uploads import PendingUploadsFull
    from ._writer import BATCH_SIZE, SampleWriter, retry_transient

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
    "PendingUploadsFull",
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

#: Where each lazily loaded name lives: SQLAlchemy and alembic load with the first of them,
#: pandas/pyarrow only for exports.
_LAZY = {
    "DashboardQueries": "_dashboard_queries",
    "RunFilters": "_dashboard_queries",
    "EXPORT_FORMATS": "_export",
    "ExportFormat": "_export",
    "export_samples": "_export",
    "samples_frame": "_export",
    "Leases": "_lease",
    "GateFigure": "_metrics",
    "Histogram": "_metrics",
    "MetricsSnapshot": "_metrics",
    "metrics_snapshot": "_metrics",
    "IN_PROCESS_PREFIX": "_queue",
    "redact_url": "_session",
    "PendingUploadsFull": "_uploads",
    "API_SCOPES": "_store",
    "Store": "_store",
    "BATCH_SIZE": "_writer",
    "SampleWriter": "_writer",
    "retry_transient": "_writer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
