"""Issue 17, breaks 8, 13, 15 and 17, against the real API server on loopback (SQLite and
PostgreSQL) and real workers running the real executor.

- Break 8: a non-HTTP service on an allowed host made run errors quote its status or header
  line (``illegal status line: ... secret_key=abc123``), visible to every read token.
- Break 13: ``/?to=9999-12-31`` answered 500 (``OverflowError``).
- Break 15: a run could pose as a registered endpoint by naming it while testing another URL.
- Break 17: dashboard login and logout could be triggered cross-site (the Chromium probe is in
  ``tests/dashboard/test_csrf.py``).
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from evalsvc.scheduler import Worker

from .conftest import Api
from .hostile_peers import raw_server

PEER_SECRET = "secret_key=abc123"


# ---- break 8: protocol lines of a non-HTTP peer ---------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        f"SSH-2.0-OpenSSH_9.6 {PEER_SECRET}\r\n".encode(),
        f"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nbroken header {PEER_SECRET}\r\n\r\n{{}}".encode(),
        f"HTTP/1.1 2x0 {PEER_SECRET}\r\n\r\n".encode(),
    ],
    ids=["ssh-banner", "bad-header-line", "bad-status-code"],
)
def test_run_errors_name_the_failure_never_the_peer_bytes(api: Api, reply: bytes) -> None:
    with raw_server(reply) as peer:
        with api.client("submit") as submitter:
            resp = submitter.post("/runs", json={
                "baseline": {"url": peer.url}, "candidates": [{"url": peer.url}],
                "suites": ["reasoning-smoke"], "options": {"samples": 2}})
            assert resp.status_code == 202, resp.text
            run_id = resp.json()["id"]
        assert Worker(api.store, poll_seconds=0.05, lease_seconds=10).run(once=True) == 1
        assert peer.connections >= 1  # the worker did talk to it
    run = api.store.get_run(run_id)
    assert run is not None and run.verdict == "error" and run.error
    assert "protocol error: the answer is not valid HTTP" in run.error
    with api.client("read") as reader:
        shown = [run.error, reader.get(f"/runs/{run_id}").text,
                 reader.get("/runs").text]
    shown += [json.dumps(s.model_dump()) for s in api.store.get_samples(run_id)]
    assert all(PEER_SECRET not in text and "abc123" not in text for text in shown)


# ---- break 13: a date past datetime's range ----------------------------------------------------


def test_dashboard_date_filters_out_of_range_are_reported_not_500(api: Api) -> None:
    bearer = {"Authorization": f"Bearer {api.tokens['read']}"}
    with httpx.Client(base_url=api.base_url, headers=bearer, timeout=60) as http:
        for query in ("to=9999-12-31", "from=9999-12-31&to=9999-12-31", "to=0001-01-01",
                      "from=0001-01-01", "to=99999-01-01"):
            resp = http.get(f"/?{query}")
            assert resp.status_code == 200, (query, resp.status_code)
        far = http.get("/?to=9999-12-31")
    assert "past the last date" in far.text


# ---- break 15: a run posing as a registered endpoint -----------------------------------------------


def test_a_run_cannot_pose_as_a_registered_endpoint(api: Api) -> None:
    real, other = "http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"
    with api.client("admin") as admin:
        assert admin.post("/endpoints", json={"name": "prod-gpu", "url": real}).status_code == 201

    def body(endpoint: dict[str, str]) -> dict[str, object]:
        return {"baseline": endpoint, "candidates": [{"url": other, "name": "mine"}],
                "suites": ["needle-smoke"], "options": {"samples": 2}}

    with api.client("submit") as submitter, api.client("admin") as admin:
        posing = submitter.post("/runs", json=body({"url": other, "name": "prod-gpu"}))
        assert posing.status_code == 422, posing.text
        assert "registered endpoint with another URL" in posing.text
        schedule = admin.post("/schedules", json={
            "name": "nightly", "cron": "0 3 * * *",
            "template": body({"url": other, "name": "prod-gpu"})})
        assert schedule.status_code == 422, schedule.text
        by_name = submitter.post("/runs", json=body({"name": "prod-gpu"}))
        same_url = submitter.post("/runs", json=body({"url": real + "/", "name": "prod-gpu"}))
        assert by_name.status_code == same_url.status_code == 202
    with api.client("read") as reader:
        runs = reader.get("/runs").json()
    assert {r["id"] for r in runs} == {by_name.json()["id"], same_url.json()["id"]}
    assert all(r["spec"]["baseline"]["url"].rstrip("/") == real for r in runs)


# ---- break 17: CSRF on the dashboard's forms -------------------------------------------------------


def _form_token(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html[:500]
    return found[1]


def test_login_and_logout_refuse_cross_site_posts(api: Api) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    token = api.tokens["read"]
    with httpx.Client(base_url=api.base_url, timeout=60) as browser:
        csrf = _form_token(browser.get("/login").text)
        assert browser.cookies.get("evalsvc_csrf") == csrf
        own = {**form, "Origin": api.base_url}
        good = f"token={token}&next=/&csrf={csrf}"
        attempts = {
            "another origin": (good, {**form, "Origin": "http://evil.example"}),
            "opaque origin": (good, {**form, "Origin": "null"}),
            "another referer": (good, {**form, "Referer": "http://evil.example/page"}),
            "no token": (f"token={token}&next=/", own),
            "wrong token": (f"token={token}&next=/&csrf={'x' * 43}", own),
        }
        for what, (content, headers) in attempts.items():
            resp = browser.post("/login", content=content, headers=headers)
            assert resp.status_code == 403, what
            assert "evalsvc_token" not in resp.headers.get("set-cookie", ""), what
        # A cross-site form carries the token field but never the SameSite=Strict cookie.
        with httpx.Client(base_url=api.base_url, timeout=60) as stranger:
            resp = stranger.post("/login", content=good, headers=form)
            assert resp.status_code == 403
        signed_in = browser.post("/login", content=good, headers=own, follow_redirects=False)
        assert signed_in.status_code == 303 and browser.cookies.get("evalsvc_token") == token
        page = browser.get("/")
        assert page.status_code == 200
        csrf = _form_token(page.text)  # the sign-out form carries it too

        refused = browser.post("/logout", content=f"csrf={csrf}",
                               headers={**form, "Origin": "http://evil.example"})
        assert refused.status_code == 403 and "set-cookie" not in {
            k.lower() for k in refused.headers if "evalsvc_token" in refused.headers[k]}
        refused = browser.post("/logout", content="", headers=own)
        assert refused.status_code == 403
        assert browser.get("/", follow_redirects=False).status_code == 200  # still signed in
        out = browser.post("/logout", content=f"csrf={csrf}", headers=own,
                           follow_redirects=False)
        assert out.status_code == 303 and browser.cookies.get("evalsvc_token") is None
        assert browser.get("/", follow_redirects=False).status_code == 303  # to /login
