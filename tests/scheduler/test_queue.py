"""The queue in one process: claim order, compare-and-set, per-endpoint budget, leases,
heartbeats, reaping, and the worker's settling of what an executor leaves behind."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from evalsvc.db import Store, _queue
from evalsvc.domain import RunInfo, RunSpec, RunStatus
from evalsvc.scheduler import Executor, Worker
from tests.fixtures.db import make_spec


def _spec(i: int, *, priority: int = 0) -> RunSpec:
    return make_spec(f"http://b{i}/v1", (f"http://c{i}/v1",), priority=priority)


def test_claim_order_priority_then_age(store: Store) -> None:
    low = store.create_run(_spec(1))
    high = store.create_run(_spec(2, priority=5))
    low2 = store.create_run(_spec(3))
    order = [store.claim_run(worker_id="w", lease_seconds=30) for _ in range(4)]
    assert [r.id if r else None for r in order] == [high.id, low.id, low2.id, None]
    claimed = order[0]
    assert claimed is not None and claimed.status == RunStatus.running
    assert claimed.lease_owner == "w" and claimed.attempts == 1
    assert claimed.lease_expires_at is not None and claimed.started_at is not None


def test_concurrent_claims_never_share_a_run(db_url: str) -> None:
    with Store.from_url(db_url, endpoint_max_runs=0) as store:
        ids = {store.create_run(_spec(i)).id for i in range(60)}
    stores = [Store.from_url(db_url, endpoint_max_runs=0) for _ in range(4)]

    def drain(k: int) -> list[str]:
        got = []
        while (run := stores[k].claim_run(worker_id=f"w{k}", lease_seconds=30)) is not None:
            got.append(run.id)
        return got

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(drain, range(4)))
    for s in stores:
        s.close()
    claimed = [rid for r in results for rid in r]
    assert len(claimed) == len(set(claimed)) == 60 and set(claimed) == ids


def test_endpoint_budget_counts_baselines_and_candidates(db_url: str) -> None:
    with Store.from_url(db_url, endpoint_max_runs=1) as store:
        first = store.create_run(make_spec("http://gpu-a/v1", ("http://gpu-b/v1",)))
        # shares gpu-b as its baseline: blocked while `first` runs
        blocked = store.create_run(make_spec("http://gpu-b/v1/", ("http://gpu-c/v1",)))
        free = store.create_run(make_spec("http://gpu-d/v1", ("http://gpu-e/v1",)))
        assert store.claim_run(worker_id="w1", lease_seconds=30).id == first.id  # type: ignore[union-attr]
        assert store.claim_run(worker_id="w2", lease_seconds=30).id == free.id  # type: ignore[union-attr]
        assert store.claim_run(worker_id="w2", lease_seconds=30) is None
        assert store.running_counts()["http://gpu-b/v1"] == 1
        store.finish_run(first.id, status=RunStatus.completed, verdict="pass", worker_id="w1")
        assert store.claim_run(worker_id="w2", lease_seconds=30).id == blocked.id  # type: ignore[union-attr]
        # in-process runs (status running, no lease) count against the budget too
        store.create_run(
            make_spec("http://gpu-x/v1", ("http://gpu-y/v1",)), status=RunStatus.running
        )
        store.create_run(make_spec("http://gpu-x/v1", ("http://gpu-z/v1",)))
        assert store.claim_run(worker_id="w3", lease_seconds=30) is None
    with Store.from_url(db_url, endpoint_max_runs=2) as store:
        assert store.claim_run(worker_id="w3", lease_seconds=30) is not None


def test_endpoint_budget_holds_under_concurrent_claims(db_url: str) -> None:
    """Many workers, many runs on one endpoint pair: never two running at once."""
    with Store.from_url(db_url) as store:
        for _ in range(12):
            store.create_run(make_spec("http://shared/v1", ("http://shared-c/v1",)))
    stores = [Store.from_url(db_url, endpoint_max_runs=1) for _ in range(4)]
    peak = 0
    lock = threading.Lock()

    def work(k: int) -> int:
        nonlocal peak
        done = 0
        deadline = time.monotonic() + 120  # a bound for a hang; the queue empties long before
        while time.monotonic() < deadline:
            run = stores[k].claim_run(worker_id=f"w{k}", lease_seconds=30)
            if run is None:
                if not stores[k].list_runs(status=RunStatus.queued, limit=1):
                    return done
                time.sleep(0.005)
                continue
            running = len(stores[k].list_runs(status=RunStatus.running))
            with lock:
                peak = max(peak, running)
            time.sleep(0.01)
            stores[k].finish_run(
                run.id, status=RunStatus.completed, verdict="pass", worker_id=f"w{k}"
            )
            done += 1
        return done

    with ThreadPoolExecutor(4) as pool:
        total = sum(pool.map(work, range(4)))
    for s in stores:
        s.close()
    assert total == 12 and peak == 1


def test_heartbeat_cancel_release_and_reap(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The queue's clock, stepped by the test: a loaded host that takes over a second between a
    # claim and the reaper's look must not expire a 1 s lease early.
    now = [_queue.utcnow()]
    monkeypatch.setattr(_queue, "utcnow", lambda: now[0])
    run = store.create_run(_spec(1))
    claimed = store.claim_run(worker_id="w1", lease_seconds=30)
    assert claimed is not None
    assert store.heartbeat(run.id, worker_id="w1", lease_seconds=30)
    assert not store.heartbeat(run.id, worker_id="intruder", lease_seconds=30)
    # graceful release: back to queued, attempt not counted
    store.release_run(run.id, worker_id="w1")
    released = store.get_run(run.id)
    assert released is not None and released.status == RunStatus.queued
    assert released.attempts == 0 and released.lease_owner is None
    # expired lease: reaped back to queued, then failed once attempts reach max_attempts
    for attempt in (1, 2):
        assert store.claim_run(worker_id=f"w{attempt}", lease_seconds=1.0) is not None
        now[0] += timedelta(seconds=0.9)
        assert store.reap_expired(max_attempts=2) == []  # not expired yet
        now[0] += timedelta(seconds=0.2)
        assert store.reap_expired(max_attempts=2) == [run.id]
    failed = store.get_run(run.id)
    assert failed is not None and failed.status == RunStatus.error
    assert failed.attempts == 2 and "lease expired" in (failed.error or "")
    # a worker that lost its lease can neither heartbeat nor finish
    assert not store.heartbeat(run.id, worker_id="w2", lease_seconds=30)
    assert not store.finish_run(run.id, status=RunStatus.completed, verdict="pass", worker_id="w2")
    # cancel: the owner's heartbeat turns False
    other = store.create_run(_spec(2))
    assert store.claim_run(worker_id="w3", lease_seconds=30) is not None
    assert store.cancel_run(other.id)
    assert not store.heartbeat(other.id, worker_id="w3", lease_seconds=30)


def test_in_process_runs_are_never_reaped(store: Store) -> None:
    run = store.create_run(_spec(1), status=RunStatus.running)
    assert store.reap_expired(max_attempts=1) == []
    assert store.get_run(run.id).status == RunStatus.running  # type: ignore[union-attr]


# ---------------------------------------------------------------------- the worker, in process


def _worker(store: Store, executor: Executor, *, lease: float = 30, concurrency: int = 1) -> Worker:
    return Worker(
        store, executor=executor, poll_seconds=0.05, lease_seconds=lease, concurrency=concurrency
    )


def test_worker_marks_crashing_and_unfinished_runs_as_error(store: Store) -> None:
    def crash(store: Store, run: RunInfo, cancel: threading.Event, worker_id: str) -> None:
        if run.spec.labels.get("mode") == "crash":
            raise RuntimeError("suite exploded")

    crashing = store.create_run(
        make_spec("http://a/v1", ("http://b/v1",), labels={"mode": "crash"})
    )
    lazy = store.create_run(make_spec("http://c/v1", ("http://d/v1",)))
    assert _worker(store, crash, concurrency=2).run(once=True) == 2
    crashed, unfinished = store.get_run(crashing.id), store.get_run(lazy.id)
    assert crashed is not None and crashed.status == RunStatus.error
    assert crashed.verdict == "error" and "RuntimeError: suite exploded" in (crashed.error or "")
    assert unfinished is not None and unfinished.status == RunStatus.error
    assert "without finishing" in (unfinished.error or "")


def test_worker_stops_a_cancelled_run_at_the_next_heartbeat(store: Store) -> None:
    saw_cancel = threading.Event()

    def wait_for_cancel(
        store: Store, run: RunInfo, cancel: threading.Event, worker_id: str
    ) -> None:
        if cancel.wait(60):
            saw_cancel.set()

    run = store.create_run(_spec(1))
    # A heartbeat every 2 s (a third of the lease): the cancel is seen within seconds, and a
    # loaded host's late beat does not let the worker's own reaper take the lease first.
    worker = _worker(store, wait_for_cancel, lease=6)
    thread = threading.Thread(target=worker.run, kwargs={"max_runs": 1})
    thread.start()
    deadline = time.monotonic() + 60
    while store.get_run(run.id).status != RunStatus.running:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert store.cancel_run(run.id)
    thread.join(60)
    assert saw_cancel.is_set() and not thread.is_alive()
    assert store.get_run(run.id).status == RunStatus.cancelled  # type: ignore[union-attr]


def test_worker_stop_releases_the_run(store: Store) -> None:
    started = threading.Event()

    def wait_for_cancel(
        store: Store, run: RunInfo, cancel: threading.Event, worker_id: str
    ) -> None:
        started.set()
        cancel.wait(60)

    run = store.create_run(_spec(1))
    worker = _worker(store, wait_for_cancel)
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert started.wait(60)
    worker.stop()
    thread.join(60)
    released = store.get_run(run.id)
    assert released is not None and released.status == RunStatus.queued
    assert released.lease_owner is None and released.attempts == 0


def test_worker_validates_arguments(store: Store) -> None:
    with pytest.raises(ValueError):
        Worker(store, concurrency=0)


def test_in_process_run_of_a_dead_process_becomes_error(store: Store) -> None:
    """A killed `evalsvc compare` leaves a run whose cli: lease expires: the reaper errors it
    (it is never handed to a worker), and leaves live in-process and worker runs alone."""
    dead = store.create_run(
        _spec(1), status=RunStatus.running, lease_owner="cli:host:1", lease_seconds=-1
    )
    alive = store.create_run(
        _spec(2), status=RunStatus.running, lease_owner="cli:host:2", lease_seconds=60
    )
    lost_worker = store.create_run(_spec(3))
    assert store.claim_run(worker_id="w", lease_seconds=-1) is not None  # already expired
    reaped = store.reap_expired(max_attempts=3)
    assert set(reaped) == {dead.id, lost_worker.id}
    got = store.get_run(dead.id)
    assert got is not None and got.status == RunStatus.error and got.verdict == "error"
    assert got.error and "stopped without finishing" in got.error
    assert store.get_run(alive.id).status == RunStatus.running  # type: ignore[union-attr]
    assert store.get_run(lost_worker.id).status == RunStatus.queued  # type: ignore[union-attr]
    # The live process's heartbeat keeps working; a late finish never overwrites the error.
    assert store.heartbeat(alive.id, worker_id="cli:host:2", lease_seconds=60)
    assert not store.finish_run(dead.id, status=RunStatus.completed, verdict="pass")
