"""Prometheus metrics of one API app (a registry per app, so several apps can share a process).

Contract: ``GET /metrics`` (no auth: aggregates and endpoint URLs only, the usual scrape target;
URLs pass through ``evalsvc.endpoints.redact_url``, so credentials stored before the userinfo
rule never appear in a label)
is computed from the store at scrape time by one collector (``evalsvc.db.metrics_snapshot``: one
read transaction, a handful of aggregate queries), so every API replica reports the whole fleet:
every worker, scheduler and in-process ``compare`` sharing the database. When the database does
not answer, only ``evalsvc_database_up 0`` and this process's request counter are exposed.

Store-wide metrics (``docs/deploy.md`` lists them with their PromQL use):
- ``evalsvc_runs{status}``: runs per status;
- ``evalsvc_gate_verdict{baseline,candidate,suite,metric,gated,verdict}``: 1 for the verdict of
  the latest gate of each (baseline URL, candidate URL, suite), 0 for the other verdicts;
  ``evalsvc_gate_verdict_code{baseline,candidate,suite,metric,gated}``: the same verdict as the
  exit code ``compare`` uses (0 pass, 1 fail, 3 inconclusive, 4 error, 5 non-comparable);
- ``evalsvc_gate_delta``, ``evalsvc_gate_ci_lower``, ``evalsvc_gate_ci_upper``,
  ``evalsvc_gate_margin``, ``evalsvc_gate_samples``, ``evalsvc_gate_timestamp_seconds``
  ``{baseline,candidate,suite,metric}``: the numbers of that latest gate (Δ = candidate −
  baseline and its two-sided 1 − 2α interval, in the metric's units; see docs/statistics.md);
- ``evalsvc_run_duration_seconds`` (histogram): start to finish of completed runs;
- ``evalsvc_queue_wait_seconds`` (histogram): submission to first claim of every started run;
- ``evalsvc_queue_depth``, ``evalsvc_queue_oldest_seconds``: queued runs, age of the oldest;
- ``evalsvc_workers_live{kind}``: distinct lease holders with an unexpired, heartbeated lease
  (``worker`` or ``in_process``); an idle worker holds no lease and is not counted;
- ``evalsvc_endpoint_samples{endpoint}``, ``evalsvc_endpoint_errors{endpoint,kind}``: samples
  and errored samples of runs created in the last 24 hours, errors by kind (``timeout``,
  ``http_429``, ``http_5xx``, ``http_4xx``, ``malformed``, ``stream``, ``connection``,
  ``other``);
- ``evalsvc_samples_per_second``: samples written in the last 60 s, divided by 60;
- ``evalsvc_database_up``: 1 when the database answered the scrape and accepts writes
  (a no-op write, ``Store.check_writable``); 0 when it is unreachable, read-only or full.
- ``evalsvc_metrics_omitted{family}``: label sets left out of a family to bound it (below).
- ``evalsvc_alerts_open{kind,severity}``: open (unacknowledged) alerts, every kind and severity
  of ``evalsvc.services.alerts`` (zeros included: closed sets, 12 series).
Process metric: ``evalsvc_api_requests_total{method,handler,status}``.

Every label comes from a bounded set, so no client can grow the scrape (issue 37, N3: invented
methods once made 6,000 series; every log upload added 20):
- ``method``: ``evalsvc.limits.HTTP_METHODS``, any other ``other``; ``handler``: the route's
  handler function (a template, never the raw path), ``unmatched`` when no route matched;
- endpoint families: only ``http(s)`` endpoints (a log upload's sides are not endpoints), the
  ``limits.MAX_ENDPOINT_SERIES`` with most samples by URL and the rest summed as ``other``;
- gate families: a side that is not an ``http(s)`` URL (an uploaded or local log file) is
  labelled ``log``, never by its file name; at most ``limits.MAX_GATE_SERIES`` label sets,
  newest first, the rest counted in ``evalsvc_metrics_omitted{family="gate"}``.
So a scrape holds at most 11 × MAX_GATE_SERIES + 9 × (MAX_ENDPOINT_SERIES + 1) store series
plus the fixed families, and the request counter at most (|HTTP_METHODS| + 1) × handlers ×
statuses the app answers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from evalsvc import limits
from evalsvc.db import Histogram, MetricsSnapshot, Store, StoreError, metrics_snapshot
from evalsvc.db._metrics import ERROR_KINDS, OTHER_KIND, RATE_WINDOW
from evalsvc.domain import EXIT_CODES
from evalsvc.endpoints import redact_url
from evalsvc.services.alerts import KINDS as ALERT_KINDS
from evalsvc.services.alerts import SEVERITIES as ALERT_SEVERITIES

log = logging.getLogger(__name__)

VERDICTS = ("pass", "fail", "inconclusive", "error", "non-comparable")
GATE_LABELS = ["baseline", "candidate", "suite", "metric"]
ERROR_KIND_NAMES = (*(name for name, _ in ERROR_KINDS), OTHER_KIND)
#: The label of a gate side that is a log file (``upload:<name>``, ``file://…``), not an endpoint.
LOG_SIDE = "log"
#: The endpoint label of the endpoints past ``limits.MAX_ENDPOINT_SERIES``, and the method label
#: of methods outside ``limits.HTTP_METHODS``.
OTHER = "other"


def method_label(method: str) -> str:
    """The request counter's (and the access log's) name for an HTTP method: a closed set."""
    return method if method in limits.HTTP_METHODS else OTHER


def _is_endpoint(url: str) -> bool:
    return url[:8].lower().startswith(("http://", "https://"))


def _side(url: str) -> str:
    return redact_url(url) if _is_endpoint(url) else LOG_SIDE


def _histogram(name: str, doc: str, h: Histogram) -> HistogramMetricFamily:
    buckets = [(repr(b), float(c)) for b, c in h.buckets] + [("+Inf", float(h.count))]
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=h.sum)


def snapshot_metrics(snap: MetricsSnapshot) -> Iterator[Metric]:
    """The metric families of one snapshot (pure: no I/O)."""
    runs = GaugeMetricFamily("evalsvc_runs", "Runs in the database per status.", labels=["status"])
    for status, count in snap.runs_by_status.items():
        runs.add_metric([status], count)
    yield runs

    verdict = GaugeMetricFamily(
        "evalsvc_gate_verdict",
        "1 for the verdict of the latest gate per (baseline, candidate, suite), 0 for the others.",
        labels=[*GATE_LABELS, "gated", "verdict"],
    )
    code = GaugeMetricFamily(
        "evalsvc_gate_verdict_code",
        "Latest gate verdict as compare's exit code: 0 pass, 1 fail, 3 inconclusive, 4 error, "
        "5 non-comparable.",
        labels=[*GATE_LABELS, "gated"],
    )
    numbers = {
        "delta": GaugeMetricFamily(
            "evalsvc_gate_delta", "Latest gate: candidate minus baseline (metric units).", labels=GATE_LABELS
        ),
        "ci_low": GaugeMetricFamily(
            "evalsvc_gate_ci_lower", "Latest gate: lower end of the CI of delta.", labels=GATE_LABELS
        ),
        "ci_high": GaugeMetricFamily(
            "evalsvc_gate_ci_upper", "Latest gate: upper end of the CI of delta.", labels=GATE_LABELS
        ),
        "margin": GaugeMetricFamily(
            "evalsvc_gate_margin", "Latest gate: the non-inferiority margin.", labels=GATE_LABELS
        ),
        "n": GaugeMetricFamily(
            "evalsvc_gate_samples", "Latest gate: paired items it rests on.", labels=GATE_LABELS
        ),
        "timestamp": GaugeMetricFamily(
            "evalsvc_gate_timestamp_seconds", "Latest gate: when it was stored (Unix time).", labels=GATE_LABELS
        ),
    }
    seen: set[tuple[str, ...]] = set()
    omitted = {"gate": 0, "endpoint": 0}
    # Newest first, so two URLs that differ only in credentials (or two log uploads) keep
    # their latest gate, and the bound keeps the newest gates.
    for g in sorted(snap.gates, key=lambda g: -g.timestamp):
        labels = [_side(g.baseline), _side(g.candidate), g.suite, g.metric]
        if tuple(labels) in seen:
            continue
        if len(seen) >= limits.MAX_GATE_SERIES:
            omitted["gate"] += 1
            continue
        seen.add(tuple(labels))
        gated = "true" if g.gated else "false"
        for v in VERDICTS:
            verdict.add_metric([*labels, gated, v], 1.0 if g.verdict == v else 0.0)
        code.add_metric([*labels, gated], float(EXIT_CODES.get(g.verdict, EXIT_CODES["error"])))
        for attr, family in numbers.items():
            value = getattr(g, attr)
            if value is not None:  # a gate without a CI (no pairs) has no series, not a NaN
                family.add_metric(labels, float(value))
    yield verdict
    yield code
    yield from numbers.values()

    yield _histogram(
        "evalsvc_run_duration_seconds", "Start to finish of completed runs.", snap.run_duration
    )
    yield _histogram(
        "evalsvc_queue_wait_seconds", "Submission to first claim of started runs.", snap.queue_wait
    )
    depth = GaugeMetricFamily("evalsvc_queue_depth", "Queued runs.")
    depth.add_metric([], snap.queue_depth)
    yield depth
    oldest = GaugeMetricFamily("evalsvc_queue_oldest_seconds", "Age of the oldest queued run (0 if none).")
    oldest.add_metric([], snap.oldest_queued_seconds)
    yield oldest
    workers = GaugeMetricFamily(
        "evalsvc_workers_live",
        "Distinct holders of an unexpired (heartbeated) run lease: queue workers, in-process compare.",
        labels=["kind"],
    )
    for kind, n in sorted(snap.live_workers.items()):
        workers.add_metric([kind], n)
    yield workers

    samples = GaugeMetricFamily(
        "evalsvc_endpoint_samples", "Samples of runs created in the last 24 h.", labels=["endpoint"]
    )
    errors = GaugeMetricFamily(
        "evalsvc_endpoint_errors",
        "Errored samples of runs created in the last 24 h, by kind.",
        labels=["endpoint", "kind"],
    )
    per_endpoint: dict[str, dict[str, int]] = {}
    for (url, kind), n in snap.endpoint_samples.items():
        if not _is_endpoint(url):
            continue  # a log upload's side: its samples were read from files, not served
        kinds = per_endpoint.setdefault(redact_url(url), {})
        kinds[kind] = kinds.get(kind, 0) + n  # URLs differing only in credentials add up
    if len(per_endpoint) > limits.MAX_ENDPOINT_SERIES:
        busiest = sorted(per_endpoint, key=lambda u: (-sum(per_endpoint[u].values()), u))
        other: dict[str, int] = {}
        for url in busiest[limits.MAX_ENDPOINT_SERIES:]:
            for kind, n in per_endpoint.pop(url).items():
                other[kind] = other.get(kind, 0) + n
            omitted["endpoint"] += 1
        per_endpoint[OTHER] = other
    for url, kinds in sorted(per_endpoint.items()):
        samples.add_metric([url], sum(kinds.values()))
        # Every kind, zeros included: a panel shows "no timeouts", not "no data".
        for kind in ERROR_KIND_NAMES:
            errors.add_metric([url, kind], kinds.get(kind, 0))
    yield samples
    yield errors
    rate = GaugeMetricFamily(
        "evalsvc_samples_per_second", "Samples written in the last 60 s, per second."
    )
    rate.add_metric([], snap.samples_last_window / RATE_WINDOW.total_seconds())
    yield rate
    alerts = GaugeMetricFamily(
        "evalsvc_alerts_open", "Open (unacknowledged) alerts by kind and severity.",
        labels=["kind", "severity"],
    )
    for kind in ALERT_KINDS:
        for severity in ALERT_SEVERITIES:
            alerts.add_metric([kind, severity], snap.alerts_open.get((kind, severity), 0))
    yield alerts
    left_out = GaugeMetricFamily(
        "evalsvc_metrics_omitted",
        "Label sets left out of a family to bound the scrape (gate), or summed as other "
        "(endpoint).",
        labels=["family"],
    )
    for name, n in omitted.items():
        left_out.add_metric([name], n)
    yield left_out


class StoreCollector(Collector):
    """Reads one ``MetricsSnapshot`` from the store per scrape."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "evalsvc_database_up", "1 if the database answered the scrape and accepts writes."
        )
        try:
            snap = metrics_snapshot(self.store)
        except StoreError as err:
            log.warning("metrics: cannot read the store: %s", err)
            up.add_metric([], 0)
        else:
            yield from snapshot_metrics(snap)
            try:
                self.store.check_writable()
            except StoreError as err:  # read-only or full: runs cannot be queued or stored
                log.warning("metrics: the store refuses writes: %s", err)
                up.add_metric([], 0)
            else:
                up.add_metric([], 1)
        yield up


def make_registry(store: Store) -> tuple[CollectorRegistry, Counter]:
    """A fresh registry with the store collector, and the request counter registered in it."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))
    requests = Counter(
        "evalsvc_api_requests",
        "HTTP requests served by this API process.",
        ["method", "handler", "status"],
        registry=registry,
    )
    return registry, requests
