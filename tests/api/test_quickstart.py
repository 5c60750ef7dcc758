"""docs/api.md's quickstart works as written: its bash block (between ``<!-- quickstart -->``
markers) is read from the doc and run with bash in an empty directory: ``evalsvc db upgrade``,
``evalsvc api serve`` and ``evalsvc worker`` as real processes, a token, curl submit, poll and
gate, against the zero-latency OpenAI-compatible stub (``benchmarks/stub_server.py``, its own
process). Only the endpoints' URLs and the API's port are substituted (free ports here).

A suite file sent to the server names ``EVALSVC_SUITES_DIR``; a worker without the API's
``EVALSVC_ALLOWED_ENDPOINTS`` (the README's old trap) ends the run in ``error`` and logs the
reason, one line per run."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsvc.scheduler import Worker
from tests.fixtures.loopback import free_port

from .conftest import Api
from .test_runs import submit

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "api.md"


def quickstart_script() -> str:
    match = re.search(r"<!-- quickstart -->\n```bash\n(.*?)```\n<!-- /quickstart -->",
                      DOC.read_text("utf-8"), re.S)
    assert match, "docs/api.md has no <!-- quickstart --> bash block"
    return match.group(1)


def stop_group(pgid: int, grace: float = 20.0) -> None:
    """SIGTERM the process group (the API and the worker), SIGKILL what is left after ``grace``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            os.killpg(pgid, 0)  # ProcessLookupError once every member has exited
            time.sleep(0.2)
        os.killpg(pgid, signal.SIGKILL)


@pytest.fixture(scope="module")
def stub_urls() -> Iterator[list[str]]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import evaluator_speed  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    with evaluator_speed.stub() as urls:
        yield urls


def test_the_quickstart_runs_as_written(tmp_path: Path, stub_urls: list[str]) -> None:
    script = quickstart_script()
    for needle in ("EVALSVC_ALLOWED_ENDPOINTS", "evalsvc api serve", "evalsvc worker",
                   "tokens create", "/runs/$RUN/gate"):
        assert needle in script
    port = free_port()
    script = (script.replace("http://127.0.0.1:8000/v1", stub_urls[0])
              .replace("http://127.0.0.1:8001/v1", stub_urls[1])
              .replace("--port 8080", f"--port {port}")
              .replace("127.0.0.1:8080", f"127.0.0.1:{port}"))
    assert "8000" not in script and "8080" not in script
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EVALSVC_") or k == "EVALSVC_HOME"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    # Its own process group: the block leaves the API and the worker running in the
    # background (as a user's shell would), and the test stops them with the group.
    proc = subprocess.Popen(["bash", "-e", "-c", script], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, errs = proc.communicate(timeout=240)
    finally:
        stop_group(proc.pid)
    assert proc.returncode == 0, f"{errs}\n{out}\nworker: {(tmp_path / 'worker.log').read_text()}"
    # stdout: `db upgrade`'s line, the run's status JSON, then the gate's (one per line).
    status, gate = (json.loads(line) for line in out.splitlines() if line.startswith("{"))
    assert status["status"] in ("queued", "running", "completed")
    assert "workers_alive" in status and "queue_note" in status
    assert gate["run_id"] == status["id"] and gate["status"] == "completed"
    assert gate["verdict"] in ("pass", "fail", "inconclusive")
    assert gate["exit_code"] == {"pass": 0, "fail": 1, "inconclusive": 3}[gate["verdict"]]
    worker_log = (tmp_path / "worker.log").read_text()
    assert f"run {gate['run_id']}: completed, verdict {gate['verdict']}" in worker_log


def test_a_worker_without_the_allow_list_errors_the_run_and_logs_why(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with api.client("submit") as client:
        run_id = submit(client, suites=["reasoning-smoke"])  # the API allows loopback
    monkeypatch.delenv("EVALSVC_ALLOWED_ENDPOINTS")  # ... this worker does not
    with caplog.at_level(logging.INFO, logger="evalsvc.scheduler"):
        Worker(api.store, poll_seconds=0.05, lease_seconds=10).run(once=True)
    run = api.store.get_run(run_id)
    assert run is not None and run.status.value == "error"
    assert run.error and "EVALSVC_ALLOWED_ENDPOINTS" in run.error
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"run {run_id}: ")]
    assert lines == [f"run {run_id}: error: {run.error}"]


def test_a_suite_file_sent_to_the_server_points_at_the_suites_dir(api: Api) -> None:
    with api.client("submit") as client:
        resp = client.post("/runs", json={"baseline": {"url": "http://127.0.0.1:9001/v1"},
                                          "candidates": [{"url": "http://127.0.0.1:9002/v1"}],
                                          "suites": ["./mine.yaml"]})
    assert resp.status_code == 422
    assert "EVALSVC_SUITES_DIR on the API server and its workers" in resp.json()["detail"]


def test_a_body_sent_as_a_form_names_the_content_type(api: Api) -> None:
    """``curl -d '{...}'`` without ``-H 'Content-Type: application/json'`` sends a form: the
    answer names the header (it read "body: Input should be a valid dictionary")."""
    body = json.dumps({"baseline": {"url": "http://127.0.0.1:9001/v1"},
                       "candidates": [{"url": "http://127.0.0.1:9002/v1"}],
                       "suites": ["reasoning-smoke"]})
    with api.client("submit") as client:
        form = client.post("/runs", content=body,
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert form.status_code == 422, form.text
        assert form.json()["detail"] == (
            "the body was sent as application/x-www-form-urlencoded, not JSON: send it with "
            "`Content-Type: application/json` (curl: -H 'Content-Type: application/json')")
        sent = client.post("/runs", content=body, headers={"Content-Type": "application/json"})
        assert sent.status_code == 202, sent.text
        wrong = client.post("/runs", json=["reasoning-smoke"])  # JSON, but not an object
        assert wrong.status_code == 422 and "Content-Type" not in wrong.json()["detail"]
