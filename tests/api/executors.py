"""Worker executors for the API tests: finish a run the way ``execute_stored_run`` does
(gate results, JSON report, ``finish_run`` under the worker's lease) without any endpoint.

The verdict comes from the run's ``verdict`` label, else from the executor's default; the
verdict ``error`` ends the run as an infrastructure error without a report.
"""

from __future__ import annotations

import threading
from typing import Any

from evalsvc.db import Store
from evalsvc.domain import RunInfo, RunStatus
from evalsvc.scheduler import Executor

_DELTA = {"pass": 0.0, "fail": -0.2, "inconclusive": -0.02}


def fake_report(run: RunInfo, verdict: str) -> dict[str, Any]:
    """A report with the shape of docs/report.md (one suite row per pair)."""
    delta = _DELTA[verdict]
    candidates: list[dict[str, Any]] = []
    for index, cand in enumerate(run.spec.candidates):
        suites = [
            {
                "suite": suite,
                "kind": "needle",
                "verdict": verdict,
                "metric": "accuracy",
                "baseline": 0.9,
                "candidate": 0.9 + delta,
                "delta": delta,
                "ci": [delta - 0.05, delta + 0.05],
                "p_value": 0.5,
                "margin": 0.05,
                "n": 20,
                "n_errors": 0,
                "test": "paired non-inferiority (test executor)",
                "details": {},
            }
            for suite in run.spec.suites
        ]
        candidates.append(
            {
                "role": f"candidate:{index}",
                "url": cand.url,
                "model": cand.model,
                "verdict": verdict,
                "provenance": {},
                "suites": suites,
            }
        )
    return {
        "run_id": run.id,
        "verdict": verdict,
        "baseline": {"url": run.spec.baseline.url, "model": run.spec.baseline.model},
        "candidates": candidates,
    }


def make_executor(default_verdict: str = "pass") -> Executor:
    def execute(store: Store, run: RunInfo, cancel: threading.Event, worker_id: str) -> None:
        verdict = run.spec.labels.get("verdict", default_verdict)
        if verdict == "error":
            store.finish_run(
                run.id,
                status=RunStatus.error,
                verdict="error",
                error="baseline unreachable (test executor)",
                worker_id=worker_id,
            )
            return
        report = fake_report(run, verdict)
        store.save_gate_results(
            run.id,
            [
                {**s, "candidate_value": s["candidate"], "candidate": c["role"]}
                for c in report["candidates"]
                for s in c["suites"]
            ],
        )
        store.save_report(run.id, report)
        store.finish_run(run.id, status=RunStatus.completed, verdict=verdict, worker_id=worker_id)

    return execute


complete_with_report = make_executor("pass")
