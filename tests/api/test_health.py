"""``/healthz``: 200 at head; 503 (and 503 on routes) while the database is unreachable or not
at head, recovering without a restart once it is migrated."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx

from evalsvc.db import Store
from evalsvc.webapp import create_app
from tests.fixtures.loopback import uvicorn_app

from .conftest import Api


def test_healthz_ok(api: Api) -> None:
    body = httpx.get(f"{api.base_url}/api/v1/healthz", timeout=60).json()
    assert body["status"] == "ok" and body["detail"] is None


def test_unreachable_database_is_503(tmp_path: Path) -> None:
    url = "postgresql+psycopg://evalsvc:secret@127.0.0.1:1/evalsvc"
    with uvicorn_app(create_app(url, auth=True)) as base:
        resp = httpx.get(f"{base}/api/v1/healthz", timeout=60)
        assert resp.status_code == 503
        body = resp.json()
        assert body["status"] == "unavailable" and "cannot use database" in body["detail"]
        assert "secret" not in resp.text  # the password never leaves the server
        runs = httpx.get(f"{base}/api/v1/runs", headers={"Authorization": "Bearer x"}, timeout=60)
        assert runs.status_code == 503 and "secret" not in runs.text
        metrics = httpx.get(f"{base}/metrics", timeout=60).text
        assert "evalsvc_database_up 0.0" in metrics


def test_database_not_at_head_is_503_until_upgraded(tmp_path: Path, sqlite_template: Path) -> None:
    path = tmp_path / "old.db"
    shutil.copy(sqlite_template, path)
    url = f"sqlite:///{path}"
    with Store.from_url(url) as store:
        store.downgrade("base")
    with uvicorn_app(create_app(url, auth=False)) as base:
        resp = httpx.get(f"{base}/api/v1/healthz", timeout=60)
        assert resp.status_code == 503 and "evalsvc db upgrade" in resp.json()["detail"]
        runs = httpx.get(f"{base}/api/v1/runs", timeout=60)
        assert runs.status_code == 503 and "evalsvc db upgrade" in runs.json()["detail"]
        with Store.from_url(url) as store:
            store.upgrade()
        assert httpx.get(f"{base}/api/v1/runs", timeout=60).json() == []
        assert httpx.get(f"{base}/api/v1/healthz", timeout=60).status_code == 200
