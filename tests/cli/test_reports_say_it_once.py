"""Reports and gates name endpoints by their label and say each reason once; every report
names its run, an interrupted one too.

A real run against the vLLM-shaped stub server (``benchmarks/stub_server.py``, loopback): its
baseline solves none of ``reasoning-smoke``, so the run is inconclusive with one reason
(``uninformative_baseline``). The candidate is a registered endpoint named ``int4``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import DatabaseNotAtHead, DatabaseUnavailable, Store
from evalsvc.reports import md_text
from tests.fixtures.cli import run_cli
from tests.fixtures.db import REPO_ROOT
from tests.fixtures.faults import base_url, fault_server


@pytest.fixture(scope="module")
def stub_urls() -> Iterator[list[str]]:
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        import evaluator_speed
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    with evaluator_speed.stub() as urls:
        yield urls


def test_reasons_once_and_labels_never_roles(stub_urls: list[str], tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'e.db'}"
    added = run_cli("endpoints", "add", "int4", stub_urls[1], "--database-url", db)
    assert added.returncode == 0, added.stderr
    out = {k: tmp_path / f"r.{k}" for k in ("json", "xml", "md")}
    r = run_cli("compare", stub_urls[0], "int4", "--suite", "reasoning-smoke", "--samples", "20",
                "--no-calibrate", "--database-url", db, "--json", str(out["json"]),
                "--junit", str(out["xml"]), "--markdown", str(out["md"]))
    assert r.returncode == 3, r.stderr
    report = json.loads(out["json"].read_text())
    label = "int4 (stub-model)"
    assert report["candidates"][0]["label"] == label
    messages = [x["message"] for x in report["reasons"]]
    assert [x["code"] for x in report["reasons"]] == ["uninformative_baseline"]

    md = out["md"].read_text()
    assert "candidate:0" not in md and f"{md_text(label)} · **reasoning-smoke**" in md
    for message in messages:
        assert md.count(md_text(message)) == 1, md

    root = ET.fromstring(out["xml"].read_text())
    said = [v for el in root.iter() for v in [el.text or "", *el.attrib.values()]]
    assert "candidate:0" not in " ".join(said)
    for message in messages:
        assert sum(s.count(message) for s in said) == 1, said

    run_id = report["run_id"]
    gate = run_cli("runs", "gate", run_id, "--database-url", db)
    assert gate.returncode == 3
    assert f"{label} · reasoning-smoke · uninformative_baseline" in gate.stderr
    assert "candidate:0" not in gate.stderr
    as_json = json.loads(run_cli("runs", "gate", run_id, "--json", "--database-url", db).stdout)
    assert as_json["reasons"][0]["candidate_label"] == label
    assert as_json["reasons"][0]["candidate"] == "candidate:0"  # the role stays the key

    from evalsvc.services.dashboard import compare_runs

    with Store.from_url(db) as store:
        (row,) = compare_runs(store, run_id, run_id)["rows"]
    assert row["candidate"] == label


def test_an_interrupted_compare_reports_its_run_id(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) in the middle of an in-process compare: the error report names the run
    it recorded as error, and says what stopped it."""
    db = f"sqlite:///{tmp_path / 'e.db'}"
    report = tmp_path / "r.json"
    env = {**os.environ, "EVALSVC_DATABASE_URL": db}
    with fault_server(slow_s=30) as srv:
        url = base_url(srv, "slowgen")  # the probe's models answer; every generation hangs
        proc = subprocess.Popen(
            [sys.executable, "-m", "evalsvc.cli.main", "compare", url, url, "--suite",
             "reasoning-smoke", "--json", str(report)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            # As in a terminal: a shell starts background jobs (CI under nohup, say) with SIGINT
            # ignored, and an ignored disposition is inherited across exec, so the Ctrl-C below
            # would never reach the CLI (it then hung for the whole timeout).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 300  # a loaded 2-core host starts the CLI in tens of s
        runs: list[Any] = []
        while time.monotonic() < deadline and not runs:
            time.sleep(0.2)
            try:
                with Store.from_url(db) as store:
                    runs = [x for x in store.list_runs() if x.status.value == "running"]
            except (DatabaseNotAtHead, DatabaseUnavailable):  # caught mid-migration
                continue
        if not runs:
            proc.kill()
            raise AssertionError(proc.communicate()[1])
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 4, stderr
    written = json.loads(report.read_text())
    assert written["run_id"] == runs[0].id
    assert written["error"] == f"interrupted (Ctrl-C); run {runs[0].id} was recorded as error"
    with Store.from_url(db) as store:
        stored = store.get_run(runs[0].id)
    assert stored is not None and stored.status.value == "error"
