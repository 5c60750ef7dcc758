"""The verdict table as `make demo` prints it at 160 columns (issue 50): each candidate's
endpoint and served model on two whole lines (not "smollm2-135m-gguf-q8" / "_0-kv" folded over
three), a row that is not gated reads "not gated", and the table fits the terminal.

The report is a real one: `make demo`'s run from nothing of 2026-12-06 (llama.cpp F16 against
q8_0-kv and q2_k, `demo-facts` and `demo-speed`), its provenance and details trimmed but the
speed suites' gain statement (the table reads neither).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from evalsvc.cli._report import verdict_table

REPORT = Path(__file__).with_name("data") / "demo_report.json"


def render(report: dict[str, Any], width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), force_terminal=False, color_system=None)
    console.print(verdict_table(report))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return out.splitlines()


def test_candidate_names_stay_whole_at_160_columns() -> None:
    report = json.loads(REPORT.read_text(encoding="utf-8"))
    lines = render(report, 160)
    assert all(len(line) <= 160 for line in lines)
    # The table is closed on the right: nothing was cropped.
    body = [line for line in lines if line.startswith("│")]
    assert body and all(line.rstrip().endswith("│") for line in body)
    first_cells = [line.split("│")[1].strip() for line in body]
    for cand in report["candidates"]:
        assert cand["model"] in first_cells  # the whole served name on its own line
        assert "127.0.0.1:" + cand["url"].split(":")[2].split("/")[0] in first_cells
    # The broken candidate's row reads fail; the speed rows say they are not gated.
    rows = [line for line in body if "demo-" in line]
    assert any("demo-facts" in r and "fail *" in r for r in rows)
    speed = [r for r in rows if "demo-speed" in r]
    assert len(speed) == 2 and all("not gated *" in r and "inconclusive" not in r for r in speed)


def test_the_speed_finding_names_the_rows_ratio() -> None:
    """The speed row's Δ (per-request output tok/s, a ratio − 1) and the finding under the table
    say the same number, and the throughput is named as the other measure it is."""
    report = json.loads(REPORT.read_text(encoding="utf-8"))
    speed = [s for c in report["candidates"] for s in c["suites"] if s["suite"] == "demo-speed"]
    assert len(speed) == 2
    for s in speed:
        summary = s["details"]["summary"]
        assert f"×{1 + s['delta']:.2f} tokens/s per request (the gated row)" in summary
        assert "throughput at c=4 (all requests)" in summary


@pytest.mark.parametrize("width", [80, 120])
def test_a_narrow_terminal_still_fits(width: int) -> None:
    report = json.loads(REPORT.read_text(encoding="utf-8"))
    lines = render(report, width)
    assert lines and all(len(line) <= width for line in lines)
    assert all(line.rstrip().endswith("│") for line in lines if line.startswith("│"))
