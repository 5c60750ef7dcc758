"""``POST /api/v1/gate-logs``: uploaded logs queued as a run and gated by a worker like
``evalsvc gate-logs``, on the real API server (uvicorn on loopback, SQLite and PostgreSQL) and a
real ``Worker`` with the default executor: 202 with the run id and where to follow it; the
same report as the service on the same files, stored as a run; the stored files dropped once
gated; lm-eval directories as several files; Inspect logs; a promptfoo file holding both
providers; scopes; the upload bound (larger than other bodies, still bounded); refusals with
the reason, at upload (422) or as the run's error, in the form fields' words."""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from evalsvc import limits
from evalsvc.db import Store
from evalsvc.domain import RunInfo
from evalsvc.scheduler import default_executor
from evalsvc.services.gatelogs import execute_upload_run, gate_logs
from tests.services.test_gatelogs import FIXTURES, _scores, check_schema, write_lmeval

from .conftest import Api


def _files(role: str, *paths: Path, names: list[str] | None = None) -> list[tuple[str, Any]]:
    return [
        (role, ((names or [p.name for p in paths])[i], p.read_bytes(), "application/jsonl"))
        for i, p in enumerate(paths)
    ]


def gate_upload(
    api: Api, client: httpx.Client, files: list[tuple[str, Any]], data: dict[str, Any] | None = None
) -> tuple[RunInfo, dict[str, Any] | None]:
    """Upload, let a real worker gate what is queued, and read the run and its report back the
    way a client does (the status URL, then the report URL; None when the run has none)."""
    r = client.post("/gate-logs", files=files, data=data or {})
    assert r.status_code == 202, r.text
    queued = r.json()
    assert queued["status"] == "queued" and queued["run_id"] == queued["id"]
    assert queued["status_url"] == f"/api/v1/runs/{queued['id']}"
    api.run_worker_once(default_executor)
    status = client.get(queued["status_url"].removeprefix("/api/v1"))
    assert status.status_code == 200, status.text
    run = api.store.get_run(queued["id"])
    assert run is not None and status.json()["status"] == run.status.value
    report = client.get(queued["report_url"].removeprefix("/api/v1"))
    assert report.status_code in (200, 409), report.text
    # Gated or refused, the run no longer holds its uploaded files.
    assert api.store.log_uploads.manifest(run.id) is None
    return run, report.json() if report.status_code == 200 else None


def test_upload_gives_the_cli_report_and_stores_the_run(api: Api, tmp_path: Path) -> None:
    base, cand = _scores(300, lost=9, gained=1)
    b = write_lmeval(tmp_path / "b", base)
    c = write_lmeval(tmp_path / "c", cand)
    with api.client("submit") as client:
        run, report = gate_upload(
            api,
            client,
            _files("baseline", b, names=[f"../../etc/{b.name}"]) + _files("candidate", c),
            data={"margin": "0.05", "slice": [], "max_error_rate": "0.05"},
        )
    assert report is not None and run.status.value == "completed", run.error
    check_schema(report)
    local = Store.from_url(f"sqlite:///{tmp_path / 'local.db'}")
    local.ensure_ready(upgrade_fresh_sqlite=True)
    direct = gate_logs(b, c, store=local, gate={"margin": 0.05})
    got, want = report["candidates"][0]["suites"][0], direct["candidates"][0]["suites"][0]
    for key in ("verdict", "n", "baseline", "candidate", "delta", "ci", "recovery"):
        assert got[key] == want[key], key
    assert got["details"]["log_pairs"] == want["details"]["log_pairs"]
    assert report["verdict"] == direct["verdict"] and got["n"] == 300
    # Stored like any run; the server's temporary paths appear nowhere in it.
    run_id = report["run_id"]
    assert run_id == run.id and run.submitted_by == "t-submit"
    assert api.store.get_report(run_id)["verdict"] == report["verdict"]
    assert len(api.store.get_samples(run_id)) == 600
    stored = json.dumps([api.store.get_report(run_id), api.store.get_run(run_id).spec.model_dump(
        mode="json")])
    assert "evalsvc-gate-logs-" not in stored and "/tmp" not in stored
    assert report["baseline"]["url"].startswith("upload:")
    assert ".." not in report["baseline"]["url"]


def test_an_lmeval_directory_is_several_files_and_inspect_logs_work(
    api: Api, tmp_path: Path
) -> None:
    base, cand = _scores(120, lost=0)
    b1 = write_lmeval(tmp_path / "b", base, task="one")
    b2 = write_lmeval(tmp_path / "b", base, task="two")
    c1 = write_lmeval(tmp_path / "c", cand, task="one")
    c2 = write_lmeval(tmp_path / "c", cand, task="two")
    with api.client("submit") as client:
        _, report = gate_upload(
            api, client, _files("baseline", b1, b2) + _files("candidate", c1, c2)
        )
        assert report is not None
        assert sorted(s["suite"] for s in report["candidates"][0]["suites"]) == ["one", "two"]
        files = report["candidates"][0]["suites"][0]["details"]
        _, report = gate_upload(
            api,
            client,
            _files("baseline", FIXTURES / "inspect_baseline.json")
            + _files("candidate", FIXTURES / "inspect_candidate.json"),
        )
    assert report is not None
    check_schema(report)
    assert "evalsvc-gate-logs-" not in json.dumps(files)


def test_a_promptfoo_file_with_both_providers(api: Api, tmp_path: Path) -> None:
    pf = FIXTURES / "promptfoo_qa.json"
    files = _files("baseline", pf) + _files("candidate", pf)
    with api.client("submit") as client:
        run, report = gate_upload(api, client, files)
        # N7: the refusal names the upload's own file and the form fields, not server paths
        # or the CLI's flags.
        assert run.status.value == "error" and report is None
        assert run.error is not None and "name this side's" in run.error
        assert "the form field baseline_provider" in run.error and "--" not in run.error
        assert f"{pf.name}: the promptfoo results hold" in run.error
        assert "/tmp" not in run.error and "evalsvc-gate-logs" not in run.error
        run, report = gate_upload(
            api, client, files, data={"baseline_provider": "bf16", "candidate_provider": "fp8-kv"}
        )
    assert report is not None, run.error
    check_schema(report)
    local = Store.from_url(f"sqlite:///{tmp_path / 'local.db'}")
    local.ensure_ready(upgrade_fresh_sqlite=True)
    direct = gate_logs(pf, pf, store=local, providers=("bf16", "fp8-kv"))
    got, want = report["candidates"][0]["suites"][0], direct["candidates"][0]["suites"][0]
    for key in ("verdict", "n", "baseline", "candidate", "delta", "ci", "recovery"):
        assert got[key] == want[key], key


def test_scopes_and_refusals(api: Api, tmp_path: Path) -> None:
    b = write_lmeval(tmp_path / "b", [1.0, 0.0] * 20, task="one")
    c = write_lmeval(tmp_path / "c", [1.0, 0.0] * 20, task="other")
    files = _files("baseline", b) + _files("candidate", c)
    with api.client(None) as anon:
        assert anon.post("/gate-logs", files=files).status_code == 401
    with api.client("read") as reader:
        assert reader.post("/gate-logs", files=files).status_code == 403
    with api.client("submit") as client:
        run, _ = gate_upload(api, client, files)  # what only reading the logs can tell
        assert run.status.value == "error" and run.verdict == "error"
        assert run.error is not None and run.error.startswith("uploaded logs refused: ")
        assert "different tasks" in run.error and "only the baseline has one" in run.error
        before = len(api.store.list_runs())
        r = client.post("/gate-logs", files=_files("baseline", b))  # no candidate
        assert r.status_code == 422
        r = client.post("/gate-logs", files=_files("baseline", b) + _files("candidate", b),
                        data={"alpha": "0.7"})
        assert r.status_code == 422 and "alpha" in r.text
        r = client.post("/gate-logs", files=_files("baseline", b, b) + _files("candidate", b))
        assert r.status_code == 422 and "two files named" in r.text
        # What the names say is checked before anything is stored, in the form fields' words.
        r = client.post("/gate-logs", files=_files("baseline", b) + _files("candidate", b),
                        data={"baseline_provider": "bf16"})
        assert r.status_code == 422 and "a provider is named" in r.text
        r = client.post("/gate-logs", files=_files("baseline", b, names=["log.txt"])
                        + _files("candidate", b))
        assert r.status_code == 422 and "log.txt: unknown log format" in r.text
        assert api.store.list_runs() and len(api.store.list_runs()) == before  # nothing stored


def test_the_upload_bound_is_its_own(api: Api, tmp_path: Path) -> None:
    # Over the 1 MiB bound of every other body, under the upload's: accepted.
    base, cand = _scores(1500, lost=0)
    b = write_lmeval(tmp_path / "b", base)
    c = write_lmeval(tmp_path / "c", cand)
    assert b.stat().st_size + c.stat().st_size > limits.MAX_BODY_BYTES
    with api.client("submit") as client:
        run, report = gate_upload(api, client, _files("baseline", b) + _files("candidate", c))
    assert report is not None and report["candidates"][0]["suites"][0]["n"] == 1500
    # A declared length past the upload bound is refused before any byte of it is read.
    url = urlsplit(api.base_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    try:
        conn.putrequest("POST", "/api/v1/gate-logs")
        conn.putheader("Authorization", f"Bearer {api.tokens['submit']}")
        conn.putheader("Content-Type", "multipart/form-data; boundary=x")
        conn.putheader("Content-Length", str(limits.MAX_UPLOAD_BYTES + 1))
        conn.endheaders()
        resp = conn.getresponse()
        assert resp.status == 413
        assert str(limits.MAX_UPLOAD_BYTES) in resp.read().decode()
    finally:
        conn.close()


def test_uploads_wait_for_a_worker_cancellable_bounded_and_with_progress(
    api: Api, tmp_path: Path
) -> None:
    """N5: the API stores and queues; the worker gates (progress in the run), a cancel stops it
    and drops the files, and a token has at most MAX_PENDING_UPLOADS uploads waiting."""
    base, cand = _scores(60, lost=0)
    files = _files("baseline", write_lmeval(tmp_path / "b", base)) + _files(
        "candidate", write_lmeval(tmp_path / "c", cand)
    )
    with api.client("submit") as client:
        ids = []
        for _ in range(limits.MAX_PENDING_UPLOADS):
            r = client.post("/gate-logs", files=files)
            assert r.status_code == 202, r.text
            ids.append(r.json()["id"])
        r = client.post("/gate-logs", files=files)
        assert r.status_code == 429 and r.headers["Retry-After"]
        # Stored, not gated: no report, the files in the database.
        assert api.store.get_report(ids[0]) is None
        assert api.store.log_uploads.manifest(ids[0])["files"][0]["size"] > 0
        # Cancelled while queued: no worker takes it; its files go with the cancel.
        assert client.post(f"/runs/{ids[0]}/cancel").json()["status"] == "cancelled"
        assert api.store.log_uploads.manifest(ids[0]) is None
        # Cancelled while a worker holds it: the executor stops at its next stage.
        claimed = api.store.claim_run(worker_id="w-test", lease_seconds=60)
        assert claimed is not None and claimed.id == ids[1]
        assert client.post(f"/runs/{ids[1]}/cancel").json()["status"] == "cancelled"
        stop = threading.Event()
        stop.set()
        execute_upload_run(api.store, claimed, cancel=stop, worker_id="w-test")
        assert api.store.get_run(ids[1]).status.value == "cancelled"
        assert api.store.log_uploads.manifest(ids[1]) is None
        for run_id in ids[2:]:
            api.store.delete_run(run_id)  # their files go with them
        run, report = gate_upload(api, client, files)
        assert report is not None and run.status.value == "completed"
        shown = client.get(f"/runs/{run.id}").json()
        progress = shown["progress"]
        assert progress["stage"] == "done" and progress["items"] == {"toy": 60}
        assert progress["done"]["toy"] == {"baseline": 60, "candidate:0": 60}
        # Each role key with the name people read (the uploaded logs' names here).
        spec = shown["spec"]
        assert progress["labels"] == {
            "baseline": f"{spec['baseline']['name']} ({spec['baseline']['model']})",
            "candidate:0": f"{spec['candidates'][0]['name']} ({spec['candidates'][0]['model']})",
        }


def test_parallel_uploads_of_one_token_never_pass_the_quota(api: Api, tmp_path: Path) -> None:
    """24 uploads of one token at once: exactly MAX_PENDING_UPLOADS are stored, the others
    refused with 429 (the count and the insert are one locked transaction; counted outside it,
    18 of 24 were stored against the quota of 16)."""
    base, cand = _scores(20, lost=0)
    files = _files("baseline", write_lmeval(tmp_path / "b", base)) + _files(
        "candidate", write_lmeval(tmp_path / "c", cand)
    )
    start = threading.Barrier(24)
    codes: list[int] = []

    def upload() -> None:
        with api.client("submit") as client:
            start.wait()
            while True:
                r = client.post("/gate-logs", files=files)
                if r.status_code != 503:  # too many being stored at once: retry, as told
                    codes.append(r.status_code)
                    return

    threads = [threading.Thread(target=upload) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [202] * limits.MAX_PENDING_UPLOADS + [429] * (
        24 - limits.MAX_PENDING_UPLOADS), codes
    assert api.store.log_uploads.pending("t-submit") == limits.MAX_PENDING_UPLOADS


def test_an_upload_is_bounded_like_any_run_a_worker_executes(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's item bound (EVALSVC_MAX_ITEMS) holds for the documents of an uploaded task
    as for the items of a run; the CLI, in-process, is not held to it."""
    monkeypatch.setenv("EVALSVC_MAX_ITEMS", "50")
    base, cand = _scores(60, lost=0)
    b = write_lmeval(tmp_path / "b", base)
    c = write_lmeval(tmp_path / "c", cand)
    with api.client("submit") as client:
        run, report = gate_upload(api, client, _files("baseline", b) + _files("candidate", c))
    assert report is None and run.status.value == "error"
    assert run.error is not None and "toy plans 60" in run.error and "EVALSVC_MAX_ITEMS" in run.error
    local = Store.from_url(f"sqlite:///{tmp_path / 'local.db'}")
    local.ensure_ready(upgrade_fresh_sqlite=True)
    assert gate_logs(b, c, store=local)["candidates"][0]["suites"][0]["n"] == 60


def test_a_worker_stops_an_upload_past_its_time_bound(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """N5: gating an upload has a time bound; past it the run ends error and its files go."""
    base, cand = _scores(40, lost=0)
    files = _files("baseline", write_lmeval(tmp_path / "b", base)) + _files(
        "candidate", write_lmeval(tmp_path / "c", cand)
    )
    with api.client("submit") as client:
        run_id = client.post("/gate-logs", files=files).json()["id"]
    monkeypatch.setattr(limits, "MAX_GATE_LOGS_SECONDS", 0.0)  # every stage is past it
    claimed = api.store.claim_run(worker_id="w-test", lease_seconds=60)
    assert claimed is not None and claimed.id == run_id
    execute_upload_run(api.store, claimed, cancel=threading.Event(), worker_id="w-test")
    run = api.store.get_run(run_id)
    assert run is not None and run.status.value == "error"
    assert run.error is not None and "took longer than 0 s" in run.error
    assert api.store.log_uploads.manifest(run_id) is None
