"""Endpoints: the async HTTP client and the capability probe.

Contract: this is the only package that opens sockets to serving engines. Suites receive an
``EndpointClient`` from the runner; they never build one themselves. Where those sockets may
go and which credentials they carry is ``EgressPolicy``'s (docs/security.md); URL hygiene
(userinfo refused and redacted) is ``_urls``'.
"""

from evalsvc.endpoints._client import (
    Completion,
    EndpointClient,
    EndpointError,
    TokenLogprob,
    root_url,
    status_line,
)
from evalsvc.endpoints._egress import EgressPolicy, EgressRefused, literal_address
from evalsvc.endpoints._probe import CAPABILITIES, probe
from evalsvc.endpoints._tokenizer import LocalTokenizer, under_root
from evalsvc.endpoints._urls import (
    UrlError,
    check_endpoint_url,
    redact_text,
    redact_url,
    redact_urls_in,
)

__all__ = [
    "CAPABILITIES",
    "Completion",
    "EgressPolicy",
    "EgressRefused",
    "EndpointClient",
    "EndpointError",
    "LocalTokenizer",
    "TokenLogprob",
    "UrlError",
    "check_endpoint_url",
    "literal_address",
    "probe",
    "redact_text",
    "redact_url",
    "redact_urls_in",
    "root_url",
    "status_line",
    "under_root",
]
