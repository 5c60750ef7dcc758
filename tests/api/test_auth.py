"""Bearer-token authentication and scopes (read ⊂ submit ⊂ admin), against a real server."""

from __future__ import annotations

import httpx

from evalsvc.webapp import create_app
from tests.fixtures.loopback import uvicorn_app

from .conftest import Api

RUN = {
    "baseline": {"url": "http://127.0.0.1:9001/v1"},
    "candidates": [{"url": "http://127.0.0.1:9002/v1"}],
    "suites": ["needle-smoke"],
}
ENDPOINT = {"name": "bf16", "url": "http://127.0.0.1:9001/v1"}


def test_no_or_bad_token_is_401_with_a_bearer_challenge(api: Api) -> None:
    with api.client(None) as anonymous:
        resp = anonymous.get("/runs")
        assert resp.status_code == 401
        assert resp.headers["www-authenticate"] == "Bearer"
        assert "bearer token" in resp.json()["detail"]
        assert anonymous.post("/runs", json=RUN).status_code == 401
    with api.client(token="evs_not-a-token") as forged:
        resp = forged.get("/endpoints")
        assert resp.status_code == 401
        assert resp.json()["detail"] == "invalid or revoked API token"
    with httpx.Client(base_url=f"{api.base_url}/api/v1", timeout=30) as basic:
        assert basic.get("/runs", auth=("user", "pw")).status_code == 401


def test_revoked_token_is_401(api: Api) -> None:
    with api.client("read") as reader:
        assert reader.get("/runs").status_code == 200
        assert api.store.revoke_api_token("t-read")
        assert reader.get("/runs").status_code == 401


def test_read_scope_reads_but_cannot_submit_or_administer(api: Api) -> None:
    with api.client("read") as reader:
        for path in ("/runs", "/endpoints", "/suites", "/schedules"):
            assert reader.get(path).status_code == 200, path
        resp = reader.post("/runs", json=RUN)
        assert resp.status_code == 403
        assert "'submit' scope" in resp.json()["detail"]
        assert reader.post("/endpoints", json=ENDPOINT).status_code == 403
    assert api.store.list_runs() == []
    assert api.store.list_endpoints() == []


def test_submit_scope_submits_and_cancels_but_cannot_administer(api: Api) -> None:
    with api.client("submit") as submitter:
        resp = submitter.post("/runs", json=RUN)
        assert resp.status_code == 202, resp.text
        run_id = resp.json()["id"]
        assert submitter.get(f"/runs/{run_id}").status_code == 200  # submit implies read
        assert submitter.post(f"/runs/{run_id}/cancel").status_code == 200
        resp = submitter.post("/endpoints", json=ENDPOINT)
        assert resp.status_code == 403
        assert "'admin' scope" in resp.json()["detail"]
        assert submitter.delete("/schedules/nightly").status_code == 403


def test_admin_scope_does_everything(api: Api) -> None:
    with api.client("admin") as admin:
        assert admin.post("/endpoints", json=ENDPOINT).status_code == 201
        assert admin.get("/endpoints/bf16").status_code == 200
        assert admin.post("/runs", json=RUN).status_code == 202
        assert admin.get("/runs").status_code == 200


def test_health_metrics_and_docs_need_no_token(api: Api) -> None:
    with httpx.Client(base_url=api.base_url, timeout=30) as anonymous:
        assert anonymous.get("/api/v1/healthz").status_code == 200
        assert anonymous.get("/healthz").status_code == 200
        assert anonymous.get("/api/v1/metrics").status_code == 200
        assert anonymous.get("/docs").status_code == 200
        schema = anonymous.get("/openapi.json").json()
    assert "/api/v1/runs/{run_id}/gate" in schema["paths"]
    assert "HTTPBearer" in schema["components"]["securitySchemes"]
    assert "RunCreate" in schema["components"]["schemas"]


def test_auth_off_serves_without_token(api: Api) -> None:
    with (
        uvicorn_app(create_app(api.db_url, auth=False)) as url,
        httpx.Client(base_url=f"{url}/api/v1", timeout=30) as anonymous,
    ):
        assert anonymous.post("/endpoints", json=ENDPOINT).status_code == 201
        assert anonymous.post("/runs", json=RUN).status_code == 202
        assert len(anonymous.get("/runs").json()) == 1
