"""The compose topology as real processes on this host (Docker cannot run here): a private
PostgreSQL database, ``evalsvc db upgrade``, ``evalsvc api serve`` on a free loopback port, two
``evalsvc worker --schedules`` processes, a schedule that comes due, and a run submitted with
``curl`` against a real local endpoint (the spare one, ``tests/fixtures/spare.py``, against itself, a tiny suite from an
``EVALSVC_SUITES_DIR`` catalog) that reaches a gate through ``GET /api/v1/runs/{id}/gate``.
The scheduled run is created by a worker and finishes too. Every process is stopped at the end."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.db.testing import temporary_postgres_database
from evalsvc.domain import RunStatus
from tests.fixtures.loopback import free_port
from tests.fixtures.spare import spare_endpoint

from .conftest import write_tiny_suite

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.endpoints]

EVALSVC = [sys.executable, "-m", "evalsvc.cli.main"]


@contextmanager
def _process(args: list[str], *, env: dict[str, str], cwd: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()  # SIGTERM: workers release their leases and exit 0
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


def _curl(*args: str) -> tuple[int, Any]:
    """Run curl; return (HTTP status, parsed JSON body)."""
    r = subprocess.run(
        ["curl", "-sS", "-w", "\n%{http_code}", "--max-time", "30", *args],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 0, r.stderr
    body, _, code = r.stdout.rpartition("\n")
    return int(code), (json.loads(body) if body.strip() else None)


def _wait(what: str, check: Any, timeout: float, logs: list[Path], every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs if p.exists())
    raise AssertionError(f"timed out waiting for {what}\n{tails}")


def test_compose_topology_as_processes(tmp_path: Path, local_endpoints: Any) -> None:
    admin = os.environ.get("EVALSVC_TEST_DATABASE_URL")
    if not admin:
        pytest.skip("needs EVALSVC_TEST_DATABASE_URL (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)")
    endpoint = spare_endpoint(local_endpoints)
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    write_tiny_suite(catalog)
    work = tmp_path / "work"  # outside the checkout, like a service's working directory
    work.mkdir()

    with temporary_postgres_database(admin, prefix="evalsvc_topology") as db, ExitStack() as stack:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("EVALSVC_") or k.startswith("EVALSVC_TEST")},
            "EVALSVC_DATABASE_URL": db,
            "EVALSVC_HOME": str(tmp_path / "home"),
            "EVALSVC_SUITES_DIR": str(catalog),
            "EVALSVC_LEASE_SECONDS": "20",
            # The egress policy of server mode (API, workers) admits no internal address unless
            # listed: the local endpoint is on loopback.
            "EVALSVC_ALLOWED_ENDPOINTS": "127.0.0.1,localhost",
        }

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            r = subprocess.run([*EVALSVC, *args], env=env, cwd=work, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"evalsvc {' '.join(args)}: {r.stdout}{r.stderr}"
            return r

        # migrate (the compose `migrate` service), then the operator's one-off setup
        cli("db", "upgrade")
        token = cli("tokens", "create", "ci", "--scope", "submit").stdout.strip().splitlines()[-1].strip()
        cli("endpoints", "add", "local-bf16", endpoint)

        port = free_port()
        logs = [tmp_path / "api.log", tmp_path / "worker-1.log", tmp_path / "worker-2.log"]
        stack.enter_context(
            _process([*EVALSVC, "api", "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                     env=env, cwd=work, log=logs[0])
        )
        base = f"http://127.0.0.1:{port}"
        _wait("the API's /healthz", lambda: _curl(f"{base}/healthz")[0] == 200 if _port_open(port) else False,
              300, logs, every=0.5)
        workers = [
            stack.enter_context(
                _process([*EVALSVC, "worker", "--schedules", "--schedule-interval", "2", "--poll", "0.5"],
                         env=env, cwd=work, log=log)
            )
            for log in logs[1:]
        ]

        # a schedule that comes due at the next minute (fire times are strictly after creation)
        cli("schedules", "add", "topology-every-minute", "--cron", "* * * * *",
            "--baseline", "local-bf16", "--candidate", "local-bf16", "--suite", "deploy-tiny")

        # the pipeline's submission, with curl
        auth = ["-H", f"Authorization: Bearer {token}"]
        spec = {"baseline": {"name": "local-bf16"}, "candidates": [{"name": "local-bf16"}],
                "suites": ["deploy-tiny"], "labels": {"source": "topology-test"}}
        code, run = _curl(*auth, "-H", "Content-Type: application/json", "-X", "POST",
                          "-d", json.dumps(spec), f"{base}/api/v1/runs")
        assert code == 202, run
        run_id = run["id"]
        code, body = _curl(*auth, f"{base}/api/v1/runs/{run_id}/gate")
        assert code in (200, 409), body  # 409 until it finishes

        def gate() -> Any:
            code, body = _curl(*auth, f"{base}/api/v1/runs/{run_id}/gate")
            return body if code == 200 else None

        verdict = _wait("the submitted run's gate", gate, 1200, logs, every=2)
        # One endpoint against itself: pass, or inconclusive on four items; never fail, never an error
        assert verdict["verdict"] in ("pass", "inconclusive"), verdict
        assert verdict["exit_code"] == {"pass": 0, "inconclusive": 3}[verdict["verdict"]]
        code, report = _curl(*auth, f"{base}/api/v1/runs/{run_id}/report")
        assert code == 200 and report["candidates"][0]["suites"][0]["n_errors"] == 0

        # the schedule fired (a worker's scheduler created the run) and that run finishes too
        def scheduled() -> Any:
            code, runs = _curl(*auth, f"{base}/api/v1/runs")
            assert code == 200, runs
            return [r for r in runs if r.get("schedule_id")]

        fired = _wait("the scheduled run", scheduled, 600, logs, every=2)
        cli("schedules", "remove", "topology-every-minute")  # no more fires while we wait
        sched_id = fired[0]["id"]

        def finished() -> Any:
            code, body = _curl(*auth, f"{base}/api/v1/runs/{sched_id}/gate")
            return body if code == 200 else None

        sched_gate = _wait("the scheduled run's gate", finished, 1200, logs, every=2)
        assert sched_gate["verdict"] in ("pass", "inconclusive"), sched_gate

        # the two workers are real, separate processes sharing the queue; /metrics sees the runs
        assert all(w.poll() is None for w in workers)
        metrics = subprocess.run(["curl", "-sS", f"{base}/metrics"], capture_output=True, text=True, timeout=60)
        assert "evalsvc_gate_verdict_code{" in metrics.stdout and "evalsvc_database_up 1.0" in metrics.stdout
        with Store.from_url(db) as store:
            completed = {r.id for r in store.list_runs() if r.status == RunStatus.completed}
            assert {run_id, sched_id} <= completed

        # SIGTERM: workers finish in-flight work, release leases and exit 0
        for w in workers:
            w.terminate()
        for w in workers:
            assert w.wait(60) == 0


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
