"""``POST /api/v1/runs`` refuses gate options that loosen a suite's policy with a 422 naming the
reason, and queues nothing (the same check as ``evalsvc compare``: ``runs.load_suites``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalsvc.db import Store
from evalsvc.webapp import create_app
from tests.fixtures.db import sqlite_template  # noqa: F401  (pytest fixture)
from tests.fixtures.loopback import uvicorn_app


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"margin": 0.9}, "would loosen"),
        ({"margin": 1e308}, "would loosen"),
        ({"alpha": 0.2}, "would loosen"),
        ({"max_error_rate": -1}, "max_error_rate"),
    ],
)
def test_loosening_gate_options_are_422(
    tmp_path: Path, sqlite_template: Path, options: dict[str, Any], message: str  # noqa: F811
) -> None:
    db = tmp_path / "evalsvc.db"
    shutil.copy(sqlite_template, db)
    url = f"sqlite:///{db}"
    body = {
        "baseline": {"url": "http://127.0.0.1:9/v1"},
        "candidates": [{"url": "http://127.0.0.1:9/v1"}],
        "suites": ["reasoning-smoke"],
        "options": options,
    }
    with uvicorn_app(create_app(url, auth=False)) as base:
        resp = httpx.post(f"{base}/api/v1/runs", json=body, timeout=30)
    assert resp.status_code == 422, resp.text
    assert message in resp.text
    with Store.from_url(url) as store:
        assert store.list_runs() == []
