"""Drill (issue 21): 2 real worker processes × 500 queued runs, each run one real request to
the zero-latency stub (``benchmarks/stub_server.py``, its own process) through the endpoint
client: 0 double claims, 0 lost runs, one stored answer per run. The claim rate is printed for
docs/benchmarks.md ("Drills"); nothing is timed.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsvc.db import Store
from evalsvc.domain import RunStatus
from tests.fixtures.db import REPO_ROOT, evalsvc_module, make_spec, subprocess_env

RUNS = 500


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    bench = str(REPO_ROOT / "benchmarks")
    sys.path.insert(0, bench)
    try:
        import evaluator_speed
    finally:
        sys.path.remove(bench)
    with evaluator_speed.stub() as urls:
        yield urls[0]


def _wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.slow
def test_two_workers_run_500_queued_runs_against_the_stub_exactly_once(
    db_url: str, stub_url: str, tmp_path: Path
) -> None:
    claim_log = tmp_path / "claims.log"
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    env = subprocess_env(
        db_url,
        EVALSVC_TEST_CLAIM_LOG=str(claim_log),
        EVALSVC_ENDPOINT_MAX_RUNS="0",
        EVALSVC_ALLOWED_ENDPOINTS="127.0.0.0/8",
    )
    with Store.from_url(db_url) as store:
        # All queued before the workers start: they compete for the same rows from the first poll.
        ids = {
            store.create_run(make_spec(baseline=stub_url, candidates=(stub_url,))).id
            for _ in range(RUNS)
        }
        workers = []
        for log in logs:
            with log.open("ab") as out:
                workers.append(
                    subprocess.Popen(
                        evalsvc_module(
                            "evalsvc.cli.worker",
                            "--poll",
                            "0.05",
                            "--executor",
                            "tests.scheduler.executors:ask_the_baseline",
                        ),
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        try:
            _wait_for(
                lambda: store.count_runs_by_status().get("completed", 0) == RUNS,
                600,
                f"{RUNS} runs to complete",
            )
        finally:
            for w in workers:
                w.send_signal(signal.SIGTERM)
            codes = [w.wait(60) for w in workers]
        assert codes == [0, 0], [log.read_text()[-2000:] for log in logs]
        assert store.list_runs(status=RunStatus.queued) == []
        assert store.list_runs(status=RunStatus.running) == []
        answers = {run_id: store.get_samples(run_id) for run_id in ids}
    lines = [line.split() for line in claim_log.read_text().splitlines()]
    claimed = collections.Counter(run_id for run_id, _, _ in lines)
    assert set(claimed) == ids and max(claimed.values()) == 1  # none twice, none lost
    per_worker = collections.Counter(worker for _, worker, _ in lines)
    assert len(per_worker) == 2, per_worker  # both took part
    assert all(len(s) == 1 and s[0].error is None and s[0].output for s in answers.values())
    times = sorted(float(t) for _, _, t in lines)
    backend = db_url.split(":", 1)[0].split("+")[0]
    print(
        f"\n[queue drill] {backend}: {RUNS} runs by 2 workers in {times[-1] - times[0]:.1f} s "
        f"({RUNS / max(times[-1] - times[0], 1e-9):.0f} runs/s; split "
        f"{sorted(per_worker.values())})"
    )
