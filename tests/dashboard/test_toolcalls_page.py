"""The ``toolcalls`` and ``structured`` kinds in every view, for runs produced by the real runner
(``evalsvc.services.runs.compare``) against the loopback tool server with planted faults
(``tests/fixtures/tool_server.py``), stored on each backend: the JSON report (against its
schema), the Markdown, the JUnit XML and the dashboard's suite page (the kind's gates, tools,
call types and faults; leaked markup shown as text, never as markup), and its flips page."""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.reports import report_schema, to_junit, to_markdown
from tests.dashboard.conftest import in_thread
from tests.fixtures.tool_server import tool_server

TOOLS = """name: tools-dash
kind: toolcalls
seed: 5
params: {n: 40}
gate: {margin: 0.1}
"""
STRUCTURED = """name: structured-dash
kind: structured
seed: 5
params: {n: 36}
gate: {margin: 0.1}
"""


def test_tool_faults_in_every_view(db_url: str, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from evalsvc.services import runs
    from evalsvc.webapp import create_app

    (tmp_path / "tools-dash.yaml").write_text(TOOLS)
    (tmp_path / "structured-dash.yaml").write_text(STRUCTURED)
    with tool_server([5], per_type=40) as srv, Store.from_url(db_url) as store:
        srv.share = 0.5
        # The drop mode plants tool faults only: its JSON answers stay faithful, so the
        # structured suite passes beside the failing tool suite.
        spec = RunSpec(baseline=EndpointRef(url=srv.base_url("faithful"), name="bf16"),
                       candidates=[EndpointRef(url=srv.base_url("drop"), name="int4")],
                       suites=[str(tmp_path / "tools-dash.yaml"),
                               str(tmp_path / "structured-dash.yaml")],
                       options=RunOptions(concurrency=4))
        # Playwright may hold a running loop on this worker's main thread (conftest.in_thread).
        report = in_thread(runs.compare, spec, store=store)
        run_id = report["run_id"]
    jsonschema.validate(report, report_schema())
    assert report["verdict"] == "fail"
    entries = {e["suite"]: e for e in report["candidates"][0]["suites"]}
    tools, structured = entries["tools-dash"], entries["structured-dash"]
    assert tools["verdict"] == "fail" and structured["verdict"] == "pass"
    titles = [f["title"] for f in tools["findings"]]
    assert any(t.startswith("faults: dropped call on") for t in titles), titles
    markdown = to_markdown(report)
    assert "Markup leaked into the candidate's content: `</tool_call>`, `<tool_call>`" in markdown
    assert "Failed: trigger_agreement" in markdown
    junit = ET.fromstring(to_junit(report))
    failed = [tc for tc in junit.iter("testcase") if tc.find("failure") is not None]
    assert any("tools-dash" in (tc.get("name") or "") for tc in failed)

    with TestClient(create_app(db_url, auth=False)) as client:
        page = client.get(f"/runs/{run_id}/suites/tools-dash?candidate=candidate:0")
        flips = client.get(f"/runs/{run_id}/flips?suite=tools-dash&candidate=candidate:0")
        spage = client.get(f"/runs/{run_id}/suites/structured-dash?candidate=candidate:0")
    assert page.status_code == 200 and flips.status_code == 200 and spage.status_code == 200
    text = html.unescape(page.text)
    for table in ('id="tool-gates"', 'id="by-tool"', 'id="by-call-type"', 'id="tool-faults"'):
        assert table in page.text
    assert "trigger_agreement" in text and "schema_valid_calls" in text
    assert "dropped call" in text and "toolcalls-by-tool" in page.text
    # The leaked markup is shown as text, never as markup.
    assert "<tool_call>" in text and "&lt;tool_call&gt;" in page.text
    assert "<tool_call>" not in page.text
    # The flips page lists the regressions (dropped calls) with their slice and stored prompt.
    ftext = html.unescape(flips.text)
    assert "regression" in ftext and ("(single)" in ftext or "(choice)" in ftext)
    assert "You are a helpful assistant with tools." in ftext
    stext = html.unescape(spage.text)
    assert 'id="by-shape"' in spage.text and "field_accuracy" in stext
