"""Issue 16's views on runs of the real runner (``loop_runs``: loopback servers of known
behaviour, so these run on any host): one label per endpoint everywhere, suite names instead of
paths, the reasons of ``runs gate`` (CLI and REST), the all-samples browser, the layout at
800 px and the dark theme, the trend's time axis and margin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Any

import httpx
import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunSpec, RunStatus
from evalsvc.reports import md_text, to_junit, to_markdown
from evalsvc.services import dashboard as svc

from .conftest import LOOP_SUITES, LoopRuns, Server

pytestmark = pytest.mark.timeout(900)


def _labels(loop: LoopRuns) -> tuple[str, str]:
    return "bf16-loop (fake-model)", f"{loop.candidate_hostport} (fake-model)"


# ---------------------------------------------------------------------------- labels


def test_one_label_per_endpoint_in_every_view(dash_store: Store, loop_runs: LoopRuns) -> None:
    base, cand = _labels(loop_runs)
    run = loop_runs.main
    # Runs list: labels, and the suites' own names.
    listed = svc.runs_list(dash_store, svc.parse_filters(endpoint=loop_runs.candidate)[0])
    (row,) = [r for r in listed["rows"] if r["id"] == run]
    assert row["baseline"] == base and row["candidates"] == [cand]
    assert row["suites"] == LOOP_SUITES
    assert {g["candidate"] for g in row["gates"]} == {cand}
    # Run page: gates table, provenance, candidates, banner.
    page = svc.run_page(dash_store, run)
    assert {g["candidate"] for g in page["gate_table"]["rows"]} == {cand}
    assert {g["candidate"] for g in page["gates"]} == {cand}
    assert [c["label"] for c in page["provenance"]["columns"]] == [base, cand]
    assert page["candidates"] == [{"role": "candidate:0", "label": cand}]
    # Suite page and flips.
    view = svc.suite_view(dash_store, run, "reasoning-smoke", "candidate:0")
    assert view["candidate"] == cand and view["labels"]["baseline"] == base
    assert svc.flips_view(dash_store, run)["labels"] == {"baseline": base, "candidate:0": cand}
    # Reports: JSON, Markdown, JUnit.
    report = dash_store.get_report(run)
    assert report is not None
    assert report["baseline"]["label"] == base and report["candidates"][0]["label"] == cand
    assert f"baseline {md_text(base)} at " in to_markdown(report)
    junit = ET.fromstring(to_junit(report).split("\n", 1)[1])
    assert [s.get("name") for s in junit.iter("testsuite")] == [f"evalsvc.{cand}"]


def test_a_suite_file_path_is_shown_as_a_name(dash_store: Store, tmp_path: Any) -> None:
    spec = RunSpec(baseline=EndpointRef(url="http://127.0.0.1:5/v1", name="b"),
                   candidates=[EndpointRef(url="http://127.0.0.1:6/v1")],
                   suites=[str(tmp_path / "suites" / "my-needle.yaml"), "reasoning-smoke"],
                   labels={"set": "paths"})
    queued = dash_store.create_run(spec, status=RunStatus.queued)
    listed = svc.runs_list(dash_store, svc.parse_filters(label="set=paths")[0])
    (row,) = [r for r in listed["rows"] if r["id"] == queued.id]
    assert row["suites"] == ["my-needle", "reasoning-smoke"]
    # Not started: labelled from the spec (no snapshot, no served model yet).
    assert row["baseline"] == "b" and row["candidates"] == ["127.0.0.1:6"]


# ---------------------------------------------------------------------------- gate reasons


def test_runs_gate_gives_the_reasons_in_the_cli_and_rest(
    dash_store: Store, dash_db_url: str, dash_server: Server, loop_runs: LoopRuns
) -> None:
    run = loop_runs.main
    report = dash_store.get_report(run)
    assert report is not None and report["reasons"], report
    want = report["reasons"]
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "evalsvc.cli.main", "runs", "gate", run[:10],
           "--database-url", dash_db_url]
    as_json = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=300,
                             env=env)
    code = {"pass": 0, "fail": 1, "inconclusive": 3, "error": 4}[report["verdict"]]
    assert as_json.returncode == code, as_json.stderr
    out = json.loads(as_json.stdout)
    assert out["verdict"] == report["verdict"] and out["reasons"] == want
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert text.returncode == code
    for r in want:  # every reason, with its suite and code, as compare prints them
        assert f"{r['suite']} · {r['code']}: {r['message']}" in text.stderr, text.stderr
    rest = httpx.get(f"{dash_server.url}/api/v1/runs/{run}/gate",
                     headers={"Authorization": f"Bearer {dash_server.token}"}, timeout=60)
    assert rest.status_code == 200, rest.text
    got = rest.json()
    assert got["exit_code"] == code
    assert [{k: v for k, v in r.items() if v is not None} for r in got["reasons"]] == want
