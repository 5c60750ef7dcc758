"""Scale-out drill of the run queue: many worker processes drain thousands of small runs.

``--workers`` processes (default 16) each run the real ``evalsvc.scheduler.Worker`` claim loop
(``Worker.run(once=True)``: claim, execute, settle, until the queue is empty) on one database;
``--runs`` runs (default 5,000) are queued before they start. Each run's executor sends one
request to a loopback stub endpoint (``benchmarks/stub_server.py``: the runs are small but
real HTTP work) and finishes the run. Measured and checked:

- **lost**: runs not ``completed`` at the end (must be 0);
- **double claims**: runs executed more than once (each executor records the run id it got;
  must be 0);
- **claim latency**: the wall time of each ``Store.claim_run`` call that returned a run (the
  compare-and-set transaction: PostgreSQL ``FOR UPDATE SKIP LOCKED`` plus the per-endpoint
  advisory locks), p50/p99/max over every claim (target: p99 <= 50 ms);
- runs per second over the whole drain.

The timing wraps ``claim_run`` in a subclass of ``Store`` (benchmark code only); the Worker and
the queue are the shipped ones.

Usage::

    python benchmarks/queue_drill.py --admin-url postgresql+psycopg://postgres@127.0.0.1:5432/test
    python benchmarks/queue_drill.py --sqlite --workers 4 --runs 500
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from multiprocessing import get_context
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

from evalsvc.db import Store  # noqa: E402
from evalsvc.db.testing import temporary_postgres_database  # noqa: E402
from evalsvc.domain import EndpointRef, RunInfo, RunSpec, RunStatus  # noqa: E402

_EXECUTED: list[str] = []
_CLAIMS_S: list[float] = []


class TimedStore(Store):
    """The shipped store with each claim that returned a run timed (``Store`` binds
    ``claim_run`` to its queue per instance, so the wrapper is bound here too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        claim = self.claim_run

        def timed(*, worker_id: str, lease_seconds: float) -> RunInfo | None:
            t0 = time.perf_counter()
            run = claim(worker_id=worker_id, lease_seconds=lease_seconds)
            if run is not None:
                _CLAIMS_S.append(time.perf_counter() - t0)
            return run

        self.claim_run = timed  # type: ignore[method-assign]


def _executor(stub: str) -> Any:
    import httpx

    client = httpx.Client(timeout=30)

    def execute(store: Store, run: RunInfo, cancel: threading.Event, worker_id: str) -> None:
        _EXECUTED.append(run.id)
        client.get(f"{stub}/models").raise_for_status()
        store.finish_run(run.id, status=RunStatus.completed, verdict="pass", worker_id=worker_id)

    return execute


def _drain(url: str, index: int, stub: str, start: float) -> tuple[list[str], list[float]]:
    from evalsvc.scheduler import Worker

    # Endpoint budget off: every run names the same stub, and the budget would serialise them
    # (its job), which is not what the drill measures.
    with TimedStore.from_url(url, endpoint_max_runs=0) as store:
        store.get_run("warm-up")  # connected before the start line
        worker = Worker(store, executor=_executor(stub), worker_id=f"drill-{index}",
                        poll_seconds=0.05, lease_seconds=60)
        while time.time() < start:
            time.sleep(0.001)
        worker.run(once=True)
    return list(_EXECUTED), list(_CLAIMS_S)


def drill(url: str, *, runs: int, workers: int, stub: str) -> dict[str, Any]:
    spec = RunSpec(baseline=EndpointRef(url=stub), candidates=[EndpointRef(url=stub)],
                   suites=["reasoning-smoke"])
    with Store.from_url(url) as store:
        ids = [store.create_run(spec).id for _ in range(runs)]
    start = time.time() + 8.0  # every process imports and connects before the start line
    with get_context("spawn").Pool(workers) as pool:
        jobs = [pool.apply_async(_drain, (url, i, stub, start)) for i in range(workers)]
        outcomes = [j.get(timeout=3600) for j in jobs]
    elapsed = time.time() - start
    executed = [rid for done, _ in outcomes for rid in done]
    claims = sorted(s for _, c in outcomes for s in c)
    with Store.from_url(url) as store:
        completed = {r.id for r in store.list_runs(status=RunStatus.completed, limit=runs + 1)}
    counts = collections.Counter(executed)
    return {
        "runs": runs,
        "workers": workers,
        "lost": len(set(ids) - completed),
        "double_claims": sum(1 for n in counts.values() if n > 1),
        "per_worker": sorted(len(done) for done, _ in outcomes),
        "claim_ms": {
            "p50": 1000 * statistics.median(claims),
            "p99": 1000 * claims[min(len(claims) - 1, int(0.99 * len(claims)))],
            "max": 1000 * claims[-1],
            "n": len(claims),
        },
        "runs_per_s": runs / elapsed,
        "elapsed_s": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", default=os.environ.get("EVALSVC_TEST_DATABASE_URL"))
    parser.add_argument("--sqlite", action="store_true", help="use a SQLite file instead")
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    import evaluator_speed

    with ExitStack() as stack:
        stub = stack.enter_context(evaluator_speed.stub())[0]
        if args.sqlite:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            url = f"sqlite:///{tmp}/drill.db"
        else:
            if not args.admin_url:
                parser.error("give --admin-url (or EVALSVC_TEST_DATABASE_URL) or --sqlite")
            url = stack.enter_context(
                temporary_postgres_database(args.admin_url, prefix="evalsvc_drill")
            )
        with Store.from_url(url) as store:
            store.upgrade()
        out = drill(url, runs=args.runs, workers=args.workers, stub=stub)
    backend = "sqlite" if args.sqlite else "postgresql"
    c = out["claim_ms"]
    print(f"{backend}: {out['workers']} workers, {out['runs']} runs in {out['elapsed_s']:.1f} s "
          f"({out['runs_per_s']:.0f} runs/s): lost {out['lost']}, double claims "
          f"{out['double_claims']}; claim latency p50 {c['p50']:.1f} ms, p99 {c['p99']:.1f} ms, "
          f"max {c['max']:.1f} ms over {c['n']} claims; runs per worker {out['per_worker']}")
    if out["lost"] or out["double_claims"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
