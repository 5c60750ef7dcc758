"""Endpoints: the async HTTP client and the capability probe.

Contract: this is the only package that opens sockets to serving engines. Suites receive an
``EndpointClient`` from the runner; they never build one themselves. Where those sockets may
go and which credentials they carry is ``EgressPolicy``'s (docs/security.md); URL hygiene
(userinfo refused and redacted) is ``_urls``'.
"""

from typing import TYPE_CHECKING, Any

# URL hygiene is light and the CLI needs it at start-up; the client, the probe and the egress
# policy (aiohttp) load on first use, so importing this package keeps ``evalsvc --help`` fast.
from evalsvc.endpoints._urls import (
    UrlError,
    check_endpoint_url,
    redact_text,
    redact_url,
    redact_urls_in,
)

if TYPE_CHECKING:
    from evalsvc.endpoints._client import (
        Completion,
        EndpointClient,
        EndpointError,
        TokenLogprob,
        ToolCall,
        root_url,
        status_line,
        unicode_text,
    )
    from evalsvc.endpoints._egress import (
        EgressPolicy,
        EgressRefused,
        GuardedResolver,
        literal_address,
    )
    from evalsvc.endpoints._probe import (
        CAPABILITIES,
        OPTIONAL_CAPABILITIES,
        BaseUrlError,
        NotOpenAIServer,
        probe,
    )
    from evalsvc.endpoints._tokenizer import LocalTokenizer, under_root

__all__ = [
    "BaseUrlError",
    "CAPABILITIES",
    "Completion",
    "EgressPolicy",
    "EgressRefused",
    "EndpointClient",
    "EndpointError",
    "GuardedResolver",
    "LocalTokenizer",
    "NotOpenAIServer",
    "OPTIONAL_CAPABILITIES",
    "TokenLogprob",
    "ToolCall",
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
    "unicode_text",
]

#: Where each lazily loaded name lives.
_LAZY = {
    "Completion": "_client",
    "EndpointClient": "_client",
    "EndpointError": "_client",
    "TokenLogprob": "_client",
    "ToolCall": "_client",
    "root_url": "_client",
    "status_line": "_client",
    "unicode_text": "_client",
    "EgressPolicy": "_egress",
    "EgressRefused": "_egress",
    "GuardedResolver": "_egress",
    "literal_address": "_egress",
    "BaseUrlError": "_probe",
    "NotOpenAIServer": "_probe",
    "CAPABILITIES": "_probe",
    "OPTIONAL_CAPABILITIES": "_probe",
    "probe": "_probe",
    "LocalTokenizer": "_tokenizer",
    "under_root": "_tokenizer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
