"""Fixtures of the dashboard's browser tests.

- ``dash_store``: one SQLite store for the session, holding
  * ``real_runs``: real runs of the local endpoints: the session's ``smoke_run`` (every kind at
    --samples 2, through the real CLI; ``tests/conftest.py``) and a second reasoning run of the
    same pair (``evalsvc.services.runs.compare``) for the trend and the comparison;
  * ``synthetic_run``: a run written through the store whose needle grid has one cell where the
    candidate lost every item (the one significant cell) and whose outputs are hostile HTML;
  * ``many_runs``: 120 stored runs with labels, for filters and pagination;
  * ``loop_runs``: runs of the real runner against loopback servers of known behaviour (any
    host: no model).
- ``dash_server``: the real API app (auth on) under uvicorn on loopback, over that store.
- ``browser``: the system Chromium (Debian's ``chromium``) driven by Playwright; the tests skip
  with a message when it is missing (``scripts/install-browser.sh`` installs it).
- ``page``: a signed-in page that records console errors, page errors, failed requests and
  dialogs; ``shot`` saves a screenshot under ``out/screenshots/``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, Provenance, RunOptions, RunSpec, RunStatus, Sample
from tests.fixtures.db import (  # noqa: F401  (pytest fixtures of test_service.py)
    db_url,
    pg_session_url,
    sqlite_template,
    store,
)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "out" / "screenshots"

HOSTILE_BASELINE = "<script>window.__xss = 1; alert('xss-b')</script> The answer is 42."
HOSTILE_CANDIDATE = (
    "<img src=x onerror=\"window.__xss = 2; alert('xss-c')\"> The answer is 41."
    "</script><script>window.__xss = 3</script>"
)

HOSTILE_NAME = "cand</script><script>window.__xss = 4</script>"


def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` on another thread: Playwright's sync API keeps an event loop running on
    this one, and the runner (``asyncio.run``) needs a thread without one."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def _require_browser() -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"dashboard browser tests need Debian's chromium at {CHROMIUM} "
                    "(run scripts/install-browser.sh)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("dashboard browser tests need playwright (pip install -e '.[dev]')")


@pytest.fixture(scope="session")
def dash_db_url(real_runs_db_url: str) -> str:
    """The session's store of real runs (``tests/conftest.py``), which the CLI's every-kind run
    (``smoke_run``) writes into too."""
    _require_browser()
    return real_runs_db_url


@pytest.fixture(scope="session")
def dash_store(dash_db_url: str) -> Iterator[Store]:
    opened = Store.from_url(dash_db_url)
    yield opened
    opened.close()


@dataclass
class RealRuns:
    baseline: str
    candidate: str
    main: str
    """The session's ``smoke_run``: needle, reasoning, determinism, drift, speed and lm-eval."""
    again: str
    """A later reasoning run of the same pair (trend, compare)."""
    durations: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="session")
def real_runs(smoke_run: Any, dash_store: Store) -> RealRuns:
    """Real runs against the local endpoints, kept tiny: the session's ``smoke_run`` (every kind
    through the CLI, into this store) and a later reasoning run of the same pair."""
    from evalsvc.services import runs

    os.environ.setdefault("EVALSVC_TEST_KEEP_ENDPOINTS", "1")
    base, cand, name = smoke_run.baseline, smoke_run.candidate, smoke_run.candidate_name
    t0 = time.monotonic()
    spec = RunSpec(
        baseline=EndpointRef(url=base, name="bf16"),
        candidates=[EndpointRef(url=cand, name=name)],
        suites=["reasoning-smoke"],
        options=RunOptions(samples=6, concurrency=4),
        labels={"source": "dashboard-test", "set": "again"},
    )
    again = str(in_thread(runs.compare, spec, store=dash_store)["run_id"])
    return RealRuns(base, cand, smoke_run.run_id, again, {"again": time.monotonic() - t0})


@dataclass
class LoopRuns:
    """Runs of the real runner against two loopback servers of known behaviour
    (``tests.fixtures.faults``: the baseline answers every chat request "OK", the candidate
    "AAAAAAAAAAAAAAAAAAAAAAAA"); no model needed, so they run on any host."""

    baseline: str
    candidate: str
    main: str
    """reasoning-smoke and determinism-smoke at --samples 6."""
    again: str
    """A later reasoning-smoke run of the same pair (trend)."""
    candidate_hostport: str


LOOP_SUITES = ["reasoning-smoke", "determinism-smoke"]


@pytest.fixture(scope="session")
def loop_runs(dash_store: Store) -> LoopRuns:
    from evalsvc.services import runs
    from tests.fixtures.faults import base_url, fault_server

    with fault_server() as a, fault_server() as b:
        b.long_chars = 24
        base, cand = base_url(a, "ok"), base_url(b, "long")

        def one(suites: list[str]) -> str:
            spec = RunSpec(
                # The candidate has no registered name: views label it host:port (model).
                baseline=EndpointRef(url=base, name="bf16-loop"),
                candidates=[EndpointRef(url=cand)],
                suites=suites,
                options=RunOptions(samples=6, concurrency=4),
                labels={"source": "loopback"},
            )
            return str(in_thread(runs.compare, spec, store=dash_store)["run_id"])

        main = one(LOOP_SUITES)
        again = one(["reasoning-smoke"])
    host, port = b.server_address[:2]
    return LoopRuns(base, cand, main, again, f"{host}:{port}")


def _reasoning_item_ids(n: int) -> list[tuple[str, str, int]]:
    """(item id, family, level) of the first ``n`` reasoning-smoke items, from its own plan."""
    import asyncio

    from evalsvc.suites import load_suite

    suite = load_suite("reasoning-smoke").with_overrides(samples=n, seed=None)
    items = in_thread(asyncio.run, suite.plan(None, Provenance()))  # type: ignore[arg-type]
    return [(i.id, i.metadata["family"], int(i.metadata["level"])) for i in items]


@dataclass
class SyntheticRun:
    id: str
    lengths: list[int]
    depths: list[float]
    significant: tuple[int, float]


@pytest.fixture(scope="session")
def synthetic_run(dash_store: Store) -> SyntheticRun:
    """A completed run written through the store: a needle grid of 3 lengths × 2 depths with
    12 items per cell, where the candidate loses all 12 items of one cell (exact McNemar
    p = 2·0.5¹² ≈ 0.0005, ×6 by Holm: significant) and ties everywhere else; and reasoning
    items whose outputs are hostile HTML."""
    from evalsvc.suites import load_suite

    spec = RunSpec(
        baseline=EndpointRef(url="http://127.0.0.1:9/v1", name="synthetic-base"),
        # A name that would end the page's JSON <script> element if it were not escaped.
        candidates=[EndpointRef(url="http://127.0.0.1:9/v2", name=HOSTILE_NAME)],
        suites=["needle-synthetic", "reasoning-smoke"],
        labels={"source": "synthetic"},
    )
    run = dash_store.create_run(spec, status=RunStatus.running)
    lengths, depths, bad = [1024, 2048, 3072], [0.25, 0.75], (2048, 0.75)
    dash_store.save_suite_snapshot(run.id, name="needle-synthetic", kind="needle", version="2",
                                   spec={"name": "needle-synthetic", "kind": "needle"})
    reasoning = load_suite("reasoning-smoke").with_overrides(samples=8, seed=None)
    dash_store.save_suite_snapshot(run.id, name="reasoning-smoke", kind="reasoning",
                                   version=reasoning.version,
                                   spec=reasoning.spec.model_dump(mode="json"))
    samples: list[Sample] = []
    for length in lengths:
        for depth in depths:
            for k in range(12):
                item = f"n{length}-d{depth}-h{k}"
                data = {"context_length": length, "depth": depth, "expected": [str(k)],
                        "cluster": f"h{k}"}
                lost = (length, depth) == bad
                samples.append(Sample(suite="needle-synthetic", item_id=item,
                                      endpoint="baseline", output=f"The value is {k}.",
                                      score=1.0, data=data))
                samples.append(Sample(suite="needle-synthetic", item_id=item,
                                      endpoint="candidate:0",
                                      output="I could not find it." if lost else f"It is {k}.",
                                      score=0.0 if lost else 1.0, data=data))
    for i, (item, family, level) in enumerate(_reasoning_item_ids(8)):
        data = {"family": family, "level": level, "expected": "42"}
        flipped = i % 2 == 0
        samples.append(Sample(suite="reasoning-smoke", item_id=item, endpoint="baseline",
                              output=HOSTILE_BASELINE, score=1.0, data=data))
        samples.append(Sample(suite="reasoning-smoke", item_id=item, endpoint="candidate:0",
                              output=HOSTILE_CANDIDATE if flipped else HOSTILE_BASELINE,
                              score=0.0 if flipped else 1.0, data=data))
    dash_store.add_samples(run.id, samples)
    dash_store.finish_run(run.id, status=RunStatus.completed, verdict="fail")
    return SyntheticRun(run.id, lengths, depths, bad)


@pytest.fixture(scope="session")
def many_runs(dash_store: Store) -> dict[str, Any]:
    """120 queued-then-finished runs, 40 of them labelled team=alpha, spread over 4 days."""
    ids: list[str] = []
    alpha: list[str] = []
    for i in range(120):
        team = "alpha" if i % 3 == 0 else "beta"
        spec = RunSpec(
            baseline=EndpointRef(url="http://127.0.0.1:7/v1"),
            candidates=[EndpointRef(url=f"http://127.0.0.1:7/v{2 + i % 2}")],
            suites=["needle-smoke"],
            labels={"team": team, "bulk": "yes"},
        )
        run = dash_store.create_run(spec, status=RunStatus.queued)
        dash_store.finish_run(run.id, status=RunStatus.completed,
                              verdict="pass" if i % 2 else "inconclusive")
        ids.append(run.id)
        if team == "alpha":
            alpha.append(run.id)
    return {"ids": ids, "alpha": alpha}


def _serve(url: str) -> Iterator[str]:
    # The API tests' real uvicorn on a free loopback port, over this session's store.
    from evalsvc.webapp import create_app
    from tests.fixtures.loopback import uvicorn_app

    with uvicorn_app(create_app(url, auth=True)) as base:
        yield base


@dataclass
class Server:
    url: str
    token: str


@pytest.fixture(scope="session")
def dash_server(dash_store: Store, dash_db_url: str) -> Iterator[Server]:
    token, _ = dash_store.create_api_token(name="dashboard-viewer", scopes=["read"])
    for url in _serve(dash_db_url):
        yield Server(url, token)


# Package scope, not session: Playwright's sync API keeps an asyncio loop running in the main
# thread while it is started, and every later test that calls asyncio.run() would then fail
# ("cannot be called from a running event loop"). It stops after the last dashboard test.
@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@dataclass
class Watched:
    """A page and everything that went wrong on it."""

    page: Any
    console_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    allowed_status: set[int] = field(default_factory=set)

    def problems(self) -> list[str]:
        return [*self.console_errors, *self.failed, *(f"dialog: {d}" for d in self.dialogs)]


def watch(page: Any) -> Watched:
    w = Watched(page)

    def console(msg: Any) -> None:
        if msg.type == "error":
            w.console_errors.append(f"console: {msg.text}")

    def response(resp: Any) -> None:
        if resp.status >= 400 and resp.status not in w.allowed_status:
            w.failed.append(f"HTTP {resp.status} {resp.url}")

    def dialog(d: Any) -> None:
        w.dialogs.append(d.message)
        d.dismiss()

    # A document's own requests still in flight when the page navigates away (the runs page's
    # live poll while a run of another test is running) are aborted by the browser: that is the
    # navigation, not a failure of the page. Each committed main-frame navigation starts a new
    # document epoch; a request belongs to the epoch it was issued in (a poll fired after the
    # navigation started but before the new document committed belongs to the old one). An
    # ERR_ABORTED request of an earlier epoch, or of the current one while a navigation is
    # under way, is not counted; one the current page aborts itself is (CI failed on the former
    # twice: "/ui/live?ids=… net::ERR_ABORTED").
    epoch = [0]
    navigating = [False]
    issued: dict[int, int] = {}

    def request(req: Any) -> None:
        if req.is_navigation_request() and req.frame == page.main_frame:
            navigating[0] = True
        issued[id(req)] = epoch[0]

    def navigated(frame: Any) -> None:
        if frame == page.main_frame:
            epoch[0] += 1
            navigating[0] = False

    def request_failed(req: Any) -> None:
        if req.is_navigation_request() and req.frame == page.main_frame:
            navigating[0] = False
        mine = issued.get(id(req), epoch[0])
        left_behind = "ERR_ABORTED" in str(req.failure) and not req.is_navigation_request() \
            and (mine < epoch[0] or navigating[0])
        if not left_behind:
            w.failed.append(f"failed: {req.url} {req.failure}")

    page.on("console", console)
    page.on("pageerror", lambda exc: w.console_errors.append(f"pageerror: {exc}"))
    page.on("request", request)
    page.on("framenavigated", navigated)
    page.on("requestfailed", request_failed)
    page.on("response", response)
    page.on("dialog", dialog)
    return w


@pytest.fixture(scope="package")
def signed_in_state(browser: Any, dash_server: Server) -> dict[str, Any]:
    """Storage state (the HttpOnly cookie) of a browser that signed in through /login."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(dash_server.url + "/")
    assert page.url.startswith(dash_server.url + "/login"), page.url
    page.fill("input[name=token]", dash_server.token)
    page.click("button[type=submit]")
    page.wait_for_url(dash_server.url + "/")
    state: dict[str, Any] = context.storage_state()
    context.close()
    return state


@pytest.fixture
def page(browser: Any, signed_in_state: dict[str, Any]) -> Iterator[Watched]:
    context = browser.new_context(storage_state=signed_in_state,
                                  viewport={"width": 1280, "height": 900})
    p = context.new_page()
    yield watch(p)
    context.close()


@pytest.fixture
def shot() -> Any:
    SHOTS.mkdir(parents=True, exist_ok=True)

    def save(page: Any, name: str, *, full: bool = True) -> Path:
        path = SHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=full)
        return path

    return save

