"""Issue 17, breaks 5 and 6: credentials in URLs never reach a view.

- Break 5: a database password given as ``?password=`` (not userinfo) was shown on the
  unauthenticated ``/healthz``, in ``api serve``'s start-up line, in the 503 detail during an
  outage, and in worker and CLI messages. Probed with a real ``evalsvc api serve`` on loopback
  (PostgreSQL, which ignores the password under trust auth, and an unreachable one).
- Break 6: URLs stored with ``user:password@`` (before the userinfo rule) or with a
  credential-like query parameter were shown on ``/metrics``, every dashboard page, the
  dashboard's ``report.json`` and the CLI's ``runs show``/``runs report -f json``/``runs list
  --json``. Probed through the real API server (SQLite and PostgreSQL) and the real CLI.

``api serve`` runs as a real ``python -m evalsvc.cli.main`` process. The other CLI commands
(``worker --once``, ``runs ...``) run in the test's own process (``tests.fixtures.cli.run_cli``,
the same Typer app): a separate interpreter costs 2-5 CPU-seconds of start-up each on a 2-core
host. What a child would have logged to stderr is in ``caplog`` there, so it is checked too.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from evalsvc.domain import EndpointRef, Provenance, RunSpec, RunStatus, Sample
from evalsvc.endpoints import redact_text, redact_url
from tests.api.executors import fake_report
from tests.fixtures.cli import run_cli
from tests.fixtures.db import REPO_ROOT
from tests.fixtures.loopback import free_port, probe

from .conftest import Api

DB_SECRET = "db-pw-5e1f"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://u:pw@h:8000/v1", "http://***@h:8000/v1"),
        ("postgresql+psycopg://postgres@db:5432/x?password=pw&sslmode=require",
         "postgresql+psycopg://***@db:5432/x?password=***&sslmode=require"),
        ("http://h/v1?PASSWORD=pw", "http://h/v1?PASSWORD=***"),
        ("http://h/v1?api_key=pw&Token=pw&client_secret=pw&sig=pw&X-Amz-Signature=pw&keep=1",
         "http://h/v1?api_key=***&Token=***&client_secret=***&sig=***&X-Amz-Signature=***&keep=1"),
        ("http://h/v1?pass%77ord=pw", "http://h/v1?pass%77ord=***"),  # an encoded name too
        ("http://h/cb#access_token=pw", "http://h/cb#access_token=***"),
        ("sqlite:////var/lib/evalsvc.db", "sqlite:////var/lib/evalsvc.db"),
        ("http://h:8000/v1", "http://h:8000/v1"),
    ],
)
def test_one_redaction_for_every_url_form(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact_text(f"cannot reach {url} now") == f"cannot reach {shown} now"


# ---- break 5: the database URL ---------------------------------------------------------------


@contextmanager
def _api_serve(db_url: str) -> Iterator[tuple[str, list[str]]]:
    """A real ``evalsvc api serve`` on loopback; yields its base URL and (after the block) its
    whole output in the list."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalsvc.cli.main", "api", "serve", "--port", str(port),
         "--database-url", db_url, "--log-level", "warning"],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "EVALSVC_API_AUTH": "on"},
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    output: list[str] = []
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # a loaded 2-core host starts it in tens of seconds
        while True:
            try:
                probe().get(f"{base}/healthz", timeout=5)
                break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "api serve did not start"
            time.sleep(0.1)
        yield base, output
    finally:
        proc.terminate()
        output.append(proc.communicate(timeout=60)[0])


def _with_password(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}password={DB_SECRET}"


@pytest.mark.postgres
def test_a_query_password_never_leaves_api_serve(pg_session_url: str) -> None:
    db_url = _with_password(pg_session_url)  # trust auth: PostgreSQL ignores it
    with _api_serve(db_url) as (base, output):
        health = httpx.get(f"{base}/healthz", timeout=60)
        metrics = httpx.get(f"{base}/metrics", timeout=60)
    assert health.status_code == 200, health.text
    assert "password=***" in health.json()["database"]
    shown = [health.text, metrics.text, *output]
    assert "evalsvc API on" in output[0] and "password=***" in output[0]
    assert all(DB_SECRET not in text for text in shown)


def test_a_query_password_never_shows_during_an_outage(tmp_path: Any) -> None:
    down = _with_password(f"postgresql+psycopg://evalsvc@127.0.0.1:{free_port()}/evalsvc")
    with _api_serve(down) as (base, output):
        health = httpx.get(f"{base}/healthz", timeout=60)
    assert health.status_code == 503
    assert health.json()["detail"] and "password=***" in health.json()["detail"]
    shown = [health.text, *output]
    assert "warning:" in output[0] and "password=***" in output[0]
    assert all(DB_SECRET not in text for text in shown)


# In-process, a worker that no longer gave up on the database would poll in the test process.
@pytest.mark.timeout(120)
def test_a_query_password_never_shows_in_the_worker_or_cli_during_an_outage(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    down = _with_password(f"postgresql+psycopg://evalsvc@127.0.0.1:{free_port()}/evalsvc")
    env = {"EVALSVC_DATABASE_URL": down, "EVALSVC_HOME": str(tmp_path)}
    caplog.set_level(logging.INFO)  # what `worker` logs to stderr as a process
    cli = [run_cli(*args, env=env) for args in (("worker", "--once"), ("runs", "list"))]
    assert all(r.returncode == 4 for r in cli), cli
    assert all("password=***" in r.stderr for r in cli), cli
    shown = [caplog.text, *(r.stdout + r.stderr for r in cli)]
    assert all(DB_SECRET not in text for text in shown)


# ---- break 6: endpoint URLs stored with credentials ----------------------------------------------

USERINFO_SECRET = "pw-6a11"
QUERY_SECRET = "key-6b22"
BASE_URL = f"http://admin:{USERINFO_SECRET}@127.0.0.1:9/v1"
CAND_URL = f"http://127.0.0.1:9/v2?api_key={QUERY_SECRET}"
SECRETS = (USERINFO_SECRET, QUERY_SECRET)


def _stored_run(api: Api, *, status: RunStatus = RunStatus.completed) -> str:
    """A finished run written straight to the store, as one from before the rules would be:
    snapshots, samples, a gate and a report all holding the two URLs."""
    store = api.store
    spec = RunSpec(baseline=EndpointRef(url=BASE_URL), candidates=[EndpointRef(url=CAND_URL)],
                   suites=["needle-smoke"])
    run = store.create_run(spec, status=RunStatus.running)
    for role, url in (("baseline", BASE_URL), ("candidate:0", CAND_URL)):
        store.save_endpoint_snapshot(run.id, role=role, endpoint=EndpointRef(url=url, model="m"),
                                     provenance=Provenance())
    store.save_suite_snapshot(run.id, name="needle-smoke", kind="needle", version="2",
                              spec={"name": "needle-smoke", "kind": "needle"})
    data = {"context_length": 1024, "depth": 0.5, "expected": ["7"]}
    store.add_samples(run.id, [
        Sample(suite="needle-smoke", item_id=f"i{k}", endpoint=role, score=1.0,
               output="The value is 7.", data=data)
        for k in range(3) for role in ("baseline", "candidate:0")
    ])
    gate = {"candidate": "candidate:0", "suite": "needle-smoke", "verdict": "pass",
            "gated": True, "metric": "accuracy", "delta": 0.0, "ci": [-0.1, 0.1],
            "margin": 0.1, "n": 3, "candidate_url": CAND_URL,
            "details": {"higher_is_better": True}}
    store.save_gate_results(run.id, [gate])
    report = fake_report(run, "pass")  # the report's shape, with the run's URLs in it
    report["warnings"] = [f"slow answers from {BASE_URL}"]
    store.save_report(run.id, report)
    if status == RunStatus.error:
        store.finish_run(run.id, status=status, verdict="error",
                         error=f"GET {BASE_URL}/models failed; then {CAND_URL} too")
    else:
        store.finish_run(run.id, status=status, verdict="pass")
    return run.id


def test_stored_credentials_never_reach_metrics_dashboard_or_cli(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    done = _stored_run(api)
    again = _stored_run(api)
    failed = _stored_run(api, status=RunStatus.error)
    bearer = {"Authorization": f"Bearer {api.tokens['read']}"}
    pages = [
        "/", f"/runs/{done}", f"/runs/{done}/suites/needle-smoke", f"/runs/{done}/flips",
        "/trends", f"/trends?baseline={BASE_URL}&candidate={CAND_URL}&suite=needle-smoke",
        f"/compare?a={done}&b={again}", f"/ui/live?ids={done},{failed}", f"/runs/{failed}",
        f"/runs/{done}/report.json", f"/runs/{done}/report.md", f"/runs/{done}/report.xml",
    ]
    shown: dict[str, str] = {}
    with httpx.Client(base_url=api.base_url, headers=bearer, timeout=60) as http:
        for path in pages:
            resp = http.get(path)
            assert resp.status_code == 200, (path, resp.status_code)
            shown[path] = resp.text
        shown["/metrics"] = httpx.get(f"{api.base_url}/metrics", timeout=60).text  # no token
    assert 'baseline="http://***@127.0.0.1:9/v1"' in shown["/metrics"]
    assert "api_key=***" in shown["/metrics"]
    assert "http://***@127.0.0.1:9/v1" in shown[f"/runs/{done}/report.json"]

    env = {"EVALSVC_DATABASE_URL": api.db_url}
    commands = (["runs", "show", failed], ["runs", "show", done, "--json"],
                ["runs", "report", done, "-f", "json"], ["runs", "list", "--json"],
                ["runs", "list"])
    for args in commands:
        r = run_cli(*args, env=env)
        assert r.returncode == 0, (args, r.stderr)
        shown[" ".join(args)] = r.stdout + r.stderr
    shown["log"] = caplog.text  # warnings a process would have written to stderr
    assert "***@127.0.0.1" in shown[f"runs show {failed}"]
    assert "***@127.0.0.1" in shown[f"runs show {done} --json"]
    assert "api_key=***" in shown[f"runs report {done} -f json"]
    leaks = {where: s for where, text in shown.items() for s in SECRETS if s in text}
    assert leaks == {}
