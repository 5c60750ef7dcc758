"""Failure isolation (issue 48 item 1) on real processes: ``evalsvc compare`` and ``evalsvc runs
resume`` as child processes against a loopback engine (``tests/runner/level_server.py``) that
answers every long prompt later than a small ``--timeout`` and every short one at once.

- A needle suite whose calibration pilot times out, and one whose requests time out, each end
  as ``error`` naming the timeout and its fix; the reasoning suite beside them still gets its
  verdict; the run is ``completed`` and its verdict and exit code follow docs/statistics.md §1
  (no fail elsewhere: ``error``, exit 4; a certain fail of another suite: ``fail``, exit 1).
- Every view says the cause: the terminal, the JSON report (per-suite ``error``), Markdown,
  JUnit and ``evalsvc runs gate``.
- ``evalsvc runs resume`` on the same run, the engine fast again, sends only the errored
  suites' requests (not one reasoning prompt) and gates the run anew.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.domain import RunStatus
from evalsvc.suites import pilot_seed
from tests.fixtures.cli import run_cli_process
from tests.runner.level_server import level_server
from tests.services.test_gatelogs import check_schema

SEED = 11
TIMEOUT_S = 3
#: Longer than the timeout, with room on a loaded host: a slow answer is never in time.
SLOW_S = 10.0
#: Reasoning prompts are a few dozen words; the needle's haystacks of 1024 tokens are ~1000.
SLOW_WORDS = 300

REASONING = f"""name: r-ok
kind: reasoning
seed: {SEED}
params:
  n: 20
  tasks:
    - {{family: arithmetic, level: 1}}
  max_tokens: 32
"""
PILOTED = f"""name: n-pilot
kind: needle
seed: {SEED}
calibrate: {{pilot_n: 4}}
params:
  lengths: [1024]
  depths: [0.5, 0.9]
  haystacks: 2
  max_tokens: 16
"""
PLAIN = f"""name: n-plain
kind: needle
seed: {SEED}
params:
  lengths: [1024]
  depths: [0.5, 0.9]
  haystacks: 2
  max_tokens: 16
"""


def _suites(tmp: Path) -> list[str]:
    args = []
    for name, text in (("r-ok", REASONING), ("n-pilot", PILOTED), ("n-plain", PLAIN)):
        path = tmp / f"{name}.yaml"
        path.write_text(text)
        args += ["--suite", str(path)]
    return args


def _compare(base: str, cand: str, tmp: Path, env: dict[str, str]) -> tuple[int, str, Any]:
    out = tmp / "report.json"
    proc = run_cli_process(
        "compare", base, cand, *_suites(tmp), "--timeout", str(TIMEOUT_S), "--concurrency", "8",
        "--json", str(out), "--junit", str(tmp / "junit.xml"), "--markdown", str(tmp / "r.md"),
        env=env,
    )
    report = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, proc.stderr, report


def _by_suite(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["suite"]: s for s in report["candidates"][0]["suites"]}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "EVALSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'iso.db'}"}


def test_timed_out_suites_end_in_error_the_others_get_verdicts_and_resume_resends_them(
    tmp_path: Path, env: dict[str, str]
) -> None:
    seeds = [SEED, pilot_seed(SEED)]
    with level_server({1: 1.0}, seeds, slow_words=SLOW_WORDS, slow_s=SLOW_S) as srv:
        code, stderr, report = _compare(srv.url, srv.url, tmp_path, env)
        assert report is not None, stderr
        suites = _by_suite(report)
        # The reasoning suite has its verdict; both needle suites ended in error.
        assert suites["r-ok"]["verdict"] in ("pass", "inconclusive"), suites["r-ok"]
        assert suites["r-ok"]["error"] is None and suites["r-ok"]["n"] == 20
        pilot, plain = suites["n-pilot"], suites["n-plain"]
        assert pilot["verdict"] == plain["verdict"] == "error"
        # The cause names the timeout, where and how many; the fix names the flags.
        assert pilot["error"]["stage"] == "pilot"
        timed_out = f"timed out after {TIMEOUT_S} s"
        assert pilot["error"]["cause"] == (
            f"calibration pilot: 4 of 4 baseline requests {timed_out} at 1024 tokens"
        )
        assert pilot["error"]["counts"] == {"timeout": 4}
        assert plain["error"]["stage"] == "requests"
        assert plain["error"]["cause"].startswith(f"8 of 8 requests {timed_out}")
        assert plain["error"]["counts"] == {"timeout": 8}
        for s in (pilot, plain):
            fix = f"raise `--timeout` (now {TIMEOUT_S} s) or lower `--concurrency` (now 8)"
            assert fix in s["error"]["fix"]
            assert f"evalsvc runs resume {report['run_id'][:12]}" in s["error"]["fix"]
            assert s["reasons"][0]["code"] in ("suite_error", "error_budget")
            assert s["error"]["cause"] in s["reasons"][0]["message"]
        # No fail anywhere, two gated suites errored: error, exit 4; the run itself completed.
        assert report["verdict"] == report["candidates"][0]["verdict"] == "error"
        assert code == 4, stderr
        with Store.from_url(env["EVALSVC_DATABASE_URL"]) as store:
            run = store.get_run(report["run_id"])
            assert run is not None and run.status == RunStatus.completed
            assert run.verdict == "error"
        check_schema(report)
        # Every view says the cause and its fix.
        flat = " ".join(stderr.split())
        assert f"{timed_out} at 1024 tokens" in flat and "raise `--timeout`" in flat
        assert f"{timed_out} at 1024 tokens" in (tmp_path / "r.md").read_text()
        junit = (tmp_path / "junit.xml").read_text()
        assert '<testcase classname=' in junit and timed_out in junit
        gate = run_cli_process("runs", "gate", report["run_id"], "--json", env=env)
        assert gate.returncode == 4
        messages = " ".join(r["message"] for r in json.loads(gate.stdout)["reasons"])
        assert f"{timed_out} at 1024 tokens" in messages
        # The dashboard's run page: the cause, its fix and the resume as the next step.
        from fastapi.testclient import TestClient

        from evalsvc.webapp import create_app

        with TestClient(create_app(env["EVALSVC_DATABASE_URL"], auth=False)) as client:
            page = client.get(f"/runs/{report['run_id']}").text
        assert f"{timed_out} at 1024 tokens" in page and "raise `--timeout`" in page
        assert f"evalsvc runs resume {report['run_id'][:12]}" in page

        # The engine is fast again: resuming sends the needle suites' requests only.
        sent_reasoning, sent_long = len(srv.seen), srv.long_prompts
        srv.slow_s = 0.0
        out = tmp_path / "resumed.json"
        resumed = run_cli_process("runs", "resume", report["run_id"][:12], "--json", str(out),
                                  env=env)
        again = json.loads(out.read_text())
    assert len(srv.seen) == sent_reasoning, "a reasoning item was sent again"
    assert srv.long_prompts > sent_long
    assert again["run_id"] == report["run_id"]
    suites = _by_suite(again)
    assert all(s["error"] is None for s in suites.values()), suites
    assert suites["r-ok"]["verdict"] == _by_suite(report)["r-ok"]["verdict"]
    assert suites["n-pilot"]["details"]["calibration"]["chosen"]
    assert suites["n-plain"]["n"] == 4 and suites["n-plain"]["n_errors"] == 0
    assert again["error"] is None
    from evalsvc.services.runs import exit_code

    assert resumed.returncode == exit_code(again["verdict"]), resumed.stderr


def test_a_certain_fail_elsewhere_reads_fail_beside_an_errored_suite(
    tmp_path: Path, env: dict[str, str]
) -> None:
    seeds = [SEED, pilot_seed(SEED)]
    with (
        level_server({1: 1.0}, seeds, slow_words=SLOW_WORDS, slow_s=SLOW_S) as base,
        level_server({1: 0.0}, seeds, slow_words=SLOW_WORDS, slow_s=SLOW_S) as cand,
    ):
        code, stderr, report = _compare(base.url, cand.url, tmp_path, env)
    assert report is not None, stderr
    suites = _by_suite(report)
    assert suites["r-ok"]["verdict"] == "fail"
    assert suites["n-pilot"]["verdict"] == suites["n-plain"]["verdict"] == "error"
    # The fail is certain whatever the errored suites would say: fail, exit 1; the reasons
    # still name the errored suites' causes.
    assert report["verdict"] == report["candidates"][0]["verdict"] == "fail"
    assert code == 1, stderr
    codes = [r["code"] for r in report["candidates"][0]["reasons"]]
    assert codes[0] == "failed_gate" and "suite_error" in codes and "error_budget" in codes
