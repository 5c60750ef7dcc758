"""Endpoint URL hygiene: one check at the door, one redaction for everything shown or stored.

Contract (stdlib only, no I/O, importable from any layer):
- ``check_endpoint_url(url)`` returns the normalised base URL (no trailing ``/``) or raises
  ``UrlError`` with a one-line reason: only ``http``/``https`` with a host, and never userinfo
  (``http://user:pw@host/v1``), because HTTP clients (aiohttp, httpx) turn it into a Basic-auth header sent to
  whatever the URL points at, and because URLs are shown to every read-scoped token. A URL
  that ends in an OpenAI route (``.../v1/chat/completions``, copied from a curl line) is
  refused with the base URL it names: ``did you mean http://host:8000/v1?``
  (``route_base_url``).
- ``redact_url(url)`` and ``redact_text(text)`` are the one redaction for every URL shown
  anywhere (endpoint and database URLs, every view, message and log line): userinfo becomes
  ``***`` and so does the value of every credential-like query or fragment parameter
  (``password``, ``token``, ``key``, ``secret``, ``sig``, ``api_key``, ... in any case, see
  ``_SECRET_PARAM``), so data stored before the check and URLs given in a parameter never show
  a credential again.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

REDACTED = "***"

# scheme://userinfo@ inside free text (error messages, log lines). The userinfo part stops at
# the first character that cannot be in it unescaped, so "@" later in a path is left alone.
_USERINFO_IN_TEXT = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<info>[^/?#@\s]*)@")

# A parameter name that may carry a credential (matched case-insensitively anywhere in the
# decoded name): libpq's ``password``/``sslpassword``, ``token``/``access_token``, ``key``/
# ``api_key``/``apikey``, ``secret``/``client_secret``, signed-URL ``sig``/``signature``/
# ``X-Amz-Signature``/``X-Amz-Credential``, ``auth``. Over-redacting a harmless parameter only
# costs readability; missing a secret leaks it to every reader.
# (``max_tokens``, a count, is the one common harmless match and is left alone.)
_SECRET_PARAM = re.compile(r"pass|pwd|secret|token(?!s)|key|sig|auth|cred|session", re.IGNORECASE)

# name=value after ``?``, ``&``, ``;`` or ``#`` in free text or a query string. The value ends
# where a URL parameter ends, or at a quote, bracket or whitespace in free text.
_PARAM = re.compile(r"(?P<lead>(?:^|[?&;#])\s*)(?P<name>[^=&;#?\s]+)=(?P<value>[^&;#\s'\"<>()\[\]]*)")


class UrlError(ValueError):
    """An endpoint URL is refused; ``str()`` says why in one line."""


#: OpenAI routes that follow the base URL: a base URL ending in one of them is a request URL
#: copied from a log or a curl line, and every request would go to ``{route}/{route}``.
OPENAI_ROUTES = ("/chat/completions", "/completions", "/models", "/embeddings", "/responses")


def route_base_url(url: str) -> str | None:
    """The base URL a route URL names (``http://h:8000/v1/chat/completions`` →
    ``http://h:8000/v1``; a route at the root gains ``/v1``, where vLLM, SGLang and llama.cpp
    serve it), or None when ``url`` does not end in an OpenAI route."""
    parts = urlsplit(url.strip().rstrip("/"))
    path = parts.path
    for route in OPENAI_ROUTES:
        if path.lower().endswith(route):
            base = path[: -len(route)].rstrip("/") or "/v1"
            return urlunsplit(parts._replace(path=base, query="", fragment=""))
    return None


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
    base = route_base_url(value)
    if base is not None:
        raise UrlError(
            f"endpoint URL {redact_url(value)!r} is a route, not a base URL: did you mean "
            f"{redact_url(base)}?"
        )
    return value


def _is_secret(name: str) -> bool:
    return bool(_SECRET_PARAM.search(unquote_plus(name)))


def _redact_params(text: str, *, anywhere: bool) -> str:
    """Credential-like ``name=value`` pairs with the value replaced by ``***``. ``anywhere``:
    also a pair at the very start (a bare query string), not only after ``?&;#``."""

    def sub(m: re.Match[str]) -> str:
        if not _is_secret(m["name"]) or not m["value"]:
            return m[0]
        if not anywhere and not m["lead"].strip():
            return m[0]  # free text "x=y" at the start of the text is not a URL parameter
        return f"{m['lead']}{m['name']}={REDACTED}"

    return _PARAM.sub(sub, text)


def redact_url(url: str) -> str:
    """``url`` with its userinfo and every credential-like query/fragment value replaced by
    ``***`` (scheme, host, port, path and other parameters unchanged). Any URL form: endpoint
    URLs, database URLs (``postgresql+psycopg://u@h/db?password=...``), signed URLs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = _redact_params(parts.query, anywhere=True)
    fragment = _redact_params(parts.fragment, anywhere=True)
    if (netloc, query, fragment) == (parts.netloc, parts.query, parts.fragment):
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query, fragment=fragment))


def redact_text(text: str) -> str:
    """Free text (error messages, log lines) with every ``scheme://userinfo@`` and every
    credential-like URL parameter value (``?password=``, ``&token=``, ...) replaced by ``***``."""
    text = _USERINFO_IN_TEXT.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    return _redact_params(text, anywhere=False)


def redact_urls_in(value: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, tuples, strings) in which every string that
    holds a URL (``://``) is passed through ``redact_text``: for views that show whole pages of
    stored data (dashboard pages, ``runs show``, ``report.json``). Strings without a URL (model
    outputs, prompts) are left exactly as stored."""
    if isinstance(value, str):
        return redact_text(value) if "://" in value else value
    if isinstance(value, dict):
        return {k: redact_urls_in(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_urls_in(v) for v in value)
    return value
