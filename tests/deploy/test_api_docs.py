"""Offline API docs: ``/docs`` (Swagger UI) and ``/redoc`` reference only assets the app itself
serves (vendored in ``evalsvc/api/static``), and every one of them answers 200."""

from __future__ import annotations

import hashlib
import re
from html.parser import HTMLParser

import httpx
import pytest

from evalsvc.webapp import create_app
from tests.fixtures.loopback import uvicorn_app

from .conftest import REPO_ROOT

STATIC = REPO_ROOT / "evalsvc" / "api" / "static"
TIMEOUT = 60  # seconds per request: the server shares a loaded 2-core host (gzip of a 1 MB bundle)


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.refs.append(value)


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> object:
    url = f"sqlite:///{tmp_path_factory.mktemp('docs') / 'evalsvc.db'}"
    with uvicorn_app(create_app(url, auth=True)) as base:
        yield base


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_use_only_local_assets(base_url: str, page: str) -> None:
    resp = httpx.get(f"{base_url}{page}", timeout=TIMEOUT)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    html = resp.text
    assert "://" not in html, re.findall(r"\S*://\S*", html)  # no CDN, no fonts, no validator
    parser = _Refs()
    parser.feed(html)
    scripts = re.findall(r"""(?:url|spec-url)\s*[:=]\s*['"]([^'"]+)['"]""", html)
    refs = parser.refs + scripts
    assert any(r.endswith(".js") for r in refs), refs
    assert "/openapi.json" in html
    for ref in refs:
        assert ref.startswith("/"), ref
        asset = httpx.get(f"{base_url}{ref}", timeout=TIMEOUT)
        assert asset.status_code == 200, ref
        if ref.startswith("/static/api-docs/"):
            assert asset.content == (STATIC / ref.removeprefix("/static/api-docs/")).read_bytes()
    assert httpx.get(f"{base_url}/openapi.json", timeout=TIMEOUT).json()["info"]["title"] == "evalsvc"


def test_swagger_oauth2_redirect_is_local(base_url: str) -> None:
    resp = httpx.get(f"{base_url}/docs/oauth2-redirect", timeout=TIMEOUT)
    assert resp.status_code == 200 and "://" not in resp.text.replace("window.location", "")


def test_vendored_assets_match_their_readme() -> None:
    readme = (STATIC / "README.md").read_text()
    sums = re.findall(r"^([0-9a-f]{64})  (\S+)$", readme, flags=re.M)
    assert len(sums) == 3
    for digest, rel in sums:
        assert hashlib.sha256((STATIC / rel).read_bytes()).hexdigest() == digest, rel
    for license_file in ("swagger-ui/LICENSE", "swagger-ui/NOTICE", "redoc/LICENSE"):
        assert (STATIC / license_file).stat().st_size > 0
    assert "5.35.0" in readme and "2.5.4" in readme



def test_redoc_bundle_served_without_its_cdn_logo(base_url: str) -> None:
    """ReDoc's footer logo comes from cdn.redoc.ly in the vendored bundle; the served copy has
    no remote URL left that the page would load (issue 16), and comes gzipped and cached."""
    vendored = (STATIC / "redoc" / "redoc.standalone.js").read_bytes()
    assert b"https://cdn.redoc.ly/redoc/logo-mini.svg" in vendored  # what the rewrite removes
    resp = httpx.get(f"{base_url}/redoc/redoc.standalone.js", headers={"Accept-Encoding": "gzip"},
                     timeout=TIMEOUT)
    assert resp.status_code == 200 and resp.headers["content-encoding"] == "gzip"
    assert "max-age" in resp.headers["cache-control"] and resp.headers["etag"]
    assert b"cdn.redoc.ly" not in resp.content and len(resp.content) > 1_000_000
    again = httpx.get(f"{base_url}/redoc/redoc.standalone.js",
                      headers={"If-None-Match": resp.headers["etag"]}, timeout=TIMEOUT)
    assert again.status_code == 304
