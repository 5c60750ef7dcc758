"""Bounds on client input (issue 9, "Wrong answers to bad input"): every request that used to be
a 500 on PostgreSQL or SQLite (integers past int4, dates past 9999, NUL bytes, over-long
strings) or that exhausted the service (a trillion samples, 100,000 suite names, a huge body)
is refused with a 4xx in the one ``Problem`` shape, on both backends, and stores nothing.
Values at the bounds are accepted, which shows the bounds fit the database's columns.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from evalsvc import limits

from .conftest import Api

BASE = "http://127.0.0.1:9001/v1"
CAND = "http://127.0.0.1:9002/v1"
# Server mode reads API keys only from variables under this prefix (docs/security.md).
_KEY_PREFIX = "EVALSVC_ENDPOINT_KEY_"


def run_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "baseline": {"url": BASE},
        "candidates": [{"url": CAND}],
        "suites": ["needle-smoke"],
        "options": {"samples": 5},
    }
    body.update(overrides)
    return body


def schedule_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "nightly", "cron": "0 3 * * *", "template": run_body()}
    body.update(overrides)
    return body


def endpoint_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "bf16", "url": BASE}
    body.update(overrides)
    return body


# (method, path, json body or raw bytes) of requests that must be refused.
BAD: dict[str, tuple[str, str, Any]] = {
    "priority 2^31 (int4 overflow on PostgreSQL)": ("POST", "/runs", run_body(priority=2**31)),
    "priority 2^63": ("POST", "/runs", run_body(priority=2**63)),
    "priority below int4": ("POST", "/runs", run_body(priority=-(2**31) - 1)),
    "schedule priority 2^63": (
        "POST",
        "/schedules",
        schedule_body(template=run_body(priority=2**63)),
    ),
    "start_at 9999-12-31T23:59:59": (
        "POST",
        "/schedules",
        schedule_body(start_at="9999-12-31T23:59:59"),
    ),
    "start_at 0001-01-01 with an offset": (
        "POST",
        "/schedules",
        schedule_body(start_at="0001-01-01T00:00:00+01:00"),
    ),
    "NUL in a label value": ("POST", "/runs", run_body(labels={"team": "a\x00b"})),
    "NUL in a label key": ("POST", "/runs", run_body(labels={"a\x00": "b"})),
    "NUL in a candidate url": ("POST", "/runs", run_body(candidates=[{"url": CAND + "\x00"}])),
    "NUL in a suite name": ("POST", "/runs", run_body(suites=["needle\x00smoke"])),
    "NUL in an endpoint model": ("POST", "/endpoints", endpoint_body(model="m\x00")),
    "NUL in a cron": ("POST", "/schedules", schedule_body(cron="0 3 * * *\x00")),
    "NUL in a path name": ("GET", "/endpoints/bf%0016", None),
    "NUL in a schedule path": ("DELETE", "/schedules/a%00b", None),
    "NUL in a run id": ("GET", "/runs/ab%00cd/report", None),
    "NUL in the endpoint filter": ("GET", "/runs?endpoint=http://a%00", None),
    "url over 2000 characters": (
        "POST",
        "/endpoints",
        endpoint_body(url="http://h/" + "a" * limits.MAX_URL),
    ),
    "model over 500 characters": (
        "POST",
        "/endpoints",
        endpoint_body(model="m" * (limits.MAX_MODEL + 1)),
    ),
    "api_key_env over 200 characters": (
        "POST",
        "/endpoints",
        endpoint_body(api_key_env="K" * (limits.MAX_ENV_NAME + 1)),
    ),
    "candidate label over 200 characters": (
        "POST",
        "/runs",
        run_body(candidates=[{"url": CAND, "name": "n" * (limits.MAX_LABEL_NAME + 1)}]),
    ),
    "cron over 200 characters": ("POST", "/schedules", schedule_body(cron="0 " * 150)),
    "a trillion samples": ("POST", "/runs", run_body(options={"samples": 999_999_999_999})),
    "samples one past the bound": (
        "POST",
        "/runs",
        run_body(options={"samples": limits.MAX_ITEMS + 1}),
    ),
    # Within what an in-process compare may run, past what a client of the server may submit.
    "samples one past the server's bound (EVALSVC_MAX_ITEMS)": (
        "POST",
        "/runs",
        run_body(options={"samples": limits.SERVER_MAX_ITEMS + 1}),
    ),
    "a schedule past the server's bound": (
        "POST",
        "/schedules",
        schedule_body(template=run_body(options={"samples": limits.MAX_ITEMS})),
    ),
    "seed 2^64": ("POST", "/runs", run_body(options={"seed": 2**64})),
    "concurrency 10^6": ("POST", "/runs", run_body(options={"concurrency": 10**6})),
    "request timeout of a year": (
        "POST",
        "/runs",
        run_body(options={"request_timeout_s": 3.2e7}),
    ),
    "NaN margin": (
        "POST",
        "/runs",
        json.dumps(run_body(options={"margin": float("nan")})).encode(),
    ),
    "33 labels": ("POST", "/runs", run_body(labels={f"k{i}": "v" for i in range(33)})),
    "label value over 256": ("POST", "/runs", run_body(labels={"k": "v" * 257})),
    "65 suite names": ("POST", "/runs", run_body(suites=["needle-smoke"] * 65)),
    "17 candidates": ("POST", "/runs", run_body(candidates=[{"url": CAND}] * 17)),
    "100,000 suite names": ("POST", "/runs", run_body(suites=["needle-smoke"] * 100_000)),
    # Under the body cap: refused by the list bound, before any name is resolved.
    "100,000 one-letter suite names": ("POST", "/runs", run_body(suites=["a"] * 100_000)),
    "a body over 1 MiB": ("POST", "/runs", b"{" + b" " * (limits.MAX_BODY_BYTES + 1) + b"}"),
    "suite name of a file in the server's directory": (
        "POST",
        "/runs",
        run_body(suites=["pyproject.toml"]),
    ),
    "margin 5 on a proportion": ("POST", "/runs", run_body(options={"margin": 5})),
}


def send(client: httpx.Client, method: str, path: str, body: Any) -> httpx.Response:
    if isinstance(body, bytes):
        return client.request(
            method, path, content=body, headers={"content-type": "application/json"}
        )
    return client.request(method, path, json=body)


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_refused_with_a_problem_and_stores_nothing(api: Api, case: str) -> None:
    method, path, body = BAD[case]
    with api.client("admin") as client:
        resp = send(client, method, path, body)
        assert resp.status_code in (413, 422), f"{case}: {resp.status_code} {resp.text[:300]}"
        problem = resp.json()
        assert isinstance(problem["detail"], str) and problem["detail"]
        if "errors" in problem and problem["errors"] is not None:
            assert all({"loc", "msg", "type"} <= set(e) for e in problem["errors"])
        assert client.get("/runs").json() == []
        assert client.get("/schedules").json() == []
        assert client.get("/endpoints").json() == []


def test_a_suite_file_name_is_not_read_from_the_servers_directory(api: Api) -> None:
    """``pyproject.toml`` exists in the server's working directory: the answer is "unknown
    suite", and nothing of the file comes back."""
    with api.client("submit") as client:
        resp = client.post("/runs", json=run_body(suites=["pyproject.toml"]))
    assert resp.status_code == 422
    assert "unknown suite 'pyproject.toml'" in resp.json()["detail"]
    assert "evalsvc" not in resp.json()["detail"].split("known suites")[0]
    assert "[project]" not in resp.text


def test_values_at_the_bounds_fit_the_database(api: Api) -> None:
    """int4 extremes, the largest sample count, 32 labels of full length and the widest
    strings are stored and read back on both backends."""
    labels = {
        f"{i:02d}" + "k" * (limits.MAX_LABEL_KEY - 2): "v" * limits.MAX_LABEL_VALUE
        for i in range(limits.MAX_LABELS)
    }
    with api.client("admin") as client:
        for priority in (limits.INT4_MAX, limits.INT4_MIN):
            resp = client.post(
                "/runs",
                json=run_body(
                    priority=priority,
                    labels=labels,
                    options={"samples": limits.SERVER_MAX_ITEMS, "seed": limits.MAX_SEED},
                    candidates=[{"url": CAND, "name": "n" * limits.MAX_LABEL_NAME}],
                ),
            )
            assert resp.status_code == 202, resp.text
            run = client.get(f"/runs/{resp.json()['id']}").json()
            assert run["spec"]["priority"] == priority
            assert run["spec"]["labels"] == labels
        long_url = "http://h/" + "a" * (limits.MAX_URL - len("http://h/"))
        resp = client.post(
            "/endpoints",
            json=endpoint_body(
                url=long_url,
                model="m" * limits.MAX_MODEL,
                api_key_env=_KEY_PREFIX + "K" * (limits.MAX_ENV_NAME - len(_KEY_PREFIX)),
            ),
        )
        assert resp.status_code == 201, resp.text
        assert client.get("/endpoints/bf16").json()["url"] == long_url
        resp = client.post("/schedules", json=schedule_body(start_at="2099-12-31T23:59:59Z"))
        assert resp.status_code == 201, resp.text


def test_the_servers_item_bound_is_a_setting(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``EVALSVC_MAX_ITEMS`` bounds what a client may submit (422 with the setting's name and
    the way out), read when the run is submitted; at the bound the run is queued."""
    monkeypatch.setenv("EVALSVC_MAX_ITEMS", "50")
    with api.client("submit") as client:
        over = client.post("/runs", json=run_body(options={"samples": 51}))
        assert over.status_code == 422, over.text
        detail = over.json()["detail"]
        assert "options.samples is 51" in detail and "at most 50 items" in detail
        assert "EVALSVC_MAX_ITEMS" in detail and "in-process" in detail
        assert client.get("/runs").json() == []
        at = client.post("/runs", json=run_body(options={"samples": 50}))
        assert at.status_code == 202, at.text


def test_the_claim_order_holds_at_the_int4_extremes(api: Api) -> None:
    with api.client("submit") as client:
        low = client.post("/runs", json=run_body(priority=limits.INT4_MIN)).json()["id"]
        high = client.post("/runs", json=run_body(priority=limits.INT4_MAX)).json()["id"]
    first = api.store.claim_run(worker_id="w", lease_seconds=10)
    second = api.store.claim_run(worker_id="w", lease_seconds=10)
    assert first is not None and second is not None
    assert (first.id, second.id) == (high, low)


def test_a_validation_error_lists_every_field(api: Api) -> None:
    with api.client("submit") as client:
        resp = client.post(
            "/runs", json=run_body(priority=2**40, options={"samples": 0, "concurrency": 0})
        )
    assert resp.status_code == 422
    problem = resp.json()
    locs = {tuple(e["loc"]) for e in problem["errors"]}
    assert {
        ("body", "priority"),
        ("body", "options", "samples"),
        ("body", "options", "concurrency"),
    } <= locs
    assert "(and 2 more)" in problem["detail"]


def test_a_run_stored_before_the_bounds_is_listed_and_fails_cleanly(api: Api) -> None:
    """A run an older evalsvc queued with ``samples: 50000`` and 40 labels: reading it still
    works (no 500), and a worker ends it ``error`` with the bound's message instead of
    crashing or planning 50,000 items."""
    import sqlalchemy as sa

    from evalsvc.db._orm import RunRow
    from evalsvc.scheduler import default_executor

    with api.client("submit") as client:
        run_id = client.post("/runs", json=run_body()).json()["id"]
    with api.store._db.session() as session:  # noqa: SLF001 - plays an older database
        row = session.scalar(sa.select(RunRow).where(RunRow.id == run_id))
        assert row is not None
        row.spec = {
            **row.spec,
            "options": {**row.spec["options"], "samples": 50_000},
            "labels": {f"k{i}": "v" for i in range(40)},
        }
    with api.client("read") as client:
        listed = client.get("/runs")
        assert listed.status_code == 200, listed.text
        assert [r["id"] for r in listed.json()] == [run_id]
        one = client.get(f"/runs/{run_id}")
        assert one.status_code == 200 and one.json()["spec"]["options"]["samples"] == 50_000
    assert api.run_worker_once(executor=default_executor) == 1
    with api.client("read") as client:
        run = client.get(f"/runs/{run_id}").json()
    assert run["status"] == "error" and "10000" in run["error"]
