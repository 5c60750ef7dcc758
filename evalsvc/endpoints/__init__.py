"""Endpoints: the async HTTP client and the capability probe.

Contract: this is the only package that opens sockets to serving engines. Suites receive an
``EndpointClient`` from the runner; they never build one themselves.
"""

from evalsvc.endpoints._client import (
    Completion,
    EndpointClient,
    EndpointError,
    TokenLogprob,
    root_url,
)
from evalsvc.endpoints._probe import CAPABILITIES, probe

__all__ = [
    "CAPABILITIES",
    "Completion",
    "EndpointClient",
    "EndpointError",
    "TokenLogprob",
    "probe",
    "root_url",
]
