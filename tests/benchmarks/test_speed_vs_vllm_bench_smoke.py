"""The P2 benchmark keeps working (``benchmarks/speed_vs_vllm_bench.py``): one tiny round,
evalsvc's speed suite beside ``vllm bench serve`` from the managed vLLM venv, both against the
vLLM-shaped zero-latency stub (``benchmarks/stub_server.py``). Nothing is timed: it asserts that
both sides measured every request and that the script printed the ratio of two positive medians.

What can break here is the script's side: ``vllm bench serve``'s arguments against the vLLM
version the managed venv installs, the speed suite it writes, and the parsing of both results.
None of that needs a model, so the round runs against the stub and leaves the vLLM endpoint
tier: against a real server it held the second vLLM group for 231 s under a `.ci/run` on a
2-core AMD host (docs/benchmarks.md, "Session 16"), most of it two ``vllm`` imports. The speed
kind against real vLLM servers is ``tests/suites/test_kinds_endpoints.py``'s speed test.

It needs what ``evalsvc local up`` prepares (the vLLM venv and the bf16 checkpoint, whose
tokenizer ``vllm bench serve`` loads), so it runs where the vLLM endpoint tier runs and skips
with that tier's reason elsewhere. When they are not prepared yet it prepares them, waiting for
a session's background start of the servers, which holds the same lock.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import _slow_host_reason
from tests.fixtures.bench_stub import bench_stub

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def vllm_prepared() -> None:
    """The managed vLLM venv and the bf16 checkpoint exist (prepared here if they do not)."""
    reason = _slow_host_reason()
    if reason is not None:
        pytest.skip(reason)
    from evalsvc import local
    from evalsvc.local._paths import Layout
    from evalsvc.local._prepare import Preparer

    layout = Layout.current()
    # A finished checkpoint directory is renamed into place whole, so its tokenizer file says
    # it is complete; asking without the lock lets a prepared host start at once.
    ready = Preparer(layout).vllm_venv_ready() and (
        layout.model_dir(local.BASELINE) / "tokenizer.json"
    ).exists()
    if not ready:
        local.prepare(())


@pytest.fixture
def stub_url() -> Iterator[str]:
    with bench_stub() as urls:
        yield urls[0]


def test_one_round_measures_both_sides(vllm_prepared: None, stub_url: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "speed_vs_vllm_bench.py"), "--url", stub_url,
         "--concurrency", "2", "--requests", "6", "--max-tokens", "8",
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
