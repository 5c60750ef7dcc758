"""Every verdict follows from its gates and says why, in the terminal, the JSON report and the
dashboard's decision banner (issue 16); no dashboard page, the API docs included, sends a
request beyond loopback; static files are compressed and cached; unknown pages answer 404.

The drift case of issue 16 runs on the real local endpoints: a small reasoning suite beside a
user's drift suite with ``n: 6`` and ``gate: {threshold: 0.002}``. At n = 6 the drift gate is below the
kind's minimum n and cannot decide; before the fix its inferiority p-value still entered Holm's
correction and the run read ``fail`` with no failing gate (``compare`` exit 1).

On llama.cpp (``serving_endpoints`` on an AVX2-only host) drift is refused (no
``prompt_logprobs``), so the same case is built from suites that run there: a small reasoning
suite beside a user's long-context aggregation suite (partial credit: a continuous metric) with
``n: 6``, below the same minimum of 10 for a continuous gate. So that the undecided gate has
something to hide, the candidate is a loopback fault proxy in front of the baseline's server
that answers every long-context request "Unknown." (scored 0, whatever this host's model
gets right); reasoning requests pass through untouched. One server on both sides: the
session's llama.cpp candidate server, off the f16 baseline every other llama.cpp test queues on.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from evalsvc.db import Store
from evalsvc.reports import report_schema
from tests.conftest import local_engine
from tests.runner.fault_proxy import fault_proxy

from .conftest import Server, SyntheticRun, Watched

pytestmark = pytest.mark.timeout(1800)

EXIT = {"pass": 0, "fail": 1, "inconclusive": 3, "error": 4}

DRIFT_STRICT = """\
name: drift-strict
kind: drift
description: A user's strict drift gate on too few passages (issue 16).
seed: 2719
params:
  n: 6
  min_chars: 400
  top_k: 20
gate:
  threshold: 0.002
"""


# What llama.cpp runs (docs/local-endpoints.md): a continuous paired gate at n = 6, at about the
# shortest length common_words' own text leaves room for (192 is refused). (Not a
# threshold: a threshold gate on scores that happen to be all 0 or 1 is tested as a proportion,
# which has no minimum n.)
LONGCTX_STRICT = """\
name: longctx-strict
kind: longctx
description: A user's aggregation suite on too few items (issue 16 on llama.cpp).
seed: 2719
params:
  task: common_words
  lengths: [256]
  languages: [en]
  haystacks: 6
  max_tokens: 24
gate:
  margin: 0.1
"""
# In every common_words prompt (evalsvc/suites/kinds/longctx.py), in no reasoning prompt.
LONGCTX_MATCH = "I will ask which are the most common"

# Four items of 32 tokens: a second gated suite beside the undecided one is all the case needs
# (eight of 48 tokens made this test 96 CPU-s of a `make test` on an AVX2 host, mostly decoding;
# on vLLM the whole reasoning-smoke, 16 items of 80 tokens, was 27 CPU-s of the servers on an
# idle 2-core AVX-512 host: docs/benchmarks-log.md, "session 19").
REASONING_SMALL = """\
name: reasoning-small
kind: reasoning
seed: 7
params:
  n: 4
  max_tokens: 32
"""


def _issue16_suites(tmp_path: Path) -> tuple[list[str], str]:
    """The suites of the issue-16 case on this session's engine: (``--suite`` values, the name
    of the undecided threshold suite)."""
    (tmp_path / "reasoning-small.yaml").write_text(REASONING_SMALL)
    if local_engine() == "vllm":
        (tmp_path / "drift-strict.yaml").write_text(DRIFT_STRICT)
        return [str(tmp_path / "reasoning-small.yaml"), str(tmp_path / "drift-strict.yaml")], \
            "drift-strict"
    (tmp_path / "longctx-strict.yaml").write_text(LONGCTX_STRICT)
    return [str(tmp_path / "reasoning-small.yaml"), str(tmp_path / "longctx-strict.yaml")], \
        "longctx-strict"


def _on_loopback(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about"):
        return True
    return parts.hostname in ("127.0.0.1", "localhost", "::1")


def _record_requests(w: Watched) -> list[str]:
    seen: list[str] = []
    w.page.on("request", lambda req: seen.append(req.url))
    return seen


def _check_report_follows_its_gates(report: dict[str, Any]) -> None:
    import jsonschema

    jsonschema.validate(report, report_schema())
    assert report["reasons"], "the run says why"
    for cand in report["candidates"]:
        assert cand["reasons"], "each candidate says why"
        gated = [s for s in cand["suites"] if s["gated"]]
        verdicts = {s["verdict"] for s in gated}
        for s in cand["suites"]:
            assert s["reasons"], f"{s['suite']} says why"
        # The candidate is a function of its gated suites (docs/statistics.md §1), unless its
        # endpoints errored beyond the budget: then it has no verdict, and says so.
        if any(r["code"] == "error_budget" for r in cand["reasons"]):
            assert cand["verdict"] == "error"
        elif "fail" in verdicts:
            assert cand["verdict"] == "fail"
        elif verdicts == {"pass"}:
            assert cand["verdict"] == "pass"
        else:
            assert cand["verdict"] == "inconclusive"
    if report["verdict"] == "fail":
        assert any(s["verdict"] == "fail" for c in report["candidates"] for s in c["suites"]
                   if s["gated"])


@pytest.mark.endpoints
@pytest.mark.llamacpp
def test_an_undecided_gate_cannot_fail_the_run(
    serving_endpoints: Any,
    dash_db_url: str,
    dash_store: Store,
    dash_server: Server,
    page: Watched,
    tmp_path: Path,
    shot: Any,
) -> None:
    chosen, name = _issue16_suites(tmp_path)
    first = next(iter(dict(serving_endpoints.candidates).values()))
    vllm = local_engine() == "vllm"
    out, md, junit = tmp_path / "r.json", tmp_path / "r.md", tmp_path / "r.xml"
    with contextlib.ExitStack() as stack:
        if vllm:
            base, cand = serving_endpoints.baseline, first
        else:
            proxy = stack.enter_context(fault_proxy(first, match=LONGCTX_MATCH))
            base, cand = first, proxy.url("match")
        r = subprocess.run(
            [sys.executable, "-m", "evalsvc.cli.main", "compare", base, cand,
             *(a for x in chosen for a in ("--suite", x)), "--concurrency", "4",
             # A loaded 2-core host can take minutes per answer; fewer timeouts, fewer errors.
             "--timeout", "900",
             "--json", str(out), "--markdown", str(md), "--junit", str(junit),
             "--database-url", dash_db_url],
            capture_output=True, text=True, timeout=1500,
        )
    assert out.exists(), f"exit {r.returncode}: {r.stderr[-3000:]}"
    report = json.loads(out.read_text())
    verdict = report["verdict"]
    # The exit code is the verdict's, and the verdict follows from the gates.
    assert r.returncode == EXIT[verdict], r.stderr
    _check_report_follows_its_gates(report)
    suites = {s["suite"]: s for s in report["candidates"][0]["suites"]}
    strict = suites[name]
    assert strict["n"] == 6 and strict["verdict"] == "inconclusive"
    (why,) = [x for x in strict["reasons"] if x["code"] == "insufficient_data"]
    assert "minimum" in why["message"]
    # Whatever this host's reasoning gate reads, the run is not a fail unless a gate failed; and
    # the undecided drift gate blocks a pass, so the run is never a pass either. (A loaded host
    # whose endpoints error beyond the budget gives ``error``, exit 4, with the reason.)
    budget = [x for x in report["reasons"] if x["code"] == "error_budget"]
    if budget:
        assert verdict == "error" and r.returncode == 4
    elif all(s["verdict"] != "fail" for s in suites.values() if s["gated"]):
        assert verdict == "inconclusive" and r.returncode == 3
    codes = {(x["suite"], x["code"]) for x in report["reasons"]}
    assert (name, "insufficient_data") in codes
    # The terminal and the Markdown say why too.
    said = " ".join(r.stderr.split())
    assert f"{name} · insufficient_data" in said
    assert "`insufficient_data`" in md.read_text()
    assert "insufficient_data" in junit.read_text()

    # The run page opens with the decision: verdict, the blocking gates with their reasons and
    # the next step.
    run_id = report["run_id"]
    seen = _record_requests(page)
    page.page.goto(f"{dash_server.url}/runs/{run_id}", wait_until="networkidle")
    shot(page.page, "run-decision", full=False)
    banner = page.page.locator("#decision")
    assert banner.locator(".decision-head .badge").inner_text() == verdict
    blocking = banner.locator(f"#blocking > li[data-suite='{name}']")
    assert blocking.count() == 1
    assert blocking.get_attribute("data-verdict") == "inconclusive"
    assert blocking.locator("li[data-code='insufficient_data']").count() == 1
    assert "at least 10 items" in banner.locator("#next-step").inner_text()
    for s in suites.values():
        if s["gated"] and s["verdict"] != "pass":
            assert banner.locator(f"#blocking > li[data-suite='{s['suite']}']").count() == 1
    row = page.page.locator(f"#gates tbody tr[data-suite='{name}']")
    assert row.count() == 1
    if vllm:
        # The threshold gate is labelled as such: no baseline value, no Δ, the metric's own CI.
        cells = row.locator("td")
        assert "threshold gate" in cells.nth(3).inner_text()
        assert cells.nth(4).inner_text() == "—" and cells.nth(6).inner_text() == "—"
        assert "threshold < 0.002" in cells.nth(7).inner_text()
    # Its suite pages stay on loopback too.
    for name in suites:
        page.page.goto(f"{dash_server.url}/runs/{run_id}/suites/{name}?candidate=candidate:0",
                       wait_until="networkidle")
    assert [u for u in seen if not _on_loopback(u)] == []
    assert page.problems() == [], page.problems()


def test_no_request_leaves_loopback_and_static_files_are_compressed(
    page: Watched, dash_server: Server, synthetic_run: SyntheticRun, many_runs: dict[str, Any],
) -> None:
    base = dash_server.url
    seen = _record_requests(page)
    statics: dict[str, dict[str, str]] = {}
    page.page.on(
        "response",
        lambda resp: statics.__setitem__(urlsplit(resp.url).path, resp.headers)
        if "/static/" in resp.url or resp.url.endswith(".js") else None,
    )
    run = synthetic_run.id
    pages = [
        f"{base}/",
        f"{base}/runs/{run}",
        f"{base}/runs/{run}/suites/needle-synthetic?candidate=candidate:0",
        f"{base}/runs/{run}/suites/reasoning-smoke?candidate=candidate:0",
        f"{base}/runs/{run}/flips",
        f"{base}/trends",
        f"{base}/compare?a={many_runs['ids'][0]}&b={run}",
        # /docs last, below: Swagger UI fetches openapi.json from script after "networkidle"
        # on a loaded host, and leaving the page then aborts that request.
        f"{base}/redoc",
    ]
    for url in pages:
        page.page.goto(url, wait_until="networkidle")
    # ReDoc drew its page, footer included (where its CDN logo used to be).
    page.page.wait_for_selector("text=API docs by Redocly", timeout=60_000)
    page.page.goto(f"{base}/docs", wait_until="networkidle")
    page.page.wait_for_selector(".swagger-ui .info", timeout=60_000)
    outside = [u for u in seen if not _on_loopback(u)]
    assert outside == [], outside
    assert page.problems() == [], page.problems()

    # Vendored bundles are sent gzipped and cached; evalsvc's own files revalidate.
    echarts = statics["/static/vendor/echarts.min.js"]
    assert echarts.get("content-encoding") == "gzip"
    assert "max-age=604800" in echarts.get("cache-control", "")
    assert statics["/static/dashboard.css"].get("cache-control") == "no-cache"
    redoc = statics["/redoc/redoc.standalone.js"]
    assert redoc.get("content-encoding") == "gzip" and "max-age" in redoc.get("cache-control", "")
    swagger = statics["/static/api-docs/swagger-ui/swagger-ui-bundle.js"]
    assert swagger.get("content-encoding") == "gzip"

    # An unknown HTML path gets the dashboard's 404 page; API paths keep their JSON.
    page.allowed_status.add(404)
    resp = page.page.goto(f"{base}/no/such/page", wait_until="networkidle")
    assert resp is not None and resp.status == 404
    assert page.page.locator("header.top .brand").count() == 1
    assert "/no/such/page" in page.page.inner_text("main")
    api = page.page.request.get(f"{base}/api/v1/no-such-route")
    assert api.status == 404 and api.json() == {"detail": "Not Found"}
