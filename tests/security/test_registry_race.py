"""Issue 17 break 3: a freshly started ``evalsvc api serve`` answered some of 40 parallel valid
``POST /runs`` with 422 "unknown suite kind 'reasoning'" (the suite-kind registry marked itself
loaded before it loaded). A real server process, its first requests, all in parallel."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from evalsvc.db import Store
from tests.fixtures.apiserve import api_serve

SUITES = ["reasoning-smoke", "reasoning", "reasoning-hard"]


def test_a_fresh_server_accepts_40_parallel_reasoning_runs(
    tmp_path: Path, sqlite_template: Path
) -> None:
    db = tmp_path / "evalsvc.db"
    db.write_bytes(sqlite_template.read_bytes())
    url = f"sqlite:///{db}"
    with Store.from_url(url) as store:
        token, _ = store.create_api_token(name="race", scopes=["submit"])
    body = {
        "baseline": {"url": "http://127.0.0.1:9001/v1"},
        "candidates": [{"url": "http://127.0.0.1:9002/v1"}],
        "options": {"samples": 4},
    }
    # /healthz (the readiness wait) touches no suite; the first suite lookups are these.
    with (
        api_serve(url, log=tmp_path / "api.log") as api,
        httpx.Client(
            base_url=f"{api.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as client,
        ThreadPoolExecutor(40) as pool,
    ):
        answers = list(pool.map(
            lambda i: client.post("/runs", json={**body, "suites": [SUITES[i % 3]]}), range(40)
        ))
    codes = [a.status_code for a in answers]
    assert codes == [202] * 40, [a.text for a in answers if a.status_code != 202][:3]
    with Store.from_url(url) as store:
        assert len(store.list_runs()) == 40
