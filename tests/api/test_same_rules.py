"""The CLI and the REST API call one service (``evalsvc.services.registry``) for endpoints and
schedules, so the same bad input gets the same refusal: exit 2 from the CLI, 409/422 with the
same message from the API, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.cli import run_cli

from .conftest import Api
from .test_cli import BASE, CAND

_URL = "http://127.0.0.1:9003/v1"


def _cli(api: Api, *args: str) -> Any:
    return run_cli(*args, "--database-url", api.db_url)


@pytest.mark.parametrize(
    ("name", "url", "needle"),
    [
        ("ok-name", "not-a-url", "url"),
        ("ok-name", "ftp://127.0.0.1/v1", "url"),
        ("http://looks-like-a-url", _URL, "invalid endpoint name"),
        ("has space", _URL, "invalid endpoint name"),
        # A request URL copied from a curl line: refused alike, naming the base URL.
        ("ok-name", f"{_URL}/chat/completions", f"did you mean {_URL}?"),
    ],
)
def test_bad_endpoint_is_refused_alike(api: Api, name: str, url: str, needle: str) -> None:
    cli = _cli(api, "endpoints", "add", name, url)
    assert cli.returncode == 2 and needle in cli.stderr, cli.stderr
    with api.client("admin") as http:
        resp = http.post("/endpoints", json={"name": name, "url": url})
    assert resp.status_code == 422, resp.text
    if "did you mean" in needle:
        assert needle in resp.text
    assert api.store.list_endpoints() == []


def test_duplicate_endpoint_is_a_conflict_unless_replaced(api: Api) -> None:
    key = "EVALSVC_ENDPOINT_KEY_PROD"
    first = _cli(api, "endpoints", "add", "prod", _URL, "--api-key-env", key)
    assert first.returncode == 0, first.stderr
    again = _cli(api, "endpoints", "add", "prod", "http://127.0.0.1:9004/v1")
    assert again.returncode == 2 and "already exists" in again.stderr and "--replace" in again.stderr
    with api.client("admin") as http:
        resp = http.post("/endpoints", json={"name": "prod", "url": "http://127.0.0.1:9004/v1"})
    assert resp.status_code == 409 and "already exists" in resp.json()["detail"]
    # Nothing was overwritten, and the key reference is kept.
    (ref,) = api.store.list_endpoints()
    assert ref.url == _URL and ref.api_key_env == key
    replaced = _cli(api, "endpoints", "add", "prod", "http://127.0.0.1:9004/v1", "--replace")
    assert replaced.returncode == 0, replaced.stderr
    (ref,) = api.store.list_endpoints()
    assert ref.url == "http://127.0.0.1:9004/v1" and ref.api_key_env is None


def test_unknown_names_are_usage_errors_alike(api: Api) -> None:
    for args in (("endpoints", "remove", "ghost"), ("schedules", "remove", "ghost"),
                 ("tokens", "revoke", "ghost"), ("export", "0" * 32)):
        r = _cli(api, *args)
        assert r.returncode == 2, (args, r.stderr)
    with api.client("admin") as http:
        assert http.delete("/endpoints/ghost").status_code == 404
        assert http.delete("/schedules/ghost").status_code == 404


@pytest.mark.parametrize(
    ("cron", "suite", "needle"),
    [
        ("0 3 * * *", "no-such-suite", "unknown suite 'no-such-suite'"),
        ("* * *", "needle-smoke", "invalid cron"),
        ("0 3 * * *", "pyproject.toml", "unknown suite 'pyproject.toml'"),
    ],
)
def test_bad_schedule_is_refused_alike(api: Api, cron: str, suite: str, needle: str) -> None:
    cli = _cli(api, "schedules", "add", "nightly", "--cron", cron, "--baseline", BASE,
               "--candidate", CAND, "--suite", suite)
    assert cli.returncode == 2 and needle in cli.stderr, cli.stderr
    with api.client("admin") as http:
        resp = http.post(
            "/schedules",
            json={"name": "nightly", "cron": cron,
                  "template": {"baseline": {"url": BASE}, "candidates": [{"url": CAND}],
                               "suites": [suite]}},
        )
    assert resp.status_code == 422 and needle in resp.text, resp.text
    assert api.store.list_schedules() == []


def test_schedule_workers_would_refuse_is_refused_by_the_cli_too(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loopback not allowed: the workers would refuse every fired run, so the schedule is refused
    # now, by the CLI as by the API.
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "")
    cli = _cli(api, "schedules", "add", "nightly", "--cron", "0 3 * * *", "--baseline", BASE,
               "--candidate", CAND, "--suite", "needle-smoke")
    assert cli.returncode == 2 and "loopback" in cli.stderr, cli.stderr
    assert api.store.list_schedules() == []
