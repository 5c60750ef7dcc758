"""``evalsvc gate-logs``: existing logs paired by document id, gated, stored and reported.

The lm-eval samples files here are written by the tests in lm-eval's ``--log_samples`` record
format (``doc_id``, ``doc``, ``filter``, ``metrics``, ``doc_hash`` and the metric values); the
Inspect logs are the hand-written fixtures in ``tests/fixtures/logs`` (see its README). Logs
written by the real ``lm_eval`` CLI against the local endpoints are in
``test_gatelogs_lmeval.py``. The CLI runs in the test's own process
(``tests.fixtures.cli.run_cli``, the same Typer app; an uncaught exception fails the test): a
separate interpreter costs 2-5 CPU-seconds of start-up each on a 2-core host. One refusal (exit
2) still runs ``python -m evalsvc.cli.main``, so the real entry point's exit code and stderr stay
covered.
"""

from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.gates import evaluate_gate
from evalsvc.services.gatelogs import gate_logs
from evalsvc.services.runs import UsageError
from tests.fixtures.cli import CliResult, run_cli, run_cli_process

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
STAMP = "2026-12-01T10-00-00.000000"


def _doc(i: int) -> dict[str, Any]:
    return {"question": f"q{i}", "subject": ["algebra", "geometry"][i % 2]}


def write_lmeval(
    directory: Path,
    scores: list[float],
    *,
    task: str = "toy",
    docs: list[dict[str, Any]] | None = None,
    skip: set[int] = frozenset(),  # type: ignore[assignment]
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"samples_{task}_{STAMP}.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for i, score in enumerate(scores):
            if i in skip:
                continue
            doc = (docs or [_doc(j) for j in range(len(scores))])[i]
            for flt, value in (("strict-match", score), ("flexible-extract", 1.0)):
                fh.write(
                    json.dumps(
                        {
                            "doc_id": i,
                            "doc": doc,
                            "target": "x",
                            "arguments": [],
                            "resps": [["x"]],
                            "filtered_resps": ["x"],
                            "filter": flt,
                            "metrics": ["exact_match"],
                            "doc_hash": hashlib.sha256(json.dumps(doc).encode()).hexdigest(),
                            "prompt_hash": "p",
                            "target_hash": "t",
                            "exact_match": value,
                        }
                    )
                    + "\n"
                )
    return path


def check_schema(report: dict[str, Any]) -> None:
    import jsonschema

    from evalsvc.reports import report_schema

    jsonschema.Draft202012Validator(report_schema()).validate(report)


def _scores(n: int, lost: int, gained: int = 0) -> tuple[list[float], list[float]]:
    base = [1.0 if (i * 7) % 10 < 6 else 0.0 for i in range(n)]
    cand = list(base)
    ones = [i for i, v in enumerate(base) if v == 1.0]
    zeros = [i for i, v in enumerate(base) if v == 0.0]
    for i in ones[:lost]:
        cand[i] = 0.0
    for i in zeros[:gained]:
        cand[i] = 1.0
    return base, cand


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.from_url(f"sqlite:///{tmp_path / 'gl.db'}")
    s.ensure_ready(upgrade_fresh_sqlite=True)
    return s


def test_pairs_by_doc_id_gates_like_the_direct_gate_and_stores_the_run(
    tmp_path: Path, store: Store
) -> None:
    base, cand = _scores(600, lost=4, gained=2)
    write_lmeval(tmp_path / "b", base)
    write_lmeval(tmp_path / "c", cand)
    report = gate_logs(tmp_path / "b", tmp_path / "c", store=store)
    suite = report["candidates"][0]["suites"][0]
    direct = evaluate_gate(base, cand, metric="exact_match", kind="binary", margin=0.03)
    assert suite["verdict"] == direct.verdict == "pass" and report["verdict"] == "pass"
    assert suite["ci"] == pytest.approx(list(direct.ci)) and suite["n"] == 600
    assert suite["recovery"]["estimate"] == pytest.approx(sum(cand) / sum(base))
    lo, hi = suite["recovery"]["ci"]
    assert lo < suite["recovery"]["estimate"] < hi
    pairs = suite["details"]["log_pairs"]
    assert pairs["paired"] == 600 and pairs["filter"] == "strict-match"
    assert pairs["other_filters"] == ["flexible-extract"]
    # Stored like any run: listed, with its report and every sample.
    assert report["run_id"] in [r.id for r in store.list_runs()]
    assert store.get_report(report["run_id"])["verdict"] == "pass"
    assert len(store.get_samples(report["run_id"])) == 1200


def test_missing_documents_are_counted_never_dropped(tmp_path: Path, store: Store) -> None:
    base, cand = _scores(200, lost=0)
    write_lmeval(tmp_path / "b", base)
    write_lmeval(tmp_path / "c", cand, skip={3, 50, 77})
    report = gate_logs(tmp_path / "b", tmp_path / "c", store=store)
    suite = report["candidates"][0]["suites"][0]
    pairs = suite["details"]["log_pairs"]
    assert pairs["only_baseline"] == 3 and pairs["examples"]["only_baseline"] == [
        "doc3",
        "doc50",
        "doc77",
    ]
    assert suite["n"] == 197 and suite["n_errors"] == 3 and suite["n_planned"] == 200
    # 3 of 200 is within the 5% error budget; a tighter budget makes the run an error (exit 4).
    assert report["verdict"] != "error"
    from evalsvc.domain import RunOptions

    tight = gate_logs(
        tmp_path / "b", tmp_path / "c", store=store, options=RunOptions(max_error_rate=0.01)
    )
    assert tight["verdict"] == "error" and "3 of 200" in tight["error"]


def test_slices_and_holm_and_recovery_floor(tmp_path: Path, store: Store) -> None:
    base, cand = _scores(400, lost=30)
    write_lmeval(tmp_path / "b", base)
    write_lmeval(tmp_path / "c", cand)
    report = gate_logs(tmp_path / "b", tmp_path / "c", store=store, slices=["subject"])
    suite = report["candidates"][0]["suites"][0]
    assert suite["verdict"] == "fail"
    labels = {s["slice"] for s in suite["details"]["slices"]["slices"]}
    assert {"algebra", "geometry"} <= labels
    floor = gate_logs(
        tmp_path / "b", tmp_path / "c", store=store, gate={"recovery_min": 0.95}
    )
    fs = floor["candidates"][0]["suites"][0]
    assert fs["details"]["gate"]["recovery_min"] == 0.95
    assert fs["recovery"]["ci"][1] < 0.95 and fs["verdict"] == "fail"
    check_schema(report)
    check_schema(floor)


@pytest.mark.parametrize(
    ("make", "kwargs", "needle"),
    [
        ("other_task", {}, "different tasks"),
        ("other_docs", {}, "hold different documents"),
        ("same", {"slices": ["difficulty"]}, "no column 'difficulty'"),
        ("same", {"metric": "acc"}, "no metric 'acc'"),
        ("same", {"filter_name": "majority"}, "no filter 'majority'"),
        ("same", {"gate": {"margin": 0.5}}, "exceeds the server's maximum"),
    ],
)
def test_mismatched_logs_and_missing_columns_are_refused_up_front(
    tmp_path: Path, store: Store, make: str, kwargs: dict[str, Any], needle: str
) -> None:
    base, cand = _scores(50, lost=1)
    write_lmeval(tmp_path / "b", base)
    if make == "other_task":
        write_lmeval(tmp_path / "c", cand, task="other")
    elif make == "other_docs":
        write_lmeval(tmp_path / "c", cand, docs=[{"question": f"other {i}"} for i in range(50)])
    else:
        write_lmeval(tmp_path / "c", cand)
    runs_before = len(store.list_runs())
    with pytest.raises(UsageError, match=needle):
        gate_logs(tmp_path / "b", tmp_path / "c", store=store, **kwargs)
    assert len(store.list_runs()) == runs_before  # refused before anything is stored


def test_inspect_logs_hand_written(store: Store) -> None:
    report = gate_logs(
        FIXTURES / "inspect_baseline.json",
        FIXTURES / "inspect_candidate.json",
        store=store,
        slices=["topic"],
    )
    cand = report["candidates"][0]
    suite = cand["suites"][0]
    assert suite["suite"] == "tiny_qa" and suite["metric"] == "match"
    assert cand["model"] == "openai/smollm2-w8a8"
    pairs = suite["details"]["log_pairs"]
    assert pairs["errored"] == 1 and pairs["examples"]["errored"] == ["q6#2"]
    assert suite["n"] == 11 and suite["n_errors"] == 1
    # The pairs by (id, epoch) the gate saw, recomputed by hand from the fixtures.
    # epoch 1: q1..q6, then epoch 2: q1..q5 (q6#2 errored on the candidate).
    base = [1, 1, 1, 0, 1, 1] + [1, 1, 1, 1, 0]
    cand_scores = [1, 1, 1, 0, 1, 0] + [1, 1, 1, 1, 0]
    assert suite["baseline"] == pytest.approx(sum(base) / 11)
    assert suite["candidate"] == pytest.approx(sum(cand_scores) / 11)
    # 1 errored pair of 12 is beyond the 5% budget: the verdict says error, not pass.
    assert report["verdict"] == "error" and "1 of 12" in report["error"]
    # Every row agrees with that verdict: the suite's, the tables' and the JUnit testcase's.
    assert cand["verdict"] == "error" and suite["verdict"] == "error"
    from evalsvc.reports import summary_rows, to_junit

    assert [r["verdict"] for r in summary_rows(report)] == ["error"]
    assert '<error message="error: error_budget' in to_junit(report)
    check_schema(report)


def _cli(*args: str, env: dict[str, str]) -> CliResult:
    return run_cli("gate-logs", *args, env=env)


def test_cli_reports_and_exit_codes(tmp_path: Path) -> None:
    env = {"EVALSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}
    base, cand = _scores(600, lost=4, gained=2)
    write_lmeval(tmp_path / "b", base)
    write_lmeval(tmp_path / "c", cand)
    out = _cli(
        str(tmp_path / "b"),
        str(tmp_path / "c" / f"samples_toy_{STAMP}.jsonl"),  # a samples file works as a side
        "--json",
        str(tmp_path / "r.json"),
        "--junit",
        str(tmp_path / "r.xml"),
        "--markdown",
        str(tmp_path / "r.md"),
        env=env,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "pass"
    assert ET.parse(tmp_path / "r.xml").getroot().get("failures") == "0"
    assert "Recovery (candidate ÷ baseline)" in (tmp_path / "r.md").read_text()
    assert "recovery" in out.stderr
    # What the verdict rests on: the logs' samples on both sides (docs/report.md, Basis).
    assert report["basis"]["suites"][0]["sides"]["baseline"]["source"] == "logs"
    assert "basis:" in out.stderr and "from the gated logs" in out.stderr
    # A clear failure exits 1; a mismatched pair of logs exits 2 with the reason, on one line.
    _, worse = _scores(600, lost=80)
    write_lmeval(tmp_path / "w", worse)
    assert _cli(str(tmp_path / "b"), str(tmp_path / "w"), env=env).returncode == 1
    write_lmeval(tmp_path / "o", cand, task="other")
    refused = run_cli_process("gate-logs", str(tmp_path / "b"), str(tmp_path / "o"), env=env)
    assert refused.returncode == 2 and "different tasks" in refused.stderr
    missing = _cli(str(tmp_path / "b"), str(tmp_path / "nowhere"), env=env)
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
    listed = run_cli("runs", "list", env=env)
    assert report["run_id"][:8] in listed.stdout


def test_inspect_eval_zip_reads_like_the_json_log(tmp_path: Path, store: Store) -> None:
    """The ``.eval`` format: a zip of ``header.json`` (the log without samples) and one
    ``samples/<id>_epoch_<n>.json`` per sample; built here from the hand-written JSON logs."""
    import zipfile

    paths = []
    for name in ("inspect_baseline", "inspect_candidate"):
        log = json.loads((FIXTURES / f"{name}.json").read_text())
        samples = log.pop("samples")
        path = tmp_path / f"{name}.eval"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("header.json", json.dumps(log))
            for s in samples:
                z.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", json.dumps(s))
        paths.append(path)
    zipped = gate_logs(*paths, store=store)["candidates"][0]["suites"][0]
    plain = gate_logs(
        FIXTURES / "inspect_baseline.json", FIXTURES / "inspect_candidate.json", store=store
    )["candidates"][0]["suites"][0]
    for key in ("verdict", "baseline", "candidate", "ci", "n", "n_errors", "recovery"):
        assert zipped[key] == plain[key], key
    (tmp_path / "bad.eval").write_bytes(b"not a zip")
    with pytest.raises(UsageError, match="not a zip file"):
        gate_logs(tmp_path / "bad.eval", paths[1], store=store)


# --- promptfoo ---------------------------------------------------------------------------------
# promptfoo_qa.json was written by the real promptfoo CLI (0.121.20) from promptfoo_qa.yaml
# against the local bf16 and fp8-kv vLLM endpoints; promptfoo_refused.json by the same config
# with the fp8-kv provider pointed at a closed port (every call refused): see the README here.
PROMPTFOO = FIXTURES / "promptfoo_qa.json"


def _promptfoo_passes(path: Path, provider: str) -> dict[int, dict[str, Any]]:
    """Per testIdx: the provider's record, read straight from the file."""
    results = json.loads(path.read_text())["results"]["results"]
    return {r["testIdx"]: r for r in results if r["provider"]["label"] == provider}


def test_promptfoo_results_one_file_two_providers(store: Store) -> None:
    report = gate_logs(
        PROMPTFOO, PROMPTFOO, store=store, slices=["category"], providers=("bf16", "fp8-kv")
    )
    check_schema(report)
    cand = report["candidates"][0]
    suite = cand["suites"][0]
    base, other = _promptfoo_passes(PROMPTFOO, "bf16"), _promptfoo_passes(PROMPTFOO, "fp8-kv")
    assert len(base) == len(other) == 60
    assert suite["suite"] == "qa" and suite["metric"] == "pass" and suite["n"] == 60
    assert suite["baseline"] == pytest.approx(sum(r["success"] for r in base.values()) / 60)
    assert suite["candidate"] == pytest.approx(sum(r["success"] for r in other.values()) / 60)
    lost = sum(base[i]["success"] and not other[i]["success"] for i in base)
    gained = sum(other[i]["success"] and not base[i]["success"] for i in base)
    flips = suite["details"]["flips"]
    assert (flips["correct_to_incorrect"], flips["incorrect_to_correct"]) == (lost, gained)
    # Every category is a slice, with its own paired rates (none reaches the 20 items a slice
    # needs to be tested: they are reported, not gated).
    got = {s["slice"]: s for s in suite["details"]["slices"]["slices"]}
    categories = {r["vars"]["category"] for r in base.values()}
    assert set(got) == categories
    for cat, row in got.items():
        ids = [i for i, r in base.items() if r["vars"]["category"] == cat]
        assert row["n"] == len(ids) and row["dimension"] == "category"
        assert row["baseline"] == pytest.approx(sum(base[i]["success"] for i in ids) / len(ids))
        assert row["candidate"] == pytest.approx(sum(other[i]["success"] for i in ids) / len(ids))
    assert cand["model"] == "fp8-kv" and report["baseline"]["model"] == "bf16"
    pairs = suite["details"]["log_pairs"]
    assert pairs["paired"] == 60 and pairs["errored"] == 0
    # The stored run has both sides' samples, with promptfoo's output text.
    samples = store.get_samples(report["run_id"])
    assert len(samples) == 120
    by_key = {(s.endpoint, s.item_id): s for s in samples}
    assert by_key[("baseline", "test0")].output == base[0]["response"]["output"]


def test_promptfoo_score_and_refusals(store: Store, tmp_path: Path) -> None:
    both = ("bf16", "fp8-kv")
    scored = gate_logs(PROMPTFOO, PROMPTFOO, store=store, metric="score", providers=both)
    assert scored["candidates"][0]["suites"][0]["metric"] == "score"
    with pytest.raises(UsageError, match=r"2 providers \(bf16, fp8-kv\); name this side's"):
        gate_logs(PROMPTFOO, PROMPTFOO, store=store)
    with pytest.raises(UsageError, match=r"no provider 'fp8' .*providers: bf16, fp8-kv"):
        gate_logs(PROMPTFOO, PROMPTFOO, store=store, providers=("bf16", "fp8"))
    with pytest.raises(UsageError, match=r"no metric 'accuracy' in test 0 \(metrics: pass, score\)"):
        gate_logs(PROMPTFOO, PROMPTFOO, store=store, metric="accuracy", providers=both)
    with pytest.raises(UsageError, match="no variable or metadata field 'topic'"):
        gate_logs(PROMPTFOO, PROMPTFOO, store=store, slices=["topic"], providers=both)
    lmeval_dir = write_lmeval(tmp_path / "lm", [1.0, 0.0] * 10)
    with pytest.raises(UsageError, match="only a promptfoo results file has providers"):
        gate_logs(lmeval_dir.parent, PROMPTFOO, store=store, providers=("bf16", None))
    with pytest.raises(UsageError, match="not a promptfoo results file"):
        gate_logs(FIXTURES / "inspect_baseline.json", PROMPTFOO, store=store, providers=both)
    # Two providers with one id (the same served model name on two endpoints): by label only.
    same_id = json.loads(PROMPTFOO.read_text())
    for rec in same_id["results"]["results"]:
        rec["provider"]["id"] = "openai:chat:smollm2"
    shared = tmp_path / "shared-id.json"
    shared.write_text(json.dumps(same_id))
    with pytest.raises(UsageError, match=r"'openai:chat:smollm2' names 2 providers \(bf16, fp8-kv\)"):
        gate_logs(shared, shared, store=store, providers=("openai:chat:smollm2", "fp8-kv"))
    assert gate_logs(shared, shared, store=store, providers=both)["candidates"][0]["suites"][0][
        "n"] == 60
    # Other test variables under the same test indices: different documents, refused.
    changed = json.loads(PROMPTFOO.read_text())
    for rec in changed["results"]["results"]:
        rec["vars"]["question"] += " (edited)"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(changed))
    with pytest.raises(UsageError, match="hold different documents"):
        gate_logs(PROMPTFOO, edited, store=store, providers=both)


def test_promptfoo_provider_errors_are_counted_against_the_budget(store: Store) -> None:
    refused = FIXTURES / "promptfoo_refused.json"
    report = gate_logs(refused, refused, store=store, providers=("bf16", "fp8-kv"))
    suite = report["candidates"][0]["suites"][0]
    pairs = suite["details"]["log_pairs"]
    assert pairs["errored"] == 3 and pairs["paired"] == 0
    assert report["verdict"] == "error" and "3 of 3" in report["error"]
    errored = [s for s in store.get_samples(report["run_id"]) if s.endpoint == "candidate:0"]
    assert all(s.error and "ECONNREFUSED" in s.error for s in errored)


def test_promptfoo_through_the_cli(tmp_path: Path) -> None:
    env = {"EVALSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}
    out = tmp_path / "report.json"
    res = run_cli(
        "gate-logs", str(PROMPTFOO), str(PROMPTFOO), "--baseline-provider", "bf16",
        "--candidate-provider", "openai:chat:smollm2-135m-fp8-kv", "--json", str(out), env=env,
    )
    report = json.loads(out.read_text())
    # 60 documents cannot resolve a 3-point margin: inconclusive, exit 3 (docs/cli.md).
    assert res.returncode == {"pass": 0, "fail": 1, "inconclusive": 3}[report["verdict"]]
    assert report["candidates"][0]["suites"][0]["n"] == 60
    refused = run_cli("gate-logs", str(PROMPTFOO), str(PROMPTFOO), env=env)
    assert refused.returncode == 2
    assert "2 providers (bf16, fp8-kv)" in refused.stderr


# --- Inspect logs written by Inspect itself ---------------------------------------------------
INSPECT_REAL = FIXTURES / "inspect_real"


def _inspect_scores(path: Path) -> dict[str, float]:
    """Per sample id: Inspect's ``match`` value (C/I) read straight from the log."""
    import zipfile

    import zipfile_zstd  # noqa: F401 - Inspect's .eval members are Zstandard-compressed

    if path.suffix == ".json":
        samples = json.loads(path.read_text())["samples"]
    else:
        with zipfile.ZipFile(path) as z:
            samples = [json.loads(z.read(n)) for n in z.namelist() if n.startswith("samples/")]
    return {s["id"]: 1.0 if s["scores"]["match"]["value"] == "C" else 0.0 for s in samples}


@pytest.mark.parametrize("suffix", [".eval", ".json"])
def test_inspect_logs_written_by_inspect(store: Store, suffix: str) -> None:
    """Both of Inspect's log formats as Inspect writes them (the .eval zip's members are
    Zstandard-compressed): paired by sample id, the scores and flips the logs hold."""
    base_path, cand_path = INSPECT_REAL / f"bf16{suffix}", INSPECT_REAL / f"fp8-kv{suffix}"
    report = gate_logs(base_path, cand_path, store=store, slices=["category"])
    check_schema(report)
    suite = report["candidates"][0]["suites"][0]
    base, cand = _inspect_scores(base_path), _inspect_scores(cand_path)
    assert set(base) == set(cand) and len(base) == 40
    assert suite["suite"] == "qa_numbers" and suite["metric"] == "match" and suite["n"] == 40
    assert suite["baseline"] == pytest.approx(sum(base.values()) / 40)
    assert suite["candidate"] == pytest.approx(sum(cand.values()) / 40)
    flips = suite["details"]["flips"]
    assert flips["correct_to_incorrect"] == sum(base[k] > cand[k] for k in base)
    assert flips["incorrect_to_correct"] == sum(base[k] < cand[k] for k in base)
    assert suite["details"]["log_pairs"]["paired"] == 40
    assert report["baseline"]["model"] == "openai-api/local/smollm2-135m-bf16"
    assert {s["dimension"] for s in suite["details"]["slices"]["slices"]} == {"category"}
