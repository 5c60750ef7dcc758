"""``/runs``: queue (202), follow, cancel, and the report and gate of runs a real ``Worker``
finished; bad input is 4xx with the service's message, never 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from evalsvc.domain import EXIT_CODES, RunStatus

from .conftest import Api

BASE = "http://127.0.0.1:9001/v1"
CAND = "http://127.0.0.1:9002/v1"


def run_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "baseline": {"url": BASE, "model": "smollm2-bf16"},
        "candidates": [{"url": CAND}],
        "suites": ["needle-smoke"],
        "options": {"samples": 5, "seed": 7},
    }
    body.update(overrides)
    return body


def submit(client: httpx.Client, **overrides: Any) -> str:
    resp = client.post("/runs", json=run_body(**overrides))
    assert resp.status_code == 202, resp.text
    assert resp.json()["status"] == "queued"
    run_id: str = resp.json()["id"]
    return run_id


def test_submit_queues_a_run_with_the_spec(api: Api) -> None:
    with api.client("submit") as client:
        run_id = submit(client, labels={"team": "serving"}, priority=3)
        run = client.get(f"/runs/{run_id}").json()
    assert run["status"] == "queued"
    assert run["verdict"] is None and run["error"] is None and run["started_at"] is None
    assert run["spec"]["baseline"] == {
        "url": BASE,
        "model": "smollm2-bf16",
        "name": None,
        "api_key_env": None,
        "tokenizer": None,
    }
    assert run["spec"]["options"]["samples"] == 5
    assert run["spec"]["labels"] == {"team": "serving"} and run["spec"]["priority"] == 3
    assert "lease_owner" not in run
    stored = api.store.get_run(run_id)
    assert stored is not None and stored.status == RunStatus.queued


def test_registered_names_resolve_to_their_urls(api: Api) -> None:
    api.store.upsert_endpoint(name="bf16", url=BASE, model="smollm2-bf16")
    api.store.upsert_endpoint(name="w8a8", url=CAND, api_key_env="EVALSVC_ENDPOINT_KEY_W8A8")
    with api.client("submit") as client:
        run_id = submit(client, baseline={"name": "bf16"}, candidates=[{"name": "w8a8"}])
        spec = client.get(f"/runs/{run_id}").json()["spec"]
    assert spec["baseline"]["url"] == BASE and spec["baseline"]["name"] == "bf16"
    assert spec["candidates"][0] == {
        "url": CAND,
        "model": None,
        "name": "w8a8",
        "api_key_env": "EVALSVC_ENDPOINT_KEY_W8A8",
        "tokenizer": None,
    }


@pytest.mark.parametrize(
    ("overrides", "status", "message"),
    [
        ({"suites": ["no-such-suite"]}, 422, "no-such-suite"),
        ({"suites": ["/etc/evalsvc/secret.yaml"]}, 422, "not file paths"),
        ({"suites": ["suites/needle-smoke.yaml"]}, 422, "not file paths"),
        ({"baseline": {"name": "ghost"}}, 422, "'ghost' is neither a URL"),
        ({"candidates": []}, 422, "at least 1"),
        ({"suites": []}, 422, "at least 1"),
        ({"baseline": {}}, 422, "url or a registered endpoint name"),
        ({"options": {"samples": 5, "turbo": True}}, 422, "turbo"),
        ({"options": {"samples": 0}}, 422, "samples"),
        ({"baseline": {"url": "ftp://x"}}, 422, "http(s) base URL"),
    ],
)
def test_bad_run_is_refused_with_its_reason(
    api: Api, overrides: dict[str, Any], status: int, message: str
) -> None:
    with api.client("submit") as client:
        resp = client.post("/runs", json=run_body(**overrides))
    assert resp.status_code == status, resp.text
    assert message in resp.text
    assert api.store.list_runs() == []


def test_list_filters(api: Api) -> None:
    with api.client("submit") as client:
        first = submit(client)
        second = submit(client, labels={"verdict": "fail"})
        third = submit(client)
        client.post(f"/runs/{third}/cancel")
        assert api.run_worker_once() == 2
        assert [r["id"] for r in client.get("/runs").json()] == [third, second, first]
        assert [r["id"] for r in client.get("/runs", params={"limit": 1}).json()] == [third]
        assert [r["id"] for r in client.get("/runs", params={"verdict": "fail"}).json()] == [second]
        assert [r["id"] for r in client.get("/runs", params={"status": "cancelled"}).json()] == [
            third
        ]
        assert {r["id"] for r in client.get("/runs", params={"endpoint": CAND}).json()} == {
            first,
            second,
            third,
        }
        assert client.get("/runs", params={"status": "sleeping"}).status_code == 422
        assert client.get("/runs", params={"limit": 0}).status_code == 422


def test_cancel(api: Api) -> None:
    with api.client("submit") as client:
        run_id = submit(client)
        resp = client.post(f"/runs/{run_id}/cancel")
        assert resp.status_code == 200
        assert resp.json()["status"] == "cancelled" and resp.json()["finished_at"]
        assert client.get(f"/runs/{run_id}").json()["status"] == "cancelled"
        again = client.post(f"/runs/{run_id}/cancel")
        assert again.status_code == 409
        assert "already cancelled" in again.json()["detail"]
        # Cancelled runs are never claimed, and gate as an error (no evidence either way).
        assert api.run_worker_once() == 0
        assert client.get(f"/runs/{run_id}/gate").json() == {
            "run_id": run_id,
            "status": "cancelled",
            "verdict": "error",
            "exit_code": 4,
            "reasons": [{"code": "infrastructure_error", "suite": None, "candidate": None,
                         "candidate_label": None, "message": "the run is cancelled"}],
            "basis": None,  # no report: nothing a verdict could rest on
            "refused_by_policy": [],
        }
        assert client.get(f"/runs/{run_id}/report").status_code == 409


def test_report_and_gate_are_409_until_finished(api: Api) -> None:
    with api.client("submit") as client:
        run_id = submit(client)
        for path in ("report", "gate"):
            resp = client.get(f"/runs/{run_id}/{path}")
            assert resp.status_code == 409
            assert "queued" in resp.json()["detail"]
        claimed = api.store.claim_run(worker_id="w-test", lease_seconds=30)
        assert claimed is not None and claimed.id == run_id
        resp = client.get(f"/runs/{run_id}/gate")
        assert resp.status_code == 409 and "running" in resp.json()["detail"]
        assert client.get(f"/runs/{run_id}").json()["started_at"] is not None


def test_unknown_run_is_404(api: Api) -> None:
    with api.client("submit") as client:
        for resp in (
            client.get("/runs/nope"),
            client.get("/runs/nope/report"),
            client.get("/runs/nope/gate"),
            client.post("/runs/nope/cancel"),
        ):
            assert resp.status_code == 404
            assert resp.json()["detail"] == "no run 'nope'"


@pytest.mark.parametrize("verdict", ["pass", "fail", "inconclusive"])
def test_completed_run_report_and_gate(api: Api, verdict: str) -> None:
    with api.client("submit") as client:
        run_id = submit(client, labels={"verdict": verdict})
        assert api.run_worker_once() == 1
        run = client.get(f"/runs/{run_id}").json()
        assert run["status"] == "completed" and run["verdict"] == verdict
        assert run["finished_at"] and run["attempts"] == 1
        report = client.get(f"/runs/{run_id}/report").json()
        gate = client.get(f"/runs/{run_id}/gate").json()
    assert report == api.store.get_report(run_id)
    assert report["run_id"] == run_id and report["verdict"] == verdict
    assert report["candidates"][0]["suites"][0]["suite"] == "needle-smoke"
    # What the verdict rests on: derived from the report (this executor's writes no basis).
    basis = gate.pop("basis")
    assert [s["suite"] for s in basis["suites"]] == ["needle-smoke"]
    assert basis["suites"][0]["sides"]["baseline"]["source"] == "measured"
    assert gate == {
        "run_id": run_id,
        "status": "completed",
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "reasons": [],  # the test executor's report gives none
        "refused_by_policy": [],
    }


def test_errored_run_gates_4_and_has_no_report(api: Api) -> None:
    with api.client("read") as reader, api.client("submit") as client:
        run_id = submit(client, labels={"verdict": "error"})
        api.run_worker_once()
        run = reader.get(f"/runs/{run_id}").json()
        assert run["status"] == "error" and "unreachable" in run["error"]
        assert reader.get(f"/runs/{run_id}/gate").json()["exit_code"] == 4
        resp = reader.get(f"/runs/{run_id}/report")
        assert resp.status_code == 409 and "unreachable" in resp.json()["detail"]


def test_suites_lists_the_catalog(api: Api) -> None:
    from evalsvc.services.catalog import suite_rows

    with api.client("read") as reader:
        suites = reader.get("/suites").json()
    by_name = {s["name"]: s for s in suites}
    assert "needle-smoke" in by_name and by_name["needle-smoke"]["kind"] == "needle"
    assert [s["name"] for s in suites] == [r["name"] for r in suite_rows()]
    sets = [s for s in suites if s["kind"] == "set"]
    assert all(s["suites"] for s in sets)
    # Each row's gate, needs and cost, as `evalsvc suites list --json` gives them.
    assert by_name["gpu"]["needs"] == ["chat", "completions", "echo", "tokenize"]
    assert by_name["reasoning-gpu"]["gate"] == "accuracy, margin 0.05"
    assert by_name["reasoning-gpu"]["cost"]["items"] == [1260, 1260]


def test_metrics_count_runs_by_status(api: Api) -> None:
    with api.client("submit") as client:
        submit(client)
        cancelled = submit(client)
        client.post(f"/runs/{cancelled}/cancel")
        text = httpx.get(f"{api.base_url}/api/v1/metrics", timeout=60).text
    assert 'evalsvc_runs{status="queued"} 1.0' in text
    assert 'evalsvc_runs{status="cancelled"} 1.0' in text
    assert 'evalsvc_runs{status="running"} 0.0' in text
    assert "evalsvc_database_up 1.0" in text
    # The server serves the whole module: only the label set is checked, not the count.
    assert 'evalsvc_api_requests_total{handler="submit_run",method="POST",status="202"}' in text
