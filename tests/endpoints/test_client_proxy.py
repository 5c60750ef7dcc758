"""Proxy variables: honoured by in-process (local) runs, never in server mode, where a proxy
would connect on the worker's behalf past the egress check. The proxy is a bare listener on
loopback that records what reaches it."""

from __future__ import annotations

import pytest

from evalsvc.domain import EndpointRef
from evalsvc.endpoints import EgressPolicy, EndpointClient, EndpointError
from tests.fixtures.faults import listener

_TARGET = "http://endpoint.invalid:8000/v1"  # .invalid never resolves (RFC 6761)


async def _models(policy: EgressPolicy) -> str:
    async with EndpointClient(EndpointRef(url=_TARGET), retries=1, timeout_s=2.0, egress=policy) as c:
        with pytest.raises(EndpointError) as info:
            await c.models()
    return str(info.value)


async def test_local_mode_sends_through_the_environment_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    with listener() as proxy:
        for name in ("HTTP_PROXY", "http_proxy"):
            monkeypatch.setenv(name, proxy.url().removesuffix("/v1"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        await _models(EgressPolicy.local())
    # The listener never answers; what matters is that the request went to it, whole URL first.
    assert proxy.connections >= 1
    assert b"GET http://endpoint.invalid:8000/v1/models" in proxy.received


async def test_no_proxy_and_server_mode_connect_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    with listener() as proxy:
        for name in ("HTTP_PROXY", "http_proxy"):
            monkeypatch.setenv(name, proxy.url().removesuffix("/v1"))
        monkeypatch.setenv("NO_PROXY", "endpoint.invalid")
        local = await _models(EgressPolicy.local())
        monkeypatch.delenv("NO_PROXY")
        server = await _models(EgressPolicy.parse("*"))
    assert proxy.connections == 0
    # Both went for the name itself, which does not resolve.
    assert "endpoint.invalid" in local and "endpoint.invalid" in server
