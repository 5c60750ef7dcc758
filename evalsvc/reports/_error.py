"""The report of a run that reached no verdict (exit 4): same schema, ``verdict: "error"``.

Contract: CI reporters always get the files they asked for; a run that never finished still
yields a JSON report, a JUnit file with an error test case per candidate and a Markdown page,
so a dashboard shows red instead of nothing.
"""

from __future__ import annotations

from typing import Any

from evalsvc import __version__
from evalsvc.domain import EndpointRef, RunOptions


def error_report(
    *,
    baseline: EndpointRef,
    candidates: list[EndpointRef],
    error: str,
    run_id: str | None = None,
    options: RunOptions | None = None,
) -> dict[str, Any]:
    """A report with no suite results, overall and per-candidate verdict ``error``."""
    from evalsvc.reports._render import SCHEMA_VERSION

    def endpoint(ref: EndpointRef) -> dict[str, Any]:
        return {"url": ref.url, "model": ref.model, "name": ref.name, "provenance": {}}

    return {
        "schema_version": SCHEMA_VERSION,
        "evalsvc_version": __version__,
        "run_id": run_id,
        "verdict": "error",
        "reasons": [{"code": "infrastructure_error", "suite": None, "message": error}],
        "error": error,
        "warnings": [],
        "duration_s": None,
        "options": (options or RunOptions()).model_dump(mode="json"),
        "baseline": endpoint(baseline),
        "candidates": [
            {
                **endpoint(c),
                "role": f"candidate:{i}",
                "verdict": "error",
                "reasons": [{"code": "infrastructure_error", "suite": None, "message": error}],
                "suites": [],
            }
            for i, c in enumerate(candidates)
        ],
    }
