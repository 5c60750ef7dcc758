"""Your own data in every view: a ``dataset`` run of the real runner (``dataset_run``: a JSONL
file of your prompts, a reference column and a slice column, against loopback servers of known
behaviour, so it runs on any host) shows each item's prompt, reference and slice on the samples
and flips pages, per-slice rates on the suite page and a ``prompt`` column in ``evalsvc
export``; the flips page opens on the candidate that has flips. And the layout: the run page
fits a 1280 px window, and the runs list keeps the verdict on a 390 px phone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.services import dashboard as svc
from tests.fixtures.cli import run_cli

from .conftest import LoopRuns, Server, Watched, in_thread, watch
from .test_pages import _clean, _open

pytestmark = pytest.mark.timeout(900)

SUITE = "own-data"
#: Four rows per category; the reference is what the loopback baseline answers ("OK").
ROWS = [{"id": f"q{i}", "question": f"Reply with OK, case {i}.", "answer": "OK",
         "category": "billing" if i % 2 else "returns"} for i in range(8)]


@dataclass
class DatasetRun:
    id: str
    candidates: list[str]
    """``candidate:0`` answers like the baseline (no flips); ``candidate:1`` never does."""


@pytest.fixture(scope="module")
def dataset_run(dash_store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatasetRun]:
    from evalsvc.services import runs
    from tests.fixtures.faults import base_url, fault_server

    root = tmp_path_factory.mktemp("own-data")
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (root / f"{SUITE}.yaml").write_text(
        f"name: {SUITE}\nkind: dataset\nparams:\n  path: rows.jsonl\n  id_column: id\n"
        "  n: 8\n  prompt: {template: 'Question: {question}'}\n  reference: answer\n"
        "  scorer: exact\n  slices: [category]\n  max_tokens: 16\n"
    )
    with fault_server() as a, fault_server() as b, fault_server() as c:
        c.long_chars = 12
        spec = RunSpec(
            baseline=EndpointRef(url=base_url(a, "ok"), name="own-base"),
            candidates=[EndpointRef(url=base_url(b, "ok"), name="same"),
                        EndpointRef(url=base_url(c, "long"), name="broken")],
            suites=[str(root / f"{SUITE}.yaml")],
            options=RunOptions(concurrency=4),
            labels={"source": "own-data"},
        )
        run_id = str(in_thread(runs.compare, spec, store=dash_store)["run_id"])
    yield DatasetRun(run_id, ["candidate:0", "candidate:1"])


def test_samples_and_flips_show_prompt_reference_and_slice(
    dash_store: Store, dataset_run: DatasetRun
) -> None:
    run = dataset_run.id
    view = svc.samples_view(dash_store, run, SUITE, role="candidate:1", limit=200)
    assert view["total"] == 8 and view["counts"] == {"regression": 8}
    assert view["slices"] == ["category billing", "category returns"]
    by_item = {r["item_id"]: r for r in view["rows"]}
    for row in ROWS:
        shown = by_item[row["id"]]
        assert shown["prompt"] == f"[user] Question: {row['question']}"
        assert shown["expected"] == "OK"
        assert shown["slice"] == f"category {row['category']}"
    one_slice = svc.samples_view(dash_store, run, SUITE, role="candidate:1",
                                 slice_="category billing")
    assert one_slice["total"] == 4
    # The prompt is stored once per item (with the baseline's answer), not once per endpoint.
    stored = dash_store.get_samples(run, suite=SUITE)
    assert {s.endpoint for s in stored if "prompt" in s.data} == {"baseline"}

    # The flips page opens on the candidate that has flips, and says how many each has.
    flips = svc.flips_view(dash_store, run)
    assert flips["role"] == "candidate:1"
    assert flips["role_flips"] == {"candidate:0": 0, "candidate:1": 8}
    assert flips["total"] == 8 and flips["slices"] == ["category billing", "category returns"]
    first = flips["rows"][0]
    assert first["prompt"].startswith("[user] Question: Reply with OK, case ")
    assert first["expected"] == "OK" and first["slice"].startswith("category ")
    assert svc.flips_view(dash_store, run, role="candidate:0")["total"] == 0
    # A search finds items by the text of their prompt.
    assert svc.flips_view(dash_store, run, query="case 3")["total"] == 1


def test_the_suite_page_has_per_slice_tables(dash_store: Store, dataset_run: DatasetRun) -> None:
    view = svc.suite_view(dash_store, dataset_run.id, SUITE, "candidate:1")
    rows = {r["label"]: r for r in view["kind_view"]["by_slice"]}
    assert set(rows) == {"billing", "returns"}
    assert all(r["n"] == 4 and r["baseline"] == 1.0 and r["candidate"] == 0.0
               and r["correct_to_incorrect"] == 4 for r in rows.values())
    assert view["template"] is not None


def test_export_has_a_prompt_column(dataset_run: DatasetRun, dash_db_url: str,
                                    tmp_path: Path) -> None:
    out = tmp_path / "own.csv"
    result = run_cli("export", dataset_run.id, "--format", "csv", "-o", str(out),
                     "--database-url", dash_db_url)
    assert result.returncode == 0, result.stderr
    frame = pd.read_csv(out)
    assert list(frame.columns).index("prompt") == list(frame.columns).index("output") - 1
    assert len(frame) == 8 * 3  # every endpoint's row carries its item's prompt
    expected = {r["id"]: f"[user] Question: {r['question']}" for r in ROWS}
    assert all(p == expected[i] for i, p in zip(frame["item_id"], frame["prompt"], strict=True))


def test_own_data_pages_in_chromium(
    page: Watched, dash_server: Server, dataset_run: DatasetRun, shot: Any
) -> None:
    run = dataset_run.id
    _open(page, f"{dash_server.url}/runs/{run}/suites/{SUITE}?candidate=candidate:1")
    tables = page.page.locator("table.by-slice")
    assert tables.count() == 1
    text = tables.first.inner_text()
    assert "billing" in text and "returns" in text and "category" in text
    _open(page, f"{dash_server.url}/runs/{run}/suites/{SUITE}/samples?candidate=candidate:1")
    row = page.page.locator("tr[data-sample]").first
    assert "category " in row.inner_text()
    row.locator("summary").click()
    opened = row.locator("div.sample").inner_text()
    assert "Question: Reply with OK, case" in opened and "expected OK" in opened
    assert "Prompt not stored" not in opened
    _open(page, f"{dash_server.url}/runs/{run}/flips")
    assert page.page.locator("article[data-flip]").count() == 8
    assert "broken" in page.page.locator("select[name=candidate] option:checked").inner_text()
    flip = page.page.locator("article[data-flip]").first
    flip.locator("details.prompt summary").click()
    assert "Question: Reply with OK, case" in flip.locator("pre.prompt").inner_text()
    assert "expected OK" in flip.locator("header").inner_text()
    shot(page.page, "own-data-flips")
    _clean(page, "own data pages")


def test_the_run_page_fits_1280px_and_390px_and_the_runs_list_keeps_the_verdict_at_390px(
    browser: Any, signed_in_state: dict[str, Any], dash_server: Server,
    dataset_run: DatasetRun, loop_runs: LoopRuns, shot: Any,
) -> None:
    wide = watch(browser.new_context(storage_state=signed_in_state,
                                     viewport={"width": 1280, "height": 900}).new_page())
    try:
        for run in (dataset_run.id, loop_runs.main):
            _open(wide, f"{dash_server.url}/runs/{run}")
            overflow = wide.page.evaluate("document.documentElement.scrollWidth")
            # What sticks out, for the failure message.
            wider = wide.page.evaluate(
                "[...document.querySelectorAll('main *')].filter(e => "
                "e.getBoundingClientRect().right > 1280).slice(0, 12).map(e => e.tagName + ' '"
                " + e.textContent.trim().slice(0, 30) + ' w' + Math.round("
                "e.getBoundingClientRect().width))")
            assert overflow <= 1280, f"{run} {overflow} {' | '.join(wider)}"
        shot(wide.page, "run-1280px")
        _clean(wide, "run page at 1280 px")
    finally:
        wide.page.context.close()
    phone = watch(browser.new_context(storage_state=signed_in_state, is_mobile=True,
                                      viewport={"width": 390, "height": 844}).new_page())
    try:
        _open(phone, f"{dash_server.url}/")
        p = phone.page
        row = p.locator(f"[data-run='{dataset_run.id}']").first
        verdict = row.locator("[data-verdict] .badge")
        assert verdict.is_visible()
        box = verdict.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
        assert p.evaluate("document.documentElement.scrollWidth") <= 390
        shot(p, "runs-390px")
        # The run page fits the phone too (it was 403 px wide: tables scroll inside their box).
        for run in (dataset_run.id, loop_runs.main):
            _open(phone, f"{dash_server.url}/runs/{run}")
            wider = p.evaluate(
                "[...document.querySelectorAll('main *')].filter(e => "
                "e.getBoundingClientRect().right > 390 && !e.closest('.scroll')).slice(0, 12)"
                ".map(e => e.tagName + '.' + e.className + ' ' + e.textContent.trim().slice(0, 30)"
                " + ' w' + Math.round(e.getBoundingClientRect().width))")
            width = p.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{run} {width} {' | '.join(wider)}"
        shot(p, "run-390px")
        _clean(phone, "runs list and run page at 390 px")
    finally:
        phone.page.context.close()


def test_a_stored_prompt_is_bounded_like_an_output() -> None:
    import asyncio

    from evalsvc.domain import Sample
    from evalsvc.suites.kinds.dataset import _with_prompt

    kept: list[Sample] = []

    async def collect(sample: Sample) -> None:
        kept.append(sample)

    chat = [{"role": "system", "content": "s" * 10}, {"role": "user", "content": "u" * 10}]
    emit = _with_prompt(collect, {"a": "short", "b": "x" * 50, "c": chat}, 20)

    async def send() -> None:
        for item, repeat in (("a", 0), ("a", 1), ("b", 0), ("c", 0)):
            await emit(Sample(suite="s", item_id=item, endpoint="baseline", repeat=repeat,
                              output="", data={"reference": "OK"}))

    in_thread(asyncio.run, send())  # Playwright keeps a loop running on this thread
    a0, a1, b, c = kept
    assert a0.data == {"reference": "OK", "prompt": "short"}
    assert "prompt" not in a1.data  # once per item: with its first answer
    assert b.data["prompt"] == "x" * 20 and b.data["prompt_truncated"] is True
    assert b.data["prompt_chars"] == 50
    as_text = "[system] " + "s" * 10 + "\n\n[user] " + "u" * 10  # the views' layout
    assert c.data["prompt"] == as_text[:20] and c.data["prompt_chars"] == len(as_text)
