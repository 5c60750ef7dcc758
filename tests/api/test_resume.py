"""``POST /runs/{id}/resume`` (issue 48 item 1): a run a real ``Worker`` finished with a suite in
error (its requests timed out on a loopback engine that answers long prompts late) is queued
again; the next worker sends only that suite's requests and gates the run anew. Only its
submitter or an admin may; a queued or running run is 409."""

from __future__ import annotations

from evalsvc.scheduler._worker import default_executor
from tests.runner.level_server import level_server

from .conftest import Api


def test_resume_requeues_and_the_worker_resends_only_the_errored_suite(api: Api) -> None:
    # Knows reasoning-smoke's items (seed 7), so ``srv.seen`` counts every one it is sent.
    with level_server({}, [7], per_level=50, slow_words=300, slow_s=10.0) as srv:
        body = {
            "baseline": {"url": srv.url},
            "candidates": [{"url": srv.url}],
            "suites": ["reasoning-smoke", "needle-smoke"],
            "options": {"samples": 4, "request_timeout_s": 2, "concurrency": 4},
        }
        with api.client("submit") as client:
            run_id = client.post("/runs", json=body).json()["id"]
            # Still queued: nothing to resume yet.
            assert client.post(f"/runs/{run_id}/resume").status_code == 409
            assert api.run_worker_once(default_executor) == 1
            first = client.get(f"/runs/{run_id}/report").json()
            suites = {s["suite"]: s for s in first["candidates"][0]["suites"]}
            assert suites["needle-smoke"]["verdict"] == "error"
            assert suites["needle-smoke"]["error"]["counts"] == {"timeout": 8}
            assert suites["reasoning-smoke"]["error"] is None
            assert client.get(f"/runs/{run_id}").json()["status"] == "completed"
            gate = client.get(f"/runs/{run_id}/gate").json()
            assert gate["exit_code"] == 4
            assert any("timed out after 2 s" in r["message"] for r in gate["reasons"])
        other_token, _ = api.store.create_api_token(name="someone-else", scopes=["submit"])
        with api.client(token=other_token) as other:
            assert other.post(f"/runs/{run_id}/resume").status_code == 403
        srv.slow_s = 0.0
        reasoning_sent = len(srv.seen)
        assert reasoning_sent == 8
        with api.client("submit") as client:
            resp = client.post(f"/runs/{run_id}/resume")
            assert resp.status_code == 202 and resp.json()["status"] == "queued"
            assert resp.json()["verdict"] is None and resp.json()["error"] is None
            assert api.run_worker_once(default_executor) == 1
            again = client.get(f"/runs/{run_id}/report").json()
    assert len(srv.seen) == reasoning_sent  # no reasoning item sent again
    suites = {s["suite"]: s for s in again["candidates"][0]["suites"]}
    assert all(s["error"] is None for s in suites.values())
    assert suites["needle-smoke"]["n"] == 4 and suites["needle-smoke"]["n_errors"] == 0
