"""Real worker processes (``python -m evalsvc.cli.worker``) sharing one database:
no double claims under contention, crash recovery by lease expiry, graceful SIGTERM,
and clear refusals (unreachable database, schema not at head). The refusals run ``evalsvc
worker`` in the test's process (``tests.fixtures.cli``): they end before any run is claimed, and
an interpreter start costs 2-5 CPU-seconds on a 2-core host
(tests/security/test_cli_refusals.py starts a real worker process that refuses)."""

from __future__ import annotations

import collections
import signal
import subprocess
import time
from pathlib import Path

import pytest

from evalsvc.db import Store
from evalsvc.domain import RunStatus
from tests.fixtures.cli import run_cli
from tests.fixtures.db import evalsvc_module, make_spec, subprocess_env

WORKER = "evalsvc.cli.worker"
EXECUTORS = "tests.scheduler.executors"
# Short, so that a killed worker's run is taken over soon, but not so short that a loaded host's
# late heartbeat lets a live worker's own reaper take its run (a third attempt).
LEASE = "5"


def _start_worker(db_url: str, log: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            evalsvc_module(WORKER, "--poll", "0.05", *args),
            env=subprocess_env(db_url, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 60) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout)


@pytest.mark.slow
def test_two_workers_claim_200_runs_exactly_once(db_url: str, tmp_path: Path) -> None:
    claim_log = tmp_path / "claims.log"
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    env = {"EVALSVC_TEST_CLAIM_LOG": str(claim_log), "EVALSVC_ENDPOINT_MAX_RUNS": "0"}
    workers = [
        _start_worker(db_url, log, "--executor", f"{EXECUTORS}:record_and_complete", **env)
        for log in logs
    ]
    try:
        # Queue the runs only once both workers are polling, so they really compete.
        _wait_for(
            lambda: (
                all("started" in log.read_text() for log in logs if log.exists())
                and all(log.exists() for log in logs)
            ),
            300,  # a loaded 2-core host can take tens of seconds to start an interpreter
            "both workers to start",
        )
        with Store.from_url(db_url) as store:
            ids = {store.create_run(make_spec(labels={"delay": "0.002"})).id for _ in range(200)}
            _wait_for(
                lambda: len(store.list_runs(status=RunStatus.completed, limit=500)) == 200,
                300,
                "all runs to complete",
            )
            assert store.list_runs(status=RunStatus.queued) == []
            assert store.list_runs(status=RunStatus.running) == []
    finally:
        codes = [_stop(w) for w in workers]
    assert codes == [0, 0], [log.read_text()[-2000:] for log in logs]
    lines = [line.split() for line in claim_log.read_text().splitlines()]
    claimed = collections.Counter(run_id for run_id, _, _ in lines)
    assert set(claimed) == ids and max(claimed.values()) == 1  # none twice, none left behind
    per_worker = collections.Counter(worker for _, worker, _ in lines)
    assert len(per_worker) == 2, per_worker  # both workers took part
    times = sorted(float(t) for _, _, t in lines)
    rate = len(times) / max(times[-1] - times[0], 1e-9)
    backend = db_url.split(":", 1)[0]
    print(
        f"\n[claim throughput] {backend}, 2 workers: {rate:.0f} runs/s "
        f"(split {sorted(per_worker.values())})"
    )


def test_killed_worker_run_is_completed_by_another_without_loss(
    db_url: str, tmp_path: Path
) -> None:
    with Store.from_url(db_url) as store:
        run = store.create_run(make_spec(labels={"items": "20", "delay": "0.1"}))
        first = _start_worker(
            db_url,
            tmp_path / "a.log",
            "--executor",
            f"{EXECUTORS}:slow_samples",
            "--lease-seconds",
            LEASE,
            "--max-runs",
            "1",
        )
        _wait_for(lambda: store.count_samples(run.id)["total"] >= 5, 300, "first samples")
        first.kill()  # SIGKILL: no release, no goodbye; only the lease expiry tells
        first.wait(10)
        written_by_first = store.count_samples(run.id)["total"]
        assert store.get_run(run.id).status == RunStatus.running  # type: ignore[union-attr]
        second = _start_worker(
            db_url,
            tmp_path / "b.log",
            "--executor",
            f"{EXECUTORS}:slow_samples",
            "--lease-seconds",
            LEASE,
            "--max-runs",
            "1",
        )
        assert second.wait(300) == 0, (tmp_path / "b.log").read_text()[-2000:]
        finished = store.get_run(run.id)
        assert finished is not None and finished.status == RunStatus.completed
        assert finished.attempts == 2
        samples = store.get_samples(run.id)
        keys = [s.key for s in samples]
        assert len(keys) == len(set(keys)) == 20  # 0 lost, 0 duplicated
        assert sorted(int(s.item_id) for s in samples) == list(range(20))
        attempts = collections.Counter(s.data["attempt"] for s in samples)
        assert attempts[1] == written_by_first and attempts[2] == 20 - written_by_first


def test_sigterm_releases_the_run_and_exits_zero(db_url: str, tmp_path: Path) -> None:
    with Store.from_url(db_url) as store:
        run = store.create_run(make_spec(labels={"items": "100", "delay": "0.05"}))
        worker = _start_worker(
            db_url,
            tmp_path / "w.log",
            "--executor",
            f"{EXECUTORS}:slow_samples",
            "--lease-seconds",
            "30",
        )
        _wait_for(lambda: store.count_samples(run.id)["total"] >= 3, 300, "first samples")
        assert _stop(worker) == 0, (tmp_path / "w.log").read_text()[-2000:]
        released = store.get_run(run.id)
        assert released is not None and released.status == RunStatus.queued
        assert released.lease_owner is None and released.attempts == 0
        kept = store.count_samples(run.id)["total"]
        assert 3 <= kept < 100
        assert "released back to the queue" in (tmp_path / "w.log").read_text()


def test_worker_refuses_an_unreachable_database() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:1/nothing"
    result = run_cli("worker", "--once", env={"EVALSVC_DATABASE_URL": url})
    assert result.returncode == 4
    assert result.stderr.strip().splitlines() == [
        line for line in result.stderr.strip().splitlines() if line.startswith("error: ")
    ]
    assert "cannot use database" in result.stderr and "Traceback" not in result.stderr


def test_worker_refuses_a_database_not_at_head(empty_db_url: str) -> None:
    result = run_cli("worker", "--once", env={"EVALSVC_DATABASE_URL": empty_db_url})
    assert result.returncode == 2
    assert "run `evalsvc db upgrade`" in result.stderr and "Traceback" not in result.stderr
