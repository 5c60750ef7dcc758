"""The web dashboard in a real browser (system Chromium through Playwright) against a real
uvicorn server on loopback whose store holds real runs of the local endpoints.

Every page must render with no console error, no page error, no failed request and no dialog;
screenshots land in ``out/screenshots/``.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec, RunStatus
from evalsvc.services import runs as run_service

from .conftest import (
    HOSTILE_BASELINE,
    HOSTILE_CANDIDATE,
    HOSTILE_NAME,
    RealRuns,
    Server,
    SyntheticRun,
    Watched,
    watch,
)

pytestmark = pytest.mark.timeout(900)


def _open(w: Watched, url: str) -> None:
    w.page.goto(url, wait_until="networkidle")
    # Every chart container on the page was drawn by the chart library.
    pending = w.page.eval_on_selector_all(
        "[data-chart]", "els => els.filter(e => e.dataset.rendered !== '1').map(e => e.dataset.chart)"
    )
    assert pending == [], f"charts not drawn on {url}: {pending}"


def _clean(w: Watched, url: str) -> None:
    assert w.problems() == [], f"{url}: {w.problems()}"


def test_login_sets_an_httponly_strict_cookie_and_refuses_bad_tokens(
    browser: Any, dash_server: Server, signed_in_state: dict[str, Any]
) -> None:
    cookie = next(c for c in signed_in_state["cookies"] if c["name"] == "evalsvc_token")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    context = browser.new_context()
    w = watch(context.new_page())
    w.allowed_status.add(401)
    w.page.goto(dash_server.url + "/runs/abc?x=1")
    assert "/login" in w.page.url and "next=" in w.page.url
    w.page.fill("input[name=token]", "evs_not-a-token")
    w.page.click("button[type=submit]")
    assert "invalid or revoked" in w.page.inner_text("#login-error")
    # Scripts cannot read the session cookie.
    assert "evalsvc_token" not in w.page.evaluate("document.cookie")
    assert w.console_errors == [] or all("401" in e for e in w.console_errors)
    # The JSON endpoint answers 401 instead of a redirect.
    resp = w.page.request.get(dash_server.url + "/ui/live?ids=abc")
    assert resp.status == 401
    context.close()


@pytest.mark.endpoints
def test_every_page_of_real_runs_renders_cleanly(
    page: Watched, dash_server: Server, real_runs: RealRuns, dash_store: Store, shot: Any
) -> None:
    base = dash_server.url
    run = real_runs.main
    suites = {s["name"]: s["kind"] for s in dash_store.get_suite_snapshots(run)}
    assert set(suites.values()) == {"needle", "reasoning", "determinism", "drift", "speed", "lmeval"}
    pages = {
        "runs": f"{base}/",
        "run": f"{base}/runs/{run}",
        **{kind: f"{base}/runs/{run}/suites/{name}?candidate=candidate:0"
           for name, kind in suites.items()},
        "flips": f"{base}/runs/{run}/flips",
        "trends": f"{base}/trends",
        "compare": f"{base}/compare?a={run}&b={real_runs.again}",
    }
    for name, url in pages.items():
        _open(page, url)
        shot(page.page, name)
        _clean(page, url)
    # The run page shows one gate row per suite, each with its CI bar and margin line.
    _open(page, pages["run"])
    rows = page.page.locator("#gates tbody tr")
    assert rows.count() == 6
    bars = page.page.locator("#gates svg.cibar")
    assert bars.count() >= 4  # a gate without a CI (e.g. no comparable data) shows "—"
    assert page.page.locator("#gates svg.cibar line.margin").count() == bars.count()
    # Provenance side by side: baseline and candidate columns, the differing rows marked
    # (the served model names always differ).
    assert page.page.locator("#provenance thead th").count() == 3
    assert page.page.locator("#provenance tr.differs").count() >= 1
    # Speed shows KV capacity; drift its percentiles; reasoning its families.
    _open(page, pages["speed"])
    assert page.page.locator("#kv").count() == 1 and page.page.locator("#levels tbody tr").count() == 2
    _open(page, pages["drift"])
    assert "mean" in page.page.inner_text("#drift-summary")
    _open(page, pages["reasoning"])
    assert page.page.locator("#by-task tbody tr").count() >= 1
    _open(page, pages["determinism"])
    assert page.page.locator("#conditions tbody tr").count() >= 1
    _clean(page, "detail pages")


@pytest.mark.endpoints
def test_real_needle_heatmap_has_one_cell_per_length_and_depth(
    page: Watched, dash_server: Server, real_runs: RealRuns, dash_store: Store
) -> None:
    name = next(s["name"] for s in dash_store.get_suite_snapshots(real_runs.main)
                if s["kind"] == "needle")
    base = [s for s in dash_store.get_samples(real_runs.main, suite=name)
            if s.endpoint == "baseline" and s.score is not None]
    lengths = {int(s.data["context_length"]) for s in base}
    depths = {float(s.data["depth"]) for s in base}
    _open(page, f"{dash_server.url}/runs/{real_runs.main}/suites/{name}")
    for which in ("baseline", "candidate", "delta"):
        cells = page.page.locator(f"[data-heatmap={which}] td[data-cell]")
        assert cells.count() == len(lengths) * len(depths)
    _clean(page, "real needle")


def test_synthetic_heatmap_marks_exactly_the_significant_cell(
    page: Watched, dash_server: Server, synthetic_run: SyntheticRun, shot: Any
) -> None:
    _open(page, f"{dash_server.url}/runs/{synthetic_run.id}/suites/needle-synthetic")
    n = len(synthetic_run.lengths) * len(synthetic_run.depths)
    for which in ("baseline", "candidate", "delta"):
        assert page.page.locator(f"[data-heatmap={which}] td[data-cell]").count() == n
    marked = page.page.locator("[data-heatmap=delta] td[data-significant]")
    assert marked.count() == 1
    # It is the cell in the row of the lost length and the column of the lost depth.
    length, depth = synthetic_run.significant
    row = page.page.locator("[data-heatmap=delta] tbody tr", has_text=str(length))
    col = synthetic_run.depths.index(depth)
    assert row.locator("td[data-cell]").nth(col).get_attribute("data-significant") is not None
    assert "-100" in marked.inner_text()
    # The candidate's name is in the page's JSON data and in its title: both stay text.
    data = json.loads(page.page.eval_on_selector("#page-data", "e => e.textContent"))
    assert data["candidate"] == HOSTILE_NAME and HOSTILE_NAME in page.page.inner_text("h1")
    assert page.page.evaluate("typeof window.__xss") == "undefined" and page.dialogs == []
    shot(page.page, "needle-significant")
    _clean(page, "synthetic needle")


def test_hostile_model_output_is_shown_as_text_and_never_runs(
    page: Watched, dash_server: Server, synthetic_run: SyntheticRun, shot: Any
) -> None:
    url = f"{dash_server.url}/runs/{synthetic_run.id}/flips?suite=reasoning-smoke"
    _open(page, url)
    flips = page.page.locator("article[data-flip]")
    assert flips.count() == 4  # every other of the 8 items flipped
    text = page.page.inner_text("main")
    assert "<script>window.__xss = 1; alert('xss-b')</script>" in text
    assert '<img src=x onerror="window.__xss = 2' in text
    assert "</script><script>window.__xss = 3</script>" in text
    # Nothing ran: no dialog, no global set, no element created from the outputs.
    page.page.wait_for_timeout(300)
    assert page.dialogs == []
    assert page.page.evaluate("typeof window.__xss") == "undefined"
    assert page.page.locator("article img").count() == 0
    assert page.page.locator("article script").count() == 0
    # The first divergent token is highlighted, and prompts were rebuilt from the suite's seed.
    assert page.page.locator("article mark.first-diff").count() == 8
    assert page.page.locator("article pre.prompt").count() == 4
    # Direction filter: only regressions here.
    page.page.select_option("select[name=direction]", "improvement")
    page.page.click("#flip-filters button[type=submit]")
    page.page.wait_for_load_state("networkidle")
    assert page.page.locator("article[data-flip]").count() == 0
    _open(page, url + "&direction=regression")
    shot(page.page, "flips")
    assert HOSTILE_BASELINE and HOSTILE_CANDIDATE  # the strings the fixture stored
    _clean(page, url)


def _row_ids(w: Watched) -> list[str]:
    ids: list[str] = w.page.eval_on_selector_all(
        "#runs tbody tr[data-run]", "rows => rows.map(r => r.dataset.run)"
    )
    return ids


def test_filters_and_keyset_pagination(
    page: Watched, dash_server: Server, many_runs: dict[str, Any], synthetic_run: SyntheticRun,
    shot: Any,
) -> None:
    base = dash_server.url
    _open(page, f"{base}/?label=team%3Dalpha")
    assert page.page.inner_text("#total") == "40 matching"
    assert sorted(_row_ids(page)) == sorted(many_runs["alpha"])
    # 120 labelled runs: 50 + 50 + 20, disjoint, newest first, and back again.
    _open(page, f"{base}/?label=bulk%3Dyes")
    assert page.page.inner_text("#total") == "120 matching"
    first = _row_ids(page)
    page.page.click("#older")
    page.page.wait_for_load_state("networkidle")
    second = _row_ids(page)
    page.page.click("#older")
    page.page.wait_for_load_state("networkidle")
    third = _row_ids(page)
    assert [len(first), len(second), len(third)] == [50, 50, 20]
    assert first + second + third == list(reversed(many_runs["ids"]))
    assert page.page.locator("#older").count() == 0
    page.page.click("#newer")
    page.page.wait_for_load_state("networkidle")
    assert _row_ids(page) == second
    page.page.click("#newer")
    page.page.wait_for_load_state("networkidle")
    assert _row_ids(page) == first and page.page.locator("#newer").count() == 0
    # The filter form: verdict and status selects, an endpoint URL.
    _open(page, f"{base}/?label=bulk%3Dyes")
    page.page.select_option("select[name=verdict]", "pass")
    page.page.select_option("select[name=status]", "completed")
    page.page.fill("input[name=endpoint]", "http://127.0.0.1:7/v3")
    page.page.click("#filters button[type=submit]")
    page.page.wait_for_load_state("networkidle")
    assert page.page.inner_text("#total") == "60 matching"
    verdicts = page.page.eval_on_selector_all("#runs [data-verdict]", "e => e.map(x => x.innerText)")
    assert set(verdicts) == {"pass"}
    _open(page, f"{base}/?limit=25")
    shot(page.page, "runs-bulk", full=False)
    # Dates: nothing was created tomorrow; suite: the suites a run executed.
    _open(page, f"{base}/?from=2999-01-01")
    assert page.page.inner_text("#total") == "0 matching"
    _open(page, f"{base}/?suite=needle-synthetic")
    assert _row_ids(page) == [synthetic_run.id]
    # A bad value is reported, not a server error.
    _open(page, f"{base}/?status=bogus&label=nokey")
    assert page.page.locator(".problem").count() == 2
    _clean(page, "filters")


@pytest.mark.endpoints
def test_trend_point_click_opens_its_run(
    page: Watched, dash_server: Server, real_runs: RealRuns, dash_store: Store, shot: Any
) -> None:
    from urllib.parse import urlencode

    from evalsvc.services import dashboard as views

    q = urlencode({"baseline": real_runs.baseline, "candidate": real_runs.candidate,
                   "suite": "reasoning-smoke"})
    # The pair's runs so far: real_runs' two, plus the live-page test's if it ran first.
    points = views.trend(dash_store, baseline_url=real_runs.baseline,
                         candidate_url=real_runs.candidate, suite="reasoning-smoke")["points"]
    assert len(points) >= 2 and real_runs.again in {p["run_id"] for p in points}
    _open(page, f"{dash_server.url}/trends?{q}")
    assert page.page.locator("#trend-points tbody tr").count() == len(points)
    shot(page.page, "trends")
    x, y = page.page.evaluate(
        """() => {
          const el = document.querySelector('[data-chart=trend]');
          const c = echarts.getInstanceByDom(el);
          // The Δ series on the time axis: each point's value is [time in ms, Δ].
          const s = c.getOption().series.find((x) => x.name === 'Δ').data;
          const idx = c.getOption().series.findIndex((x) => x.name === 'Δ');
          const p = c.convertToPixel({seriesIndex: idx}, s[s.length - 1].value);
          const r = el.getBoundingClientRect();
          return [r.left + p[0], r.top + p[1]];
        }"""
    )
    page.page.mouse.click(x, y)
    page.page.wait_for_url(f"**/runs/{points[-1]['run_id']}")  # the newest point
    # These runs were not made by a schedule.
    _open(page, f"{dash_server.url}/trends?{q}")
    page.page.click("#scheduled-only")
    page.page.wait_for_load_state("networkidle")
    assert "No scheduled runs" in page.page.inner_text("main")
    _clean(page, "trends")


@pytest.mark.endpoints
def test_run_page_links_the_previous_run_of_the_pair(
    page: Watched, dash_server: Server, real_runs: RealRuns
) -> None:
    _open(page, f"{dash_server.url}/runs/{real_runs.again}")
    page.page.click("#compare-previous")
    page.page.wait_for_load_state("networkidle")
    assert f"a={real_runs.main}" in page.page.url and f"b={real_runs.again}" in page.page.url
    # The reasoning gate is in both runs; the other five (the smoke run's) only in the earlier one.
    assert page.page.locator("#compare-gates tbody tr").count() == 6
    _clean(page, "compare previous")


@pytest.mark.endpoints
def test_report_downloads(page: Watched, dash_server: Server, real_runs: RealRuns) -> None:
    base = f"{dash_server.url}/runs/{real_runs.main}/report"
    js = page.page.request.get(base + ".json")
    assert js.status == 200 and json.loads(js.text())["run_id"] == real_runs.main
    xml = page.page.request.get(base + ".xml")
    assert xml.status == 200 and xml.text().startswith("<?xml") and "<testsuites" in xml.text()
    md = page.page.request.get(base + ".md")
    assert md.status == 200 and md.text().startswith("# evalsvc report")


@pytest.mark.endpoints
def test_live_page_advances_while_a_worker_executes(
    page: Watched, dash_server: Server, real_runs: RealRuns, dash_store: Store,
    dash_db_url: str, shot: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Submitted runs are checked against the server-mode egress policy (docs/security.md): the
    # local endpoints are on loopback, which an operator allows explicitly.
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")
    spec = RunSpec(
        baseline=EndpointRef(url=real_runs.baseline),
        candidates=[EndpointRef(url=real_runs.candidate)],
        suites=["reasoning-smoke"],
        # Six items one at a time give the page several counts to show (ten cost 34 CPU-s of the
        # servers on an idle 2-core AVX-512 host: docs/benchmarks-log.md, "session 19").
        options=RunOptions(samples=6, concurrency=1),
        labels={"source": "dashboard-live"},
    )
    run = run_service.submit(spec, store=dash_store)
    _open(page, f"{dash_server.url}/runs/{run.id}")
    assert page.page.inner_text("[data-status]") == "queued"
    log = (tmp_path / "worker.log").open("wb")
    import os

    env = dict(os.environ, EVALSVC_DATABASE_URL=dash_db_url)
    worker = subprocess.Popen(
        [sys.executable, "-m", "evalsvc.cli.worker", "--once", "--poll", "0.2"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    seen: list[str] = []
    try:
        # Read in one step in the page: the live view reloads the page when the run finishes
        # (the gates replace the progress), so a count-then-read pair of calls could find the
        # element and then wait 30 s for one that never comes back (seen under `.ci/run`); a
        # read that meets the reload itself reads nothing.
        read_count = (
            "() => document.querySelector('#progress [data-count]')?.innerText ?? ''"
        )
        for _ in range(600):
            try:
                text = page.page.evaluate(read_count)
            except PlaywrightError:
                text = ""
            if text and (not seen or seen[-1] != text):
                seen.append(text)
                if len(seen) == 3:
                    shot(page.page, "live")
            if page.page.locator("#gates").count():
                break
            page.page.wait_for_timeout(250)
        page.page.wait_for_selector("#gates", timeout=300_000)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        log.close()
    # "suite 1 of 1 · reasoning-smoke 3/6 items": the count before the slash.
    done = [int(m.group(1)) for t in seen if (m := re.search(r"(\d+)/\d+ items", t))]
    # The page showed the counts climbing (several distinct values, increasing) before the
    # finished run's gates replaced the progress.
    assert len(set(done)) >= 3 and done == sorted(done), seen
    final = dash_store.get_run(run.id)
    assert final is not None and final.status == RunStatus.completed
    assert page.page.inner_text(".meta [data-status]") == "completed"
    # The runs of the real endpoints, for the docs.
    from urllib.parse import quote

    _open(page, f"{dash_server.url}/?endpoint={quote(real_runs.baseline, safe='')}")
    assert run.id in _row_ids(page)
    shot(page.page, "runs-list", full=False)
    _clean(page, "live")
