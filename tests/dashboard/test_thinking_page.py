"""The thinking-traces finding on the dashboard's suite page and the samples' stored traces,
for a run produced by the real runner (``evalsvc.services.runs.compare``) against loopback
servers with planted thinking (``tests/runner/thinking_server.py``), stored on each backend."""

from __future__ import annotations

import html
import json
from pathlib import Path

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from tests.dashboard.conftest import in_thread
from tests.runner.thinking_server import thinking_server

SUITE = """name: thinking-r
kind: reasoning
seed: 5
params:
  n: 20
  tasks: [{family: arithmetic, level: 1}, {family: lists, level: 1}]
  max_tokens: 64
thinking: {max_length_ratio: 1.5}
"""


def test_suite_page_shows_the_thinking_finding(db_url: str, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from evalsvc.services import runs
    from evalsvc.webapp import create_app

    path = tmp_path / "thinking-r.yaml"
    path.write_text(SUITE)
    acc = dict.fromkeys(range(1, 6), 0.7)
    with (
        thinking_server(acc, [5], think_words=40) as base,
        thinking_server(acc, [5], think_words=80, mode="markers", leak=True) as cand,
        Store.from_url(db_url) as store,
    ):
        spec = RunSpec(baseline=EndpointRef(url=base.url, name="bf16"),
                       candidates=[EndpointRef(url=cand.url, name="int4")],
                       suites=[str(path)], options=RunOptions(concurrency=4))
        # Playwright may hold a running loop on this worker's main thread (conftest.in_thread).
        report = in_thread(runs.compare, spec, store=store)
        run_id = report["run_id"]
        stored = store.get_samples(run_id, suite="thinking-r")
    assert report["verdict"] == "fail"
    cand_samples = [s for s in stored if s.endpoint == "candidate:0"]
    assert len(cand_samples) == 20
    assert all(s.data["thinking"]["tokens"] > 0 and "<think>" not in s.output for s in cand_samples)
    # The trace's text is kept with each sample (the figures read it whole).
    assert all(s.data["thinking"]["text"] for s in cand_samples)
    with TestClient(create_app(db_url, auth=False)) as client:
        page = client.get(f"/runs/{run_id}/suites/thinking-r?candidate=candidate:0")
        samples = client.get(f"/runs/{run_id}/suites/thinking-r/samples?candidate=candidate:0")
    # The samples page shows each side's trace: its text, tokens and the leaked markup.
    assert samples.status_code == 200
    shown = html.unescape(samples.text)
    assert shown.count("data-thinking") == 40  # both sides of each of the 20 items
    assert "leaked markup <|channel|>" in shown
    first = cand_samples[0].data["thinking"]["text"]
    assert first.splitlines()[0] in shown
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert "Thinking traces" in text and "bound max_length_ratio exceeded" in text
    # The leaked markup is shown as text, never as markup.
    assert "<|channel|>" in text and "&lt;|channel|&gt;" in page.text
    # The charts: tokens per answer and the rates, baseline beside candidate.
    assert 'data-chart="thinking-tokens"' in page.text and 'data-chart="thinking-rates"' in page.text
    data = json.loads(html.unescape(page.text.split('id="page-data">', 1)[1].split("</script>")[0]))
    charts = {c["id"]: c for c in data["thinking_charts"]}
    base_mean, cand_mean = (s["data"][0] for s in charts["thinking-tokens"]["series"])
    assert 1.7 < cand_mean / base_mean < 2.3
    assert charts["thinking-rates"]["series"][1]["data"] == [0.0, 0.0, 100.0]  # every answer leaks


def test_a_model_that_never_thinks_gets_no_thinking_panel(db_url: str, tmp_path: Path) -> None:
    """Two plain servers (no trace) whose wrong answers end at the token budget: the suite page
    has no "Thinking traces" panel of zero-token bars, only the answers' cuts, after the
    findings (it was larger than them, for a model that never thinks)."""
    from fastapi.testclient import TestClient

    from evalsvc.services import runs
    from evalsvc.webapp import create_app

    path = tmp_path / "thinking-r.yaml"
    path.write_text(SUITE)
    acc = dict.fromkeys(range(1, 6), 0.7)
    with (
        thinking_server(acc, [5], think_words=0, truncate_wrong=True) as base,
        thinking_server(acc, [5], think_words=0, truncate_wrong=True) as cand,
        Store.from_url(db_url) as store,
    ):
        spec = RunSpec(baseline=EndpointRef(url=base.url, name="bf16"),
                       candidates=[EndpointRef(url=cand.url, name="int8")],
                       suites=[str(path)], options=RunOptions(concurrency=4))
        run_id = in_thread(runs.compare, spec, store=store)["run_id"]
        stored = store.get_samples(run_id, suite="thinking-r")
    assert not any((s.data.get("thinking") or {}).get("tokens") for s in stored)
    with TestClient(create_app(db_url, auth=False)) as client:
        page = client.get(f"/runs/{run_id}/suites/thinking-r?candidate=candidate:0")
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert "Thinking traces" not in text and "Answers cut, looping or leaking" in text
    assert 'data-chart="thinking-tokens"' not in page.text
    assert text.index("Answers cut, looping or leaking") > text.index("Findings")
    data = json.loads(html.unescape(page.text.split('id="page-data">', 1)[1].split("</script>")[0]))
    assert [c["id"] for c in data["thinking_charts"]] == ["thinking-rates"]
