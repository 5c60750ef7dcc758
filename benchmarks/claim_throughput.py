"""Claim throughput of the DB-backed run queue: how many runs per second W worker processes can
claim and complete when the runs themselves take no time (pure queue overhead).

Two measurements, each against a fresh database:
- ``store``: W processes call ``Store.claim_run`` + ``Store.finish_run`` in a tight loop
  (the queue's own cost: one claim transaction and one completion transaction per run);
- ``worker``: W real ``evalsvc worker`` processes with an executor that only finishes the run
  (adds the worker's thread hand-off, settling and polling).

Usage (PostgreSQL server from the URL; a database ``evalsvc_bench_<random>`` is created and
dropped)::

    python benchmarks/claim_throughput.py --admin-url postgresql+psycopg://postgres@127.0.0.1:5432/test
    python benchmarks/claim_throughput.py --sqlite   # embedded database instead
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from multiprocessing import get_context
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from evalsvc.db import Store  # noqa: E402
from evalsvc.db.testing import temporary_postgres_database  # noqa: E402
from evalsvc.domain import EndpointRef, RunInfo, RunSpec, RunStatus  # noqa: E402


def finish_immediately(store: Store, run: RunInfo, cancel: threading.Event, worker_id: str) -> None:
    """The executor of the ``worker`` measurement: no work, just completion."""
    store.finish_run(run.id, status=RunStatus.completed, verdict="pass", worker_id=worker_id)


def _spec() -> RunSpec:
    return RunSpec(
        baseline=EndpointRef(url="http://127.0.0.1:9001/v1"),
        candidates=[EndpointRef(url="http://127.0.0.1:9002/v1")],
        suites=["needle-4k"],
    )


def _queue_runs(url: str, n: int) -> None:
    with Store.from_url(url) as store:
        for _ in range(n):
            store.create_run(_spec())


def _drain(url: str, worker_id: str, start: float) -> tuple[int, float, float]:
    """Claim and finish until the queue is empty; returns (runs, first claim, last finish)."""
    # No per-endpoint budget: every run targets the same endpoints, and the budget would
    # serialise them (that is its job), which is not what is measured here.
    with Store.from_url(url, endpoint_max_runs=0) as store:
        store.get_run("warm-up")  # connect before the start line
        while time.time() < start:
            time.sleep(0.001)
        done, first, last = 0, time.time(), time.time()
        while (run := store.claim_run(worker_id=worker_id, lease_seconds=60)) is not None:
            store.finish_run(
                run.id, status=RunStatus.completed, verdict="pass", worker_id=worker_id
            )
            done += 1
            last = time.time()
        return done, first, last


def measure_store(url: str, *, runs: int, workers: int) -> float:
    _queue_runs(url, runs)
    start = time.time() + 5.0  # every process connects before the start line
    with get_context("spawn").Pool(workers) as pool:
        results = [pool.apply_async(_drain, (url, f"bench-{i}", start)) for i in range(workers)]
        outcomes = [r.get() for r in results]
    assert sum(n for n, _, _ in outcomes) == runs, outcomes
    elapsed = max(last for _, _, last in outcomes) - min(first for _, first, _ in outcomes)
    return runs / elapsed


def measure_worker(url: str, *, runs: int, workers: int) -> float:
    env = dict(
        os.environ,
        EVALSVC_DATABASE_URL=url,
        EVALSVC_ENDPOINT_MAX_RUNS="0",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    )
    with ExitStack() as stack:
        procs = []
        logs = []
        for i in range(workers):
            log = stack.enter_context(tempfile.NamedTemporaryFile("w+", suffix=f"-w{i}.log"))
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "evalsvc.cli.worker",
                        "--poll",
                        "0.05",
                        "--executor",
                        "benchmarks.claim_throughput:finish_immediately",
                    ],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        deadline = time.time() + 60
        while not all("started" in Path(log.name).read_text() for log in logs):
            if time.time() > deadline:
                raise RuntimeError("workers did not start")
            time.sleep(0.05)
        with Store.from_url(url) as store:
            start = time.time()
            _queue_in_one_go(store, runs)
            while len(store.list_runs(status=RunStatus.completed, limit=runs + 1)) < runs:
                time.sleep(0.01)
            elapsed = time.time() - start
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
    return runs / elapsed


def _queue_in_one_go(store: Store, runs: int) -> None:
    # Sequential inserts are a few ms each; the clock starts before them, so the figure is
    # conservative (workers start claiming while runs are still being queued).
    for _ in range(runs):
        store.create_run(_spec())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", default=os.environ.get("EVALSVC_TEST_DATABASE_URL"))
    parser.add_argument("--sqlite", action="store_true", help="use a SQLite file instead")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    for name, measure in (("store", measure_store), ("worker", measure_worker)):
        with ExitStack() as stack:
            if args.sqlite:
                tmp = stack.enter_context(tempfile.TemporaryDirectory())
                url = f"sqlite:///{tmp}/bench.db"
            else:
                if not args.admin_url:
                    parser.error("give --admin-url (or EVALSVC_TEST_DATABASE_URL) or --sqlite")
                url = stack.enter_context(
                    temporary_postgres_database(args.admin_url, prefix="evalsvc_bench")
                )
            with Store.from_url(url) as store:
                store.upgrade()
            rate = measure(url, runs=args.runs, workers=args.workers)
            backend = "sqlite" if args.sqlite else "postgresql"
            print(
                f"{name:>6}: {backend}, {args.workers} processes, {args.runs} runs: "
                f"{rate:,.0f} runs/s"
            )


if __name__ == "__main__":
    main()
