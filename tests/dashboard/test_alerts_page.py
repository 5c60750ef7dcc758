"""The alerts page and the runs list's alert badge in Chromium, over an alert real runs raised:
three in-process runs (``evalsvc.services.runs.compare``) against a loopback endpoint that
answers no JSON end in ``error`` and raise one ``error_streak`` alert."""

from __future__ import annotations

from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from tests.fixtures.faults import base_url, fault_server

from .conftest import Server, Watched, in_thread
from .test_pages import _clean, _open

LABEL = {"source": "alerts-test"}


def _streak(store: Store) -> list[str]:
    from evalsvc.services import runs

    ids = []
    with pytest.MonkeyPatch.context() as mp, fault_server() as srv:
        mp.setenv("EVALSVC_ALERT_ERROR_STREAK", "3")
        mp.delenv("EVALSVC_ALERT_WEBHOOKS", raising=False)
        dead = base_url(srv, "garbage")
        for _ in range(3):
            spec = RunSpec(baseline=EndpointRef(url=dead, name="alert-base"),
                           candidates=[EndpointRef(url=dead)], suites=["reasoning-smoke"],
                           options=RunOptions(samples=2), labels=LABEL)
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
