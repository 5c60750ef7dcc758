"""``/metrics``' store figures, on SQLite and PostgreSQL: known runs, samples and gates in a real
database give the expected verdicts, CI bounds, histograms, queue, workers, errors and rates."""

from __future__ import annotations

from datetime import timedelta

import httpx
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from evalsvc.db import Store, metrics_snapshot
from evalsvc.db._orm import RunRow, utcnow
from evalsvc.domain import EndpointRef, Provenance, RunSpec, RunStatus, Sample
from evalsvc.webapp import create_app
from tests.fixtures.loopback import uvicorn_app

BASE = "http://bf16.test:8000/v1"
CAND = "http://fp8.test:8000/v1"


def _run(store: Store, *, verdict: str, delta: float, ci: tuple[float, float]) -> str:
    spec = RunSpec(
        baseline=EndpointRef(url=BASE, model="m"),
        candidates=[EndpointRef(url=CAND, model="m")],
        suites=["needle-smoke"],
    )
    run = store.create_run(spec, status=RunStatus.running)
    for role, url in (("baseline", BASE), ("candidate:0", CAND)):
        store.save_endpoint_snapshot(
            run.id, role=role, endpoint=EndpointRef(url=url, model="m"), provenance=Provenance()
        )
    store.save_gate_results(
        run.id,
        [
            {
                "candidate": "candidate:0",
                "suite": "needle-smoke",
                "verdict": verdict,
                "gated": True,
                "metric": "accuracy",
                "delta": delta,
                "ci": list(ci),
                "margin": 0.1,
                "n": 40,
            }
        ],
    )
    store.finish_run(run.id, status=RunStatus.completed, verdict=verdict)
    return run.id


def _set_times(
    store: Store, run_id: str, *, created: float, started: float | None, finished: float | None
) -> None:
    """Back-date a run: seconds before now."""
    now = utcnow()
    engine = sa.create_engine(store.url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.update(RunRow)
                .where(RunRow.id == run_id)
                .values(
                    created_at=now - timedelta(seconds=created),
                    started_at=None if started is None else now - timedelta(seconds=started),
                    finished_at=None if finished is None else now - timedelta(seconds=finished),
                )
            )
    finally:
        engine.dispose()


def test_snapshot_figures(store: Store) -> None:
    old = _run(store, verdict="fail", delta=-0.2, ci=(-0.3, -0.1))
    new = _run(store, verdict="pass", delta=-0.01, ci=(-0.04, 0.02))
    _set_times(store, old, created=4000, started=3990, finished=3000)  # waited 10 s, ran 990 s
    _set_times(store, new, created=200, started=100, finished=50)  # waited 100 s, ran 50 s
    # samples of the newer run: 3 fine, one timeout, one HTTP 503, one connection error
    errors = [None, None, None, "timeout: ReadTimeout on http://x", "HTTP 503: busy", "ConnectError: refused (x)"]
    store.add_samples(
        new,
        [
            Sample(suite="needle-smoke", item_id=str(i), endpoint="candidate:0", error=e, score=None if e else 1.0)
            for i, e in enumerate(errors)
        ]
        + [Sample(suite="needle-smoke", item_id="0", endpoint="baseline", score=1.0)],
    )
    queued = store.create_run(
        RunSpec(baseline=EndpointRef(url=BASE), candidates=[EndpointRef(url=CAND)], suites=["needle-smoke"])
    )
    _set_times(store, queued.id, created=30, started=None, finished=None)
    # a live worker: a claimed run with a fresh lease (higher priority: claimed before the other)
    hot = store.create_run(
        RunSpec(
            baseline=EndpointRef(url=BASE), candidates=[EndpointRef(url=CAND)], suites=["needle-smoke"],
            priority=5,
        )
    )
    claimed = store.claim_run(worker_id="w1", lease_seconds=60)
    assert claimed is not None and claimed.id == hot.id
    # Its wait pinned at 0 s: a loaded host may take over a second from the create to the claim.
    _set_times(store, hot.id, created=0, started=0, finished=None)

    snap = metrics_snapshot(store)
    (gate,) = snap.gates  # the latest of the two runs on the same (baseline, candidate, suite)
    assert (gate.baseline, gate.candidate, gate.suite) == (BASE, CAND, "needle-smoke")
    assert gate.verdict == "pass" and gate.run_id == new
    assert gate.ci_low is not None and gate.ci_high is not None
    assert gate.ci_low <= gate.delta <= gate.ci_high  # type: ignore[operator]
    assert (gate.ci_low, gate.ci_high, gate.margin, gate.n) == (-0.04, 0.02, 0.1, 40)

    d = dict(snap.run_duration.buckets)
    assert snap.run_duration.count == 2
    assert abs(snap.run_duration.sum - 1040) < 2
    assert d[30.0] == 0 and d[60.0] == 1 and d[600.0] == 1 and d[1200.0] == 2
    w = dict(snap.queue_wait.buckets)
    # started runs: old (10 s), new (100 s), and the claimed one (≈0 s)
    assert snap.queue_wait.count == 3
    assert w[1.0] == 1 and w[15.0] == 2 and w[300.0] == 3

    assert snap.queue_depth == 1 and 25 <= snap.oldest_queued_seconds <= 120
    assert snap.live_workers == {"worker": 1, "in_process": 0}
    s = snap.endpoint_samples
    assert s[(CAND, "ok")] == 3 and s[(BASE, "ok")] == 1
    assert s[(CAND, "timeout")] == 1 and s[(CAND, "http_5xx")] == 1 and s[(CAND, "connection")] == 1
    assert snap.samples_last_window == 7
    assert snap.runs_by_status["completed"] == 2 and snap.runs_by_status["queued"] == 1


def test_metrics_endpoint_exposes_them(db_url: str) -> None:
    with Store.from_url(db_url) as store:
        _run(store, verdict="inconclusive", delta=-0.05, ci=(-0.12, 0.02))
    with uvicorn_app(create_app(db_url, auth=True)) as base:
        text = httpx.get(f"{base}/metrics", timeout=60).text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    labels = (("baseline", BASE), ("candidate", CAND), ("metric", "accuracy"), ("suite", "needle-smoke"))
    assert samples[("evalsvc_gate_delta", labels)] == -0.05
    assert samples[("evalsvc_gate_ci_lower", labels)] == -0.12
    assert samples[("evalsvc_gate_ci_upper", labels)] == 0.02
    assert samples[("evalsvc_gate_verdict_code", (*labels[:2], ("gated", "true"), *labels[2:]))] == 3
    one_hot = {
        dict(k[1])["verdict"]: v for k, v in samples.items() if k[0] == "evalsvc_gate_verdict"
    }
    assert one_hot == {"pass": 0, "fail": 0, "inconclusive": 1, "error": 0, "non-comparable": 0}
    assert samples[("evalsvc_database_up", ())] == 1
    assert ("evalsvc_run_duration_seconds_count", ()) in samples
    assert samples[("evalsvc_queue_depth", ())] == 0


def test_a_scrape_is_a_fixed_handful_of_queries(store: Store) -> None:
    """The number of SQL statements per snapshot does not grow with the runs or gates stored."""
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        statements.append(statement)

    engine = store._db.engine
    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        _run(store, verdict="pass", delta=0.0, ci=(-0.01, 0.01))
        statements.clear()
        metrics_snapshot(store)
        few = len(statements)
        for _ in range(5):
            _run(store, verdict="fail", delta=-0.2, ci=(-0.3, -0.1))
        statements.clear()
        metrics_snapshot(store)
        many = len(statements)
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)
    assert few == many <= 10, statements
