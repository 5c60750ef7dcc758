"""Sampled evaluation of an lm-eval generate task (the ``lmeval`` kind, issue 39).

Without lm-eval (fast): a ``sampling:`` block is refused for a loglikelihood task with the fix
(its YAML's ``output_type``, through ``include:``, or ``params.output_type``; exit 2 through
the service layer), a run's decoding options pass such a suite by and reach a generate task;
the generation arguments each sample's evaluation gets (no seed unless the policy sets one);
the preflight's verdict on the output types lm-eval reports; the bundled data is its
generator's output.

With lm-eval (``lmeval_python``, slow: lm-eval's start-up), against real loopback servers that
answer the bundled ``evalsvc_gen`` right with a planted per-document probability under
temperature > 0 (``tests/suites/lmeval_gen_server.py``): one run through the service layer
into the store with a copy of the baseline and a worse candidate (k samples differ, A/A does
not fail, the worse candidate fails, every view gets ``details.sampling``); a resumed run
evaluates only the missing sample indices, with the policy's per-sample seeds; a completions
task samples through the engine's own tokenizer; a process that fails mid-run keeps the samples
it finished; the real preflight reads the task's output type. REST refuses the block with a 422.
"""

from __future__ import annotations

import asyncio
import html
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, Item, RunOptions, RunSpec, Sample, SamplingOptions
from evalsvc.suites import SuiteSpec, catalog_dir, suite_kinds
from evalsvc.suites._sampling import request_seed
from evalsvc.suites.kinds._gen_task import gen_docs
from evalsvc.suites.kinds.lmeval import count_docs
from tests.fixtures.db import sqlite_template  # noqa: F401  (a pytest fixture)
from tests.suites.lmeval_gen_server import gen_server, run_baseline

GEN = {"task": "evalsvc_gen", "model_type": "local-chat-completions", "metric": "exact_match",
       "capabilities": ["chat"], "num_concurrent": 4}
SAMPLING = {"k": 3, "temperature": 0.6, "top_p": 0.95, "max_tokens": 24, "pass_at": [1, 3]}


def _lmeval(name: str = "g", sampling: dict[str, Any] | None = None, **params: Any) -> Any:
    spec = SuiteSpec(name=name, kind="lmeval", sampling=sampling, params=params)
    return suite_kinds()["lmeval"](spec)


# ------------------------------------------------------------------------------ without lm-eval


def test_the_block_is_refused_for_a_loglikelihood_task_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lm-eval task 'evalsvc_mc' is scored by loglikelihood "
                       r"\(output_type multiple_choice\)") as refused:
        _lmeval(sampling={"k": 2, "temperature": 0.6})  # the default task: evalsvc_mc
    assert "remove the sampling block, or use a generate_until task" in str(refused.value)
    # lm-eval's own task, declared: refused before lm-eval is asked.
    with pytest.raises(ValueError, match="output_type loglikelihood"):
        _lmeval(sampling={"k": 2, "temperature": 0.6}, task="lambada_openai",
                include_path=None, n=10, output_type="loglikelihood")
    # A local task whose output type comes from the file it includes.
    (tmp_path / "_base.yaml").write_text("output_type: multiple_choice\ndoc_to_text: q\n")
    (tmp_path / "mine.yaml").write_text("include: _base.yaml\ntask: mine\n")
    with pytest.raises(ValueError, match="'mine' is scored by loglikelihood"):
        _lmeval(sampling={"k": 2, "temperature": 0.6}, task="mine", include_path=str(tmp_path),
                n=5)
    # A local task that names no output type generates (lm-eval's default): sampled.
    (tmp_path / "free.yaml").write_text("task: free\n")
    free = _lmeval(sampling={"k": 2, "temperature": 0.6}, task="free",
                   include_path=str(tmp_path), n=5)
    assert free.output_type == "generate_until" and free.samples_per_item == 2


def test_the_service_layer_refuses_the_block_as_a_usage_error(tmp_path: Path) -> None:
    from evalsvc.services.runs import UsageError, load_suites

    path = tmp_path / "mc-sampled.yaml"
    path.write_text("name: mc-sampled\nkind: lmeval\nsampling: {k: 4, temperature: 0.6}\n")
    spec = RunSpec(baseline=EndpointRef(url="http://127.0.0.1:9/v1"),
                   candidates=[EndpointRef(url="http://127.0.0.1:9/v1")], suites=[str(path)])
    with pytest.raises(UsageError, match="scored by loglikelihood") as refused:
        load_suites(spec, allow_paths=True)
    assert "\n" not in str(refused.value).strip()  # one line


def test_rest_refuses_the_block_with_422_and_queues_nothing(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    from fastapi.testclient import TestClient

    from evalsvc.db import Store
    from evalsvc.webapp import create_app

    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "mc-sampled.yaml").write_text(
        "name: mc-sampled\nkind: lmeval\nsampling: {k: 4, temperature: 0.6}\n"
    )
    monkeypatch.setenv("EVALSVC_SUITES_DIR", str(suites))
    db = tmp_path / "evalsvc.db"
    shutil.copy(sqlite_template, db)
    url = f"sqlite:///{db}"
    body = {"baseline": {"url": "http://127.0.0.1:9/v1"},
            "candidates": [{"url": "http://127.0.0.1:9/v1"}], "suites": ["mc-sampled"]}
    with TestClient(create_app(url, auth=False)) as client:
        resp = client.post("/api/v1/runs", json=body)
    assert resp.status_code == 422, resp.text
    assert "'evalsvc_mc' is scored by loglikelihood" in resp.text
    assert "remove the sampling block" in resp.text
    with Store.from_url(url) as store:
        assert store.list_runs() == []


def test_a_runs_decoding_options_reach_a_generate_task_and_pass_a_loglikelihood_one() -> None:
    options = RunOptions(sampling=SamplingOptions(k=3, temperature=0.8))
    mc = _lmeval("mc")
    mc.bind_gate(options)
    assert mc.spec.sampling is None and mc.samples_per_item == 1 and mc.gate.kind == "binary"
    gen = _lmeval("gen", **GEN)
    gen.bind_gate(options)
    assert gen.samples_per_item == 3 and gen.gate.kind == "continuous"
    items = [Item(id=f"doc{i}") for i in range(40)]
    assert gen.expected_samples(items) == 120 and gen.gated_pairs(items) == 40
    assert list(gen.repeats("baseline")) == [0, 1, 2]
    # lm-eval's own task, undeclared: sampled now, its type checked by the preflight.
    gsm = _lmeval("gsm", task="gsm8k_cot", include_path=None, n=10)
    gsm.bind_gate(options)
    assert gsm.output_type is None and gsm.samples_per_item == 3


def test_each_sample_gets_the_decoding_and_no_seed_unless_the_policy_sets_one() -> None:
    from evalsvc.endpoints import EndpointClient

    suite = _lmeval(sampling=SAMPLING, **GEN)
    gen = suite.gen_kwargs(2)
    assert gen == {"do_sample": True, "temperature": 0.6, "top_p": 0.95, "max_gen_toks": 24,
                   "seed": None}  # JSON null replaces lm-eval's fixed request seed 1234
    seeded = _lmeval(sampling={**SAMPLING, "seed": 7}, **GEN)
    seeds = [seeded.gen_kwargs(r)["seed"] for r in range(3)]
    assert seeds == [request_seed(7, "evalsvc_gen", r) for r in range(3)]
    assert len(set(seeds)) == 3  # k samples, k seeds: never k copies
    assert _lmeval(**GEN).gen_kwargs(0) is None  # greedy: the task's own arguments
    client = EndpointClient(EndpointRef(url="http://127.0.0.1:8100/v1", model="m"))
    config = suite.sampled_config(client, Path("/tmp/out"), 40, [1, 2])
    assert [r["repeat"] for r in config["runs"]] == [1, 2] and config["limit"] == 40
    assert config["apply_chat_template"] is True and config["engine"] is False
    assert "base_url=http://127.0.0.1:8100/v1/chat/completions" in config["model_args"]
    assert config["include"] == str(Path(catalog_dir()) / "data" / "lmeval")


def test_the_preflight_refuses_a_sampled_task_lm_eval_builds_as_loglikelihood() -> None:
    gsm = _lmeval("gsm", sampling={"k": 2, "temperature": 0.6}, task="arc_challenge",
                  include_path=None, n=10)
    (problem,) = gsm._check_output_types(["multiple_choice"])
    assert "'arc_challenge' is scored by loglikelihood" in problem
    assert gsm._check_output_types(["generate_until"]) == []
    declared = _lmeval("d", task="arc_challenge", include_path=None, n=10,
                       output_type="generate_until")
    (problem,) = declared._check_output_types(["multiple_choice"])
    assert "lm-eval builds task 'arc_challenge' as multiple_choice" in problem


def test_bundled_generate_data_is_the_generator_output() -> None:
    path = Path(catalog_dir()) / "data" / "lmeval" / "evalsvc_gen.jsonl"
    shipped = [json.loads(line) for line in path.read_text().splitlines()]
    assert shipped == gen_docs()
    assert len({d["question"] for d in shipped}) == len(shipped)
    assert count_docs(path.parent, "evalsvc_gen") == len(shipped) == 40


# ----------------------------------------------------------------------------- with lm-eval

SUITE = """name: gen-sampled
kind: lmeval
seed: 3
sampling: {k: 3, temperature: 0.6, top_p: 0.95, max_tokens: 24, pass_at: [1, 3]}
params:
  task: evalsvc_gen
  model_type: local-chat-completions
  metric: exact_match
  capabilities: [chat]
  num_concurrent: 4
"""


@pytest.fixture(scope="module")
def sampled_run(lmeval_python: str, tmp_path_factory: pytest.TempPathFactory,
                sqlite_template: Path) -> dict[str, Any]:  # noqa: F811
    """One compare through the service layer: the baseline, a copy of it (same per-document
    probabilities, other draws) and a candidate 40 points worse per document, k = 3."""
    from evalsvc.db import Store
    from evalsvc.services import runs

    tmp = tmp_path_factory.mktemp("lmeval-sampled")
    suite = tmp / "gen-sampled.yaml"
    suite.write_text(SUITE)
    db = tmp / "runs.db"
    shutil.copy(sqlite_template, db)
    with gen_server(0.6, rng_seed=1) as base, gen_server(0.6, rng_seed=2) as copy, \
            gen_server(0.2, rng_seed=3) as worse, Store.from_url(f"sqlite:///{db}") as store:
        spec = RunSpec(baseline=EndpointRef(url=base.url, name="bf16"),
                       candidates=[EndpointRef(url=copy.url, name="copy"),
                                   EndpointRef(url=worse.url, name="worse")],
                       suites=[str(suite)], options=RunOptions(concurrency=4))
        report = runs.compare(spec, store=store)
        stored = store.get_samples(report["run_id"], suite="gen-sampled")
    return {"report": report, "stored": stored, "db": f"sqlite:///{db}",
            "servers": {"baseline": base, "copy": copy, "worse": worse}}


@pytest.mark.slow
def test_k_samples_per_document_each_with_the_decoding_and_no_seed(
    sampled_run: dict[str, Any]
) -> None:
    stored: list[Sample] = sampled_run["stored"]
    assert len(stored) == 3 * 40 * 3 and {s.repeat for s in stored} == {0, 1, 2}
    assert all(s.error is None and s.data["seed_sent"] is False and "seed" not in s.data
               for s in stored)
    for server in sampled_run["servers"].values():
        sent = [b for b in server.bodies if b["max_tokens"] == 24]  # lm-eval's, not the probe's
        assert len(sent) == 120
        # lm-eval's fixed seed 1234 is replaced by null: the key is there, no seed is.
        assert all(b["has_seed"] and b["seed"] is None for b in sent)
        assert all(b["temperature"] == 0.6 and b["top_p"] == 0.95 for b in sent)
    # The k samples of a document differ (not k copies): as drawn by the server.
    base = sampled_run["servers"]["baseline"]
    assert any(len(set(draws)) == 2 for draws in base.answers.values())
    by_doc: dict[str, set[float]] = {}
    for s in stored:
        if s.endpoint == "baseline":
            by_doc.setdefault(s.item_id, set()).add(float(s.score or 0.0))
    assert any(len(scores) == 2 for scores in by_doc.values())


@pytest.mark.slow
def test_a_copy_does_not_fail_and_a_worse_candidate_does(sampled_run: dict[str, Any]) -> None:
    copy, worse = (c["suites"][0] for c in sampled_run["report"]["candidates"])
    assert copy["verdict"] != "fail" and worse["verdict"] == "fail"
    for entry in (copy, worse):
        assert entry["n"] == 40 and entry["n_planned"] == 40 and entry["n_errors"] == 0
        assert entry["details"]["gate"]["kind"] == "continuous"
    assert worse["delta"] < -0.25
    sampling = worse["details"]["sampling"]
    assert sampling["k"] == 3 and sampling["items"] == 40
    assert sampling["samples"] == {"baseline": 120, "candidate": 120}
    p1 = sampling["pass@1_baseline"]
    assert p1["ci"][0] < p1["value"] < p1["ci"][1]
    assert [r["k"] for r in sampling["pass_at_k"]] == [1, 3]
    assert sampling["variance"]["within"] > 0  # the samples of a document differ
    # The kind's own table counts every sample (pass@1 by family).
    families = {r["family"]: r for r in worse["details"]["by_family"]}
    assert set(families) == {"add", "count_on", "double", "largest"}
    assert sum(r["n"] for r in families.values()) == 120


@pytest.mark.slow
def test_every_view_shows_the_sampled_figures(sampled_run: dict[str, Any]) -> None:
    from fastapi.testclient import TestClient

    from evalsvc.reports import to_markdown
    from evalsvc.webapp import create_app
    from tests.services.test_gatelogs import check_schema

    report = sampled_run["report"]
    check_schema(report)
    entry = report["candidates"][1]["suites"][0]
    (finding,) = [f for f in entry["findings"] if f["title"] == "sampled evaluation"]
    assert "3 samples per item at temperature 0.6, top_p 0.95" in finding["text"]
    assert "no per-request seeds" in finding["text"] and "pass@3:" in finding["text"]
    assert "pass@1 over 3 samples" in entry["headline"]
    assert "**Sampled evaluation**" in to_markdown(report)
    with TestClient(create_app(sampled_run["db"], auth=False)) as client:
        page = client.get(f"/runs/{report['run_id']}/suites/gen-sampled?candidate=candidate:1")
    assert page.status_code == 200
    shown = html.unescape(page.text)
    assert "Sampled evaluation" in shown and "3 samples per item" in shown


@pytest.mark.slow
def test_a_resumed_run_evaluates_only_the_missing_samples_with_the_policys_seeds(
    lmeval_python: str, tmp_path: Path
) -> None:
    """Samples 0 of every document and 2 of half of them are done: one lm-eval process
    evaluates sample indices 1 and 2 (all 40 documents each, as ``--limit`` takes them) and
    emits the 60 missing samples, each request carrying its sample index's seed; ``keep_logs``
    keeps each index's lm-eval logs under ``sample-<r>/``."""
    suite = _lmeval("gen-seeded", sampling={**SAMPLING, "seed": 7}, n=40,
                    keep_logs=str(tmp_path / "logs"), **GEN)
    items = [Item(id=f"doc{i}", metadata={"doc_id": i}) for i in range(40)]
    done = {(it.id, 0) for it in items} | {(it.id, 2) for it in items[:20]}
    with gen_server(0.6) as srv:
        emitted = run_baseline(suite, items, srv.url, done=done)
    assert sorted((s.item_id, s.repeat) for s in emitted) == sorted(
        [(it.id, 1) for it in items] + [(it.id, 2) for it in items[20:]]
    )
    assert all(s.error is None for s in emitted), {s.error for s in emitted}
    seeds = {r: request_seed(7, "evalsvc_gen", r) for r in (1, 2)}
    assert all(s.data["seed_sent"] is True and s.data["seed"] == seeds[s.repeat]
               for s in emitted)
    assert len(srv.bodies) == 80 and {b["seed"] for b in srv.bodies} == set(seeds.values())
    kept = tmp_path / "logs" / "gen-seeded" / "baseline"
    assert sorted(p.name for p in kept.iterdir()) == ["sample-1", "sample-2"]
    for r in (1, 2):
        (log,) = (kept / f"sample-{r}").rglob("samples_evalsvc_gen_*.jsonl")
        assert len(log.read_text().splitlines()) == 40


@pytest.mark.slow
def test_a_completions_task_is_sampled_through_the_engines_own_tokenizer(
    lmeval_python: str,
) -> None:
    """``local-completions`` without a local tokenizer: the sampling process registers
    ``evalsvc-engine-completions`` first, the prompts go out as the engine's token ids
    (``/tokenize``), with the sample's decoding and no seed."""
    from evalsvc.endpoints import EndpointClient

    suite = _lmeval("gen-engine", sampling={"k": 2, "temperature": 0.6}, n=8,
                    task="evalsvc_gen", metric="exact_match", capabilities=["completions"])
    assert suite.sampled_config(
        EndpointClient(EndpointRef(url="http://127.0.0.1:9/v1")), Path("/o"), 8, [0]
    )["engine"] is True
    items = [Item(id=f"doc{i}", metadata={"doc_id": i}) for i in range(8)]
    with gen_server(0.6) as srv:
        emitted = run_baseline(suite, items, srv.url)
    assert len(emitted) == 16 and all(s.error is None for s in emitted), emitted[:1]
    assert {s.repeat for s in emitted} == {0, 1}
    assert len(srv.bodies) == 16  # one completion per document and sample, answered
    assert all(b["temperature"] == 0.6 and b["has_seed"] and b["seed"] is None
               for b in srv.bodies)
    assert sum(len(draws) for draws in srv.answers.values()) == 16


@pytest.mark.slow
def test_samples_finished_before_the_endpoint_died_are_kept(lmeval_python: str) -> None:
    """The endpoint answers sample 0's 12 documents, then only 500s: lm-eval's process fails
    during sample 1, whose documents are errored samples naming its exit status and the log
    kept on the worker; sample 0's are scored."""
    # One attempt per request: lm-eval's retries back off for seconds before it gives up.
    suite = _lmeval("gen-dies", sampling={"k": 2, "temperature": 0.6}, n=12,
                    model_args={"max_retries": 1}, **GEN)
    items = [Item(id=f"doc{i}", metadata={"doc_id": i}) for i in range(12)]
    with gen_server(0.6, fail_after=12) as srv:
        emitted = run_baseline(suite, items, srv.url)
    first = [s for s in emitted if s.repeat == 0]
    second = [s for s in emitted if s.repeat == 1]
    assert len(first) == len(second) == 12
    assert all(s.error is None and s.score is not None for s in first)
    assert all(s.error and s.error.startswith("lm-eval exited 1") for s in second)
    log = Path((second[0].error or "").rsplit("log on the worker: ", 1)[1].rstrip(")"))
    assert log.name == "lm_eval.log" and "sample 0 done" in log.read_text()
    shutil.rmtree(log.parent)  # kept for the operator; this test's is read


@pytest.mark.slow
def test_the_real_preflight_reads_the_tasks_output_type(lmeval_python: str) -> None:
    from evalsvc.domain import Provenance

    sampled = _lmeval(sampling=SAMPLING, **GEN)
    assert asyncio.run(sampled.preflight(Provenance())) == []
    declared = _lmeval(**{**GEN, "output_type": "multiple_choice"})
    (problem,) = asyncio.run(declared.preflight(Provenance()))
    assert "params.output_type is multiple_choice" in problem
    assert "builds task 'evalsvc_gen' as generate_until" in problem
