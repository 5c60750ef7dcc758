"""Issue 16's views on runs of the real runner (``loop_runs``: loopback servers of known
behaviour, so these run on any host): one label per endpoint everywhere, suite names instead of
paths, the reasons of ``runs gate`` (CLI and REST), the all-samples browser, the layout at
800 px and the dark theme, the trend's time axis and margin.

``runs gate --json`` runs in the test's own process (``tests.fixtures.cli.run_cli``, the same
Typer app; an uncaught exception fails the test): a separate interpreter costs 2-5 CPU-seconds
of start-up on a 2-core host. ``runs gate`` without ``--json`` still runs ``python -m
evalsvc.cli.main``, so the real entry point's verdict exit code and stderr stay covered, and
``compare`` needs a process of its own while Chromium runs (see its test).
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Any

import httpx
import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunSpec, RunStatus
from evalsvc.reports import md_text, to_junit, to_markdown
from evalsvc.services import dashboard as svc
from tests.fixtures.cli import run_cli, run_cli_process

from .conftest import LOOP_SUITES, LoopRuns, Server, SyntheticRun, Watched, watch
from .test_pages import _clean, _open

pytestmark = pytest.mark.timeout(900)


def _labels(loop: LoopRuns) -> tuple[str, str]:
    return "bf16-loop (fake-model)", f"{loop.candidate_hostport} (fake-model)"


# ---------------------------------------------------------------------------- labels


def test_one_label_per_endpoint_in_every_view(dash_store: Store, loop_runs: LoopRuns) -> None:
    base, cand = _labels(loop_runs)
    run = loop_runs.main
    # Runs list: labels, and the suites' own names.
    listed = svc.runs_list(dash_store, svc.parse_filters(endpoint=loop_runs.candidate)[0])
    (row,) = [r for r in listed["rows"] if r["id"] == run]
    assert row["baseline"] == base and row["candidates"] == [cand]
    assert row["suites"] == LOOP_SUITES
    assert {g["candidate"] for g in row["gates"]} == {cand}
    # Run page: gates table, provenance, candidates, banner.
    page = svc.run_page(dash_store, run)
    assert {g["candidate"] for g in page["gate_table"]["rows"]} == {cand}
    assert {g["candidate"] for g in page["gates"]} == {cand}
    assert [c["label"] for c in page["provenance"]["columns"]] == [base, cand]
    # Their subtitles say the side, never the role key ("candidate:0").
    assert [c["side"] for c in page["provenance"]["columns"]] == ["baseline", "candidate"]
    assert page["candidates"] == [{"role": "candidate:0", "label": cand}]
    # Suite page and flips.
    view = svc.suite_view(dash_store, run, "reasoning-smoke", "candidate:0")
    assert view["candidate"] == cand and view["labels"]["baseline"] == base
    assert svc.flips_view(dash_store, run)["labels"] == {"baseline": base, "candidate:0": cand}
    # Trends: the pair picker and the chosen pair (their URLs stay in the query only).
    pairs = [p for p in svc.trend_pairs(dash_store) if p["candidate_url"] == loop_runs.candidate]
    assert {p["suite"] for p in pairs} == set(LOOP_SUITES)
    assert {(p["baseline_label"], p["candidate_label"]) for p in pairs} == {(base, cand)}
    t = svc.trend(dash_store, baseline_url=loop_runs.baseline, candidate_url=loop_runs.candidate,
                  suite="reasoning-smoke")
    assert (t["baseline_label"], t["candidate_label"]) == (base, cand)
    # Reports: JSON, Markdown, JUnit.
    report = dash_store.get_report(run)
    assert report is not None
    assert report["baseline"]["label"] == base and report["candidates"][0]["label"] == cand
    assert f"baseline {md_text(base)} at " in to_markdown(report)
    junit = ET.fromstring(to_junit(report).split("\n", 1)[1])
    assert [s.get("name") for s in junit.iter("testsuite")] == [f"evalsvc.{cand}"]


def test_a_suite_file_path_is_shown_as_a_name(dash_store: Store, tmp_path: Any) -> None:
    spec = RunSpec(baseline=EndpointRef(url="http://127.0.0.1:5/v1", name="b"),
                   candidates=[EndpointRef(url="http://127.0.0.1:6/v1")],
                   suites=[str(tmp_path / "suites" / "my-needle.yaml"), "reasoning-smoke"],
                   labels={"set": "paths"})
    queued = dash_store.create_run(spec, status=RunStatus.queued)
    listed = svc.runs_list(dash_store, svc.parse_filters(label="set=paths")[0])
    (row,) = [r for r in listed["rows"] if r["id"] == queued.id]
    assert row["suites"] == ["my-needle", "reasoning-smoke"]
    # Not started: labelled from the spec (no snapshot, no served model yet).
    assert row["baseline"] == "b" and row["candidates"] == ["127.0.0.1:6"]


# ---------------------------------------------------------------------------- gate reasons


def test_runs_gate_gives_the_reasons_in_the_cli_and_rest(
    dash_store: Store, dash_db_url: str, dash_server: Server, loop_runs: LoopRuns
) -> None:
    run = loop_runs.main
    report = dash_store.get_report(run)
    assert report is not None and report["reasons"], report
    want = report["reasons"]
    args = ["runs", "gate", run[:10], "--database-url", dash_db_url]
    as_json = run_cli(*args, "--json")
    code = {"pass": 0, "fail": 1, "inconclusive": 3, "error": 4}[report["verdict"]]
    assert as_json.returncode == code, as_json.stderr
    out = json.loads(as_json.stdout)
    # Each reason as stored, plus the candidate's label (never its role) beside its role.
    def stored(reasons: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "candidate_label"} for r in reasons]

    assert out["verdict"] == report["verdict"] and stored(out["reasons"]) == want
    labelled = [r for r in out["reasons"] if r.get("candidate")]
    assert labelled and all(
        r["candidate_label"] and not r["candidate_label"].startswith("candidate:")
        for r in labelled
    ), out["reasons"]
    # The real entry point (see the module docstring).
    text = run_cli_process(*args)
    assert text.returncode == code
    for r in want:  # every reason, with its suite and code, as compare prints them
        assert f"{r['suite']} · {r['code']}: {r['message']}" in text.stderr, text.stderr
    rest = httpx.get(f"{dash_server.url}/api/v1/runs/{run}/gate",
                     headers={"Authorization": f"Bearer {dash_server.token}"}, timeout=60)
    assert rest.status_code == 200, rest.text
    got = rest.json()
    assert got["exit_code"] == code
    assert [{k: v for k, v in r.items() if v is not None} for r in stored(got["reasons"])] == want
    assert [r.get("candidate_label") for r in got["reasons"]] == [
        r.get("candidate_label") for r in out["reasons"]
    ]


# ---------------------------------------------------------------------------- all samples


def test_samples_browser_pages_and_filters_from_the_store(
    dash_store: Store, loop_runs: LoopRuns, synthetic_run: SyntheticRun
) -> None:
    run = loop_runs.main
    stored = dash_store.get_samples(run, suite="reasoning-smoke")
    items = sorted({s.item_id for s in stored})
    first = svc.samples_view(dash_store, run, "reasoning-smoke", limit=4)
    assert first["total"] == len(items) == 6 and len(first["rows"]) == 4
    assert first["next"] == 4 and first["previous"] is None
    rest = svc.samples_view(dash_store, run, "reasoning-smoke", offset=4, limit=4)
    assert rest["next"] is None and rest["previous"] == 0
    assert sorted(r["item_id"] for r in first["rows"] + rest["rows"]) == items
    # Both sides' outputs (the loopback servers' known answers), the prompt, the expected answer.
    by_key = {(s.endpoint, s.item_id): s for s in stored}
    for r in first["rows"]:
        assert r["baseline"]["output"] == "OK" == by_key[("baseline", r["item_id"])].output
        assert r["candidate"]["output"] == "A" * 24
        assert r["prompt"] and r["expected"] is not None
        assert r["outcome"] == "unchanged"  # both wrong: "OK" is never the answer
    # Slices are the kind's own (family/level), each item in exactly one.
    per_slice = [svc.samples_view(dash_store, run, "reasoning-smoke", slice_=sl)["total"]
                 for sl in first["slices"]]
    assert sum(per_slice) == 6 and len(first["slices"]) >= 1
    assert svc.samples_view(dash_store, run, "reasoning-smoke", outcome="regression")["total"] == 0
    # Determinism has repeats: one row per (item, repeat); not scored right/wrong.
    det = svc.samples_view(dash_store, run, "determinism-smoke", limit=200)
    n_det = len({(s.item_id, s.repeat) for s in dash_store.get_samples(run, suite="determinism-smoke")})
    assert det["total"] == n_det and set(det["counts"]) == {"scored"}
    # Logprobs where the kind stores them (Suite.sample_logprobs): determinism asks for them and
    # the loopback servers' chat answers carry none, which every sample says; reasoning keeps
    # no logprobs at all. (Real logprobs: tests/dashboard/test_plugin_kind.py.)
    sides = [r[k] for r in det["rows"] for k in ("baseline", "candidate") if r[k]]
    summaries = [x["logprobs"]["summary"] for x in sides if x["logprobs"]]
    assert summaries and all(sm == [["logprobs", "asked for, none returned"]] for sm in summaries)
    assert all(r[k]["logprobs"] is None for r in first["rows"] for k in ("baseline", "candidate"))
    # Mixed outcomes (the stored synthetic run: half its reasoning items flipped).
    mixed = svc.samples_view(dash_store, synthetic_run.id, "reasoning-smoke")
    assert mixed["counts"] == {"regression": 4, "unchanged": 4}
    only = svc.samples_view(dash_store, synthetic_run.id, "reasoning-smoke", outcome="regression")
    assert only["total"] == 4 and {r["outcome"] for r in only["rows"]} == {"regression"}
    assert {r["candidate"]["score"] for r in only["rows"]} == {0.0}
    # Search: an item's id, or either side's output, case-insensitive; wildcards are literal.
    one = items[0]
    found = [r["item_id"] for r in svc.samples_view(dash_store, run, "reasoning-smoke",
                                                    query=one.upper())["rows"]]
    assert one in found and all(one in f for f in found) and len(found) < 6
    assert svc.samples_view(dash_store, run, "reasoning-smoke", query="ok")["total"] == 6
    assert svc.samples_view(dash_store, run, "reasoning-smoke", query="aaaa")["total"] == 6
    assert svc.samples_view(dash_store, run, "reasoning-smoke", query="%")["total"] == 0
    assert svc.samples_view(dash_store, run, "reasoning-smoke", query="O_")["total"] == 0
    with pytest.raises(svc.NotFound):
        svc.samples_view(dash_store, run, "no-such-suite")
    with pytest.raises(svc.NotFound):
        svc.samples_view(dash_store, run, "reasoning-smoke", role="candidate:7")


def test_samples_page_in_chromium(
    page: Watched, dash_server: Server, loop_runs: LoopRuns, shot: Any
) -> None:
    run = loop_runs.main
    base, cand = _labels(loop_runs)
    _open(page, f"{dash_server.url}/runs/{run}/suites/reasoning-smoke")
    page.page.click("#all-samples")
    page.page.wait_for_selector("#samples")
    rows = page.page.locator("tr[data-sample]")
    assert rows.count() == 6
    assert cand in page.page.inner_text("h1") and base in page.page.inner_text("h1")
    rows.first.locator("summary").click()
    opened = rows.first.locator("div.sample")
    assert opened.is_visible()
    text = opened.inner_text()
    assert "Prompt" in text and "OK" in text and "A" * 24 in text
    page.page.goto(f"{dash_server.url}/runs/{run}/suites/reasoning-smoke/samples?limit=4")
    assert page.page.locator("tr[data-sample]").count() == 4
    page.page.click("#next-page")
    page.page.wait_for_load_state("networkidle")
    assert page.page.locator("tr[data-sample]").count() == 2
    shot(page.page, "samples")
    # A kind that stores logprobs shows them in the opened sample (here: none came back).
    _open(page, f"{dash_server.url}/runs/{run}/suites/determinism-smoke/samples?limit=4")
    row = page.page.locator("tr[data-sample]").first
    row.locator("summary").click()
    lp = row.locator("[data-logprobs]")
    assert lp.count() == 2 and lp.first.is_visible()
    assert "asked for, none returned" in lp.first.inner_text()
    _clean(page, "samples")


# ---------------------------------------------------------------------------- layout, theme


def _narrow(browser: Any, state: dict[str, Any], **kw: Any) -> Watched:
    context = browser.new_context(storage_state=state, viewport={"width": 800, "height": 900},
                                  **kw)
    return watch(context.new_page())


def test_gates_table_fits_800px_with_its_links_on_screen(
    browser: Any, signed_in_state: dict[str, Any], dash_server: Server, loop_runs: LoopRuns,
    shot: Any,
) -> None:
    w = _narrow(browser, signed_in_state)
    try:
        _open(w, f"{dash_server.url}/runs/{loop_runs.main}")
        p = w.page
        width = p.evaluate("document.getElementById('gates').getBoundingClientRect().width")
        page_width = p.evaluate("document.documentElement.scrollWidth")
        assert width <= 800 and page_width <= 800, (width, page_width)
        links = p.locator("#gates td.drill a")
        assert links.count() == 2 * len(LOOP_SUITES) + 1  # details + samples; flips: reasoning
        for i in range(links.count()):
            box = links.nth(i).bounding_box()
            assert links.nth(i).is_visible() and box is not None
            assert box["x"] >= 0 and box["x"] + box["width"] <= 800, box
        # Every other wide table scrolls inside its own box, never the page.
        for url in (f"/runs/{loop_runs.main}/suites/reasoning-smoke/samples", "/"):
            _open(w, dash_server.url + url)
            assert p.evaluate("document.documentElement.scrollWidth") <= 800, url
        _open(w, f"{dash_server.url}/runs/{loop_runs.main}")
        shot(p, "run-800px")
        _clean(w, "run at 800 px")
    finally:
        w.page.context.close()
    # At 1280 px it stays a table.
    wide = browser.new_context(storage_state=signed_in_state, viewport={"width": 1280, "height": 900})
    try:
        p = wide.new_page()
        p.goto(f"{dash_server.url}/runs/{loop_runs.main}", wait_until="networkidle")
        assert p.evaluate("getComputedStyle(document.getElementById('gates')).display") == "table"
    finally:
        wide.close()


def _luminance(css: str) -> float:
    """WCAG 2.x relative luminance of an ``rgb(...)``/``rgba(...)`` colour."""
    r, g, b = (int(float(x)) for x in css[css.index("(") + 1:css.index(")")].split(",")[:3])

    def ch(v: int) -> float:
        c = v / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * ch(r) + 0.7152 * ch(g) + 0.0722 * ch(b)


def _contrast(a: str, b: str) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_dark_theme_follows_the_system_preference(
    browser: Any, signed_in_state: dict[str, Any], dash_server: Server, loop_runs: LoopRuns,
    shot: Any,
) -> None:
    style = "e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]"
    seen = {}
    for scheme in ("light", "dark"):
        w = _narrow(browser, signed_in_state, color_scheme=scheme)
        try:
            _open(w, f"{dash_server.url}/runs/{loop_runs.main}")
            fg, bg = w.page.eval_on_selector("body", style)
            if bg in ("rgba(0, 0, 0, 0)", "transparent"):
                bg = "rgb(255, 255, 255)"  # the canvas of an unstyled page
            seen[scheme] = (fg, bg)
            # WCAG AA for body text: contrast ≥ 4.5 (Understanding SC 1.4.3).
            assert _contrast(fg, bg) >= 4.5, (scheme, fg, bg)
            muted = w.page.eval_on_selector(".muted", "e => getComputedStyle(e).color")
            assert _contrast(muted, bg) >= 4.5, (scheme, muted, bg)
            link = w.page.eval_on_selector("#gates td.drill a", "e => getComputedStyle(e).color")
            assert _contrast(link, bg) >= 4.5, (scheme, link, bg)
            shot(w.page, f"run-{scheme}")
            _clean(w, scheme)
        finally:
            w.page.context.close()
    assert _luminance(seen["dark"][1]) < 0.05 < _luminance(seen["light"][1])
    assert _luminance(seen["dark"][0]) > 0.5 > _luminance(seen["light"][0])


# ---------------------------------------------------------------------------- trends


def _chart_option(w: Watched) -> dict[str, Any]:
    opt: dict[str, Any] = w.page.evaluate(
        "() => { const o = echarts.getInstanceByDom(document.querySelector('[data-chart=trend]'))"
        ".getOption(); return {x: o.xAxis[0], y: o.yAxis[0], series: o.series.map(s => "
        "({name: s.name, type: s.type, data: s.data, markLine: s.markLine || null}))}; }"
    )
    return opt


def test_trend_has_a_time_axis_the_margin_in_range_and_a_ci_for_one_run(
    page: Watched, dash_server: Server, dash_store: Store, loop_runs: LoopRuns, shot: Any
) -> None:
    from urllib.parse import urlencode

    q = {"baseline": loop_runs.baseline, "candidate": loop_runs.candidate,
         "suite": "determinism-smoke"}
    t = svc.trend(dash_store, baseline_url=loop_runs.baseline, candidate_url=loop_runs.candidate,
                  suite="determinism-smoke")
    (point,) = t["points"]  # one run of this suite
    # unstable_rate: lower is better, so the margin sits above 0 (Δ = candidate − baseline).
    assert point["boundary"] == pytest.approx(0.1)
    assert point["boundary"] is not None and t["y_range"][0] < point["boundary"] < t["y_range"][1]
    _open(page, f"{dash_server.url}/trends?{urlencode(q)}")
    opt = _chart_option(page)
    assert opt["x"]["type"] == "time"
    assert opt["y"]["min"] <= point["boundary"] <= opt["y"]["max"]
    assert opt["y"]["min"] <= min(point["ci_low"], point["delta"])
    assert opt["y"]["max"] >= max(point["ci_high"], point["delta"])
    series = {s["name"]: s for s in opt["series"]}
    assert series["Δ"]["markLine"]["data"][0]["yAxis"] == pytest.approx(point["boundary"])
    (whisker,) = series["CI"]["data"]  # a single run still has its interval drawn
    assert whisker[1:3] == [point["ci_low"], point["ci_high"]]
    assert "determinism" not in (t["y_name"] or "") and t["metric"] in t["y_name"]
    shot(page.page, "trend-single")
    # The pair picker and the heading name the endpoints by their labels, not their URLs.
    base, cand = _labels(loop_runs)
    picked = page.page.locator("#pick option:checked").inner_text()
    assert picked.startswith(f"determinism-smoke · {base} → {cand}"), picked
    assert "http" not in page.page.inner_text("#pick") + page.page.inner_text("ul.pairs")
    assert f"{base} → {cand}" in page.page.inner_text("main h2")
    # Two runs of reasoning-smoke: on the time axis at their own times, oldest first.
    q["suite"] = "reasoning-smoke"
    _open(page, f"{dash_server.url}/trends?{urlencode(q)}")
    opt = _chart_option(page)
    xs = [d["value"][0] for d in {s["name"]: s for s in opt["series"]}["Δ"]["data"]]
    runs_ = [dash_store.get_run(r) for r in (loop_runs.main, loop_runs.again)]
    want = [int(r.created_at.timestamp() * 1000) for r in runs_ if r is not None]
    assert [abs(a - b) < 1000 for a, b in zip(xs, want, strict=True)] == [True, True]
    _clean(page, "trends")


# ---------------------------------------------------------------------------- progress


def test_cli_bars_and_the_stored_record_say_which_suite_of_how_many(
    tmp_path: Any, dash_store: Store, loop_runs: LoopRuns
) -> None:
    from tests.fixtures.faults import base_url, fault_server

    for name in ("tiny-a", "tiny-b"):
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\nkind: reasoning\nseed: 3\nparams: {{n: 4, max_tokens: 8}}\n")
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    with fault_server() as srv:
        url = base_url(srv, "ok")
        # A process of its own: `compare` calls asyncio.run, which fails in this one while the
        # package's Chromium (Playwright's sync API) keeps an event loop running in the thread.
        r = subprocess.run(
            [sys.executable, "-m", "evalsvc.cli.main", "compare", url, url,
             "--suite", str(tmp_path / "tiny-a.yaml"), "--suite", str(tmp_path / "tiny-b.yaml"),
             "--database-url", db, "--json", str(tmp_path / "r.json")],
            capture_output=True, text=True, timeout=600,
        )
    assert r.returncode in (0, 1, 3), r.stderr
    host = url.split("/")[2]
    assert f"suite 1/2 tiny-a · baseline {host}" in r.stderr, r.stderr
    assert f"suite 2/2 tiny-b · candidate {host}" in r.stderr, r.stderr
    # The record the dashboard reads keeps the run's suites in order (real runner, in-process).
    run = dash_store.get_run(loop_runs.main)
    assert run is not None and (run.progress or {}).get("suites") == LOOP_SUITES
    p = svc.run_page(dash_store, loop_runs.main)["progress"]
    per_side = sum(1 for x in dash_store.get_samples(loop_runs.main, suite="determinism-smoke")
                   if x.endpoint == "baseline")  # its repeats count: what the runner planned
    assert p["summary"] == f"suite 2 of 2 · determinism-smoke {per_side}/{per_side} items"
    assert p["fraction"] == 1.0
