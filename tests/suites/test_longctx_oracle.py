"""``longctx`` end to end over HTTP against a loopback server with known behaviour
(``tests.fixtures.longctx_oracle``): items planned with a real tokenizer, sent through the real
endpoint client, scored, analysed and gated by the runner's gate step.

An endpoint against itself never fails; a planted loss past N tokens (the longest length only)
fails the task and shifts the effective length. The endpoint case runs the longctx-4k set on
the real local endpoints (skipped on hosts without them, as every endpoint test).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.endpoints import EndpointClient, probe
from evalsvc.suites import SuiteSpec, suite_kinds
from evalsvc.suites._registry import register
from evalsvc.suites.kinds.longctx import LongContextSuite
from tests.fixtures.longctx_oracle import oracle_server, train_tokenizer, url

if "longctx" not in suite_kinds():
    register(LongContextSuite)

LENGTHS = [400, 800, 1200]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


def _run(suite: LongContextSuite, base_url: str, cand_url: str) -> tuple[Any, Any]:
    from evalsvc.runner._runner import _gate_one

    async def go() -> tuple[list[Sample], list[Sample]]:
        out: list[list[Sample]] = []
        items: list[Any] = []
        for role, u in (("baseline", base_url), ("candidate:0", cand_url)):
            async with EndpointClient(EndpointRef(url=u)) as client:
                prov = await probe(client)  # the model name and the /tokenize shape
                if not items:  # planned on the baseline, as the runner does
                    items = await suite.plan(client, prov)
                samples = await asyncio.gather(*(suite.solve(it, client) for it in items))
            for s in samples:
                s.endpoint = role
            out.append(list(samples))
        return out[0], out[1]

    b, c = asyncio.run(go())
    suite.bind_gate(RunOptions())
    analysis = suite.analyze(b, c)
    return _gate_one(suite, analysis, RunOptions(), len(b), b, c), b


@pytest.mark.parametrize("task", ["nolima", "common_words", "frequent_words",
                                  "variable_tracking"])
def test_self_passes_and_a_planted_long_loss_fails(task: str, bpe: Path) -> None:
    params: dict[str, Any] = {"task": task, "lengths": LENGTHS, "languages": ["en", "ko"],
                              "tokenizer": str(bpe), "max_tokens": 48}
    if task in ("nolima", "variable_tracking"):
        # 6 haystacks x 3 lengths x 2 languages: 36 clusters of two depths, past the 32
        # flip-free clusters a pass at margin 0.10 can rest on (docs/statistics.md).
        params |= {"depths": [0.3, 0.7], "haystacks": 6}
    else:
        params |= {"haystacks": 10, "uncommon_per_1k": 8, "common_freq": 4}
    suite = LongContextSuite(SuiteSpec(name=f"lc-{task}", kind="longctx", seed=11,
                                       params=params))
    with oracle_server(str(bpe), error_pct=10) as srv:
        same, b = _run(suite, url(srv, "good"), url(srv, "good"))
        # The oracle reads every task: neither 0% nor 100% (its 10% planted misses).
        mean = sum(s.score or 0.0 for s in b) / len(b)
        assert 0.75 <= mean < 1.0, mean
        # Nothing differs: a pass on the exact bound for the clusters' (haystacks') count,
        # never on a zero-width interval (docs/statistics.md, "No pass without evidence").
        assert same.verdict == "pass", repr(same.outcome)
        eff = same.details["effective_length"]
        assert eff["baseline"] == eff["candidate"] and eff["shift"] == 0
    # The planted loss on a server without planted misses, so that the baseline's effective
    # length is the longest length by construction (with 10% misses over 20 items a length
    # can fall below 85% of the shortest by chance).
    with oracle_server(str(bpe), error_pct=0) as srv:
        cut, _ = _run(suite, url(srv, "good"), url(srv, f"cut{LENGTHS[1]}"))
    assert cut.verdict == "fail"
    eff = cut.details["effective_length"]
    assert eff["baseline"] == LENGTHS[-1] and eff["candidate"] == LENGTHS[1]
    assert eff["shift"] == LENGTHS[1] - LENGTHS[-1]
    by = {(r["context_length"], r["language"]): r for r in cut.details["by_length"]}
    assert by[(LENGTHS[-1], "all")]["candidate"] == 0.0
    assert by[(LENGTHS[0], "ko")]["candidate"] == by[(LENGTHS[0], "ko")]["baseline"]


def test_longctx_4k_on_the_local_endpoints(local_endpoints: Any) -> None:
    """Each task of the longctx-4k set runs on the local BF16 endpoint against itself (the figures
    for docs/benchmarks.md, "Suite measurements", come from this run)."""
    from evalsvc.suites import resolve

    for suite in resolve(["longctx-4k"]):
        assert isinstance(suite, LongContextSuite)
        res, b = _run(suite, local_endpoints.baseline, local_endpoints.baseline)
        assert not [s.error for s in b if s.error]
        assert res.verdict != "fail"


def test_compare_end_to_end_through_the_endpoint_tokenizer(tmp_path: Path, bpe: Path) -> None:
    """``evalsvc compare``'s service: the probe finds the oracle's /tokenize, the suite sizes its
    items with it (no ``params.tokenizer``), and the Markdown report carries the finding."""
    from evalsvc.db import Store
    from evalsvc.domain import RunSpec
    from evalsvc.reports import to_markdown
    from evalsvc.services import dashboard, runs

    yaml = tmp_path / "lc.yaml"
    yaml.write_text(
        "name: lc-vt\nkind: longctx\nseed: 5\nparams:\n  task: variable_tracking\n"
        f"  lengths: {LENGTHS}\n  languages: [en, ko]\n  depths: [0.3, 0.7]\n  haystacks: 5\n"
        "gate:\n  margin: 0.1\n"
    )
    with Store.from_url(f"sqlite:///{tmp_path / 'e.db'}") as store, \
            oracle_server(str(bpe), error_pct=0) as srv:
        store.upgrade()
        spec = RunSpec(baseline=EndpointRef(url=url(srv, "good")),
                       candidates=[EndpointRef(url=url(srv, f"cut{LENGTHS[1]}"))],
                       suites=[str(yaml)])
        report = runs.compare(spec, store=store)
        # The dashboard's suite page: the kind's chart and findings from the stored run.
        page = dashboard.suite_view(store, report["run_id"], "lc-vt", "candidate:0")
    entry = report["candidates"][0]["suites"][0]
    assert entry["verdict"] == "fail" and entry["n"] == 60 and entry["n_errors"] == 0
    assert "endpoint /tokenize" in (report["baseline"]["provenance"]["tokenizer_source"] or "")
    text = to_markdown(report)
    assert f"Effective length (longest context keeping ≥ 85% of the shortest length's score): " \
           f"≥ {LENGTHS[-1]} tokens → {LENGTHS[1]} tokens." in text
    assert f"| {LENGTHS[-1]} | " in text
    (chart,) = page["kind_view"]["charts"]
    assert chart["labels"] == [str(n) for n in LENGTHS]
    assert chart["series"][1]["data"][-1] == 0.0 and chart["series"][0]["data"][-1] > 0
    assert any(f["title"].startswith("effective length") and f["severity"] == "warn"
               for f in page["findings"])
