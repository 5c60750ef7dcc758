"""The routers of the REST API, one module per resource, mounted under ``/api/v1``.

Contract: a route validates input with ``evalsvc.api._schemas``, calls the store or a service
function, and shapes the answer; it holds no business logic and builds no SQL. ``None`` from
the store becomes 404.
"""

from __future__ import annotations

from . import alerts, endpoints, gatelogs, health, runs, schedules, suites

__all__ = ["alerts", "endpoints", "gatelogs", "health", "runs", "schedules", "suites"]
