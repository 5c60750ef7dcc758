"""A worker honours SIGTERM even while a run ignores its cancel (issue 9: a huge plan ignored
SIGTERM), and a run whose execution dies of MemoryError ends ``error`` instead of staying
``running``. Real worker processes and both backends."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from evalsvc.db import Store
from evalsvc.domain import RunStatus
from evalsvc.scheduler import Worker
from tests.fixtures.db import evalsvc_module, make_spec, subprocess_env

from .stuck_executors import runs_out_of_memory


def test_sigterm_during_planning_releases_the_run_and_exits_0(db_url: str, tmp_path: Path) -> None:
    with Store.from_url(db_url) as store:
        run = store.create_run(make_spec())
    started = tmp_path / "started"
    env = subprocess_env(db_url, EVALSVC_TEST_STARTED=str(started))
    proc = subprocess.Popen(
        evalsvc_module(
            "evalsvc.cli.worker",
            "--executor",
            "tests.scheduler.stuck_executors:plans_forever",
            "--shutdown-grace",
            "1",
            "--poll",
            "0.1",
        ),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300  # a loaded 2-core host starts it in tens of seconds
        while not started.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the worker never claimed the run"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-2000:]
    assert "released to the queue" in stderr
    with Store.from_url(db_url) as store:
        after = store.get_run(run.id)
    assert after is not None and after.status == RunStatus.queued
    assert after.lease_owner is None and after.lease_expires_at is None


def test_memory_error_in_a_run_ends_it_as_error(store: Store) -> None:
    run = store.create_run(make_spec())
    worker = Worker(store, executor=runs_out_of_memory, poll_seconds=0.05, lease_seconds=10)
    assert worker.run(once=True) == 1
    after = store.get_run(run.id)
    assert after is not None and after.status == RunStatus.error
    assert after.verdict == "error" and "MemoryError" in (after.error or "")


def test_a_killed_worker_s_run_is_reaped_not_left_running(store: Store) -> None:
    """SIGKILL or the OOM killer leaves no one to settle the run: the reaper re-queues it
    while attempts remain and ends it ``error`` after the last one."""
    run = store.create_run(make_spec())
    for _ in range(2):
        claimed = store.claim_run(worker_id="dead", lease_seconds=0.01)
        assert claimed is not None and claimed.id == run.id
        time.sleep(0.05)
        store.reap_expired(max_attempts=2)
    after = store.get_run(run.id)
    assert after is not None and after.status == RunStatus.error
    assert "lease expired" in (after.error or "")
