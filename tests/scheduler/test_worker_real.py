"""A SIGKILLed worker's real run is finished by another worker: item-level resume, nothing lost.

End to end with the real executor (``evalsvc.services.runs.execute_stored_run``) against the
real local endpoints, on PostgreSQL when ``EVALSVC_TEST_DATABASE_URL`` is set, else SQLite.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.db.testing import temporary_postgres_database
from evalsvc.domain import EndpointRef, RunOptions, RunSpec, RunStatus
from evalsvc.services import runs
from tests.fixtures.db import evalsvc_module, subprocess_env


@pytest.fixture
def real_db_url(tmp_path: Path) -> Iterator[str]:
    admin = os.environ.get("EVALSVC_TEST_DATABASE_URL")
    if admin:
        with temporary_postgres_database(admin) as url:
            Store.from_url(url).upgrade()
            yield url
    else:
        url = f"sqlite:///{tmp_path / 'e2e.db'}"
        Store.from_url(url).upgrade()
        yield url


def _worker(db_url: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            evalsvc_module("evalsvc.cli.worker", "--poll", "0.2", "--lease-seconds", "20"),
            env=subprocess_env(db_url), stdout=out, stderr=subprocess.STDOUT)


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.endpoints
def test_sigkill_mid_run_then_resume_on_another_worker(
    local_endpoints: Any, real_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Server mode (submit, workers) reaches the local endpoints only if loopback is allowed, as
    # an operator would allow it (docs/security.md); the workers inherit the environment.
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")
    candidate = next(iter(local_endpoints.candidates.values()))
    spec = RunSpec(baseline=EndpointRef(url=local_endpoints.baseline),
                   candidates=[EndpointRef(url=candidate)], suites=["needle-smoke"],
                   options=RunOptions(samples=6, concurrency=2))
    store = Store.from_url(real_db_url)
    run = runs.submit(spec, store=store)
    first = _worker(real_db_url, tmp_path / "w1.log")
    try:
        _wait(lambda: store.count_samples(run.id)["total"] >= 4, 900, "the first samples")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    stored_at_kill = store.count_samples(run.id)["total"]
    second = _worker(real_db_url, tmp_path / "w2.log")
    try:
        _wait(lambda: store.get_run(run.id).status in (RunStatus.completed, RunStatus.error),  # type: ignore[union-attr]
              1800, "the second worker to finish the run")
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(60)
    done = store.get_run(run.id)
    assert done is not None and done.status == RunStatus.completed, (tmp_path / "w2.log").read_text()[-3000:]
    assert done.attempts >= 2  # claimed by the killed worker, then taken up by the second
    samples = store.get_samples(run.id)
    keys = collections.Counter(s.key for s in samples)
    assert len(samples) == 12 and max(keys.values()) == 1  # 6 items x 2 endpoints: none lost or doubled
    assert all(s.error is None for s in samples)
    assert 4 <= stored_at_kill < 12  # the kill really was mid-run
    report = store.get_report(run.id)
    assert report is not None and report["verdict"] == done.verdict
    suite = report["candidates"][0]["suites"][0]
    assert suite["n"] == 6 and suite["n_errors"] == 0
    # The resumed run's verdict equals an uninterrupted run's on the same spec.
    uninterrupted = runs.compare(spec, store=store)
    assert uninterrupted["verdict"] == report["verdict"]
