"""`make demo`'s script on the real llama.cpp servers (issue 50): the table shows what a `fail`
looks like and why, and the output ends with the next steps.

``scripts/demo.sh`` runs as a process, as ``make demo`` runs it, against the session's llama.cpp
home: it reuses the F16 baseline and the q8_0-kv candidate of ``llamacpp_endpoints`` and starts
the 2-bit ``q2_k`` beside them (its GGUF prepared on first use). Only the demo's quality suite
runs (``SUITE=demo-facts``: 32 items a side); its store is a throwaway SQLite database. The
next steps it prints are then followed as written: the token it names is created, a real
``evalsvc api serve`` opens the run, and the samples page shows the broken candidate's answers.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from markupsafe import escape

from tests.fixtures.apiserve import api_serve
from tests.fixtures.db import REPO_ROOT


def test_demo_shows_a_failing_candidate_and_the_next_steps(
    llamacpp_endpoints: Any, tmp_path: Path
) -> None:
    evalsvc = Path(sys.executable).with_name("evalsvc")
    db_url = f"sqlite:///{tmp_path / 'demo.db'}"
    env = {
        **os.environ,
        "EVALSVC": str(evalsvc),
        "SUITE": "demo-facts",
        "OUT": str(tmp_path / "out"),
        "COLUMNS": "160",
        "EVALSVC_DATABASE_URL": db_url,
    }
    from evalsvc import local

    started_before = set(local.recorded_names())
    try:
        proc = subprocess.run(
            ["bash", str(REPO_ROOT / "scripts" / "demo.sh")],
            env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200, check=False,
        )
    finally:
        # The session's other llama.cpp tests see the servers of ``llamacpp_endpoints`` only:
        # the candidate the demo started beside them stops here. Only that one: other workers
        # record their own servers in the same home meanwhile (the vLLM tier's).
        local.stop_servers({"q2_k"} - started_before)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    by_model = {c["model"]: c for c in report["candidates"]}
    broken = by_model["smollm2-135m-gguf-q2_k"]
    faithful = by_model["smollm2-135m-gguf-q8_0-kv"]
    # The 2-bit weights fail the easy questions, with the reason a user can read...
    assert broken["verdict"] == "fail"
    (facts,) = broken["suites"]
    assert facts["verdict"] == "fail" and facts["delta"] < -facts["margin"]
    assert any(r["code"] == "failed_gate" for r in broken["reasons"])
    assert "fail, because" in out and "worse than the gate allows" in out
    # ...while the 8-bit KV cache keeps the baseline's answers (a pass or, on a bad day, an
    # inconclusive: never a fail).
    assert faithful["verdict"] != "fail"
    assert faithful["suites"][0]["verdict"] != "fail"
    # One line of terms, then the next steps: the dashboard with its token, the servers still
    # running, a decision-sized run.
    assert "terms: p (NI) = non-inferiority p" in out and "MDE = " in out
    run_id = report["run_id"]
    assert f"{evalsvc} tokens create viewer-{run_id[:8]} --scope read" in out
    assert f"{evalsvc} api serve" in out and f"http://127.0.0.1:8080/runs/{run_id}" in out
    assert "q8_0-kv, q2_k are still running" in out and "make down" in out
    assert "make demo SUITE=smoke" in out

    # The next steps, followed as printed: the token command, then the run's page and the broken
    # candidate's answers on its samples page.
    (command,) = re.findall(r"^\s*(\S+ tokens create \S+ --scope read)", out, re.M)
    token = subprocess.run(
        shlex.split(command), env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout.strip()
    exported = tmp_path / "samples.jsonl"
    subprocess.run([str(evalsvc), "export", run_id, "-f", "jsonl", "-o", str(exported)],
                   env=env, capture_output=True, text=True, timeout=300, check=True)
    rows = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    wrong = [r for r in rows if r["endpoint_model"] == "smollm2-135m-gguf-q2_k" and r["score"] == 0
             and r["output"].strip()]
    assert wrong, "q2_k's wrong answers are stored"
    (url,) = re.findall(r"then open (http://127\.0\.0\.1:8080(/runs/\S+))", out)
    headers = {"Authorization": f"Bearer {token}"}
    with api_serve(db_url, log=tmp_path / "api.log") as api:
        page = httpx.get(api.url + url[1], headers=headers, timeout=60)
        assert page.status_code == 200 and "demo-facts" in page.text
        sample = wrong[0]
        samples = httpx.get(
            f"{api.url}/runs/{run_id}/suites/demo-facts/samples",
            params={"candidate": sample["role"], "q": sample["item_id"]},
            headers=headers, timeout=60,
        )
        assert samples.status_code == 200
        first_line = next(line for line in sample["output"].splitlines() if line.strip())
        assert str(escape(first_line.strip())) in samples.text
