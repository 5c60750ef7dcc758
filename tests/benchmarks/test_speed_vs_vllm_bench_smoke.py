"""The P2 benchmark keeps working (``benchmarks/speed_vs_vllm_bench.py``): one tiny round on a
local vLLM endpoint (the spare one, ``tests/fixtures/spare.py``), evalsvc's speed suite beside
``vllm bench serve`` from the managed vLLM venv. Nothing is timed: it asserts that both sides
measured every request and that the script printed the ratio of two positive medians."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.spare import spare_endpoint

ROOT = Path(__file__).resolve().parents[2]


def test_one_round_measures_both_sides(local_endpoints: Any) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "speed_vs_vllm_bench.py"), "--url",
         spare_endpoint(local_endpoints), "--concurrency", "2", "--requests", "6", "--max-tokens", "8",
         "--prompt-chars", "200", "--rounds", "1"],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    m = re.search(r"evalsvc speed suite ([\d.]+) \(n=2\), vllm bench serve ([\d.]+) \(n=2\); "
                  r"ratio ([\d.]+)", proc.stdout)
    assert m, proc.stdout
    ours, theirs, ratio = (float(x) for x in m.groups())
    assert ours > 0 and theirs > 0
    # The script prints the medians to 0.1 tok/s and the ratio of the unrounded ones.
    assert ratio == pytest.approx(ours / theirs, rel=0.02)
