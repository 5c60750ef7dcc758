"""``benchmarks/store_scale.py`` (P5) keeps working: end to end on a tiny size, SQLite.

Nothing is timed (the targets and figures live in docs/benchmarks.md): each case asserts what
the script must produce — a real run as the template, every ingested sample stored, the runs
filled to the count asked, and every measured page answered by the real server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "store_scale.py"


def _run(tmp_path: Path, *args: str) -> dict[str, object]:
    out = tmp_path / "result.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--sqlite",
            "--real-items",
            "10",
            "--ingest-runs",
            "2",
            "--samples-per-run",
            "300",
            "--runs",
            "8",
            "--fill-samples",
            "4",
            "--repeats",
            "1",
            "--out",
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(out.read_text())
    return result


def test_store_scale_ingests_fills_and_serves_every_page(tmp_path: Path) -> None:
    result = _run(tmp_path)
    real, ingest = result["real_run"], result["ingest"]
    assert real["samples"] > 0 and real["verdict"] in ("pass", "fail", "inconclusive")  # type: ignore[index]
    assert ingest["samples"] == 600 and len(ingest["runs"]) == 2  # type: ignore[index]
    pages = result["pages"]
    assert isinstance(pages, dict) and len(pages) == 12
    assert all(m["bytes"] > 0 and m["median_ms"] > 0 for m in pages.values())


@pytest.mark.slow
def test_store_scale_fills_through_the_store_api_too(tmp_path: Path) -> None:
    result = _run(tmp_path, "--fill", "store", "--no-pages")
    assert result["ingest"]["samples"] == 600  # type: ignore[index]
    assert "pages" not in result and result["fill_s"] >= 0  # type: ignore[operator]
