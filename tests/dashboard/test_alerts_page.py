"""The alerts page and the runs list's alert badge in Chromium, over an alert real runs raised:
three in-process runs (``evalsvc.services.runs.compare``) against a loopback endpoint that
answers no JSON end in ``error`` and raise one ``error_streak`` alert. The page's
"Acknowledge" button: a reader is refused (403, the scope named), another site's form is refused,
a ``submit`` token acknowledges it (who and when shown, out of the open count and the badge), and
a second click from a page loaded before that is told who did (409)."""

from __future__ import annotations

from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from tests.fixtures.faults import base_url, fault_server

from .conftest import Server, Watched, in_thread, watch
from .test_csrf import _attacker_site, _landing
from .test_pages import _clean, _open

LABEL = {"source": "alerts-test"}


def _streak(store: Store, labels: dict[str, str] = LABEL) -> list[str]:
    from evalsvc.services import runs

    ids = []
    with pytest.MonkeyPatch.context() as mp, fault_server() as srv:
        mp.setenv("EVALSVC_ALERT_ERROR_STREAK", "3")
        mp.delenv("EVALSVC_ALERT_WEBHOOKS", raising=False)
        dead = base_url(srv, "garbage")
        for _ in range(3):
            spec = RunSpec(baseline=EndpointRef(url=dead, name="alert-base"),
                           candidates=[EndpointRef(url=dead)], suites=["reasoning-smoke"],
                           options=RunOptions(samples=2), labels=labels)
            with pytest.raises(Exception):  # noqa: B017 - each run ends in error: the point
                in_thread(runs.compare, spec, store=store)
            ids.append(store.list_runs(limit=1)[0].id)
    return ids


def test_the_alerts_page_and_the_runs_badge(
    page: Watched, dash_server: Server, dash_store: Store, shot: Any
) -> None:
    ids = _streak(dash_store)
    base = dash_server.url
    _open(page, f"{base}/alerts?kind=error_streak")
    row = page.page.locator(f"#alerts tr:has(a[href='/runs/{ids[-1]}'])")
    assert row.count() == 1
    assert "3 finished runs in a row ended in error" in row.inner_text()
    assert "critical" in row.inner_text() and "open" in row.inner_text()
    shot(page.page, "alerts", full=False)

    _open(page, f"{base}/?label=source%3Dalerts-test")
    badges = page.page.locator("#runs a.badge.alerts")
    assert badges.count() == 1  # the run that completed the streak, not the two before it
    assert badges.inner_text() == "1 alert"
    badges.click()
    page.page.wait_for_load_state("networkidle")
    assert page.page.url.endswith(f"/alerts?run={ids[-1]}")
    assert page.page.locator("#alerts tbody tr[data-alert]").count() == 1
    _open(page, f"{base}/alerts?kind=bogus")
    assert "kind must be one of" in page.page.inner_text(".problem")
    _clean(page, f"{base}/alerts")


def _clean_but(w: Watched, code: int) -> None:
    """No problem on the page but Chromium's console line for the one refusal it was meant to
    get."""
    expected = f"console: Failed to load resource: the server responded with a status of {code}"
    assert [p for p in w.problems() if not p.startswith(expected)] == [], w.problems()
    assert any(p.startswith(expected) for p in w.console_errors), w.console_errors


def _open_count(w: Watched) -> int:
    return int(w.page.inner_text("#open-count").split()[0])


def test_the_alerts_page_acknowledges_an_alert(
    browser: Any, page: Watched, dash_server: Server, dash_store: Store, shot: Any
) -> None:
    ids = _streak(dash_store, {"source": "alerts-ack-test"})
    (alert,) = dash_store.alerts.list_alerts(status="open", kind="error_streak", run_ids=ids[-1:],
                                            limit=10)
    base = dash_server.url
    listing = f"{base}/alerts?run={ids[-1]}"
    row = f"#alert-{alert['id']}"

    # A read-only viewer sees the button, and is told which scope it needs.
    page.allowed_status.add(403)
    _open(page, listing)
    assert "which this one lacks" in page.page.inner_text("main")
    page.page.click(f"{row} .ack-form button")
    page.page.wait_for_load_state("networkidle")
    assert "lacks the 'submit' scope" in page.page.inner_text("main")
    assert dash_store.alerts.get_alert(alert["id"])["status"] == "open"

    acker, _ = dash_store.create_api_token(name="dashboard-acker", scopes=["submit"])
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        w = watch(context.new_page())
        w.page.goto(f"{base}/login")
        w.page.fill("input[name=token]", acker)
        w.page.click("button[type=submit]")
        w.page.wait_for_url(f"{base}/")
        # Another site's auto-submitting form: the browser does not send the SameSite=Strict
        # session cookie along, so it is sent to sign in, and nothing is acknowledged. (That
        # cookie-less visit to /login sets a new form token: pages loaded before it are stale.)
        target = f"{base}/alerts/{alert['id']}/acknowledge"
        evil_tab = context.new_page()
        with _attacker_site(target, {"csrf": "guessed"}) as evil:
            landed = _landing(evil_tab, evil, target)
        assert landed.status == 303 and "/login?next=" in landed.headers["location"]
        evil_tab.close()
        # With the session (a client that sends it anyway): another Origin, or a form without
        # the page's token, is refused.
        csrf = next(c["value"] for c in context.cookies() if c["name"] == "evalsvc_csrf")
        other = w.page.request.post(target, form={"csrf": csrf},
                                    headers={"Origin": "http://localhost:9"}, max_redirects=0)
        assert other.status == 403 and "another site" in other.text()
        guessed = w.page.request.post(target, form={"csrf": "guessed"}, max_redirects=0)
        assert guessed.status == 403 and "reload the page" in guessed.text()
        assert dash_store.alerts.get_alert(alert["id"])["status"] == "open"

        _open(w, listing)
        before = _open_count(w)
        assert before >= 1
        assert w.page.get_attribute(row, "data-status") == "open"
        assert "which this one lacks" not in w.page.inner_text("main")
        stale = watch(context.new_page())  # a second tab, loaded before the acknowledgement
        _open(stale, listing)

        w.page.click(f"{row} .ack-form button")
        w.page.wait_for_url(f"{listing}#alert-{alert['id']}")
        w.page.wait_for_load_state("networkidle")
        cell = w.page.inner_text(f"{row} td.ack")
        stored = dash_store.alerts.get_alert(alert["id"])
        assert stored["status"] == "acknowledged"
        assert stored["acknowledged_by"] == "dashboard-acker"
        when = stored["acknowledged_at"].strftime("%Y-%m-%d %H:%M:%S")
        assert cell == f"acknowledged by dashboard-acker {when}", cell
        assert w.page.locator(f"{row} .ack-form").count() == 0
        assert _open_count(w) == before - 1
        shot(w.page, "alerts-acknowledged", full=False)

        stale.allowed_status.add(409)
        stale.page.click(f"{row} .ack-form button")
        stale.page.wait_for_load_state("networkidle")
        assert ("already acknowledged (by dashboard-acker)"
                in stale.page.inner_text("main")), stale.page.inner_text("main")

        # The runs list's badge went with it: the streak's last run has no open alert left.
        _open(w, f"{base}/?label=source%3Dalerts-ack-test")
        assert w.page.locator("#runs tbody tr").count() == 3
        assert w.page.locator("#runs a.badge.alerts").count() == 0
        # Listed among the acknowledged ones (the redirect above kept the page's run filter).
        _open(w, f"{base}/alerts?status=acknowledged&run={ids[-1]}")
        assert w.page.locator("#alerts tbody tr[data-alert]").count() == 1
        _clean(w, listing)
        _clean_but(stale, 409)
    finally:
        context.close()
    _clean_but(page, 403)
