"""The comparability guard through the REST API and the dashboard: ``options.comparability``
is validated (a name outside the closed set is a 422 naming the valid ones) and queued as sent;
a run the real runner found non-comparable gates with exit code 5 and its reasons at
``GET /api/v1/runs/{id}/gate``, and its dashboard page opens with the non-comparable banner.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunSpec
from evalsvc.services import runs
from evalsvc.webapp import create_app
from tests.fixtures.db import sqlite_template  # noqa: F401  (pytest fixture)
from tests.fixtures.loopback import uvicorn_app
from tests.runner.level_server import level_server

SEED = 5
GOOD = dict.fromkeys(range(1, 6), 0.8)


def _db(tmp_path: Path, template: Path) -> str:
    db = tmp_path / "evalsvc.db"
    shutil.copy(template, db)
    return f"sqlite:///{db}"


def _body(comparability: dict[str, Any]) -> dict[str, Any]:
    return {
        "baseline": {"url": "http://127.0.0.1:9/v1"},
        "candidates": [{"url": "http://127.0.0.1:9/v1"}],
        "suites": ["reasoning-smoke"],
        "options": {"comparability": comparability},
    }


def test_comparability_options_are_validated_and_queued_as_sent(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")  # server mode, loopback
    url = _db(tmp_path, sqlite_template)
    with uvicorn_app(create_app(url, auth=False)) as base:
        bad = httpx.post(f"{base}/api/v1/runs", json=_body({"allow": ["dtype"]}), timeout=30)
        good = httpx.post(f"{base}/api/v1/runs", json=_body({"allow": ["chat_template"]}),
                          timeout=30)
    assert bad.status_code == 422 and "chat_template" in bad.text, bad.text
    assert good.status_code in (200, 201, 202), good.text
    with Store.from_url(url) as store:
        (run,) = store.list_runs()
        stored = store.get_run(run.id)
    assert stored is not None and stored.spec.options.comparability is not None
    assert stored.spec.options.comparability.allow == ["chat_template"]


def test_a_non_comparable_run_gates_5_and_its_page_says_why(
    tmp_path: Path, sqlite_template: Path  # noqa: F811
) -> None:
    url = _db(tmp_path, sqlite_template)
    suite = tmp_path / "tiny.yaml"
    suite.write_text(
        f"name: tiny\nkind: reasoning\nseed: {SEED}\nparams:\n  n: 10\n  max_tokens: 16\n"
        "  tasks:\n    - {family: arithmetic, level: 1}\n"
    )
    with level_server(GOOD, [SEED], per_level=30) as b, \
            level_server(GOOD, [SEED], per_level=30, tokenizer_offset=3) as c, \
            Store.from_url(url) as store:
        spec = RunSpec(baseline=EndpointRef(url=b.url), candidates=[EndpointRef(url=c.url)],
                       suites=[str(suite)])
        report = runs.compare(spec, store=store)
    assert report["verdict"] == "non-comparable"
    with uvicorn_app(create_app(url, auth=False)) as base:
        gate = httpx.get(f"{base}/api/v1/runs/{report['run_id']}/gate", timeout=30).json()
        page = httpx.get(f"{base}/runs/{report['run_id']}", timeout=30)
    assert gate["verdict"] == "non-comparable" and gate["exit_code"] == 5
    assert [r["code"] for r in gate["reasons"]] == ["non_comparable"]
    assert "--allow-difference tokenizer" in gate["reasons"][0]["message"]
    assert page.status_code == 200, page.text[-2000:]
    assert 'class="decision v-non-comparable"' in page.text
    assert "Not a quantization comparison" in page.text
    assert "--allow-difference tokenizer if the tokenizer change is what you are testing" in page.text
