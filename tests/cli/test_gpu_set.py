"""The GPU-first path (issue 38): the ``gpu`` set against real loopback servers shaped like vLLM,
SGLang and a generic OpenAI server (``benchmarks/stub_server.py --engine``), with nothing local:
a fresh ``EVALSVC_HOME`` (no checkpoint, no managed venv) and no ``EVALSVC_LMEVAL_PYTHON``.

- Every suite of the set runs on both engine shapes (the tokenizer is the engine's
  ``/tokenize``; drift reads logprobs through ``echo``, which SGLang has where it lacks vLLM's
  ``prompt_logprobs``); the lm-eval suite, with no Python that has lm-eval and its first-use
  preparation turned off (``EVALSVC_LMEVAL_AUTO_INSTALL=0``; with it on, evalsvc prepares its
  own lm-eval venv: ``tests/suites/test_lmeval_prepare.py``), is skipped with the reason in the
  terminal, the JSON report (``skipped``), the Markdown and JUnit (a skipped testcase), and every
  candidate's reasons.
- A skipped suite never passes a verdict silently: the pass says it does not cover it;
  ``--strict`` refuses the same run (exit 2) naming the suite, its fix and what would run.
- A missing capability is named once, with the endpoints that lack it, the fix and the suites
  that would run.
- ``suites list`` and ``suites show``.

The stub answers every question wrong, so the quality gates read inconclusive (a 0% baseline):
these tests assert what ran, what was skipped and why, never a quality verdict.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
GPU_SUITES = ["needle-gpu", "reasoning-gpu", "determinism", "drift-gpu", "lmeval-mc-gpu"]
# A determinism suite small and quick enough to pass against the stub (answers never vary).
QUICK_DETERMINISM = (
    "name: det-quick\nkind: determinism\nseed: 5\nparams: {n: 48, repeats: 1, conditions: "
    "[mixed], background_requests: 2, schedule_window_s: 0, max_tokens: 8, "
    "background_max_tokens: [4, 8], background_prompt_chars: [50, 100]}\n"
)


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, list[str]]]:
    """Two endpoints each of a vLLM-, an SGLang- and a generic-shaped server (32k context)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import evaluator_speed
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    with ExitStack() as stack:
        yield {
            engine: stack.enter_context(
                evaluator_speed.stub("--engine", engine, "--max-model-len", "32768")
            )
            for engine in ("vllm", "sglang", "openai")
        }


@pytest.fixture
def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Nothing local: an empty EVALSVC_HOME, no lm-eval Python named (and none prepared on first
    use: that needs the package index), a fresh store."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("EVALSVC_HOME", str(home))
    monkeypatch.setenv("EVALSVC_DATABASE_URL", f"sqlite:///{tmp_path / 'store.db'}")
    monkeypatch.delenv("EVALSVC_LMEVAL_PYTHON", raising=False)
    monkeypatch.setenv("EVALSVC_LMEVAL_AUTO_INSTALL", "0")
    return home


def _lmeval_beside_evalsvc() -> bool:
    import importlib.util

    return importlib.util.find_spec("lm_eval") is not None


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_gpu_set_runs_on_a_vllm_or_sglang_pair_with_nothing_local(
    engine: str, engines: dict[str, list[str]], fresh_home: Path, tmp_path: Path
) -> None:
    if _lmeval_beside_evalsvc():
        pytest.skip("lm-eval is installed beside evalsvc here: the lm-eval suite would run")
    base, cand = engines[engine]
    out = {ext: tmp_path / f"report.{ext}" for ext in ("json", "xml", "md")}
    r = run_cli("compare", base, cand, "--suite", "gpu", "--samples", "4",
                "--json", str(out["json"]), "--junit", str(out["xml"]),
                "--markdown", str(out["md"]))
    assert r.returncode == 3, r.stderr[-3000:]  # inconclusive: the stub's 0% baselines
    report = json.loads(out["json"].read_text())
    import jsonschema

    from evalsvc.reports import report_schema

    jsonschema.Draft202012Validator(report_schema()).validate(report)  # `skipped` included
    prov = report["baseline"]["provenance"]
    assert prov["engine"] == engine and prov["capabilities"]["tokenize"]
    assert prov["capabilities"]["prompt_logprobs"] is (engine == "vllm")
    assert prov["tokenizer_source"].startswith("endpoint /tokenize")
    ran = {s["suite"]: s for s in report["candidates"][0]["suites"]}
    assert list(ran) == GPU_SUITES[:4]
    assert all(s["n"] > 0 and s["n_errors"] == 0 for s in ran.values()), ran
    assert ran["needle-gpu"]["details"]["calibration"]["ladder"] == [
        "4096 tokens", "8192 tokens", "16384 tokens"]  # capped at 16k on a 32k server
    # The skipped suite, with its reason and fix, in every view.
    (skipped,) = report["skipped"]
    assert skipped["suite"] == "lmeval-mc-gpu" and skipped["kind"] == "lmeval"
    assert "no Python with lm-eval" in skipped["reason"]
    assert "pip install 'evalsvc[lmeval]'" in skipped["reason"]
    why = [r for r in report["candidates"][0]["reasons"] if r["code"] == "skipped"]
    assert [r["suite"] for r in why] == ["lmeval-mc-gpu"]
    assert "does not cover it" in why[0]["message"]
    assert "skipping lmeval-mc-gpu" in r.stderr and "skipped" in r.stderr
    case = ET.parse(out["xml"]).getroot().find(".//testcase[@name='lmeval-mc-gpu']")
    assert case is not None and case.find("skipped") is not None
    assert "no Python with lm-eval" in case.find("skipped").get("message", "")  # type: ignore[union-attr]
    md = out["md"].read_text()
    assert "Skipped (not run on these endpoints" in md and "lmeval-mc-gpu" in md
    # Nothing was prepared locally.
    assert not (fresh_home / "models").exists() and not (fresh_home / "venvs").exists()


def test_a_pass_says_what_it_does_not_cover_and_strict_refuses(
    engines: dict[str, list[str]], fresh_home: Path, tmp_path: Path
) -> None:
    if _lmeval_beside_evalsvc():
        pytest.skip("lm-eval is installed beside evalsvc here: nothing would be skipped")
    quick = tmp_path / "det-quick.yaml"
    quick.write_text(QUICK_DETERMINISM)
    base, cand = engines["vllm"]
    args = ("compare", base, cand, "--suite", str(quick), "--suite", "lmeval-mc-gpu")
    r = run_cli(*args, "--json", "-")
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["verdict"] == "pass"
    codes = [(x["code"], x["suite"]) for x in report["reasons"]]
    assert codes == [("passed", None), ("skipped", "lmeval-mc-gpu")]
    assert "not run, so this verdict does not cover it" in report["reasons"][1]["message"]

    strict = run_cli(*args, "--strict")
    assert strict.returncode == 2, strict.stderr[-3000:]
    msg = " ".join(strict.stderr.split())
    assert "suite lmeval-mc-gpu: no Python with lm-eval" in msg
    assert "Suites that would run: det-quick" in msg


def test_a_missing_capability_is_named_once_with_its_fix_and_what_would_run(
    engines: dict[str, list[str]], fresh_home: Path
) -> None:
    """A generic OpenAI server (no /tokenize) as the baseline and the candidate."""
    base, cand = engines["openai"]
    r = run_cli("compare", base, cand, "--suite", "gpu", "--strict")
    assert r.returncode == 2, r.stderr[-3000:]
    msg = " ".join(r.stderr.split())
    assert msg.count("needs tokenize") == 1, msg
    host = base.split("//")[1].split("/")[0]
    other = cand.split("//")[1].split("/")[0]
    line = msg.split("needs tokenize, which ", 1)[1]
    assert line.startswith(f"{host} (stub-model), {other} (stub-model) lack")
    assert "(suites needle-gpu, lmeval-mc-gpu)" in line
    assert "evalsvc endpoints add NAME URL --tokenizer PATH" in line
    assert "Suites that would run: reasoning-gpu, determinism, drift-gpu" in msg


def _row(rows: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(r for r in rows if r["name"] == name)


def test_suites_list_and_show_give_gate_needs_and_cost() -> None:
    listed = run_cli("suites", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    reasoning = _row(rows, "reasoning-gpu")
    assert reasoning["margin"] == 0.05 and reasoning["needs"] == ["chat"]
    assert reasoning["calibrates"] and reasoning["cost"]["items"] == [1260, 1260]
    assert reasoning["cost"]["pilot_requests"] == [40, 200]  # 4 families × 1-5 levels × 10
    assert reasoning["cost"]["text"] == "1,260 items + 40–200 pilot"
    drift = _row(rows, "drift-gpu")
    assert drift["gate"] == "kld_mean < 0.05 (threshold)" and drift["needs"] == ["completions", "echo"]
    gpu = _row(rows, "gpu")
    assert gpu["suites"] == GPU_SUITES
    assert gpu["needs"] == ["chat", "completions", "echo", "tokenize"]
    members = [_row(rows, n)["cost"]["items"] for n in GPU_SUITES]
    assert gpu["cost"]["items"] == [sum(m[0] for m in members), sum(m[1] for m in members)]
    table = run_cli("suites", "list", env={"COLUMNS": "300"})
    assert table.returncode == 0 and "needs" in table.stdout and "1,260 items" in table.stdout

    shown = run_cli("suites", "show", "gpu", env={"COLUMNS": "300"})
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "suites: [needle-gpu, reasoning-gpu, determinism, drift-gpu, lmeval-mc-gpu]" in text
    assert "needs: chat, completions, echo, tokenize" in text
    assert "acc, margin 0.05" in text and "1257" in text  # the gate, and plan's sizing
    detail = json.loads(run_cli("suites", "show", "lmeval-mc-gpu", "--json").stdout)
    assert detail["gates"]["lmeval-mc-gpu"]["margin"] == 0.05
    assert detail["plan"][0]["planned_items"] == 80 and "margin: 0.05" in detail["yaml"]
    unknown = run_cli("suites", "show", "gpu-nope")
    assert unknown.returncode == 2 and "gpu-nope" in unknown.stderr


def test_suites_list_gives_each_description_its_gist() -> None:
    """The table gives a description's first sentence, cut with "…" (whole descriptions made
    the listing 1,245 lines on 80 columns, 14 a suite on 120); ``--json`` keeps them whole."""
    rows = json.loads(run_cli("suites", "list", "--json").stdout)
    full = _row(rows, "dataset-qa")["description"]
    assert full.startswith("The dataset kind on the shipped QA file") and len(full) > 200
    table = run_cli("suites", "list", env={"COLUMNS": "120"})
    assert table.returncode == 0, table.stderr
    assert len(table.stdout.splitlines()) < 7 * len(rows)
    assert "A template for your own data" not in table.stdout  # past the first sentence
    gpu = [line for line in table.stdout.splitlines() if "│ gpu " in line]
    assert gpu, table.stdout


def test_suites_show_prints_the_yaml_unwrapped_on_a_narrow_terminal() -> None:
    """The YAML ``suites show`` prints is the file, whatever the terminal's width: users copy it
    to make their own suite, and a folded description wrapped at 60 columns was no YAML."""
    import yaml

    shown = run_cli("suites", "show", "gpu", env={"COLUMNS": "60"})
    assert shown.returncode == 0, shown.stderr
    header, rest = shown.stdout.split("\n", 1)
    path = Path(header.split(" · ", 1)[1])
    block = rest.split("\n\nneeds: ", 1)[0]
    assert block == path.read_text().rstrip()
    assert yaml.safe_load(block)["suites"] == GPU_SUITES


def test_lm_eval_runs_with_the_engines_own_tokenizer(
    lmeval_python: str, engines: dict[str, list[str]], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """lm-eval (its own Python) scores the bundled task through ``/tokenize`` of an SGLang-shaped
    server: no tokenizer files, no hub; every document paired."""
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EVALSVC_LMEVAL_PYTHON", lmeval_python)
    base, cand = engines["sglang"]
    r = run_cli("compare", base, cand, "--suite", "lmeval-mc-gpu", "--samples", "8",
                "--database-url", f"sqlite:///{tmp_path / 'db.sqlite'}", "--json", "-")
    assert r.returncode in (0, 1, 3), r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["skipped"] == []
    (suite,) = report["candidates"][0]["suites"]
    assert suite["n"] == 8 and suite["n_errors"] == 0
