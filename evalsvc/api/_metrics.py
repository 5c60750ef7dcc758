"""Prometheus metrics of one API app (a registry per app, so several apps can share a process).

Contract: ``GET /metrics`` (no auth: aggregate counts only, the usual scrape target) exposes
- ``evalsvc_runs{status}``: runs per status, read from the store at scrape time (so it covers
  the runs of every worker and scheduler sharing the database, not just this process);
- ``evalsvc_database_up``: 1 when the database answered that query, else 0;
- ``evalsvc_api_requests_total{method,handler,status}``: requests this process served.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from evalsvc.db import Store, StoreError

log = logging.getLogger(__name__)

class RunsCollector(Collector):
    """Counts runs per status in the store when scraped."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        runs = GaugeMetricFamily(
            "evalsvc_runs",
            "Runs in the database per status.",
            labels=["status"],
        )
        up = GaugeMetricFamily("evalsvc_database_up", "1 if the database answered the scrape.")
        try:
            counts = self.store.count_runs_by_status()
        except StoreError as err:
            log.warning("metrics: cannot count runs: %s", err)
            up.add_metric([], 0)
        else:
            for name, count in counts.items():
                runs.add_metric([name], count)
            up.add_metric([], 1)
            yield runs
        yield up


def make_registry(store: Store) -> tuple[CollectorRegistry, Counter]:
    """A fresh registry with the runs collector, and the request counter registered in it."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunsCollector(store))
    requests = Counter(
        "evalsvc_api_requests",
        "HTTP requests served by this API process.",
        ["method", "handler", "status"],
        registry=registry,
    )
    return registry, requests
