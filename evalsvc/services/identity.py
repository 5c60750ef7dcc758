"""An endpoint's identity: which deployment a measurement belongs to (issue 47).

Contract: what a run reuses instead of measuring it (a blessed baseline's samples, a
calibration's noise floor) belongs to the endpoint it was measured on, and applies only to a
run whose endpoint has the same identity *and* the same provenance fingerprint. The fingerprint
is what the server says about itself, so it names a model, not a deployment: any server can
report another's model id, checkpoint, tokenizer and chat template.

- :func:`endpoint_identity` is the operator's name for the endpoint: its registered name
  (``evalsvc endpoints add``; a name can move between hosts or stand for replicas) when the
  ref's name is registered with the ref's URL, or, for a URL given directly, the one registered
  endpoint with that URL; otherwise the normalized base URL (:func:`normalize_base_url`). A name
  that no registration backs is a label anyone can type, so it never counts.
- The runs service records it on each endpoint snapshot when the probe answers
  (``Store.save_endpoint_snapshot(identity=…)``), so what a run measured keeps the identity it
  had then, whatever the registry says later.
- :func:`shown` is the short form messages use (``gpu-a``, ``10.0.0.7:8000``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from evalsvc.db import Store
    from evalsvc.domain import EndpointRef

_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_base_url(url: str) -> str:
    """``url`` as one deployment's key: scheme and host lower-cased, userinfo, query, fragment,
    a default port and trailing slashes dropped (``HTTP://Host:80/v1/`` is ``http://host/v1``)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None or _DEFAULT_PORTS.get(scheme) == port else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), "", ""))


def endpoint_identity(store: Store | None, ref: EndpointRef) -> str:
    """The identity of ``ref`` (the module contract): a registered name, else the normalized
    base URL. A registry that cannot be read leaves the URL (never a name it could not check)."""
    url = normalize_base_url(ref.url)
    if store is None:
        return url
    try:
        if ref.name:
            registered = store.get_endpoint(ref.name)
            if registered is not None and normalize_base_url(registered.url) == url:
                return ref.name
        named = [e.name for e in store.list_endpoints()
                 if e.name and normalize_base_url(e.url) == url]
    except Exception:  # noqa: BLE001 - the URL is always a safe (narrower) identity
        return url
    return named[0] if len(named) == 1 else url


def shown(identity: str | None) -> str:
    """The short form of an identity for messages (``gpu-a``, ``10.0.0.7:8000``): the reports'
    ``shown_endpoint``, which renders ``baseline_reuse`` the same way."""
    from evalsvc.reports import shown_endpoint

    return shown_endpoint(identity)
