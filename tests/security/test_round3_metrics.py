"""Issue 37, N3: ``/metrics`` label cardinality. A client without a token grew the scrape with
invented HTTP methods (h11 accepts any token as a method): 3,000 requests with 8,000-character
methods made 6,000 series (58 KB → 48.5 MB), kept 31 MB of API memory until a restart and wrote
24 MB of access log; every gate-logs upload under a new file name added 20 permanent series.

A real ``evalsvc api serve`` process gets invented methods and paths over raw sockets; the
number of series it then exposes stays within a stated bound, no invented name reaches a label
or the access log. The store's families are checked on snapshots built to exceed their bounds
(log-upload sides, thousands of distinct URLs).
"""

from __future__ import annotations

import http.client
import random
import string
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from evalsvc import limits
from evalsvc.api._metrics import LOG_SIDE, OTHER, method_label, snapshot_metrics
from evalsvc.db import Histogram, MetricsSnapshot
from evalsvc.db._metrics import GateFigure
from tests.fixtures.apiserve import api_serve

INVENTED = 300
METHOD_CHARS = 8000
#: New series the invented requests may add: the "other" method on each handler they reached
#: (the routes they named, ``unmatched`` for the rest) with each status it answered. The paths
#: below reach at most four handlers, each answering one status for a method it does not serve.
NEW_SERIES_BOUND = 8


def _series(text: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (s.name, dict(s.labels))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def _invented_method(rng: random.Random) -> str:
    # A token (RFC 9110 tchar) h11 accepts as a method.
    return "".join(rng.choices(string.ascii_uppercase + string.digits + "-_~", k=METHOD_CHARS))


def _raw_request(port: int, method: str, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path)
        return conn.getresponse().status
    finally:
        conn.close()


def test_invented_methods_and_paths_add_a_bounded_number_of_series(
    tmp_path: Path, sqlite_template: Path
) -> None:
    db = tmp_path / "evalsvc.db"
    db.write_bytes(sqlite_template.read_bytes())
    rng = random.Random(37)
    # info: the access log is written (the default level of `evalsvc api serve`)
    with api_serve(f"sqlite:///{db}", log=tmp_path / "api.log",
                   args=("--log-level", "info")) as api:
        port = int(api.url.rsplit(":", 1)[1])
        before = httpx.get(f"{api.url}/metrics", timeout=60).text
        methods = [_invented_method(rng) for _ in range(INVENTED)]
        paths = ["/metrics", "/api/v1/healthz", "/api/v1/runs/{}", "/no/such/{}"]
        statuses = set()
        for i, method in enumerate(methods):
            path = paths[i % len(paths)].format(rng.getrandbits(64))
            statuses.add(_raw_request(port, method, path))
        # Ordinary methods on invented paths and ids: one handler or "unmatched" each.
        for _ in range(100):
            statuses.add(_raw_request(port, "GET", f"/x{rng.getrandbits(64)}/{rng.random()}"))
            statuses.add(_raw_request(port, "DELETE", f"/api/v1/runs/{rng.getrandbits(64):x}"))
        after = httpx.get(f"{api.url}/metrics", timeout=60).text
        assert api.proc.poll() is None
    log = api.log.read_text(errors="replace")

    assert statuses <= {401, 403, 404, 405}, statuses
    old, new = _series(before), _series(after)
    added = {(n, tuple(sorted(lab.items()))) for n, lab in new} - {
        (n, tuple(sorted(lab.items()))) for n, lab in old
    }
    requests = [lab for n, lab in new if n == "evalsvc_api_requests_total"]
    print(f"/metrics {len(before)} -> {len(after)} bytes, {len(old)} -> {len(new)} series "
          f"({len(added)} new) after {INVENTED} invented {METHOD_CHARS}-character methods and "
          f"200 invented paths; access log {len(log)} bytes")
    assert {lab["method"] for lab in requests} <= limits.HTTP_METHODS | {OTHER}
    assert any(lab["method"] == OTHER for lab in requests)
    # Before the fix: 2 series per invented method (the counter and its _created twin).
    assert len(added) <= 2 * NEW_SERIES_BOUND, sorted(added)
    assert len(after) < len(before) + 8_000
    assert not any(m[:40] in after for m in methods)
    # The access log names the methods' length, never the methods; 100 bytes a line or so.
    assert not any(m[:40] in log for m in methods)
    assert f"other({METHOD_CHARS} chars)" in log
    assert max(len(line) for line in log.splitlines()) < 2 * limits.MAX_LOGGED_PATH
    assert len(log) < 400 * 250


def test_the_access_log_cuts_long_paths_and_escapes_control_characters() -> None:
    import logging

    from evalsvc.api._server import BoundedAccessLog

    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:1", "PATCH", "/a\n127.0.0.1:2 - \"GET /forged\" 200" + "p" * 5000, "1.1", 404),
        None,
    )
    assert BoundedAccessLog().filter(record)
    line = record.getMessage()
    assert "\n" not in line and "\\x0a" in line and "PATCH" in line
    assert len(line) < limits.MAX_LOGGED_PATH + 100 and "chars)" in line
    assert method_label("PATCH") == "PATCH" and method_label("get") == OTHER


def _gate(i: int, baseline: str, candidate: str, suite: str) -> GateFigure:
    return GateFigure(
        baseline=baseline, candidate=candidate, suite=suite, metric="acc", verdict="pass",
        gated=True, delta=0.0, ci_low=-0.01, ci_high=0.01, margin=0.05, n=100,
        timestamp=float(i), run_id=f"r{i}",
    )


def _snapshot(gates: list[GateFigure], samples: dict[tuple[str, str], int]) -> MetricsSnapshot:
    empty = Histogram(buckets=(), count=0, sum=0.0)
    return MetricsSnapshot(
        runs_by_status={"completed": len(gates)}, gates=gates, run_duration=empty,
        queue_wait=empty, queue_depth=0, oldest_queued_seconds=0.0,
        live_workers={"worker": 0, "in_process": 0}, endpoint_samples=samples,
    )


def _store_series(snap: MetricsSnapshot) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for family in snapshot_metrics(snap):
        for s in family.samples:
            out.setdefault(s.name, []).append(dict(s.labels))
    return out


def test_log_uploads_add_no_file_name_labels_and_the_store_families_are_bounded() -> None:
    """A log upload's sides (``upload:<file name>``, a local ``file://`` path) are labelled
    ``log`` in the gate families and are not endpoints; thousands of distinct URLs and task
    names stay within ``MAX_GATE_SERIES`` label sets (the newest kept, the rest counted) and
    ``MAX_ENDPOINT_SERIES`` endpoints plus ``other`` (sums kept)."""
    uploads = 1_000
    gates = [
        _gate(i, f"upload:base-{i}.jsonl", f"file:///tmp/cand-{i}.jsonl", f"task{i % 3}")
        for i in range(uploads)
    ]
    samples = {(f"upload:base-{i}.jsonl", "ok"): 10 for i in range(uploads)}
    series = _store_series(_snapshot(gates, samples))
    labels = [lab for rows in series.values() for lab in rows]
    assert not any("base-" in v or "cand-" in v for lab in labels for v in lab.values())
    verdicts = series["evalsvc_gate_verdict"]
    # One label set per task (the newest upload of each), 5 verdicts each.
    assert {(v["baseline"], v["candidate"], v["suite"]) for v in verdicts} == {
        (LOG_SIDE, LOG_SIDE, f"task{k}") for k in range(3)
    }
    assert "evalsvc_endpoint_samples" not in series or not series["evalsvc_endpoint_samples"]

    # Distinct endpoint URLs and suites past both bounds.
    n = 2_000
    gates = [_gate(i, "http://127.0.0.1:1/v1", f"http://10.0.{i // 250}.{i % 250}:8000/v1",
                   f"suite-{i}") for i in range(n)]
    samples = {(f"http://10.1.{i // 250}.{i % 250}:8000/v1", "ok"): i + 1 for i in range(n)}
    samples[("http://10.1.0.0:8000/v1", "timeout")] = 5
    series = _store_series(_snapshot(gates, samples))
    sets = {(v["candidate"], v["suite"]) for v in series["evalsvc_gate_verdict"]}
    assert len(sets) == limits.MAX_GATE_SERIES
    assert (gates[-1].candidate, gates[-1].suite) in sets  # the newest are kept
    omitted = {lab["family"]: v for lab, v in _omitted(_snapshot(gates, samples))}
    assert omitted == {"gate": n - limits.MAX_GATE_SERIES,
                       "endpoint": n - limits.MAX_ENDPOINT_SERIES}
    endpoints = {lab["endpoint"] for lab in series["evalsvc_endpoint_samples"]}
    assert len(endpoints) == limits.MAX_ENDPOINT_SERIES + 1 and OTHER in endpoints
    total = sum(v for lab, v in _values(_snapshot(gates, samples), "evalsvc_endpoint_samples"))
    assert total == sum(samples.values())  # nothing lost: the rest is summed under "other"
    count = sum(len(rows) for rows in series.values())
    # Per gate label set: 7 gauges and the one-hot verdict over its 5 values (non-comparable
    # included); per endpoint 9; a fixed few (queue, workers, the 12 open-alert series).
    bound = 12 * limits.MAX_GATE_SERIES + 9 * (limits.MAX_ENDPOINT_SERIES + 1) + 64
    print(f"{count} store series for {n} gates and {n} endpoints (bound {bound})")
    assert count <= bound


def _values(snap: MetricsSnapshot, name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(s.labels), s.value) for family in snapshot_metrics(snap)
            for s in family.samples if s.name == name]


def _omitted(snap: MetricsSnapshot) -> list[tuple[dict[str, str], float]]:
    return _values(snap, "evalsvc_metrics_omitted")

