"""Endpoint URL hygiene: one check at the door, one redaction for everything shown or stored.

Contract (stdlib only, no I/O, importable from any layer):
- ``check_endpoint_url(url)`` returns the normalised base URL (no trailing ``/``) or raises
  ``UrlError`` with a one-line reason: only ``http``/``https`` with a host, and never userinfo
  (``http://user:pw@host/v1``), because httpx would turn it into a Basic-auth header sent to
  whatever the URL points at, and because URLs are shown to every read-scoped token.
- ``redact_url(url)`` and ``redact_text(text)`` replace userinfo with ``***`` so data stored
  before the check (old runs, reports, snapshots) never shows a credential again.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

REDACTED = "***"

# scheme://userinfo@ inside free text (error messages, log lines). The userinfo part stops at
# the first character that cannot be in it unescaped, so "@" later in a path is left alone.
_USERINFO_IN_TEXT = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<info>[^/?#@\s]*)@")


class UrlError(ValueError):
    """An endpoint URL is refused; ``str()`` says why in one line."""


def check_endpoint_url(url: str) -> str:
    """The normalised base URL, or ``UrlError`` (bad scheme, no host, credentials in it)."""
    value = url.strip().rstrip("/")
    try:
        parts = urlsplit(value)
        port = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError as exc:
        raise UrlError(f"invalid endpoint URL {redact_url(value)!r}: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise UrlError("url must be an http(s) base URL, e.g. http://127.0.0.1:8000/v1")
    if "@" in parts.netloc:
        raise UrlError(
            f"endpoint URL {redact_url(value)!r} carries credentials (user:password@host); "
            "they would be sent to the endpoint and shown to every reader of the run: register "
            "the endpoint with api_key_env instead"
        )
    if not parts.hostname:
        raise UrlError(f"endpoint URL {value!r} has no host")
    del port
    return value


def redact_url(url: str) -> str:
    """``url`` with any userinfo replaced by ``***`` (everything else unchanged)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{REDACTED}@{host}"))


def redact_text(text: str) -> str:
    """Every ``scheme://userinfo@`` in free text with the userinfo replaced by ``***``."""
    return _USERINFO_IN_TEXT.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
