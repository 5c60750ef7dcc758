"""Slice gates on the real endpoints (one run, both candidates, so the baseline is sent once):

- a **planted** slice collapse — a loopback fault proxy in front of the real bf16 endpoint that
  answers every "day of the week" question wrongly — fails the suite and names the dates slice,
  with the first divergent token on both sides;
- bf16 against itself never fails, neither as a whole nor in any slice.

What a real quantized candidate does to one slice depends on the host's kernels (fp8-kv lost the
dates family, 22% → 0%, on an AMD EPYC AVX-512 host and kept it, 21.7% → 25.8%, on an Intel AMX
host: docs/local-endpoints.md), so no real candidate's slice verdict is asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.runner.fault_proxy import fault_proxy

# Four worked demonstrations (``shots``): zero-shot, bf16 solved 11 of the 60 dates items on a
# 2-core Intel AMX host (18%), and a slice gate at its share of alpha (weighted Holm: 0.1 of the
# family's 0.05 for each of two slices) needs at least 12 solved items lost of 60 to fail, so the
# planted collapse failed the slice only when batched traffic changed an answer or two (one
# `.ci/run` in five missed it). With four shots the same host's bf16 solved 21 of 60 (35%) and
# lists L1 70% (30 items), idle, one run each; two shots gave 16 of 60.
SUITE = """name: dates-slice
kind: reasoning
seed: 5
params:
  n: 90
  shots: 4
  tasks:
    - {family: dates, level: 1, weight: 2}
    - {family: lists, level: 1}
  max_tokens: 128
"""


@pytest.mark.endpoints
@pytest.mark.slow
def test_planted_dates_collapse_fails_the_slice_and_bf16_self_never_fails(
    local_endpoints: Any, tmp_path: Path
) -> None:
    suite = tmp_path / "dates-slice.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "r.json"
    base = local_endpoints.baseline
    with fault_proxy(base, match="What day of the week", wrong="Unknown.") as proxy:
        r = subprocess.run(
            [sys.executable, "-m", "evalsvc.cli.main", "compare", base, base,
             proxy.url("match"), "--suite", str(suite), "--json", str(out)],
            capture_output=True, text=True, timeout=1800,
        )
        damaged = proxy.damaged
    assert r.returncode == 1, r.stderr
    assert damaged >= 40  # every dates item (weight 2 of 3: about 60 of 90) was answered wrongly
    report = json.loads(out.read_text())
    self_, planted = (c["suites"][0] for c in report["candidates"])
    assert self_["verdict"] != "fail"
    assert all(s["verdict"] != "fail" for s in self_["details"]["slices"]["slices"])
    assert planted["verdict"] == "fail"
    rows = {s["slice"]: s for s in planted["details"]["slices"]["slices"]}
    dates = rows["dates L1"]
    assert dates["verdict"] == "fail" and dates["candidate"] == 0.0 < dates["baseline"]
    assert rows["lists L1"]["verdict"] != "fail"  # the untouched family is not blamed
    reason = planted["details"]["reason"]
    assert "dates L1" in reason and "solved items lost" in reason
    assert dates["flipped_tokens"]  # first divergent token on both sides
    # Word tokens (\w+ or one punctuation mark): the planted answer "Unknown." starts "Unknown".
    assert all(t["candidate"] == "Unknown" for t in dates["flipped_tokens"])
