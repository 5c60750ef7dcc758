"""``POST /api/v1/runs`` with ``options.sampling``: refused with a 422 naming the fix (k > 1 at
temperature 0, bounds from ``evalsvc.limits``) and nothing queued; accepted and stored as sent
otherwise (the same checks as ``evalsvc compare``: ``runs.load_suites``)."""

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


def _body(sampling: dict[str, Any]) -> dict[str, Any]:
    return {
        "baseline": {"url": "http://127.0.0.1:9/v1"},
        "candidates": [{"url": "http://127.0.0.1:9/v1"}],
        "suites": ["reasoning-smoke"],
        "options": {"sampling": sampling},
    }


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        ({"k": 4}, "set a temperature"),
        ({"k": 65, "temperature": 0.6}, "less than or equal to 64"),
        ({"k": 2, "temperature": 2.5}, "temperature"),
        ({"k": 2, "temperature": 0.6, "top_p": 0}, "top_p"),
        ({"k": 2, "temperature": 0.6, "beams": 4}, "beams"),
    ],
)
def test_bad_sampling_options_are_422(
    tmp_path: Path, sqlite_template: Path, sampling: dict[str, Any], message: str  # noqa: F811
) -> None:
    db = tmp_path / "evalsvc.db"
    shutil.copy(sqlite_template, db)
    url = f"sqlite:///{db}"
    with uvicorn_app(create_app(url, auth=False)) as base:
        resp = httpx.post(f"{base}/api/v1/runs", json=_body(sampling), timeout=30)
    assert resp.status_code == 422, resp.text
    assert message in resp.text
    with Store.from_url(url) as store:
        assert store.list_runs() == []


def test_sampling_options_are_queued_as_sent(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")  # server mode, loopback
    db = tmp_path / "evalsvc.db"
    shutil.copy(sqlite_template, db)
    url = f"sqlite:///{db}"
    sampling = {"k": 4, "temperature": 0.6, "top_p": 0.95, "max_tokens": 256}
    with uvicorn_app(create_app(url, auth=False)) as base:
        resp = httpx.post(f"{base}/api/v1/runs", json=_body(sampling), timeout=30)
    assert resp.status_code in (200, 201, 202), resp.text
    with Store.from_url(url) as store:
        (run,) = store.list_runs()
        stored = store.get_run(run.id)
    assert stored is not None and stored.spec.options.sampling is not None
    assert stored.spec.options.sampling.model_dump(exclude_none=True) == sampling
