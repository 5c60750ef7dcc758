"""Issue 17, break 17, in a real browser: another site's page that auto-submits a form to the
dashboard's ``/logout`` or ``/login`` (the classic CSRF and login-CSRF probes) is refused, and
the victim's session is what it was. The attacker's page is served by a real loopback server on
``localhost``, another site than the dashboard's ``127.0.0.1`` for the browser.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from html import escape
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from evalsvc.db import Store
from tests.fixtures.loopback import LoopbackHTTPServer, serving

from .conftest import Server

pytestmark = pytest.mark.timeout(600)


@contextmanager
def _attacker_site(action: str, fields: dict[str, str]) -> Iterator[str]:
    """A page on http://localhost:PORT/ whose form posts ``fields`` to ``action`` on load."""
    inputs = "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">'
                     for k, v in fields.items())
    page = (f'<!doctype html><form id="f" method="post" action="{escape(action)}">{inputs}'
            '</form><script>document.getElementById("f").submit()</script>').encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

    with serving(LoopbackHTTPServer(Handler)) as server:
        yield f"http://localhost:{server.server_address[1]}/"


def _landing(page: Any, url: str, target: str) -> Any:
    """Open ``url`` and return the response of the cross-site post it makes to ``target``."""
    with page.expect_response(lambda r: r.url == target and r.request.method == "POST") as info:
        page.goto(url)
    return info.value


def test_another_site_cannot_sign_the_viewer_out(
    browser: Any, dash_server: Server, signed_in_state: dict[str, Any]
) -> None:
    context = browser.new_context(storage_state=signed_in_state)
    page = context.new_page()
    page.goto(dash_server.url + "/")
    assert page.url == dash_server.url + "/"  # signed in
    target = dash_server.url + "/logout"
    with _attacker_site(target, {"csrf": "guessed"}) as evil:
        resp = _landing(page, evil, target)
    assert resp.status == 403
    page.goto(dash_server.url + "/")
    assert page.url == dash_server.url + "/", "the cross-site post signed the viewer out"
    # The dashboard's own button still works.
    page.click("form[action='/logout'] button")
    page.wait_for_url(dash_server.url + "/login")
    context.close()


def test_another_site_cannot_sign_the_viewer_in_as_someone_else(
    browser: Any, dash_server: Server, dash_store: Store
) -> None:
    attacker_token, _ = dash_store.create_api_token(name="attacker", scopes=["read"])
    context = browser.new_context()
    page = context.new_page()
    page.goto(dash_server.url + "/login")  # the viewer has the dashboard's csrf cookie
    target = dash_server.url + "/login"
    with _attacker_site(target, {"token": attacker_token, "next": "/", "csrf": "x"}) as evil:
        resp = _landing(page, evil, target)
    assert resp.status == 403
    assert not [c for c in context.cookies() if c["name"] == "evalsvc_token"]
    page.goto(dash_server.url + "/")
    assert page.url.startswith(dash_server.url + "/login")
    context.close()
