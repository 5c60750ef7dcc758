"""The dashboard's service functions and store queries, without a browser: SQLite and
PostgreSQL (``EVALSVC_TEST_DATABASE_URL``), statistics checked against scipy/statsmodels."""

from __future__ import annotations

import random
import re

import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from evalsvc.db import RunFilters, Store
from evalsvc.domain import EndpointRef, RunSpec, RunStatus, Sample
from evalsvc.services import dashboard as svc
from evalsvc.suites import Scored, ViewInput, suite_kinds


def _spec(i: int, *, suites: list[str] | None = None) -> RunSpec:
    return RunSpec(
        baseline=EndpointRef(url="http://127.0.0.1:9001/v1", name="base"),
        candidates=[EndpointRef(url=f"http://127.0.0.1:900{2 + i % 2}/v1",
                                name=f"cand{i % 2}")],
        suites=suites or ["needle-4k"],
        labels={"team": "a" if i % 3 == 0 else "b", "odd": 'quote"d' if i % 2 else "even"},
    )


def test_runs_page_filters_and_keyset_pages(store: Store) -> None:
    ids = []
    for i in range(23):
        run = store.create_run(_spec(i), status=RunStatus.queued)
        if i % 4:
            store.finish_run(run.id, status=RunStatus.completed, verdict="pass" if i % 2 else "fail")
        ids.append(run.id)
    newest_first = list(reversed(ids))
    q = store.dashboard
    page, total, more = q.runs_page(RunFilters(), limit=10)
    assert total == 23 and more and [r.id for r in page] == newest_first[:10]
    cursor = (page[-1].created_at, page[-1].id)
    page2, _, more2 = q.runs_page(RunFilters(), limit=10, older_than=cursor)
    assert [r.id for r in page2] == newest_first[10:20] and more2
    back, _, _ = q.runs_page(RunFilters(), limit=10, newer_than=(page2[0].created_at, page2[0].id))
    assert [r.id for r in back] == newest_first[:10]
    # Filters: label (JSON, with a quote in the value), endpoint by URL and by name, status.
    assert q.runs_page(RunFilters(label=("team", "a")), limit=50)[1] == 8
    assert q.runs_page(RunFilters(label=("odd", 'quote"d')), limit=50)[1] == 11
    by_url = q.runs_page(RunFilters(endpoint="http://127.0.0.1:9003/v1/"), limit=50)[1]
    assert by_url == 11
    assert q.runs_page(RunFilters(endpoint="cand1"), limit=50)[1] == 11
    assert q.runs_page(RunFilters(endpoint="base"), limit=50)[1] == 23
    assert q.runs_page(RunFilters(status="queued"), limit=50)[1] == 6
    assert q.runs_page(RunFilters(verdict="fail", status="completed"), limit=50)[1] == 6
    # Suite: the requested name for queued runs, the executed suites for the others.
    assert q.runs_page(RunFilters(suite="needle-4k"), limit=50)[1] == 6
    store.save_suite_snapshot(ids[1], name="needle-4k", kind="needle", version="2", spec={})
    assert q.runs_page(RunFilters(suite="needle-4k"), limit=50)[1] == 7
    assert q.runs_page(RunFilters(suite="needle"), limit=50)[1] == 0


def test_progress_counts_stored_samples_per_suite_and_endpoint(store: Store) -> None:
    run = store.create_run(_spec(0), status=RunStatus.running)
    store.update_progress(run.id, {"items": {"needle-4k": 4}, "done": {}})
    store.add_samples(run.id, [
        Sample(suite="needle-4k", item_id="a", endpoint="baseline", score=1.0),
        Sample(suite="needle-4k", item_id="b", endpoint="baseline", error="timeout"),
        Sample(suite="needle-4k", item_id="a", endpoint="candidate:0", score=0.0),
    ])
    live = svc.live_status(store, [run.id, "f" * 32])
    assert list(live) == [run.id]
    rows = {r["endpoint"]: r for r in live[run.id]["progress"]["rows"]}
    assert rows["baseline"]["done"] == 2 and rows["baseline"]["errors"] == 1
    assert rows["candidate:0"]["done"] == 1 and rows["candidate:0"]["planned"] == 4
    assert live[run.id]["progress"]["planned"] == 8 and live[run.id]["progress"]["done"] == 3


def test_progress_says_which_suite_of_how_many(store: Store) -> None:
    """Issue 16: "52 / 80" with 4 of 5 suites not yet planned. With the run's suite list in
    the record, the run reads "suite 2 of 3" and every suite weighs the same."""
    run = store.create_run(_spec(0), status=RunStatus.running)
    order = ["needle-4k", "reasoning", "drift"]
    store.update_progress(run.id, {"suites": order, "items": {"needle-4k": 2, "reasoning": 4},
                                   "done": {}})
    store.add_samples(run.id, [
        *(Sample(suite="needle-4k", item_id=i, endpoint=e, score=1.0)
          for i in "ab" for e in ("baseline", "candidate:0")),
        Sample(suite="reasoning", item_id="a", endpoint="baseline", score=1.0),
        Sample(suite="reasoning", item_id="b", endpoint="baseline", score=1.0),
        Sample(suite="reasoning", item_id="a", endpoint="candidate:0", score=1.0),
    ])
    p = svc.live_status(store, [run.id])[run.id]["progress"]
    assert p["suite_count"] == 3 and p["current"] == "reasoning"
    # The slower endpoint is where the suite stands: 1 of 4 items on the candidate.
    assert p["summary"] == "suite 2 of 3 · reasoning 1/4 items"
    # needle done (1), reasoning 3 of 8 samples (0.375), drift not planned (0): / 3 suites.
    assert p["fraction"] == pytest.approx((1 + 3 / 8 + 0) / 3)
    assert [r["suite"] for r in p["rows"]][-2:] == ["drift", "drift"]  # not planned yet
    # Records kept before the suite list: the share of the items planned so far, as before.
    store.update_progress(run.id, {"items": {"needle-4k": 2, "reasoning": 4}, "done": {}})
    old = svc.live_status(store, [run.id])[run.id]["progress"]
    assert old["summary"] is None and old["fraction"] == pytest.approx(7 / 12)


def test_label_and_sample_index_queries(store: Store) -> None:
    """The bounded reads behind labels and the samples browser, on SQLite and PostgreSQL."""
    from evalsvc.domain import Provenance

    run = store.create_run(_spec(0), status=RunStatus.running)
    store.save_endpoint_snapshot(run.id, role="baseline",
                                 endpoint=EndpointRef(url="http://gpu-a:8000/v1", name="prod"),
                                 provenance=Provenance(model="served-a"))
    store.save_endpoint_snapshot(run.id, role="candidate:0",
                                 endpoint=EndpointRef(url="http://gpu-b:8000/v1"),
                                 provenance=Provenance(model="served-b"))
    for name in ("needle-4k", "reasoning"):
        store.save_suite_snapshot(run.id, name=name, kind="needle", version="1", spec={})
    store.add_samples(run.id, [
        Sample(suite="reasoning", item_id="a", endpoint="baseline", score=1.0,
               data={"family": "lists", "level": 2}),
        Sample(suite="reasoning", item_id="a", endpoint="candidate:0", error="timeout",
               data={"family": "lists", "level": 2}),
    ])
    q = store.dashboard
    ends = q.endpoints_of([run.id, "0" * 32])[run.id]
    assert ends["baseline"] == {"name": "prod", "url": "http://gpu-a:8000/v1", "model": "served-a"}
    assert ends["candidate:0"]["model"] == "served-b" and ends["candidate:0"]["name"] is None
    info = store.get_run(run.id)
    assert info is not None
    assert svc.endpoint_labels(info, ends) == {"baseline": "prod (served-a)",
                                               "candidate:0": "cand0 (served-b)"}
    assert q.suite_names([run.id]) == {run.id: ["needle-4k", "reasoning"]}
    assert q.endpoints_of([]) == {} and q.suite_names([]) == {}
    rows = q.sample_index(run.id, "reasoning", (("family", "str"), ("level", "int")))
    assert rows == [("baseline", "a", 0, 1.0, False, {"family": "lists", "level": 2}),
                    ("candidate:0", "a", 0, None, True, {"family": "lists", "level": 2})]


def test_needle_heatmap_significance_matches_scipy_and_statsmodels() -> None:
    rng = random.Random(5)
    rows: list[Scored] = []
    truth = {}
    for length in (1000, 2000):
        for depth in (0.1, 0.5, 0.9):
            drop = 0.6 if (length, depth) == (2000, 0.9) else 0.05
            worse = better = 0
            for k in range(20):
                b = 1.0 if rng.random() < 0.9 else 0.0
                c = b
                if b == 1.0 and rng.random() < drop:
                    c = 0.0
                elif b == 0.0 and rng.random() < 0.05:
                    c = 1.0
                worse += b > c
                better += c > b
                data = {"context_length": length, "depth": depth}
                rows.append(("baseline", f"{length}-{depth}-{k}", 0, b, data))
                rows.append(("candidate:0", f"{length}-{depth}-{k}", 0, c, data))
            m = worse + better
            truth[(length, depth)] = (
                1.0 if m == 0 else stats.binomtest(worse, m, 0.5).pvalue
            )
    # Through the kind's own view model, as the dashboard calls it.
    view = ViewInput(suite="needle-x", role="candidate:0", entry=None, alpha=0.05,
                     scores=lambda fields: rows, samples=list)
    hm = suite_kinds()["needle"].view_model(view)["heatmap"]
    assert hm["lengths"] == [1000, 2000] and hm["depths"] == [0.1, 0.5, 0.9]
    cells = {(c["context_length"], c["depth"]): c for c in hm["cells"]}
    keys = sorted(truth)
    reject, adjusted, *_ = multipletests([truth[k] for k in keys], alpha=0.05, method="holm")
    for k, rej, adj in zip(keys, reject, adjusted, strict=True):
        assert cells[k]["p"] == pytest.approx(truth[k])
        assert cells[k]["p_holm"] == pytest.approx(adj)
        assert cells[k]["significant"] == bool(rej)
    assert cells[(2000, 0.9)]["significant"]


def test_first_divergence_splits_at_the_first_differing_token() -> None:
    d = svc.first_divergence("The answer is 42.", "The answer is 41.")
    assert d["baseline"] == {"same": "The answer is ", "first": "42", "rest": "."}
    assert d["candidate"]["first"] == "41"
    same = svc.first_divergence("abc", "abc")
    assert same["baseline"]["first"] == "" and same["baseline"]["same"] == "abc"
    prefix = svc.first_divergence("ab", "ab cd")
    assert prefix["baseline"]["first"] == "" and prefix["candidate"]["first"] == " "


def test_bad_filter_values_are_reported_not_raised() -> None:
    filters, problems = svc.parse_filters(status="nope", verdict="maybe", label="novalue",
                                          since="yesterday", until="2026-01-31")
    assert len(problems) == 4
    assert filters.status is None and filters.verdict is None and filters.label is None
    assert filters.until is not None and filters.until.day == 1  # "to" is inclusive
    assert svc.decode_cursor("garbage") is None
    assert svc.decode_cursor("2026-01-01T00:00:00+00:00~'; drop table runs") is None


def test_ci_bar_places_margin_and_one_sided_intervals() -> None:
    two = svc._ci_bar({"delta": -0.01, "ci": [-0.03, 0.01], "margin": 0.05,
                       "details": {"higher_is_better": True}})
    assert two is not None and two["margin"] < two["lo"] < two["delta"] < two["zero"] < two["hi"]
    # Threshold gate (lower is better): Δ is candidate − threshold, the line sits at 0.
    one = svc._ci_bar({"delta": -0.03, "ci": [None, -0.02], "margin": 0.0,
                       "details": {"higher_is_better": False}})
    assert one is not None and one["lo"] == 0.0 and one["margin"] == one["zero"]
    assert svc._ci_bar({"delta": None, "ci": [None, None]}) is None


def test_pages_follow_the_api_auth(db_url: str) -> None:
    from fastapi.testclient import TestClient

    from evalsvc.webapp import create_app

    with Store.from_url(db_url) as s:
        token, _ = s.create_api_token(name="viewer", scopes=["read"])
        revoked, _ = s.create_api_token(name="old", scopes=["admin"])
        s.revoke_api_token("old")
    with TestClient(create_app(db_url, auth=False)) as open_client:
        assert open_client.get("/").status_code == 200  # EVALSVC_API_AUTH=off: open
    with TestClient(create_app(db_url, auth=True)) as client:
        r = client.get("/runs/abc?x=1", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/login?next=%2Fruns%2Fabc%3Fx%3D1"
        assert client.get("/ui/live?ids=abc").status_code == 401
        assert client.get("/", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        client.cookies.set("evalsvc_token", revoked)
        assert client.get("/", follow_redirects=False).status_code == 303
        client.cookies.clear()
        # Login: a bad token is refused on the page; a good one sets the cookie and redirects
        # to a local path only (never to another site).
        # (The form's CSRF token comes with the sign-in page, as in a browser.)
        csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)
        assert csrf is not None
        bad = client.post("/login", content=f"token=nope&next=/&csrf={csrf[1]}",
                          follow_redirects=False,
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert bad.status_code == 401 and "invalid or revoked" in bad.text
        ok = client.post("/login", content=f"token={token}&next=//evil.example/&csrf={csrf[1]}",
                         follow_redirects=False,
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert ok.status_code == 303 and ok.headers["location"] == "/"
        cookie = ok.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert client.get("/").status_code == 200
        # The REST API does not take the cookie: it keeps requiring the bearer header.
        assert client.get("/api/v1/runs").status_code == 401
        assert "script-src 'self'" in client.get("/").headers["content-security-policy"]


def test_unfinished_and_failed_runs_render(db_url: str) -> None:
    from fastapi.testclient import TestClient

    from evalsvc.webapp import create_app

    with Store.from_url(db_url) as s:
        queued = s.create_run(_spec(0), status=RunStatus.queued)
        failed = s.create_run(_spec(1), status=RunStatus.running)
        s.save_suite_snapshot(failed.id, name="needle-4k", kind="needle", version="2", spec={})
        s.add_samples(failed.id, [
            Sample(suite="needle-4k", item_id="a", endpoint="baseline", score=1.0,
                   data={"context_length": 1024, "depth": 0.5}),
            Sample(suite="needle-4k", item_id="a", endpoint="candidate:0", error="HTTP 500"),
        ])
        s.finish_run(failed.id, status=RunStatus.error, verdict="error",
                     error="error budget exceeded: <b>candidate</b> 100% errors")
    with TestClient(create_app(db_url, auth=False)) as client:
        page = client.get(f"/runs/{queued.id}")
        assert page.status_code == 200 and 'id="progress"' in page.text
        page = client.get(f"/runs/{failed.id}")
        assert page.status_code == 200
        assert "error budget exceeded: &lt;b&gt;candidate&lt;/b&gt;" in page.text
        assert 'id="progress"' in page.text and "No gates yet" in page.text
        suite = client.get(f"/runs/{failed.id}/suites/needle-4k")
        assert suite.status_code == 200 and "No gate for this suite yet" in suite.text
        for path in (f"/runs/{'0' * 32}", f"/runs/{failed.id}/suites/nope",
                     f"/runs/{failed.id}/suites/needle-4k?candidate=candidate:7",
                     f"/runs/{queued.id}/report.json", "/runs/not-hex!"):
            assert client.get(path).status_code == 404, path
        assert client.get(f"/runs/{failed.id}/flips").status_code == 200
        assert client.get(f"/compare?a={queued.id}&b={'0' * 32}").status_code == 200


def test_trend_points_of_a_pair_oldest_first_and_scheduled_only(store: Store) -> None:
    from datetime import UTC, datetime, timedelta

    spec = _spec(1)
    cand = spec.candidates[0].url
    store.add_schedule(name="nightly", cron="0 3 * * *", template=spec,
                       start_at=datetime.now(UTC) - timedelta(days=2))
    (scheduled,) = store.fire_due_schedules(now=datetime.now(UTC))
    manual = store.create_run(spec, status=RunStatus.running)
    other = store.create_run(_spec(0), status=RunStatus.running)  # another candidate
    for run, delta in ((scheduled, -0.02), (manual, 0.01), (other, 0.5)):
        url = run.spec.candidates[0].url
        store.save_gate_results(run.id, [{
            "candidate": "candidate:0", "suite": "needle-4k", "verdict": "pass",
            "delta": delta, "ci": [delta - 0.01, delta + 0.01], "margin": 0.05,
            "candidate_url": url, "n": 40, "details": {"higher_is_better": True}}])
        store.finish_run(run.id, status=RunStatus.completed, verdict="pass")
    t = svc.trend(store, baseline_url=spec.baseline.url, candidate_url=cand, suite="needle-4k")
    assert [p["run_id"] for p in t["points"]] == [scheduled.id, manual.id]
    assert t["points"][0]["boundary"] == -0.05 and t["points"][0]["scheduled"]
    only = svc.trend(store, baseline_url=spec.baseline.url, candidate_url=cand,
                     suite="needle-4k", scheduled_only=True)
    assert [p["run_id"] for p in only["points"]] == [scheduled.id]
    pairs = {(p["candidate_url"], p["suite"]): p["runs"] for p in svc.trend_pairs(store)}
    assert pairs == {(cand, "needle-4k"): 2, (other.spec.candidates[0].url, "needle-4k"): 1}


def test_flips_are_limited_and_counted(store: Store) -> None:
    run = store.create_run(_spec(0), status=RunStatus.running)
    store.save_suite_snapshot(run.id, name="needle-4k", kind="needle", version="2", spec={})
    samples = []
    for k in range(30):
        data = {"context_length": 1024 * (1 + k % 2), "depth": 0.5, "expected": [str(k)]}
        b, c = (1.0, 0.0) if k % 3 else (0.0, 1.0)
        samples += [Sample(suite="needle-4k", item_id=f"i{k}", endpoint="baseline", score=b,
                           output=f"it is {k}", data=data),
                    Sample(suite="needle-4k", item_id=f"i{k}", endpoint="candidate:0", score=c,
                           output=f"it is {k + 1}", data=data)]
    store.add_samples(run.id, samples)
    view = svc.flips_view(store, run.id, limit=7)
    assert view["total"] == 30 and len(view["rows"]) == 7
    assert view["counts"] == {"regression": 20, "improvement": 10}
    only = svc.flips_view(store, run.id, direction="improvement", slice_="2048 tokens @ depth 0.5")
    assert {r["item_id"] for r in only["rows"]} == {f"i{k}" for k in range(30)
                                                    if k % 3 == 0 and k % 2 == 1}
    assert all(r["diff"]["baseline"]["first"] != r["diff"]["candidate"]["first"]
               for r in only["rows"])


def test_flips_found_in_the_database_equal_the_kinds_own_rule(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flips page finds flipped pairs with a join in the database (only those are read);
    a kind that overrides ``flip`` is asked pair by pair. Both give the same page over scores at
    and around the threshold, errored (score-less) samples and items one side never answered."""
    import random

    from evalsvc.suites import suite_kinds

    rng = random.Random(5)
    run = store.create_run(_spec(0), status=RunStatus.running)
    store.save_suite_snapshot(run.id, name="needle-4k", kind="needle", version="2", spec={})
    levels = [None, 0.0, 0.25, 0.4999, 0.5, 0.75, 1.0]
    samples = []
    for k in range(300):
        data = {"context_length": 1024 * (1 + k % 3), "depth": 0.5, "expected": [str(k)]}
        samples.append(Sample(suite="needle-4k", item_id=f"i{k:03d}", endpoint="baseline",
                              score=rng.choice(levels), output=f"b{k}", data=data))
        if k % 17:  # every 17th item has no candidate sample
            samples.append(Sample(suite="needle-4k", item_id=f"i{k:03d}", endpoint="candidate:0",
                                  score=rng.choice(levels), output=f"c{k}", data=data))
    store.add_samples(run.id, samples)
    in_db = svc.flips_view(store, run.id, limit=1000)
    monkeypatch.setattr(suite_kinds()["needle"], "flips_by_threshold",
                        classmethod(lambda cls: False))
    pairwise = svc.flips_view(store, run.id, limit=1000)
    assert in_db["counts"] == pairwise["counts"] and in_db["rows"] == pairwise["rows"]
    assert in_db["slices"] == pairwise["slices"] and len(in_db["rows"]) > 50
    assert {r["direction"] for r in in_db["rows"]} == {"regression", "improvement"}


def test_flips_rebuild_prompts_from_a_stored_snapshot_regressions_first_and_search(
    store: Store,
) -> None:
    """The snapshot a real run stores has ``resolved_gate`` beside the spec (the flips page used
    to fail validating it and show no prompt); regressions come before improvements; ``query``
    searches prompts, outputs and item ids."""
    from evalsvc.services.runs import load_suites

    spec = _spec(0, suites=["reasoning-smoke"])
    spec.options.samples = 6
    (suite,) = load_suites(spec)  # binds the gate, as a real run does
    run = store.create_run(spec, status=RunStatus.running)
    store.save_suite_snapshot(run.id, name=suite.name, kind=suite.kind, version=suite.version,
                              spec={**suite.spec.model_dump(mode="json"),
                                    "resolved_gate": suite.gate.to_dict()})
    import asyncio

    # In a thread of its own: Playwright's sync API (the browser tests of this session) leaves
    # an event loop running in the main thread, where asyncio.run refuses to start another.
    from concurrent.futures import ThreadPoolExecutor

    from evalsvc.domain import Provenance

    with ThreadPoolExecutor(1) as pool:
        items = pool.submit(asyncio.run, suite.plan(None, Provenance())).result()  # type: ignore[arg-type]
    samples = []
    for k, item in enumerate(items):
        data = {"family": item.metadata["family"], "level": item.metadata["level"],
                "expected": str(item.expected)}
        # Item 0 improves, the others regress: the improvement sorts last.
        b, c = (0.0, 1.0) if k == 0 else (1.0, 0.0)
        samples += [Sample(suite=suite.name, item_id=item.id, endpoint="baseline", score=b,
                           output=f"base {k}", data=data),
                    Sample(suite=suite.name, item_id=item.id, endpoint="candidate:0", score=c,
                           output=f"cand {k}", data=data)]
    store.add_samples(run.id, samples)
    view = svc.flips_view(store, run.id)
    assert [r["direction"] for r in view["rows"]] == ["regression"] * 5 + ["improvement"]
    last = items[-1].prompt
    assert isinstance(last, list)
    by_id = {r["item_id"]: r["prompt"] for r in view["rows"]}
    assert all(by_id.values()) and last[-1]["content"] in by_id[items[-1].id]
    found = svc.flips_view(store, run.id, query="CAND 3")
    assert [r["item_id"] for r in found["rows"]] == [items[3].id] and found["total"] == 1
    question = str(last[-1]["content"])[:30]
    assert items[-1].id in {r["item_id"] for r in svc.flips_view(store, run.id,
                                                                   query=question)["rows"]}
