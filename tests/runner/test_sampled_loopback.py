"""Sampled evaluation end to end on a real loopback server that samples
(``tests/runner/sampled_server.py``): a reasoning suite with ``sampling: {k: 4, temperature:
0.6, top_p: 0.95}``.

- every item is sent k = 4 times to each side (``Sample.repeat`` 0-3) with the suite's decoding
  and no per-request seed (``data["seed_sent"]`` false); the gate pairs 60 items, not 240
  samples, with the continuous test on per-item means in [0, 1];
- two copies of one sampling model (independent draws) do not fail against each other; a
  candidate 30 points worse per item fails;
- the report's ``details["sampling"]`` has pass@1 with its interval, the variance components
  (both parts present on this server) and pass@k;
- a seed, when the suite sets one, is sent and recorded, derived per item and sample;
- without a ``sampling`` block the requests are greedy, one per item, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, RunOptions
from evalsvc.suites import SuiteSpec, suite_kinds
from evalsvc.suites._sampling import request_seed
from tests.fixtures.db import (  # noqa: F401  (pytest fixtures)
    db_url,
    pg_session_url,
    sqlite_template,
)
from tests.fixtures.runs import execute_pair
from tests.runner.sampled_server import sampled_server

SEED = 3
TASKS = [{"family": "arithmetic", "level": 1}, {"family": "lists", "level": 1}]
GOOD = dict.fromkeys(range(1, 6), 0.6)
WORSE = dict.fromkeys(range(1, 6), 0.3)
SAMPLING = {"k": 4, "temperature": 0.6, "top_p": 0.95, "pass_at": [1, 4]}


def _suite(n: int = 60, sampling: dict[str, Any] | None = None) -> Any:
    spec = SuiteSpec(name="r", kind="reasoning", seed=SEED, sampling=sampling,
                     params={"n": n, "tasks": TASKS, "max_tokens": 16})
    return suite_kinds()["reasoning"](spec)


def test_sampled_suite_against_itself_pairs_item_means_and_does_not_fail() -> None:
    # Two copies of one model: the same per-item probabilities, independent draws.
    with sampled_server(GOOD, [SEED], per_level=100, rng_seed=1) as one, \
            sampled_server(GOOD, [SEED], per_level=100, rng_seed=2) as two:
        result, kept = execute_pair(one.url, two.url, _suite(sampling=SAMPLING))
        bodies = [b for srv in (one, two) for b in srv.bodies if b["max_tokens"] == 16]
    res = result.candidates[0].suites[0]
    assert res.verdict != "fail"
    assert res.outcome.n == 60 and res.n_planned == 60 and res.n_errors == 0
    assert res.outcome.details["kind"] == "continuous"
    assert res.details["gate"]["kind"] == "continuous"
    # k = 4 samples of every item on each side, each with the suite's decoding and no seed.
    assert len(kept) == 2 * 60 * 4
    assert {s.repeat for s in kept} == {0, 1, 2, 3}
    assert all(s.data["seed_sent"] is False and "seed" not in s.data for s in kept)
    assert len(bodies) == 480
    assert all(b["temperature"] == 0.6 and b["top_p"] == 0.95 and b["seed"] is None
               for b in bodies)
    sampling = res.details["sampling"]
    assert sampling["k"] == 4 and sampling["items"] == 60
    assert sampling["samples"] == {"baseline": 240, "candidate": 240}
    p1 = sampling["pass@1_baseline"]
    lo, hi = p1["ci"]
    assert lo < p1["value"] < hi and 0.4 < p1["value"] < 0.8
    # Items differ (per-item offsets) and samples differ (random draws): both parts present.
    var = sampling["variance"]
    assert var["between"] > 0 and var["within"] > 0
    assert abs(var["unit"] - (var["between"] + var["within"] / 4)) < 1e-12
    assert [r["k"] for r in sampling["pass_at_k"]] == [1, 4]
    at1, at4 = sampling["pass_at_k"]
    assert abs(at1["baseline"] - p1["value"]) < 1e-12  # pass@1 is the mean over samples
    assert at4["baseline"] >= at1["baseline"]


def test_sampled_candidate_worse_per_item_fails() -> None:
    with sampled_server(GOOD, [SEED], per_level=100, rng_seed=2) as good, \
            sampled_server(WORSE, [SEED], per_level=100, rng_seed=3) as worse:
        result, _ = execute_pair(good.url, worse.url, _suite(sampling=SAMPLING))
    res = result.candidates[0].suites[0]
    assert res.verdict == "fail" and res.outcome.n == 60
    assert res.outcome.delta < -0.15


def test_a_seed_is_sent_only_when_the_suite_sets_one_and_recorded() -> None:
    with sampled_server(GOOD, [SEED], per_level=100) as srv:
        _, kept = execute_pair(srv.url, srv.url, _suite(n=10, sampling={**SAMPLING, "seed": 7}))
        seeds = {b["seed"] for b in srv.bodies if b["max_tokens"] == 16}
    assert all(s.data["seed_sent"] is True for s in kept)
    assert {s.data["seed"] for s in kept} == seeds
    one = kept[0]
    assert one.data["seed"] == request_seed(7, one.item_id, one.repeat)
    assert len(seeds) == 40  # one per (item, sample), the same on both sides


def test_without_sampling_the_suite_stays_greedy_one_sample_per_item() -> None:
    with sampled_server(GOOD, [SEED], per_level=100) as srv:
        result, kept = execute_pair(srv.url, srv.url, _suite(n=20))
        bodies = [b for b in srv.bodies if b["max_tokens"] == 16]
    assert len(kept) == 40 and {s.repeat for s in kept} == {0}
    assert all("seed_sent" not in s.data for s in kept)
    assert all(b["temperature"] == 0.0 and b["top_p"] is None and b["seed"] is None
               for b in bodies)
    res = result.candidates[0].suites[0]
    assert "sampling" not in res.details and res.details["gate"]["kind"] == "binary"


def test_run_options_override_the_suites_decoding() -> None:
    from evalsvc.suites._sampling import SamplingOptions

    with sampled_server(GOOD, [SEED], per_level=100) as srv:
        suite = _suite(n=10, sampling=SAMPLING)
        result, kept = execute_pair(srv.url, srv.url, suite,
                            sampling=SamplingOptions(k=2, temperature=1.0, max_tokens=24))
        bodies = [b for b in srv.bodies if b["max_tokens"] == 24]
    assert len(kept) == 2 * 10 * 2 and len(bodies) == 40
    assert all(b["temperature"] == 1.0 and b["top_p"] == 0.95 for b in bodies)
    res = result.candidates[0].suites[0]
    assert res.details["sampling"]["k"] == 2 and res.outcome.n == 10


SUITE_YAML = f"""name: sampled
kind: reasoning
seed: {SEED}
sampling: {{k: 4, temperature: 0.6, top_p: 0.95, pass_at: [1, 2]}}
params:
  n: 40
  tasks:
    - {{family: arithmetic, level: 1}}
    - {{family: lists, level: 1}}
  max_tokens: 16
"""


def test_compare_stores_samples_reports_sampling_and_plan_sizes_items_by_k(
    tmp_path: Path, db_url: str  # noqa: F811
) -> None:
    """Through the service layer into the store: every sample kept with its ``repeat``, the
    JSON report valid against its schema with ``details["sampling"]``, and ``evalsvc plan``
    sized from the measured variance components (``--pilot-run``) and from the bound."""
    from evalsvc.db import Store
    from evalsvc.domain import RunSpec
    from evalsvc.services import runs
    from evalsvc.services.planning import plan
    from tests.services.test_gatelogs import check_schema

    suite = tmp_path / "sampled.yaml"
    suite.write_text(SUITE_YAML)
    store = Store.from_url(db_url)
    with sampled_server(GOOD, [SEED], per_level=100, rng_seed=4) as one, \
            sampled_server(GOOD, [SEED], per_level=100, rng_seed=5) as two:
        spec = RunSpec(baseline=EndpointRef(url=one.url, name="base"),
                       candidates=[EndpointRef(url=two.url, name="cand")],
                       suites=[str(suite)], options=RunOptions(concurrency=4))
        report = runs.compare(spec, store=store)
    check_schema(report)
    entry = report["candidates"][0]["suites"][0]
    assert entry["n_planned"] == 40 and entry["details"]["sampling"]["k"] == 4
    (finding,) = [f for f in entry["findings"] if f["title"] == "sampled evaluation"]
    assert "4 samples per item at temperature 0.6, top_p 0.95" in finding["text"]
    assert "pass@1 (mean over samples)" in finding["text"] and "pass@2:" in finding["text"]
    assert entry["headline"] and "pass@1 over 4 samples" in entry["headline"]
    from evalsvc.reports import to_markdown

    assert "**Sampled evaluation**" in to_markdown(report)
    stored = store.done_keys(report["run_id"])  # (endpoint, suite, item, repeat)
    assert len(stored) == 2 * 40 * 4 and {key[3] for key in stored} == {0, 1, 2, 3}
    (bound,) = plan(suites=[str(suite)], margin=None, alpha=None)
    sampling = bound["sampling"]
    assert sampling["k"] == 4 and sampling["within"] == 0.5 and sampling["between"] == 0.0
    assert bound["required_items"] == sampling["required_items"]
    assert [r["k"] for r in sampling["by_k"]] == [1, 2, 4, 8, 16]
    items = [r["items"] for r in sampling["by_k"]]
    requests = [r["requests"] for r in sampling["by_k"]]
    assert items == sorted(items, reverse=True) and requests == sorted(requests)
    assert "more items beat more samples" in bound["note"]
    (measured,) = plan(suites=[str(suite)], margin=None, alpha=None,
                       pilot_run=report["run_id"], store=store)
    var = entry["details"]["sampling"]["variance"]
    assert measured["sampling"]["source"] == "pilot run"
    assert measured["sampling"]["within"] == pytest.approx(var["within"])
    assert measured["sampling"]["between"] == pytest.approx(var["between"])


def test_compare_flags_sample_a_greedy_suite_and_refuse_k_without_a_temperature(
    tmp_path: Path,
) -> None:
    """``compare --sampling-k 2 --temperature 0.7 --top-p 0.9 --max-tokens 24`` samples a
    suite that has no ``sampling:`` block; ``--sampling-k 2`` alone is refused (exit 2) with
    the fix, before any request."""
    import json

    from tests.fixtures.cli import run_cli

    greedy = tmp_path / "greedy.yaml"
    greedy.write_text(SUITE_YAML.replace(
        "sampling: {k: 4, temperature: 0.6, top_p: 0.95, pass_at: [1, 2]}\n", "").replace(
        "n: 40", "n: 10"))
    db = f"sqlite:///{tmp_path / 'e.db'}"
    with sampled_server(GOOD, [SEED], per_level=100) as srv:
        refused = run_cli("compare", srv.url, srv.url, "-s", str(greedy), "--database-url", db,
                          "--sampling-k", "2")
        assert refused.returncode == 2
        assert "temperature 0" in refused.stderr and "set a temperature" in refused.stderr
        assert srv.bodies == []
        out = tmp_path / "r.json"
        ran = run_cli("compare", srv.url, srv.url, "-s", str(greedy), "--database-url", db,
                      "--sampling-k", "2", "--temperature", "0.7", "--top-p", "0.9",
                      "--max-tokens", "24", "--json", str(out))
        bodies = [b for b in srv.bodies if b["max_tokens"] == 24]
    assert ran.returncode in (0, 3), ran.stderr
    assert len(bodies) == 2 * 10 * 2
    assert all(b["temperature"] == 0.7 and b["top_p"] == 0.9 for b in bodies)
    entry = json.loads(out.read_text())["candidates"][0]["suites"][0]
    assert entry["details"]["sampling"]["k"] == 2 and entry["n_planned"] == 10
