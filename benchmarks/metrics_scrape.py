"""Cost of one ``/metrics`` scrape (``evalsvc.db.metrics_snapshot``) as the store's history grows.

The snapshot reads samples only of runs created in the last 24 hours, so old samples should
not slow a scrape down; gates and run histograms read every run's rows. Two stores, the same
recent activity (one run with its gates and samples), and a *small* vs a *large* history of
runs older than a day, each with ``--gates`` gate rows and ``--samples`` samples; the median
of ``--repeats`` snapshots of each, alternated.

Usage::

    python benchmarks/metrics_scrape.py --sqlite
    python benchmarks/metrics_scrape.py --admin-url postgresql+psycopg://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import sqlalchemy as sa  # noqa: E402

from evalsvc.db import Store, metrics_snapshot  # noqa: E402
from evalsvc.db._orm import RunRow, utcnow  # noqa: E402
from evalsvc.db.testing import temporary_postgres_database  # noqa: E402
from evalsvc.domain import EndpointRef, Provenance, RunSpec, RunStatus, Sample  # noqa: E402

BASE, CAND = "http://bf16.bench:8000/v1", "http://fp8.bench:8000/v1"


def add_run(store: Store, *, gates: int, samples: int) -> str:
    spec = RunSpec(baseline=EndpointRef(url=BASE), candidates=[EndpointRef(url=CAND)], suites=["needle-smoke"])
    run = store.create_run(spec, status=RunStatus.running)
    for role, url in (("baseline", BASE), ("candidate:0", CAND)):
        store.save_endpoint_snapshot(run.id, role=role, endpoint=EndpointRef(url=url), provenance=Provenance())
    store.save_gate_results(
        run.id,
        [
            {"candidate": "candidate:0", "suite": f"suite-{g}", "verdict": "pass", "gated": True,
             "metric": "accuracy", "delta": -0.01, "ci": [-0.03, 0.01], "margin": 0.05, "n": 40}
            for g in range(gates)
        ],
    )
    store.add_samples(
        run.id,
        [
            Sample(suite=f"suite-{i % gates}", item_id=str(i), endpoint="baseline" if i % 2 else "candidate:0",
                   score=1.0, error="timeout: x" if i % 50 == 0 else None)
            for i in range(samples)
        ],
    )
    store.finish_run(run.id, status=RunStatus.completed, verdict="pass")
    return run.id


def fill(store: Store, old_runs: int, args: argparse.Namespace) -> None:
    store.upgrade()
    old = [add_run(store, gates=args.gates, samples=args.samples) for _ in range(old_runs)]
    add_run(store, gates=args.gates, samples=args.samples)
    # Back-date the history in one statement: two days old, five minutes long.
    then = utcnow() - timedelta(days=2)
    engine = sa.create_engine(store.url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.update(RunRow)
                .where(RunRow.id.in_(old))
                .values(created_at=then, started_at=then, finished_at=then + timedelta(minutes=5))
            )
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--admin-url")
    parser.add_argument("--small", type=int, default=10, help="old runs in the small history")
    parser.add_argument("--large", type=int, default=300, help="old runs in the large history")
    parser.add_argument("--gates", type=int, default=5)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    if not args.sqlite and not args.admin_url:
        parser.error("--sqlite or --admin-url")
    with ExitStack() as stack:
        urls = []
        for _ in range(2):
            if args.sqlite:
                d = stack.enter_context(tempfile.TemporaryDirectory())
                urls.append(f"sqlite:///{d}/bench.db")
            else:
                urls.append(stack.enter_context(temporary_postgres_database(args.admin_url, prefix="evalsvc_bench")))
        stores = [stack.enter_context(Store.from_url(u)) for u in urls]
        t0 = time.perf_counter()
        fill(stores[0], args.small, args)
        fill(stores[1], args.large, args)
        print(f"filled in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        times: list[list[float]] = [[], []]
        for _ in range(args.repeats):
            for i, store in enumerate(stores):
                t = time.perf_counter()
                snap = metrics_snapshot(store)
                times[i].append(time.perf_counter() - t)
                assert len(snap.gates) == args.gates
        med = [statistics.median(t) for t in times]
        backend = "SQLite" if args.sqlite else "PostgreSQL"
        for label, n, m in (("small", args.small, med[0]), ("large", args.large, med[1])):
            print(f"{backend} {label}: {n} old runs ({n * args.samples:,} samples, {n * args.gates:,} gates): "
                  f"median {m * 1000:.1f} ms")
        print(f"{backend} ratio large/small: {med[1] / med[0]:.2f}")


if __name__ == "__main__":
    main()
