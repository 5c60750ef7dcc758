"""``POST /api/v1/gate-logs``: uploaded logs gated like ``evalsvc gate-logs``, on the real API
server (uvicorn on loopback, SQLite and PostgreSQL): the same report as the service on the same
files, stored as a run; lm-eval directories as several files; Inspect logs; a promptfoo file
holding both providers; scopes; the upload bound (larger than other bodies, still bounded);
refusals with the reason."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from evalsvc import limits
from evalsvc.db import Store
from evalsvc.services.gatelogs import gate_logs
from tests.services.test_gatelogs import FIXTURES, _scores, check_schema, write_lmeval

from .conftest import Api


def _files(role: str, *paths: Path, names: list[str] | None = None) -> list[tuple[str, Any]]:
    return [
        (role, ((names or [p.name for p in paths])[i], p.read_bytes(), "application/jsonl"))
        for i, p in enumerate(paths)
    ]


def test_upload_gives_the_cli_report_and_stores_the_run(api: Api, tmp_path: Path) -> None:
    base, cand = _scores(300, lost=9, gained=1)
    b = write_lmeval(tmp_path / "b", base)
    c = write_lmeval(tmp_path / "c", cand)
    with api.client("submit") as client:
        r = client.post(
            "/gate-logs",
            files=_files("baseline", b, names=[f"../../etc/{b.name}"]) + _files("candidate", c),
            data={"margin": "0.05", "slice": [], "max_error_rate": "0.05"},
        )
    assert r.status_code == 200, r.text
    report = r.json()
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
        r = client.post("/gate-logs", files=_files("baseline", b1, b2) + _files("candidate", c1, c2))
        assert r.status_code == 200, r.text
        assert sorted(s["suite"] for s in r.json()["candidates"][0]["suites"]) == ["one", "two"]
        r = client.post(
            "/gate-logs",
            files=_files("baseline", FIXTURES / "inspect_baseline.json")
            + _files("candidate", FIXTURES / "inspect_candidate.json"),
        )
    assert r.status_code == 200, r.text
    check_schema(r.json())


def test_a_promptfoo_file_with_both_providers(api: Api, tmp_path: Path) -> None:
    pf = FIXTURES / "promptfoo_qa.json"
    files = _files("baseline", pf) + _files("candidate", pf)
    with api.client("submit") as client:
        r = client.post("/gate-logs", files=files)
        assert r.status_code == 422 and "name this side's" in r.text
        r = client.post(
            "/gate-logs", files=files,
            data={"baseline_provider": "bf16", "candidate_provider": "fp8-kv"},
        )
    assert r.status_code == 200, r.text
    report = r.json()
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
    before = len(api.store.list_runs())
    with api.client("submit") as client:
        r = client.post("/gate-logs", files=files)
        assert r.status_code == 422
        assert "different tasks" in r.text and "only the baseline has one" in r.text
        r = client.post("/gate-logs", files=_files("baseline", b))  # no candidate
        assert r.status_code == 422
        r = client.post("/gate-logs", files=_files("baseline", b) + _files("candidate", b),
                        data={"alpha": "0.7"})
        assert r.status_code == 422 and "alpha" in r.text
        r = client.post("/gate-logs", files=_files("baseline", b, b) + _files("candidate", b))
        assert r.status_code == 422 and "two files named" in r.text
    assert len(api.store.list_runs()) == before  # nothing stored for a refused upload


def test_the_upload_bound_is_its_own(api: Api, tmp_path: Path) -> None:
    # Over the 1 MiB bound of every other body, under the upload's: accepted.
    base, cand = _scores(1500, lost=0)
    b = write_lmeval(tmp_path / "b", base)
    c = write_lmeval(tmp_path / "c", cand)
    assert b.stat().st_size + c.stat().st_size > limits.MAX_BODY_BYTES
    with api.client("submit") as client:
        r = client.post("/gate-logs", files=_files("baseline", b) + _files("candidate", c))
    assert r.status_code == 200, r.text
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
