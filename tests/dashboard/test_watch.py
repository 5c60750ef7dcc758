"""The page watcher the dashboard tests rely on (``tests/dashboard/conftest.py``, ``watch``).

Requests a document still had in flight when the page navigated away are aborted by the browser
(a polling page left mid-poll): not a failure of any page. A request the current page aborts or
that fails is. A loopback server of our own gives both, with a navigation slow enough that the
old page keeps polling while it is under way (the case CI failed on twice).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.dashboard.conftest import watch
from tests.fixtures.loopback import LoopbackHTTPServer, serving

PAGES = {
    # Polls every 50 ms; each poll takes 3 s, so several are in flight whenever it is left.
    "/polling": b"<html><body>A<script>setInterval(() => fetch('/slow?' + Date.now())"
                b".catch(() => {}), 50)</script></body></html>",
    "/next": b"<html><body>B</body></html>",
    # Aborts its own request: a failure of this page.
    "/aborts": b"<html><body>C<script>const c = new AbortController(); fetch('/slow', "
               b"{signal: c.signal}).catch(() => {}); setTimeout(() => c.abort(), 100)</script>"
               b"</body></html>",
}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        path = self.path.split("?")[0]
        if path == "/slow":
            time.sleep(3)
        if path == "/next":
            time.sleep(1)  # the old page polls on while the navigation is under way
        try:
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.end_headers()
            self.wfile.write(PAGES.get(path, b"ok"))
        except OSError:
            pass  # the browser gave up on it (the aborted polls)


@pytest.fixture
def site() -> Iterator[str]:
    with serving(LoopbackHTTPServer(_Handler)) as server:
        yield server.origin


def test_requests_left_behind_by_a_navigation_are_not_failures(browser: Any, site: str) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        w = watch(page)
        aborted: list[str] = []
        page.on("requestfailed", lambda req: aborted.append(req.url))
        page.goto(f"{site}/polling")
        page.wait_for_timeout(400)
        page.goto(f"{site}/next")
        page.wait_for_timeout(800)
        assert len(aborted) >= 2  # the browser did abort the old page's polls
        assert w.failed == []
        page.goto(f"{site}/aborts")
        page.wait_for_timeout(1000)
        assert w.failed == [f"failed: {site}/slow net::ERR_ABORTED"]
    finally:
        context.close()
