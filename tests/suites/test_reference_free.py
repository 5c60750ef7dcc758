"""The ``dataset`` kind without a reference: similarity scorers checked against ``rouge-score``,
and the similarity and judge gates driven through the runner by a loopback server with planted
behaviour (``tests/suites/judge_server.py``): a planted share of worse answers beyond the margin
fails, a position-biased judge is reported inconsistent and never passes, an A/A with a
consistent judge passes."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from rouge_score import rouge_scorer

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.runner import InfrastructureError, execute
from evalsvc.services.runs import UsageError, resolve_helpers
from evalsvc.suites import load_suite
from evalsvc.suites.kinds._judge import combine, degraded, parse_verdict
from evalsvc.suites.kinds._similarity import embedding_similarity, similarity
from tests.suites.judge_server import judge_server

PAIRS = [
    ("The cat sat on the mat.", "A cat was sitting on the mat"),
    ("Paris is the capital of France.", "The capital of France is Paris."),
    ("42", "The answer is 42."),
    ("one two three four five", "five four three two one"),
    ("the the the cat", "the cat cat"),
    ("Completely different words here", "nothing shared at all"),
]


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_text_similarity_matches_rouge_score(a: str, b: str) -> None:
    """On ASCII text our tokenizer and rouge-score's agree, so the scores are the package's."""
    ref = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=False).score(a, b)
    assert similarity("rouge_l", a, b) == pytest.approx(ref["rougeL"].fmeasure)
    assert similarity("token_f1", a, b) == pytest.approx(ref["rouge1"].fmeasure)
    # Token F1 is SQuAD's bag-of-tokens F1 (without its normalization): counted independently.
    ta, tb = Counter(a.lower().replace(".", " ").split()), Counter(b.lower().replace(".", " ").split())
    common = sum((ta & tb).values())
    f1 = 0.0 if common == 0 else 2 * common / (sum(ta.values()) + sum(tb.values()))
    assert similarity("token_f1", a, b) == pytest.approx(f1)
    assert similarity("rouge_l", a, b) == pytest.approx(similarity("rouge_l", b, a))


def test_similarity_edges_and_unicode() -> None:
    assert similarity("rouge_l", "", "") == 1.0 and similarity("token_f1", "x", "") == 0.0
    # rouge-score's own tokenizer keeps [a-z0-9] only: Cyrillic would be empty to it.
    assert similarity("rouge_l", "Привет, мир", "привет мир") == 1.0
    assert similarity("token_f1", "Привет мир", "привет") == pytest.approx(2 / 3)
    assert embedding_similarity([1.0, 0.0], [1.0, 0.0]) == pytest.approx(1.0)
    assert embedding_similarity([1.0, 0.0], [-1.0, 0.0]) == 0.0  # clipped: not "less than unrelated"
    assert embedding_similarity([0.0, 0.0], [1.0, 0.0]) is None


def test_judge_verdicts_combine_over_both_orders() -> None:
    assert parse_verdict("reasons... [[A]] no wait [[B]]") == "B"
    assert parse_verdict("no verdict") is None
    # First order: the baseline is A; second: the baseline is B. Preference of the other answer.
    assert combine("B", "A") == (1, True) and combine("A", "B") == (-1, True)
    assert combine("C", "C") == (0, True)
    assert combine("A", "A") == (0, False)  # position bias: a tie, counted inconsistent
    assert combine(None, "A") == (0, False)
    assert degraded("one two three four five six") == "one two" and degraded("Paris") == ""


def test_unknown_judge_endpoint_is_a_usage_error(tmp_path: Path) -> None:
    suite = load_suite(str(write_suite(tmp_path, 4, judge={"endpoint": "no-such-judge"})),
                       allow_paths=True)
    assert suite.helper_endpoints() == {"judge": "no-such-judge"}
    with pytest.raises(UsageError, match="judge endpoint: 'no-such-judge' is neither"):
        resolve_helpers([suite], None, server=False)
    url_suite = load_suite(str(write_suite(tmp_path, 4, judge={"endpoint": "http://x:1/v1"})),
                           allow_paths=True)
    with pytest.raises(UsageError, match="must be a registered endpoint name on a server"):
        resolve_helpers([url_suite], None, server=True)


def test_params_refuse_what_cannot_run(tmp_path: Path) -> None:
    from evalsvc.suites import SuiteError

    with pytest.raises(SuiteError, match="compare 'judge' needs a judge"):
        load_suite(str(write_suite(tmp_path, 4, compare="judge")), allow_paths=True)
    with pytest.raises(SuiteError, match="needs an embedding endpoint"):
        load_suite(str(write_suite(tmp_path, 4, similarity="embedding")), allow_paths=True)
    with pytest.raises(SuiteError, match=r"must contain \{answer_b\}"):
        load_suite(str(write_suite(tmp_path, 4, judge={"endpoint": "j", "prompt": "{question} "
                                                        "{answer_a}"})), allow_paths=True)


# ---- through the runner, against the loopback server ------------------------------------------


def write_suite(tmp_path: Path, n: int, **params: Any) -> Path:
    rows = [{"id": f"q{i:02d}", "messages": [{"role": "user", "content": f"Question {i}: why?"}]}
            for i in range(n)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"name": "rf", "kind": "dataset", "params": {
        "path": "d.jsonl", "prompt": {"messages": "messages"}, "id_column": "id", "n": n,
        "max_tokens": 32, **params}}
    path = tmp_path / f"rf-{len(list(tmp_path.glob('rf-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run(base: str, cand: str, suite_path: Path, helpers: dict[str, str]) -> tuple[Any, list[Sample]]:
    suite = load_suite(str(suite_path), allow_paths=True)
    stored: dict[tuple[str, str, str, int], Sample] = {}

    async def sink(sample: Sample) -> None:
        stored[sample.key] = sample  # the store keeps the last sample of a key

    refs = {purpose: EndpointRef(url=url) for purpose, url in helpers.items()}
    result = asyncio.run(execute(
        run_id="t", baseline=EndpointRef(url=base), candidates=[EndpointRef(url=cand)],
        suites=[suite], options=RunOptions(concurrency=4), sink=sink,
        helpers={suite.name: refs} if refs else None,
    ))
    return result.candidates[0].suites[0], list(stored.values())


def test_planted_worse_share_beyond_the_margin_fails(tmp_path: Path) -> None:
    with judge_server(worse_tenths=3) as srv:
        path = write_suite(tmp_path, 40, judge={"endpoint": "judge", "controls": 10})
        res, samples = run(srv.url("base"), srv.url("cand"), path, {"judge": srv.url("judge")})
    assert res.outcome.metric == "judge_not_worse" and res.n_errors == 0 and res.outcome.n == 40
    assert res.verdict == "fail", res.outcome
    assert res.outcome.delta == pytest.approx(-0.30)  # 12 of 40 judged worse, none better
    j = res.details["judge"]
    assert j["candidate"]["worse"] == 12 and j["candidate"]["better"] == 0
    assert j["consistency"] == 1.0 and j["discrimination"] == 1.0 and j["informative"]
    assert j["aa"]["n"] == 40 and j["aa"]["same"] == 40  # the baseline against its second pass
    assert j["controls"] == 10 and j["model"] == "judge-model"
    # Every judged-worse item is in the report with its prompt, both answers and the reasons.
    worse = [e for e in res.details["pair_examples"] if e.get("preference") == -1]
    assert len(worse) == 12
    assert worse[0]["prompt"].startswith("[user] Question") and "worse" in worse[0]["candidate"]
    assert worse[0]["reasons"] and "One answer is worse." in worse[0]["reasons"][0]
    # The stored candidate samples carry the judgement; the judged-worse ones score 0.
    cand = [s for s in samples if s.endpoint == "candidate:0"]
    assert sum(s.score == 0.0 for s in cand) == 12
    assert all(s.data["judge"]["verdicts"] in (["C", "C"], ["A", "B"]) for s in cand)
    assert res.details["changed_answers"]["candidate"] == 12


def test_position_biased_judge_is_inconsistent_and_never_passes(tmp_path: Path) -> None:
    with judge_server() as srv:
        path = write_suite(tmp_path, 40, judge={"endpoint": "position", "controls": 10})
        # A/A: the candidate is the baseline itself, so every pair is a tie to a sound judge.
        res, _ = run(srv.url("base"), srv.url("base"), path, {"judge": srv.url("position")})
    j = res.details["judge"]
    assert j["consistency"] == 0.0 and j["candidate"]["inconsistent"] == 40
    assert j["discrimination"] == 0.0 and not j["informative"] and len(j["problems"]) == 2
    assert res.verdict == "inconclusive"
    # The interval alone would pass (every pair a tie); the judge's guard says why it did not.
    assert "would read pass" in res.outcome.details["judge_overrode"]


def test_aa_with_a_consistent_judge_passes(tmp_path: Path) -> None:
    with judge_server() as srv:
        path = write_suite(tmp_path, 40, judge={"endpoint": "judge", "controls": 5})
        res, _ = run(srv.url("base"), srv.url("base"), path, {"judge": srv.url("judge")})
        judged = srv.judged
    assert res.verdict == "pass", res.outcome
    assert res.details["judge"]["informative"] and res.details["judge"]["candidate"]["same"] == 40
    # Both orders of the candidate pair and of the A/A pair per item, and of each control.
    assert judged == 40 * 4 + 5 * 2


def test_similarity_gate_with_embeddings(tmp_path: Path) -> None:
    """Asked to (``compare: similarity``), the suite gates on similarity: the A/A passes, the planted worse
    answers fail; agreement is reported (changed answers), and an embedding endpoint adds
    embedding similarity."""
    with judge_server(worse_tenths=3) as srv:
        # 60 items: an A/A with no spread passes a 5-point margin on the exact bound from
        # about 59 (at 40 the bound is 7 points: evalsvc.gates.exact_constant_bounds).
        path = write_suite(tmp_path, 60, embeddings={"endpoint": "embed"}, compare="similarity")
        helpers = {"embeddings": srv.url("embed")}
        same, _ = run(srv.url("base"), srv.url("base"), path, helpers)
        worse, samples = run(srv.url("base"), srv.url("cand"), path, helpers)
    assert same.outcome.metric == "rouge_l" and same.verdict == "pass", same.outcome
    assert worse.verdict == "fail", worse.outcome
    # ROUGE-L of "Answer i: a worse answer." against the full answer: LCS 3 of 5 and 7 tokens.
    assert worse.outcome.candidate == pytest.approx(0.7 + 0.3 * 0.5)
    sims = worse.details["similarity"]
    assert set(sims) == {"rouge_l", "token_f1", "embedding"}
    assert sims["embedding"]["baseline"] == pytest.approx(1.0)
    assert 0 < sims["embedding"]["candidate"] < 1
    assert worse.details["changed_answers"] == {
        "candidate": 18, "baseline_second_pass": 0, "n": 60, "share": pytest.approx(0.3)}
    assert worse.details["flips"]["correct_to_incorrect"] == 18
    cand = [s for s in samples if s.endpoint == "candidate:0"]
    assert sum(s.score == 0.0 for s in cand) == 18  # the flips page lists the changed answers


def test_every_view_shows_the_judged_items(tmp_path: Path) -> None:
    """Through ``evalsvc compare``'s service with a registered judge: the suite snapshot holds
    the judge's prompt; the JSON report (against its schema), the Markdown report, the flips
    page and the samples page show each item judged worse with its prompt, both answers and
    the judge's reasons."""
    import jsonschema

    from evalsvc.db import Store
    from evalsvc.domain import RunSpec
    from evalsvc.reports import report_schema, to_markdown
    from evalsvc.services import dashboard, runs

    with judge_server(worse_tenths=2) as srv, \
            Store.from_url(f"sqlite:///{tmp_path / 'v.db'}") as store:
        store.upgrade()
        store.upsert_endpoint(name="the-judge", url=srv.url("judge"))
        path = write_suite(tmp_path, 20, judge={"endpoint": "the-judge", "controls": 4})
        spec = RunSpec(baseline=EndpointRef(url=srv.url("base")),
                       candidates=[EndpointRef(url=srv.url("cand"))], suites=[str(path)])
        report = runs.compare(spec, store=store)
        run_id = report["run_id"]
        (snapshot,) = store.get_suite_snapshots(run_id)
        flips = dashboard.flips_view(store, run_id, role="candidate:0")
        samples = dashboard.samples_view(store, run_id, "rf", outcome="regression")
    jsonschema.validate(report, report_schema())
    assert snapshot["spec"]["judge"]["endpoint"] == "the-judge"
    assert "{answer_a}" in snapshot["spec"]["judge"]["prompt"]
    entry = report["candidates"][0]["suites"][0]
    # 4 of 20 judged worse against a 10-point margin: too few items to fail, never a pass.
    assert entry["verdict"] == "inconclusive" and entry["details"]["judge"]["candidate"]["worse"] == 4
    titles = [f["title"] for f in entry["findings"]]
    assert "4 items judged worse" in titles and any(t.startswith("judge ") for t in titles)
    text = to_markdown(report)
    assert "Question 10: why?" in text and "Answer 10: a worse answer." in text
    assert "judge (baseline first): One answer is worse." in text
    # The flips page: exactly the four items judged worse, with the judge's reasons.
    assert sorted(r["item_id"] for r in flips["rows"]) == ["q00", "q01", "q10", "q11"]
    row = flips["rows"][0]
    assert row["prompt"].startswith("[user] Question") and "worse" in row["candidate_output"]
    notes = {n["label"]: n["text"] for n in row["notes"]}
    assert notes["judge"].startswith("candidate worse")
    assert notes["judge, baseline first"].startswith("One answer is worse.")
    assert len(samples["rows"]) == 4
    assert any(n["label"] == "judge" for n in samples["rows"][0]["candidate"]["notes"])


def test_plan_knows_when_a_similarity_aa_can_pass(tmp_path: Path) -> None:
    """``evalsvc plan``'s fewest items to pass, for the similarity gate: where an unchanged
    candidate's pairs (all differences 0) first pass on the exact bound, checked on the gate."""
    from evalsvc.gates import evaluate_gate

    suite = load_suite(str(write_suite(tmp_path, 4, compare="similarity")), allow_paths=True)
    n = suite.min_items_to_pass(0.05, 0.05)
    assert n == 59

    def verdict(k: int) -> str:
        return evaluate_gate([1.0] * k, [1.0] * k, metric="rouge_l", kind="continuous",
                             margin=0.05, alpha=0.05, higher_is_better=True, paired=True,
                             seed=0, value_range=(0.0, 1.0)).verdict

    assert verdict(n) == "pass" and verdict(n - 1) == "inconclusive"


def _probed_fingerprint(url: str) -> str:
    """The judge endpoint's provenance fingerprint, from a probe of our own."""
    from evalsvc.domain import provenance_fingerprint
    from evalsvc.endpoints import EndpointClient, probe

    async def go() -> str:
        client = EndpointClient(EndpointRef(url=url))
        try:
            return provenance_fingerprint(await probe(client))
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_the_report_names_the_judge_it_probed(tmp_path: Path) -> None:
    """The judge endpoint's probe is recorded with the run (the report's per-suite ``helpers``:
    purpose, name, served model, engine, provenance fingerprint), every judged record carries
    that fingerprint, and the Markdown report and the dashboard's run and suite pages say which
    model judged, at which endpoint, beside the judge's reliability figures; a judge that
    served another model than the suite's ``judge.model`` is said to."""
    import html

    import jsonschema
    from fastapi.testclient import TestClient

    from evalsvc.db import Store
    from evalsvc.domain import RunSpec
    from evalsvc.reports import report_schema, to_markdown
    from evalsvc.services import runs
    from evalsvc.webapp import create_app

    db_url = f"sqlite:///{tmp_path / 'h.db'}"
    with judge_server(worse_tenths=2) as srv, Store.from_url(db_url) as store:
        store.upgrade()
        store.upsert_endpoint(name="the-judge", url=srv.url("judge"))
        wrong = write_suite(tmp_path, 10, judge={"endpoint": "the-judge", "controls": 2,
                                                 "model": "big-judge"})
        with pytest.raises(InfrastructureError,
                           match="does not serve model 'big-judge' \\(it serves judge-model\\)"):
            runs.compare(RunSpec(baseline=EndpointRef(url=srv.url("base")),
                                 candidates=[EndpointRef(url=srv.url("cand"))],
                                 suites=[str(wrong)]), store=store)
        path = write_suite(tmp_path, 10, judge={"endpoint": "the-judge", "controls": 2,
                                                "model": "judge-model"})
        spec = RunSpec(baseline=EndpointRef(url=srv.url("base")),
                       candidates=[EndpointRef(url=srv.url("cand"))], suites=[str(path)])
        report = runs.compare(spec, store=store)
        run_id = report["run_id"]
        judged = [s for s in store.get_samples(run_id, suite="rf") if "judge" in s.data]
        expected = _probed_fingerprint(srv.url("judge"))
        with TestClient(create_app(db_url, auth=False)) as client:
            run_page = html.unescape(client.get(f"/runs/{run_id}").text)
            suite_page = html.unescape(
                client.get(f"/runs/{run_id}/suites/rf?candidate=candidate:0").text)
    jsonschema.validate(report, report_schema())
    entry = report["candidates"][0]["suites"][0]
    [helper] = entry["helpers"]
    assert helper["purpose"] == "judge" and helper["name"] == "the-judge"
    assert helper["model"] == "judge-model" and helper["url"] == srv.url("judge")
    assert helper["fingerprint"] == expected and len(expected) == 16
    assert helper["provenance"]["model"] == "judge-model"
    # The verdicts are that judge's: every record (candidate, A/A, controls) says so.
    assert len(judged) == 20  # 10 candidate answers and 10 second passes
    assert {s.data["judge"]["endpoint_fingerprint"] for s in judged} == {expected}
    j = entry["details"]["judge"]
    assert j["endpoint_fingerprint"] == expected and j["model"] == "judge-model"
    assert j["configured_model"] == "judge-model" and j["model_differs"] is False
    line = f"Judge: `judge-model` at `the-judge` (fingerprint `{expected}`)."
    text = to_markdown(report)
    assert line in text
    # Beside the reliability figures: right after the consistency and discrimination line.
    after = text.split("Position consistency over both:", 1)[1]
    assert after.split("\n\n", 2)[1] == line
    assert "not the suite's `judge.model`" not in text
    for page in (run_page, suite_page):
        shown = re.sub(r"<[^>]+>", "", page)  # the finding's Markdown, rendered
        assert f"Judge: judge-model at the-judge (fingerprint {expected})." in shown
        assert "not the suite's judge.model" not in shown


def test_a_blessed_baseline_judged_by_another_judge_is_judged_again(tmp_path: Path) -> None:
    """A blessed baseline's samples carry the A/A and control verdicts of the judge of the
    blessed run. Reused under the same judge they stand (only the candidate is judged); once
    the judge endpoint serves another model they are judged again, so the reliability figures
    beside the verdict are the current judge's, never the earlier one's."""
    from evalsvc.db import Store
    from evalsvc.domain import RunSpec
    from evalsvc.services import baselines, runs

    n = 10
    with judge_server() as srv, Store.from_url(f"sqlite:///{tmp_path / 'b.db'}") as store:
        store.upgrade()
        store.upsert_endpoint(name="the-judge", url=srv.url("judge"))
        path = write_suite(tmp_path, n, judge={"endpoint": "the-judge", "controls": 3})
        spec = RunSpec(baseline=EndpointRef(url=srv.url("base")),
                       candidates=[EndpointRef(url=srv.url("cand"))], suites=[str(path)])

        def compare() -> tuple[dict[str, Any], int]:
            before = srv.judged
            out = runs.compare(spec, store=store)
            return out, srv.judged - before

        first, asked = compare()
        assert asked == n * 4 + 3 * 2  # candidate and A/A pairs in both orders, the controls
        baselines.bless(store, [first["run_id"]])
        same, asked = compare()
        assert same["baseline_reuse"][0]["status"] == "reused"
        assert asked == n * 2  # the blessed A/A and control verdicts are this judge's: kept
        assert same["candidates"][0]["suites"][0]["details"]["judge"]["aa"]["same"] == n

        # The registered judge now points at another model (a pure position-bias judge).
        store.upsert_endpoint(name="the-judge", url=srv.url("position"))
        other, asked = compare()
        base = [s for s in store.get_samples(other["run_id"], suite="rf")
                if s.endpoint == "baseline"]
    assert other["baseline_reuse"][0]["status"] == "reused"
    assert asked == n * 4 + 3 * 2  # everything judged again, by the new judge
    entry = other["candidates"][0]["suites"][0]
    j = entry["details"]["judge"]
    assert entry["helpers"][0]["model"] == "position-model"
    assert j["aa"]["inconsistent"] == n and j["discrimination"] == 0.0
    assert not j["informative"] and entry["verdict"] == "inconclusive"
    records = [s.data[f] for s in base for f in ("judge", "judge_control") if f in s.data]
    assert len(records) == n + 3 and {r["model"] for r in records} == {"position-model"}


def test_embeddings_are_recorded_and_redone_for_another_embedder(tmp_path: Path) -> None:
    """The embedding endpoint's probe is in the report beside the similarities, each
    comparison records which embedder made it, and a stored comparison of another embedder (an
    earlier attempt's, a blessed baseline's) is computed again, while this one's stands."""
    from evalsvc.endpoints import EndpointClient, probe
    from evalsvc.reports import build_report, to_markdown
    from evalsvc.suites.kinds._similarity import PAIR_FIELD

    with judge_server(worse_tenths=3) as srv:
        suite = load_suite(str(write_suite(tmp_path, 10, embeddings={"endpoint": "embed"})),
                           allow_paths=True)
        stored: dict[tuple[str, str, str, int], Sample] = {}

        async def sink(sample: Sample) -> None:
            stored[sample.key] = sample

        result = asyncio.run(execute(
            run_id="t", baseline=EndpointRef(url=srv.url("base")),
            candidates=[EndpointRef(url=srv.url("cand"))], suites=[suite],
            options=RunOptions(concurrency=4), sink=sink,
            helpers={"rf": {"embeddings": EndpointRef(url=srv.url("embed"))}},
        ))
        samples = list(stored.values())

        async def rescore(first_fp: str | None) -> list[Sample]:
            # The same samples, the first pair's comparison as if another embedder made it.
            client = EndpointClient(EndpointRef(url=srv.url("embed")))
            try:
                prov = await probe(client)
                old = [s.model_copy(deep=True) for s in samples]
                pair = next(s for s in old if s.endpoint == "candidate:0")
                pair.data[PAIR_FIELD]["embedding_endpoint"] = first_fp
                items = await suite.plan(client, prov)
                again: list[Sample] = []

                async def collect(sample: Sample) -> None:
                    again.append(sample)

                await suite.after_pairs(items, old, {"embeddings": client}, emit=collect,
                                        concurrency=2)
                return again
            finally:
                await client.aclose()

        report = build_report(result)
        entry = report["candidates"][0]["suites"][0]
        [helper] = entry["helpers"]
        fp = helper["fingerprint"]
        assert helper["purpose"] == "embeddings" and helper["model"] == "embed-model"
        assert {s.data[PAIR_FIELD]["embedding_endpoint"] for s in samples
                if PAIR_FIELD in s.data} == {fp}
        assert asyncio.run(rescore(fp)) == []  # this embedder's comparisons stand
        [again] = asyncio.run(rescore("0" * 16))  # another's is computed again
    assert again.endpoint == "candidate:0" and again.data[PAIR_FIELD]["embedding_endpoint"] == fp
    assert f"Embeddings: `embed-model` at `{srv.url('embed')}` (fingerprint `{fp}`)." in (
        to_markdown(report))
