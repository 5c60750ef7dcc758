"""``/sweeps``: a sweep over existing endpoints queued through REST, executed by a real worker
through the sweep service, read back (status, per-configuration verdicts, runs, frontier,
recommendation); launching sweeps refused by default; sweep schedules fire sweeps.

The endpoints are the fault server's well-formed ``ok`` and ``flaky`` (a 503 on each route's
first request, then good answers) on loopback; the quality suite is the catalog's
``determinism-smoke``, which passes on a server whose answers never vary. Both backends
(``api`` is parametrized over SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from evalsvc import limits
from evalsvc.scheduler import Scheduler, Worker
from evalsvc.services import registry
from evalsvc.services.runs import UsageError
from evalsvc.services.sweeps import SweepSpec
from tests.fixtures.faults import base_url, fault_server

from .conftest import Api


@pytest.fixture(scope="module")
def srv() -> Iterator[Any]:
    with fault_server() as server:
        yield server


def sweep_body(srv: Any, **speed: Any) -> dict[str, Any]:
    return {
        "baseline": base_url(srv, "ok"),
        "configs": [
            {"name": "same", "kind": "existing", "url": base_url(srv, "ok")},
            {"name": "flaky", "kind": "existing", "url": base_url(srv, "flaky")},
        ],
        "suites": ["determinism-smoke"],
        "samples": 32,
        "speed": speed or {"enabled": False},
    }


@pytest.mark.slow  # about 8-16 s: two configurations gated on a real suite
def test_sweep_over_existing_endpoints_through_rest_and_a_real_worker(api: Api, srv: Any) -> None:
    with api.client("submit") as client:
        resp = client.post("/sweeps", json=sweep_body(srv))
        assert resp.status_code == 202, resp.text
        sweep_id = resp.json()["id"]
        assert resp.json()["status"] == "queued"
        assert client.get(f"/sweeps/{sweep_id}").json()["status"] == "queued"

        assert api.run_worker_once() == 1  # the real worker claims the sweep and executes it

        got = client.get(f"/sweeps/{sweep_id}")
        assert got.status_code == 200, got.text
        sweep = got.json()
        listed = client.get("/sweeps").json()
    assert sweep["status"] == "completed", sweep.get("error")
    assert sweep["submitted_by"] == "t-submit" and sweep["attempts"] == 1
    results = {c["name"]: c for c in sweep["results"]}
    assert set(results) == {"same", "flaky"}
    for c in results.values():
        assert c["status"] == "measured" and c["verdict"] == "pass", c
        assert c["quality_suite"] == "determinism-smoke" and c["quality_ci"] is not None
    # Each configuration's quality run is stored, linked to the sweep and gated on the same
    # baseline samples.
    links = {r["config"]: r["run_id"] for r in sweep["runs"]}
    assert links == {name: c["run_id"] for name, c in results.items()}
    b1, b2 = (
        {s.item_id: s.output for s in api.store.get_samples(links[n], endpoint="baseline")}
        for n in ("same", "flaky")
    )
    assert b1 and b1 == b2
    assert sweep["progress"]["configs"] == 2 and len(sweep["progress"]["done"]) == 2
    # No capacity was measured (speed off), so the recommendation is a passing configuration
    # and says so; the report is the one `evalsvc sweep --json` writes.
    assert sweep["recommendation"] in ("same", "flaky")
    assert "capacity not measured" in sweep["reason"]
    assert sweep["report"]["schema"] == "evalsvc.sweep/1"
    assert [s["id"] for s in listed] == [sweep_id]
    assert listed[0]["recommendation"] == sweep["recommendation"] and listed[0]["configs"] == 2


def test_rest_refuses_a_sweep_that_would_launch_servers(api: Api, srv: Any) -> None:
    command = {"name": "c", "kind": "command", "command": "vllm serve m --port {port}"}
    with api.client("admin") as client:
        for body in (
            {**sweep_body(srv), "configs": [{"name": "fp8-kv", "kind": "local"}]},
            {**sweep_body(srv), "configs": [command]},
            {**{k: v for k, v in sweep_body(srv).items() if k != "baseline"}},  # local baseline
        ):
            resp = client.post("/sweeps", json=body)
            assert resp.status_code == 403, resp.text
            assert "EVALSVC_SWEEP_ALLOW_LAUNCH" in resp.json()["detail"]
        path = client.post("/sweeps", json={**sweep_body(srv), "suites": ["/etc/x.yaml"]})
        assert path.status_code == 422 and "file paths" in path.json()["detail"]
        unknown = client.post("/sweeps", json={**sweep_body(srv), "suites": ["no-such-suite"]})
        assert unknown.status_code == 422 and "no-such-suite" in unknown.json()["detail"]
        extra = client.post("/sweeps", json={**sweep_body(srv), "bogus": 1})
        assert extra.status_code == 422
        assert client.get("/sweeps/0123456789abcdef").status_code == 404
        typo = client.get("/sweeps", params={"stauts": "queued"})
        assert typo.status_code == 422 and "stauts" in typo.json()["detail"]
    with api.client("read") as reader:
        assert reader.post("/sweeps", json=sweep_body(srv)).status_code == 403
    assert api.store.sweeps.list_sweeps() == []  # nothing was queued


def test_a_sweep_outside_the_egress_policy_is_refused(
    api: Api, srv: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "10.0.0.0/8")
    with api.client("submit") as client:
        resp = client.post("/sweeps", json=sweep_body(srv))
    assert resp.status_code == 422 and "127.0.0.1" in resp.json()["detail"]


def test_a_sweep_schedule_fires_a_sweep_once_per_fire_time(api: Api, srv: Any) -> None:
    spec = SweepSpec.model_validate(sweep_body(srv))
    start = datetime.now(UTC) - timedelta(hours=2)
    created = registry.add_sweep_schedule(api.store, name="nightly-sweep", cron="0 * * * *",
                                          spec=spec, start_at=start)
    assert created["kind"] == "sweep"
    with pytest.raises(UsageError, match="launch servers"):
        registry.add_sweep_schedule(api.store, name="launching", cron="0 * * * *",
                                    spec=SweepSpec.model_validate(
                                        {"configs": [{"name": "w8a8", "kind": "local"}]}))
    now = datetime.now(UTC)
    Scheduler(api.store).tick(now)
    Scheduler(api.store).tick(now)  # a second scheduler at the same instant adds nothing
    fired = api.store.sweeps.list_sweeps()
    assert len(fired) == 1 and fired[0]["schedule_id"] == created["id"]
    assert fired[0]["status"] == "queued" and fired[0]["spec"]["configs"][0]["name"] == "same"
    with api.client("read") as client:
        schedules = client.get("/schedules").json()
        assert [(s["name"], s["kind"], s["template"]) for s in schedules] == [
            ("nightly-sweep", "sweep", None)
        ]
        assert schedules[0]["sweep"]["suites"] == ["determinism-smoke"]


def test_cli_schedules_add_sweep_checks_the_spec_like_the_workers(
    api: Api, srv: Any, tmp_path: Any
) -> None:
    from typer.testing import CliRunner

    from evalsvc.cli.main import app

    good = tmp_path / "sweep.yaml"
    good.write_text(
        f"baseline: {base_url(srv, 'ok')}\n"
        f"configs: [{{name: same, kind: existing, url: {base_url(srv, 'ok')}}}]\n"
        "suites: [determinism-smoke]\n"
    )
    launching = tmp_path / "launch.yaml"
    launching.write_text("configs: [{name: w8a8, kind: local}]\n")
    runner = CliRunner()
    db = ["--database-url", api.db_url]
    ok = runner.invoke(app, ["schedules", "add", "nightly", "--cron", "0 2 * * *",
                             "--sweep", str(good), *db])
    assert ok.exit_code == 0, ok.output
    assert "next sweep at" in ok.output
    refused = runner.invoke(app, ["schedules", "add", "x", "--cron", "0 2 * * *",
                                  "--sweep", str(launching), *db])
    assert refused.exit_code == 2 and "EVALSVC_SWEEP_ALLOW_LAUNCH" in refused.output
    listed = runner.invoke(app, ["schedules", "list", *db], env={"COLUMNS": "200"})
    assert "sweep: determinism-smoke" in listed.output
    assert [s["name"] for s in api.store.list_schedules()] == ["nightly"]


def test_the_worker_settles_a_sweep_its_executor_did_not_finish(api: Api, srv: Any) -> None:
    """An executor that raises, or returns without finishing, leaves the sweep ``error`` with
    the reason, never ``running``; a stored spec the worker refuses ends ``error`` too."""
    spec = SweepSpec.model_validate(sweep_body(srv)).model_dump(mode="json")
    raised = api.store.sweeps.create_sweep(spec)

    def boom(store: Any, sweep: dict[str, Any], cancel: Any, worker_id: str) -> None:
        if sweep["id"] == raised["id"]:
            raise RuntimeError("boom")

    returned = api.store.sweeps.create_sweep(spec)
    worker = Worker(api.store, sweep_executor=boom, poll_seconds=0.05, lease_seconds=10)
    assert worker.run(once=True) == 2
    failed = api.store.sweeps.get_sweep(raised["id"])
    assert failed is not None and failed["status"] == "error"
    assert "RuntimeError: boom" in (failed["error"] or "")
    unfinished = api.store.sweeps.get_sweep(returned["id"])
    assert unfinished is not None and unfinished["status"] == "error"
    assert "without finishing the sweep" in (unfinished["error"] or "")
    # Stored before the rules (or written into the database): refused by the worker itself.
    launching = api.store.sweeps.create_sweep(
        {"configs": [{"name": "w8a8", "kind": "local"}]}
    )
    assert Worker(api.store, poll_seconds=0.05, lease_seconds=10).run(once=True) == 1
    refused = api.store.sweeps.get_sweep(launching["id"])
    assert refused is not None and refused["status"] == "error"
    assert "sweep refused" in (refused["error"] or "") and "launch" in (refused["error"] or "")


def test_cancel_is_for_the_submitter_or_an_admin_and_a_cancelled_sweep_never_runs(
    api: Api, srv: Any
) -> None:
    with api.client("submit") as client:
        sweep_id = client.post("/sweeps", json=sweep_body(srv)).json()["id"]
    other = api.store.create_api_token(name="t-other", scopes=["submit"])[0]
    with api.client(token=other) as client:
        refused = client.post(f"/sweeps/{sweep_id}/cancel")
    assert refused.status_code == 403 and "submitter" in refused.json()["detail"]
    with api.client("read") as reader:
        assert reader.post(f"/sweeps/{sweep_id}/cancel").status_code == 403
    with api.client("submit") as client:
        done = client.post(f"/sweeps/{sweep_id}/cancel")
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "cancelled" and done.json()["id"] == sweep_id
        again = client.post(f"/sweeps/{sweep_id}/cancel")
        assert again.status_code == 409 and "cancelled" in again.json()["detail"]
        assert client.post("/sweeps/0123456789abcdef/cancel").status_code == 404
    assert api.run_worker_once() == 0  # nothing left to claim
    assert api.store.sweeps.get_sweep(sweep_id)["runs"] == []  # type: ignore[index]


@pytest.mark.slow  # a real worker gates configurations until the cancel reaches it
def test_a_running_sweep_cancelled_through_rest_stops_between_configurations(
    api: Api, srv: Any
) -> None:
    import threading
    import time

    body = {**sweep_body(srv), "configs": [
        {"name": f"c{k}", "kind": "existing", "url": base_url(srv, "ok")} for k in range(4)
    ]}
    with api.client("admin") as client:
        sweep_id = client.post("/sweeps", json=body).json()["id"]
    # A short lease: the heartbeat (every lease/3) finds the cancel within a second.
    worker = Worker(api.store, poll_seconds=0.05, lease_seconds=1.5)
    thread = threading.Thread(target=worker.run, kwargs={"once": True}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not (api.store.sweeps.get_sweep(sweep_id) or {}).get("runs"):
        assert time.monotonic() < deadline and thread.is_alive(), "no configuration finished"
        time.sleep(0.05)
    with api.client("admin") as client:
        assert client.post(f"/sweeps/{sweep_id}/cancel").json()["status"] == "cancelled"
    thread.join(120)
    assert not thread.is_alive()
    sweep = api.store.sweeps.get_sweep(sweep_id)
    assert sweep is not None and sweep["status"] == "cancelled"
    # The configuration in progress at the cancel may finish; none after it starts.
    assert 1 <= len(sweep["runs"]) <= 2, sweep["runs"]


# ---- issue 37, N4 and N6: the server's bounds hold for sweeps as for runs --------------------


def test_a_sweep_is_bounded_by_the_servers_item_setting_at_submission_and_in_the_worker(
    api: Api, srv: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``EVALSVC_MAX_ITEMS`` bounds a sweep's items per suite like a run's (they used to be
    queued, and a worker ran a 10,001-item quality run): 422 over REST, ``UsageError`` for a
    sweep schedule, and a stored sweep over the bound, or one queued before the setting was
    lowered, ends ``error`` in the worker with the reason, before any request is sent."""
    over = limits.SERVER_MAX_ITEMS + 1
    with api.client("submit") as client:
        resp = client.post("/sweeps", json={**sweep_body(srv), "samples": over})
        assert resp.status_code == 422, resp.text
        detail = resp.json()["detail"]
        assert f"samples is {over}" in detail and "EVALSVC_MAX_ITEMS" in detail
        assert "`evalsvc sweep`" in detail  # the way out: run it in-process
        monkeypatch.setenv("EVALSVC_MAX_ITEMS", "2")
        # A catalog suite's own size counts too (no samples override: its 4 probes).
        own = client.post("/sweeps", json={k: v for k, v in sweep_body(srv).items()
                                           if k != "samples"})
        assert own.status_code == 422 and "determinism-smoke plans" in own.json()["detail"]
        monkeypatch.setenv("EVALSVC_MAX_ITEMS", "32")
        at = client.post("/sweeps", json=sweep_body(srv))  # samples 32: at the bound
        assert at.status_code == 202, at.text
    with pytest.raises(UsageError, match="EVALSVC_MAX_ITEMS"):
        registry.add_sweep_schedule(
            api.store, name="big", cron="0 * * * *",
            spec=SweepSpec.model_validate({**sweep_body(srv), "samples": over}),
        )
    # A row written past the API (an older server, the database itself), and the sweep queued
    # above with the setting lowered since: the worker refuses both with the reason.
    slipped = api.store.sweeps.create_sweep(
        SweepSpec.model_validate({**sweep_body(srv), "samples": over}).model_dump(mode="json")
    )
    monkeypatch.setenv("EVALSVC_MAX_ITEMS", "31")
    assert Worker(api.store, poll_seconds=0.05, lease_seconds=10).run(once=True) == 2
    for sweep_id in (slipped["id"], at.json()["id"]):
        sweep = api.store.sweeps.get_sweep(sweep_id)
        assert sweep is not None and sweep["status"] == "error", sweep
        assert "sweep refused: too many items" in (sweep["error"] or "")
        assert "EVALSVC_MAX_ITEMS" in (sweep["error"] or "") and not sweep["runs"]
    assert api.store.list_runs() == []  # no quality run was started


def test_a_sweeps_capacity_measurement_is_bounded_at_submission_and_in_the_worker(
    api: Api, srv: Any
) -> None:
    """The schema allows 56 million requests per configuration (10,000 per point, 64 points,
    20 ABBA blocks); a sweep submitted to the server may send ``MAX_SWEEP_SPEED_REQUESTS``."""
    huge = {"requests": 10_000, "max_points": 64, "blocks": 20, "warmup": 1000, "refine": 6}
    with api.client("submit") as client:
        resp = client.post("/sweeps", json=sweep_body(srv, **huge))
        assert resp.status_code == 422, resp.text
        assert "56,080,000 requests per configuration" in resp.json()["detail"]
        assert "`evalsvc sweep`" in resp.json()["detail"]
        off = client.post("/sweeps", json=sweep_body(srv, **huge, enabled=False))
        assert off.status_code == 202, off.text  # speed off: nothing is measured
    slipped = api.store.sweeps.create_sweep(
        SweepSpec.model_validate(sweep_body(srv, **huge)).model_dump(mode="json")
    )
    assert api.store.sweeps.cancel_sweep(off.json()["id"])  # only the slipped one is claimed
    assert Worker(api.store, poll_seconds=0.05, lease_seconds=10).run(once=True) == 1
    sweep = api.store.sweeps.get_sweep(slipped["id"])
    assert sweep is not None and sweep["status"] == "error"
    assert "sweep refused: too many speed requests" in (sweep["error"] or "")


_INF, _NAN = float("inf"), float("nan")
#: Float fields of a sweep spec (and the run options) that must be finite and in range: each
#: was stored (202) on SQLite, and refused only by PostgreSQL itself.
BAD_SWEEP_FLOATS: dict[str, dict[str, Any]] = {
    "start_rps Infinity": {"speed": {"start_rps": _INF}},
    "start_rps 1e308": {"speed": {"start_rps": 1e308}},
    "slo_ttft_ms Infinity": {"speed": {"slo_ttft_ms": _INF}},
    "slo_tpot_ms NaN": {"speed": {"slo_tpot_ms": _NAN}},
    "health_timeout_s Infinity": {"health_timeout_s": _INF},
    "health_timeout_s a year": {"health_timeout_s": 3.2e7},
    "rates -1": {"speed": {"rates": [1.0, -1]}},
    "rates 0": {"speed": {"rates": [0]}},
    "rates 1e308": {"speed": {"rates": [1e308]}},
    "rates NaN": {"speed": {"rates": [_NAN]}},
    "rates Infinity": {"speed": {"rates": [_INF]}},
    "rates -Infinity": {"speed": {"rates": [-_INF]}},
    "growth Infinity": {"speed": {"growth": _INF}},
    "growth 1e308": {"speed": {"growth": 1e308}},
    "burstiness 1e-300": {"speed": {"burstiness": 1e-300}},
    "burstiness NaN": {"speed": {"burstiness": _NAN}},
    "slo_attainment NaN": {"speed": {"slo_attainment": _NAN}},
    "error_budget Infinity": {"speed": {"error_budget": _INF}},
    "confidence NaN": {"speed": {"confidence": _NAN}},
    "saturation_tolerance NaN": {"speed": {"saturation_tolerance": _NAN}},
    "samples past MAX_ITEMS": {"samples": limits.MAX_ITEMS + 1},
    "seed 2^64": {"seed": 2**64},
}


@pytest.mark.parametrize("case", list(BAD_SWEEP_FLOATS))
def test_a_sweep_float_that_is_not_finite_or_out_of_range_is_422_and_stores_nothing(
    api: Api, srv: Any, case: str
) -> None:
    """Refused by the schema itself (``allow_inf_nan=False`` and a bound per field, JSON's
    ``Infinity``/``NaN`` tokens included), on either backend, never a database error."""
    body = sweep_body(srv)
    for key, value in BAD_SWEEP_FLOATS[case].items():
        body[key] = {**body[key], **value} if isinstance(value, dict) else value
    raw = json.dumps(body).encode()  # Python writes inf/nan as JSON's Infinity/NaN tokens
    with api.client("admin") as client:
        resp = client.post("/sweeps", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code == 422, f"{case}: {resp.status_code} {resp.text[:300]}"
    problem = resp.json()
    field = next(iter(BAD_SWEEP_FLOATS[case].values()))
    name = next(iter(field)) if isinstance(field, dict) else next(iter(BAD_SWEEP_FLOATS[case]))
    assert name in problem["detail"], problem["detail"]
    assert "database" not in problem["detail"].lower()
    assert api.store.sweeps.list_sweeps() == []


def test_rates_at_the_bounds_are_stored_and_read_back(api: Api, srv: Any) -> None:
    body = sweep_body(srv, enabled=False, rates=[1e-3, limits.MAX_RATE_RPS],
                      start_rps=limits.MAX_RATE_RPS, growth=limits.MAX_RATE_GROWTH,
                      slo_ttft_ms=limits.MAX_SLO_MS)
    body["health_timeout_s"] = limits.MAX_HEALTH_TIMEOUT_S
    with api.client("submit") as client:
        resp = client.post("/sweeps", json=body)
        assert resp.status_code == 202, resp.text
        stored = client.get(f"/sweeps/{resp.json()['id']}").json()
    assert stored["status"] == "queued"
    got = api.store.sweeps.get_sweep(resp.json()["id"])
    assert got is not None
    assert got["spec"]["speed"]["rates"] == [1e-3, limits.MAX_RATE_RPS]
    assert got["spec"]["health_timeout_s"] == limits.MAX_HEALTH_TIMEOUT_S
