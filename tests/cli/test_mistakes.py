"""A user's common mistakes name their fix, with the documented exit code (docs/cli.md).

The wrong-URL cases run against the vLLM-shaped stub server (``benchmarks/stub_server.py``: a
real aiohttp server on loopback, ``/v1/models``, ``/v1/chat/completions``, ... and a plain-text
404 for every other route, as vLLM answers); the commands run in this process
(``tests/fixtures/cli.py``). The worker's path (a run submitted through the REST API) is the
service's ``execute_stored_run`` on a real store, as a worker calls it.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunSpec, RunStatus
from tests.fixtures.cli import run_cli
from tests.fixtures.db import REPO_ROOT


@pytest.fixture(scope="module")
def stub_root() -> Iterator[str]:
    """``http://127.0.0.1:PORT``: a vLLM-shaped server whose OpenAI base URL is ``.../v1``."""
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        import evaluator_speed
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    with evaluator_speed.stub() as urls:
        yield urls[0].removesuffix("/v1")


def test_a_base_url_without_v1_exits_2_with_the_corrected_url(
    stub_root: str, tmp_path: Path
) -> None:
    report = tmp_path / "r.json"
    r = run_cli(
        "compare", stub_root, f"{stub_root}/v1", "--suite", "reasoning-smoke",
        "--database-url", f"sqlite:///{tmp_path / 'e.db'}", "--json", str(report),
    )
    assert r.returncode == 2, r.stderr  # usage, not "unreachable" (4): the server answered
    assert f"did you mean {stub_root}/v1?" in r.stderr
    assert "unreachable" not in r.stderr and "HTTP 404" in r.stderr
    assert f"did you mean {stub_root}/v1?" in json.loads(report.read_text())["error"]


def test_a_route_url_is_refused_with_its_base_everywhere_a_url_is_taken(
    stub_root: str, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'e.db'}"
    route = f"{stub_root}/v1/chat/completions"
    r = run_cli("compare", route, f"{stub_root}/v1", "--suite", "reasoning-smoke",
                "--database-url", db)
    assert r.returncode == 2, r.stderr
    assert f"is a route, not a base URL: did you mean {stub_root}/v1?" in r.stderr
    added = run_cli("endpoints", "add", "bf16", f"{stub_root}/chat/completions",
                    "--database-url", db)
    assert added.returncode == 2, added.stderr
    assert f"did you mean {stub_root}/v1?" in added.stderr  # a root route gains /v1
    listed = run_cli("endpoints", "list", "--json", "--database-url", db)
    assert json.loads(listed.stdout) == []  # nothing was registered


def test_a_url_without_its_scheme_is_given_back_with_it(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'e.db'}"
    for given, meant in (("127.0.0.1:9/v1", "http://127.0.0.1:9/v1"),
                         ("gpu-a:8000", "http://gpu-a:8000/v1")):  # and the base path
        r = run_cli("compare", given, "http://127.0.0.1:9/v1", "--suite", "reasoning-smoke",
                    "--database-url", db)
        assert r.returncode == 2, r.stderr
        assert f"nor a registered endpoint name (did you mean {meant}?)" in r.stderr
    r = run_cli("compare", "prod-bf16", "http://127.0.0.1:9/v1", "--suite", "reasoning-smoke",
                "--database-url", db)  # a name: no URL to suggest
    assert r.returncode == 2 and "did you mean" not in r.stderr, r.stderr


def test_a_worker_run_with_a_url_without_v1_errors_naming_the_fix(
    stub_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalsvc.services.runs import execute_stored_run

    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")  # server mode, loopback
    spec = RunSpec(
        baseline=EndpointRef(url=stub_root),
        candidates=[EndpointRef(url=f"{stub_root}/v1")],
        suites=["reasoning-smoke"],
    )
    with Store.from_url(f"sqlite:///{tmp_path / 'w.db'}") as store:
        store.ensure_ready(upgrade_fresh_sqlite=True)
        queued = store.create_run(spec)
        claimed = store.claim_run(worker_id="w1", lease_seconds=60)  # as a worker claims it
        assert claimed is not None and claimed.id == queued.id
        execute_stored_run(store, claimed, cancel=threading.Event(), worker_id="w1")
        run = store.get_run(queued.id)
    assert run is not None and run.status == RunStatus.error
    assert run.error is not None and f"did you mean {stub_root}/v1?" in run.error


def test_a_mistyped_suite_name_or_kind_says_did_you_mean(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/v1"
    r = run_cli("compare", url, url, "--suite", "releas")
    assert r.returncode == 2, r.stderr
    assert "unknown suite 'releas' (did you mean 'release'?)" in r.stderr
    kind = tmp_path / "k.yaml"
    kind.write_text("name: k\nkind: reasonin\n")
    r = run_cli("compare", url, url, "--suite", str(kind))
    assert r.returncode == 2 and "did you mean 'reasoning'?" in r.stderr


def test_a_mistyped_yaml_key_names_the_nearest_valid_key(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/v1"
    top = tmp_path / "top.yaml"
    top.write_text("name: t\nkind: needle\nseeed: 3\n")
    r = run_cli("compare", url, url, "--suite", str(top))
    assert r.returncode == 2, r.stderr
    assert f"{top}:3: field 'seeed': unknown key (did you mean 'seed'?)" in r.stderr
    params = tmp_path / "params.yaml"
    params.write_text(
        "name: p\nkind: reasoning\ngate:\n  margn: 0.1\nparams:\n  n: 20\n  tasks:\n"
        "    - family: arithmetic\n      levle: 1\n"
    )
    r = run_cli("plan", "--suite", str(params))
    assert r.returncode == 2, r.stderr
    assert "field 'gate.margn': unknown key (did you mean 'margin'?)" in r.stderr
    nested = tmp_path / "nested.yaml"
    nested.write_text(
        "name: p\nkind: reasoning\nparams:\n  n: 20\n  tasks:\n"
        "    - family: arithmetic\n      level: 1\n      wieght: 2\n"
    )
    r = run_cli("plan", "--suite", str(nested))
    assert r.returncode == 2, r.stderr
    assert "field 'params.tasks.0.wieght': unknown key (did you mean 'weight'?)" in r.stderr


def test_a_set_file_with_a_mistyped_suites_key_says_did_you_mean(tmp_path: Path) -> None:
    """A set is told it is a set: "kind required" (the suite model's error) named no fix."""
    url = "http://127.0.0.1:9/v1"
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: mine\nsuite: [reasoning-smoke, drift-smoke]\n")
    r = run_cli("compare", url, url, "--suite", str(mine))
    assert r.returncode == 2, r.stderr
    assert (f"{mine}:2: field 'suite': unknown key (did you mean 'suites'?): a set lists its "
            "suites under 'suites', a suite needs a 'kind'") in " ".join(r.stderr.split())
    bare = tmp_path / "bare.yaml"
    bare.write_text("name: bare\nseed: 3\n")  # no key near 'suites': the suite model's error
    r = run_cli("plan", "--suite", str(bare))
    assert r.returncode == 2 and "field 'kind': Field required" in r.stderr, r.stderr


def test_samples_past_a_datasets_rows_runs_them_all_and_says_so(
    stub_root: str, tmp_path: Path
) -> None:
    rows = [{"id": f"q{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}
            for i in range(12)]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = tmp_path / "mine.yaml"
    suite.write_text(
        "name: mine\nkind: dataset\nseed: 0\nparams:\n  path: qa.jsonl\n  id_column: id\n"
        "  prompt:\n    template: \"{question}\"\n  reference: answer\n  scorer: numeric\n"
        "  max_tokens: 8\n"
    )
    url = f"{stub_root}/v1"
    r = run_cli("compare", url, url, "--suite", str(suite), "--samples", "40", "--json", "-",
                "--database-url", f"sqlite:///{tmp_path / 'e.db'}")
    assert r.returncode in (0, 3), r.stderr  # a verdict: the warning does not stop the run
    report = json.loads(r.stdout)
    assert report["candidates"][0]["suites"][0]["n"] == 12
    warning = "mine: --samples/n 40 asks for more rows than qa.jsonl has: it runs all 12"
    assert warning in report["warnings"]
    assert warning in " ".join(r.stderr.split())  # and the terminal says it


def _stub_answer(question: str) -> str:
    """The number the stub server answers to ``question`` sent as one user message."""
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        from stub_server import _answer
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    return _answer([{"role": "user", "content": question}]).split()[-1].rstrip(".")


def test_a_dataset_that_ran_every_row_is_told_to_add_rows_never_samples(
    stub_root: str, tmp_path: Path
) -> None:
    """60 rows, no ``n``: the default n (200) asked for nothing, so no warning; both endpoints
    answer alike and the baseline solves 60%, so the interval at n = 60 reaches the margin
    (inconclusive). ``--samples`` cannot add an item to a file of 60 rows: the next step says
    to add rows."""
    from evalsvc.services import run_verdict

    rows = []
    for i in range(60):
        question = f"What is {i} + 1?"
        right = _stub_answer(question)
        rows.append({"id": f"q{i}", "question": question,
                     "answer": right if i % 5 < 3 else str(int(right) + 1)})
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = tmp_path / "mine.yaml"
    suite.write_text(
        "name: mine\nkind: dataset\nseed: 0\nparams:\n  path: qa.jsonl\n  id_column: id\n"
        "  prompt:\n    template: \"{question}\"\n  reference: answer\n  scorer: numeric\n"
        "  max_tokens: 8\n"
    )
    url = f"{stub_root}/v1"
    db = f"sqlite:///{tmp_path / 'e.db'}"
    r = run_cli("compare", url, url, "--suite", str(suite), "--json", "-", "--database-url", db)
    assert r.returncode == 3, r.stderr
    report = json.loads(r.stdout)
    assert report["warnings"] == [] and "asks for more rows" not in r.stderr
    (s,) = report["candidates"][0]["suites"]
    assert s["n"] == 60 and s["baseline"] == pytest.approx(0.6)
    assert [x["code"] for x in s["reasons"]] == ["ci_includes_margin"]
    with Store.from_url(db) as store:
        run = store.get_run(report["run_id"])
        assert run is not None
        steps = run_verdict.banner(store, run, report)["next"]
    texts = [x["text"] for x in steps]
    assert texts and not any("--samples" in t for t in texts), texts
    assert "its data held 60 rows and all of them ran" in texts[0], texts
