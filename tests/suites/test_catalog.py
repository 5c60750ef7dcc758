"""The suite catalog: every YAML loads, sets resolve, the bundled lm-eval data is reproducible."""

from __future__ import annotations

import json
from pathlib import Path

from evalsvc.suites import catalog, catalog_dir, resolve
from evalsvc.suites.kinds._mc_task import mc_docs
from evalsvc.suites.kinds.lmeval import count_docs


def test_every_catalog_file_loads() -> None:
    names = {s.name for s in catalog()}
    for kind_suite in (
        "reasoning",
        "determinism",
        "drift",
        "speed",
        "lmeval-mc",
        "smoke",
        "release",
        "long-context",
    ):
        assert kind_suite in names


def test_sets_contain_what_the_issue_asks() -> None:
    smoke = [s.name for s in resolve(["smoke"])]
    assert "needle-smoke" in smoke
    release = {s.kind for s in resolve(["release"])}
    assert {"needle", "reasoning", "determinism", "drift", "speed"} <= release
    assert "needle-4k" in [s.name for s in resolve(["release"])]
    assert "needle-long-context" in [s.name for s in resolve(["long-context"])]


def test_speed_suites_are_informational_by_default() -> None:
    for s in resolve(["speed", "speed-smoke"]):
        assert s.spec.gate.enabled is False and s.exclusive


def test_bundled_mc_data_is_the_generator_output() -> None:
    path = Path(catalog_dir()) / "data" / "lmeval" / "evalsvc_mc.jsonl"
    shipped = [json.loads(line) for line in path.read_text().splitlines()]
    assert shipped == mc_docs()
    assert all(0 <= d["answer"] < len(d["choices"]) == 4 for d in shipped)
    assert all(len(set(d["choices"])) == 4 for d in shipped)
    assert count_docs(path.parent, "evalsvc_mc") == len(shipped)


def test_lmeval_run_config() -> None:
    """What the one lm-eval process per endpoint (``_lmeval_run.py``) runs for a greedy suite:
    the arguments of ``lm_eval --model M --model_args A --tasks T --include_path P --limit N
    --seed S``, one evaluation."""
    from evalsvc.domain import EndpointRef
    from evalsvc.endpoints import EndpointClient
    from evalsvc.suites import load_suite
    from evalsvc.suites.kinds.lmeval import ENGINE_MODEL

    suite = load_suite("lmeval-mc")
    client = EndpointClient(EndpointRef(url="http://127.0.0.1:8100/v1", model="m"))
    # With a local tokenizer directory: lm-eval's own local-completions, that tokenizer.
    config = suite.greedy_config(  # type: ignore[attr-defined]
        client, Path("/tmp/out"), 80, tokenizer="/models/m"
    )
    args = config["model_args"]
    assert config["greedy"] is True and "runs" not in config
    assert config["model"] == "local-completions" and config["engine"] is False
    assert "base_url=http://127.0.0.1:8100/v1/completions" in args and "model=m" in args
    assert "tokenizer_backend=huggingface,tokenizer=/models/m" in args
    assert config["limit"] == 80 and config["seed"] == 1234 and config["task"] == "evalsvc_mc"
    assert config["include"] == str(Path(catalog_dir()) / "data" / "lmeval")
    assert config["output"] == "/tmp/out" and config["apply_chat_template"] is False
    # Without one: the engine's /tokenize through evalsvc's lm-eval model, nothing local.
    config = suite.greedy_config(client, Path("/tmp/out"), 80)  # type: ignore[attr-defined]
    args = config["model_args"]
    assert config["model"] == ENGINE_MODEL and config["engine"] is True
    assert "tokenizer" not in args and "base_url=http://127.0.0.1:8100/v1/completions" in args
    # ... which is why a suite without params.tokenizer needs the endpoints' tokenize.
    assert suite.requires == frozenset({"completions", "echo", "tokenize"})


def test_read_samples_keys_records_by_doc_id(tmp_path: Path) -> None:
    from evalsvc.suites.kinds.lmeval import read_samples

    out = tmp_path / "out" / "model__name"
    out.mkdir(parents=True)
    rows = [
        {"doc_id": 1, "acc": 1.0, "filtered_resps": [[-1.0, False]], "target": 2},
        {"doc_id": 0, "acc": 0.0, "filtered_resps": [[-2.0, False]], "target": 0},
    ]
    (out / "samples_evalsvc_mc_2026-11-29T23-00-00.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows) + "\n"
    )
    records = read_samples(tmp_path / "out", "evalsvc_mc")
    assert sorted(records) == [0, 1] and records[1]["acc"] == 1.0


def test_the_gpu_set_needs_nothing_vllm_only_and_each_suite_can_pass() -> None:
    """The README's first command: every suite of `gpu` needs only what vLLM and SGLang both
    serve (no `prompt_logprobs`), needle's calibration stays at ordinary lengths on a 128k model
    and keeps two lengths on an 8k one, and each suite's planned size (a staged suite's cap) can
    pass at its own margin (at least the smallest n a run with no loss at all passes at,
    `Suite.min_items_to_pass`; lmeval-mc's 80 documents cannot at lm-eval's 0.03, hence
    lmeval-mc-gpu's 0.05)."""
    from evalsvc.domain import Provenance, RunOptions

    suites = resolve(["gpu"])
    assert [s.name for s in suites] == [
        "needle-gpu", "reasoning-gpu", "determinism", "drift-gpu", "lmeval-mc-gpu"]
    for s in suites:
        assert s.requires <= {"chat", "completions", "echo", "tokenize"}, (s.name, s.requires)
    needle = suites[0]
    ladder = [r.value for r in needle.difficulty_ladder(Provenance(max_context=131072))]
    assert ladder == [4096, 8192, 16384]
    assert len(needle.difficulty_ladder(Provenance(max_context=8192))) == 2
    for s in suites:
        gate = s.bind_gate(RunOptions())
        if gate.threshold is not None:  # drift: a threshold, no margin to pass by
            continue
        assert gate.margin is not None
        stages = s.stage_sizes()
        planned = stages[-1] if stages else s.item_count()
        assert planned is not None and planned >= s.min_items_to_pass(gate.margin, gate.alpha), (
            s.name, planned)
