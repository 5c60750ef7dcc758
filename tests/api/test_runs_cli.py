"""``evalsvc runs ...`` (the real command in this process: ``tests/fixtures/cli.py``) and
``evalsvc compare --server`` interrupted (real subprocesses, signalled) against a real API server
and store (SQLite and PostgreSQL), with a real worker thread.

The worker's executor completes runs without model endpoints (``tests/api/executors.py``): these
tests are about the views over stored runs, not about scoring.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from evalsvc.domain import EndpointRef, RunSpec, RunStatus
from evalsvc.services import history
from tests.cli.test_compare import check_schema
from tests.fixtures.cli import run_cli as evalsvc
from tests.fixtures.db import REPO_ROOT

from .conftest import Api
from .executors import make_executor
from .test_cli import BASE, CAND, background_worker


def _submit(api: Api, verdict: str = "pass") -> str:
    with api.client("submit") as http:
        resp = http.post(
            "/runs",
            json={
                "baseline": {"url": BASE},
                "candidates": [{"url": CAND}],
                "suites": ["needle-smoke"],
                "labels": {"verdict": verdict},
            },
        )
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def _wait_finished(api: Api, run_id: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while (run := api.store.get_run(run_id)) is not None and run.status in (
        RunStatus.queued,
        RunStatus.running,
    ):
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


def test_runs_commands_round_trip(api: Api, tmp_path: Path) -> None:
    db = ["--database-url", api.db_url]
    with background_worker(api.db_url, make_executor("pass")):
        done = _submit(api, "fail")
        _wait_finished(api, done)
    queued = _submit(api)  # no worker any more: it stays queued

    listed = evalsvc("runs", "list", "--json", *db)
    assert listed.returncode == 0, listed.stderr
    rows = {r["id"]: r for r in json.loads(listed.stdout)}
    assert rows.keys() == {done, queued}
    assert rows[done]["status"] == "completed" and rows[done]["verdict"] == "fail"
    assert rows[done]["baseline"] == BASE and rows[done]["candidates"] == [CAND]
    table = evalsvc("runs", "list", "--status", "queued", *db)
    assert queued[:8] in table.stdout and done[:8] not in table.stdout
    # The table (80 columns here, as in a CI log): id, status and verdict whole, endpoints by
    # their label, as the reports and the dashboard name them.
    table = evalsvc("runs", "list", *db)
    (row,) = [line for line in table.stdout.splitlines() if done[:8] in line]
    assert "completed" in row and " fail " in row, table.stdout
    assert "127.0." in row  # the label's host:port, its start on this line
    assert "http://" not in table.stdout

    prefix = done[:8]  # what `runs list` prints
    shown = evalsvc("runs", "show", prefix, "--json", *db)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == done
    gate = evalsvc("runs", "gate", prefix, "--json", *db)
    assert gate.returncode == 1  # the gate's own exit code: fail
    gated = json.loads(gate.stdout)
    # What the verdict rests on (derived from the report), and no policy asked to refuse it.
    assert gated.pop("basis")["suites"][0]["sides"]["baseline"]["source"] == "measured"
    assert gated == {
        "run_id": done, "status": "completed", "verdict": "fail", "exit_code": 1,
        "reasons": [],  # the test executor's report gives none
        "refused_by_policy": [],
    }
    md = tmp_path / "report.md"
    report = evalsvc("runs", "report", prefix, "-f", "markdown", "-o", str(md), *db)
    assert report.returncode == 0, report.stderr
    assert "verdict: **fail**" in md.read_text()
    as_json = evalsvc("runs", "report", prefix, *db)
    assert json.loads(as_json.stdout) == api.store.get_report(done)
    junit = ET.fromstring(evalsvc("runs", "report", done, "-f", "junit", *db).stdout)
    assert junit.get("failures") == "1"

    # The REST API resolves the same prefix through the same service.
    with api.client("read") as http:
        assert http.get(f"/runs/{prefix}").json()["id"] == done
        assert http.get(f"/runs/{prefix}/gate").json()["exit_code"] == 1

    not_yet = evalsvc("runs", "gate", queued, *db)
    assert not_yet.returncode == 2 and "no verdict yet" in not_yet.stderr
    no_report = evalsvc("runs", "report", queued, *db)
    assert no_report.returncode == 2 and "no report" in no_report.stderr
    cancelled = evalsvc("runs", "cancel", queued[:10], *db)
    assert cancelled.returncode == 0, cancelled.stderr
    assert api.store.get_run(queued).status == RunStatus.cancelled  # type: ignore[union-attr]
    assert evalsvc("runs", "gate", queued, *db).returncode == 4  # a cancelled run proves nothing
    again = evalsvc("runs", "cancel", queued, *db)
    assert again.returncode == 2 and "already cancelled" in again.stderr

    for bad in ("0" * 32, "abc", "not-hex!"):
        r = evalsvc("runs", "show", bad, *db)
        assert r.returncode == 2 and "no run" in r.stderr, (bad, r.stderr)
        with api.client("read") as http:
            assert http.get(f"/runs/{bad}").status_code == 404


def test_ambiguous_prefix_is_refused_never_guessed(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = RunSpec(
        baseline=EndpointRef(url=BASE), candidates=[EndpointRef(url=CAND)], suites=["needle-smoke"]
    )
    ids = [api.store.create_run(spec).id for _ in range(17)]  # 17 ids, 16 first digits
    first = [i[0] for i in ids]
    shared = next(c for c in first if first.count(c) > 1)
    monkeypatch.setattr(history, "MIN_PREFIX", 1)
    with pytest.raises(history.AmbiguousRunId, match="ambiguous"):
        history.find_run(api.store, shared)
    # A full id is never ambiguous, and a longer prefix narrows it down to one run.
    target = next(i for i in ids if i[0] == shared)
    assert history.find_run(api.store, target).id == target
    assert history.find_run(api.store, target[:20]).id == target


def _remote_compare(api: Api, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "evalsvc.cli.main", "compare", BASE, CAND,
         "--suite", "needle-smoke", "--server", api.base_url,
         "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"), *extra],
        env={**os.environ, "EVALSVC_TOKEN": api.tokens["submit"]},
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # As in a terminal: a shell runs background jobs with SIGINT ignored, and an ignored
        # disposition is inherited across exec, so Ctrl-C would never reach the CLI.
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _check_error_reports(tmp_path: Path, run_id: str, reason: str) -> None:
    report = json.loads((tmp_path / "r.json").read_text())
    check_schema(report)
    assert report["verdict"] == "error" and report["run_id"] == run_id
    assert reason in report["error"] and report["candidates"][0]["url"] == CAND
    junit = ET.fromstring((tmp_path / "j.xml").read_text())
    assert junit.get("errors") == "1"
    assert junit.find(".//error").get("type") == "infrastructure"  # type: ignore[union-attr]


@pytest.mark.parametrize("how", ["sigint", "sigterm"])
def test_interrupted_remote_compare_cancels_its_run(api: Api, tmp_path: Path, how: str) -> None:
    # No worker runs: the run stays queued until the CLI is interrupted.
    proc = _remote_compare(api, tmp_path)
    deadline = time.monotonic() + 300  # a loaded 2-core host starts the CLI in tens of seconds
    while not api.store.list_runs():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    (run,) = api.store.list_runs()
    # The run is stored once the server has it; the CLI knows its id only once the answer is
    # back, and says so. Interrupted before that, it cannot cancel the run (it says it does not
    # know whether the server queued it): wait for the line, not for a guess at the host's speed.
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("submitted run"):
            break
    else:
        raise AssertionError(proc.communicate())
    time.sleep(1.0)  # let it reach the polling loop
    proc.send_signal(signal.SIGINT if how == "sigint" else signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 4, stderr
    assert f"run {run.id} cancelled" in stderr
    assert api.store.get_run(run.id).status == RunStatus.cancelled  # type: ignore[union-attr]
    _check_error_reports(tmp_path, run.id, "interrupted")


def test_remote_compare_wait_timeout_cancels(api: Api, tmp_path: Path) -> None:
    proc = _remote_compare(api, tmp_path, "--wait-timeout", "3")
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 4, stderr
    (run,) = api.store.list_runs()
    assert run.status == RunStatus.cancelled
    _check_error_reports(tmp_path, run.id, "--wait-timeout 3")


def test_version() -> None:
    from evalsvc import __version__

    r = subprocess.run([sys.executable, "-m", "evalsvc.cli.main", "--version"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"evalsvc {__version__}"
