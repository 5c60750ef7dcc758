"""``evalsvc compare`` on two endpoints that differ in more than the quantization: exit 5
(non-comparable) with the reason and its fix, the run stored as ``non-comparable`` on SQLite and
PostgreSQL and gated again by ``evalsvc runs gate`` with the same code; ``--allow-difference``
runs it; a name outside the closed set is a usage error naming the valid ones. The endpoints are
vLLM-shaped loopback servers (``tests/runner/level_server.py``) announcing another chat template.
"""

from __future__ import annotations

import json
from pathlib import Path

from evalsvc.db import Store
from tests.fixtures.cli import run_cli
from tests.fixtures.db import db_url, pg_session_url, sqlite_template  # noqa: F401  (fixtures)
from tests.runner.level_server import level_server

SEED = 5
GOOD = dict.fromkeys(range(1, 6), 0.8)


def _suite(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-reasoning.yaml"
    path.write_text(
        f"name: tiny-reasoning\nkind: reasoning\nseed: {SEED}\nparams:\n  n: 20\n  max_tokens: 16\n"
        "  tasks:\n    - {family: arithmetic, level: 1}\n    - {family: lists, level: 1}\n"
    )
    return path


def _said(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines at spaces


def test_another_chat_template_exits_5_naming_the_fix_and_is_stored(
    db_url: str, tmp_path: Path  # noqa: F811
) -> None:
    out = tmp_path / "report.json"
    junit = tmp_path / "junit.xml"
    with level_server(GOOD, [SEED], per_level=30) as base, \
            level_server(GOOD, [SEED], per_level=30, chat_template="llama3") as cand:
        r = run_cli("compare", base.url, cand.url, "--suite", str(_suite(tmp_path)),
                    "--database-url", db_url, "--json", str(out), "--junit", str(junit))
        assert not cand.seen, "a non-comparable candidate is sent no item"
    assert r.returncode == 5, r.stderr[-2000:]
    said = _said(r.stderr)
    assert "non_comparable: the candidate renders a fixed conversation differently" in said
    assert "--allow-difference chat_template if the template change is what you are testing" in said
    report = json.loads(out.read_text())
    assert report["verdict"] == "non-comparable"
    assert report["candidates"][0]["comparability"]["comparable"] is False
    assert 'type="non-comparable"' in junit.read_text()
    with Store.from_url(db_url) as store:
        assert store.get_run(report["run_id"]).verdict == "non-comparable"
    again = run_cli("runs", "gate", report["run_id"], "--database-url", db_url)
    assert again.returncode == 5 and "non-comparable (exit 5)" in again.stderr


def test_allow_difference_runs_the_comparison(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'e.db'}"
    out = tmp_path / "report.json"
    with level_server(GOOD, [SEED], per_level=30) as base, \
            level_server(GOOD, [SEED], per_level=30, chat_template="llama3") as cand:
        r = run_cli("compare", base.url, cand.url, "--suite", str(_suite(tmp_path)),
                    "--database-url", db, "--json", str(out),
                    "--allow-difference", "chat_template")
        assert len(cand.seen) == 20
    assert r.returncode in (0, 3), r.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["options"]["comparability"] == {"allow": ["chat_template"]}
    allowed = report["candidates"][0]["comparability"]["allowed"]
    assert [d["field"] for d in allowed] == ["chat_template"]


def test_an_unknown_difference_name_is_a_usage_error_naming_the_valid_ones() -> None:
    r = run_cli("compare", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", "--suite",
                "needle-smoke", "--allow-difference", "quantization")
    assert r.returncode == 2, r.stderr
    said = _said(r.stderr)
    assert "'quantization'" in said and "chat_template" in said and "sample_counts" in said
