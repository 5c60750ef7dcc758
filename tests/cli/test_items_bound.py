"""The item bound of an in-process ``evalsvc compare`` (issue 21): ``evalsvc.limits.MAX_ITEMS``
(100,000), not the server's ``EVALSVC_MAX_ITEMS`` (10,000 by default, tests/api/test_bounds.py).

A suite of 100,000 items validates through the real CLI; one past the bound is a usage error
(exit 2). The run itself is kept small (``--samples``) against the zero-latency stub of the
benchmarks (a real aiohttp server on loopback), and its streamed analysis (the reasoning kind
keeps no samples, ``PairedColumns``) equals the list analysis of the samples it stored.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsvc import limits
from evalsvc.db import Store
from evalsvc.suites import paired_scores
from evalsvc.suites.kinds.reasoning import by_task
from tests.fixtures.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]


def evalsvc(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalsvc.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def suite_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / f"big-{n}.yaml"
    path.write_text(f"name: big\nkind: reasoning\nseed: 3\nparams:\n  n: {n}\n")
    return path


@pytest.fixture(scope="module")
def stub_urls() -> Iterator[list[str]]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import evaluator_speed
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    with evaluator_speed.stub() as urls:
        yield urls


def test_a_suite_of_100k_items_validates_and_one_more_is_refused(tmp_path: Path) -> None:
    evalsvc = run_cli  # refusals and a plan: in-process (tests/fixtures/cli.py)
    ok = evalsvc("plan", "--suite", str(suite_file(tmp_path, limits.MAX_ITEMS)), "--json")
    assert ok.returncode == 0, ok.stderr
    over = evalsvc("plan", "--suite", str(suite_file(tmp_path, limits.MAX_ITEMS + 1)), "--json")
    assert over.returncode == 2, over.stderr
    assert "params.n" in over.stderr and "100000" in over.stderr
    samples = evalsvc(
        "compare", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", "--suite", "reasoning",
        "--samples", str(limits.MAX_ITEMS + 1),
    )
    assert samples.returncode == 2, samples.stderr


def test_compare_runs_the_100k_spec_small_and_its_streamed_gate_equals_the_list_one(
    tmp_path: Path, stub_urls: list[str]
) -> None:
    db = tmp_path / "e.db"
    report = tmp_path / "r.json"
    r = evalsvc(
        "compare", *stub_urls, "--suite", str(suite_file(tmp_path, limits.MAX_ITEMS)),
        "--samples", "40", "--concurrency", "8", "--database-url", f"sqlite:///{db}",
        "--json", str(report),
    )
    # 0/1/3: the stub solves few items, so the verdict may be inconclusive; never an error.
    assert r.returncode in (0, 1, 3), r.stderr[-3000:]
    data = json.loads(report.read_text())
    (cand,) = data["candidates"]
    (entry,) = cand["suites"]
    assert entry["n"] == 40 and entry["n_errors"] == 0
    with Store.from_url(f"sqlite:///{db}") as store:
        samples = store.get_samples(data["run_id"], suite="big")
    base = [s for s in samples if s.endpoint == "baseline"]
    other = [s for s in samples if s.endpoint == cand["role"]]
    assert len(base) == len(other) == 40
    listed = paired_scores(base, other)
    assert entry["baseline"] == pytest.approx(sum(listed.baseline) / 40)
    assert entry["candidate"] == pytest.approx(sum(listed.candidate) / 40)
    assert entry["details"]["by_task"] == by_task(base, other)
