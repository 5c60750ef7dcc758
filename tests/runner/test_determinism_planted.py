"""The catalog ``determinism`` suite on the real endpoints (one run, three candidates):

- a planted candidate — a loopback fault proxy in front of the real bf16 endpoint that changes
  the answer (swaps a confident token for the runner-up) on half of the chat requests that
  arrive while another request is in flight — never passes and is measured more unstable than
  the baseline (on a host where bf16 itself is stable under load it fails; on an Intel AMX host,
  where bf16 is about 31% unstable under this traffic, the catalog size leaves it inconclusive:
  docs/local-endpoints.md);
- bf16 against itself and fp8-kv as it is never fail because of the baseline's own batch
  variance (the gate tests answers under load that differ from the prompt's modal answer,
  beyond the baseline's under the same traffic); fp8-kv's fixed batch-1-vs-batched difference
  (the same prompts under every batched condition) is stable, not unstable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.runner.fault_proxy import fault_proxy


@pytest.mark.endpoints
@pytest.mark.slow
def test_planted_batch_dependence_fails_and_real_ones_do_not(
    local_endpoints: Any, tmp_path: Path
) -> None:
    base = local_endpoints.baseline
    others = [base]
    if "fp8-kv" in local_endpoints.candidates:
        others.append(local_endpoints.candidates["fp8-kv"])
    out = tmp_path / "r.json"
    with fault_proxy(base, alter_p=0.5, seed=1) as proxy:
        r = subprocess.run(
            [sys.executable, "-m", "evalsvc.cli.main", "compare", base, proxy.url("concurrent"),
             *others, "--suite", "determinism", "--json", str(out)],
            capture_output=True, text=True, timeout=3000,
        )
        damaged = proxy.damaged
    assert r.returncode in (1, 3), r.stderr
    assert damaged >= 10  # the proxy did change answers under load (25 of 168 requests measured)
    report = json.loads(out.read_text())
    planted, *real = (c["suites"][0] for c in report["candidates"])
    assert planted["verdict"] != "pass", planted["details"].get("reason")
    assert planted["candidate"] > planted["baseline"]  # more unstable answers
    for s in real:
        assert s["verdict"] != "fail", s
    if len(real) < 2:
        pytest.skip("fp8-kv is not served on this host; the planted and self cases were checked")
