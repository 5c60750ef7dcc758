"""Hostile endpoints (a real fault server on loopback) get bounded answers: a total deadline per
request, capped bodies and streams, no redirects, and errors that never quote the body.

No timing is asserted: each case asserts what the error says and how little the server got to
send (the hostile pages are bounded, so a client without the bound would see them finish).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evalsvc.domain import EndpointRef
from evalsvc.endpoints import EndpointClient, EndpointError, probe
from tests.fixtures.faults import SECRET, _FaultServer, base_url, fault_server

_MB = 1024 * 1024


@pytest.fixture
def server() -> Iterator[_FaultServer]:
    with fault_server() as srv:
        yield srv


def client(srv: _FaultServer, mode: str, **kw: float) -> EndpointClient:
    # The default deadline is for answers that must arrive (a loaded host can take seconds on
    # loopback); the cases about the deadline pass their own.
    return EndpointClient(
        EndpointRef(url=base_url(srv, mode), model="fake-model"),
        retries=int(kw.get("retries", 1)),
        backoff_s=0.01,
        timeout_s=kw.get("timeout_s", 60.0),
        max_response_bytes=int(kw.get("max_response_bytes", 4 * _MB)),
        max_stream_bytes=int(kw.get("max_stream_bytes", 4 * _MB)),
    )


async def test_one_byte_every_two_seconds_cannot_outlast_a_5s_deadline(
    server: _FaultServer,
) -> None:
    # httpx's timeout is per read: each byte arrives well inside it. The deadline is total.
    async with client(server, "drip", timeout_s=5.0) as c:
        out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1)
    assert not out.ok and "not complete within 5 s" in (out.error or "")
    # 30 bytes were on offer; within 5 s at one per 2 s only a few can have gone out.
    assert 0 < server.sent["drip"] < 30


async def test_a_stream_that_never_ends_ends_with_an_error_at_the_deadline(
    server: _FaultServer,
) -> None:
    async with client(server, "sseforever", timeout_s=3.0) as c:
        out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1, stream=True)
    assert not out.ok and "stream not complete within 3 s" in (out.error or "")
    assert server.sent["sseforever"] < 3000 * 50  # far from the 10 minutes on offer


@pytest.mark.parametrize("mode", ["huge", "hugenolen"])
async def test_a_100mb_body_is_refused_at_the_cap(server: _FaultServer, mode: str) -> None:
    async with client(server, mode, max_response_bytes=2 * _MB) as c:
        out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1)
    assert not out.ok and "exceeds the cap of 2097152 bytes" in (out.error or "")
    # The client hung up long before the 100 MB: what was sent is bounded by the socket
    # buffers, not by the body.
    assert server.sent.get(mode, 0) < 100 * _MB


async def test_a_100mb_stream_line_is_refused_at_the_stream_cap(server: _FaultServer) -> None:
    async with client(server, "hugesse", max_stream_bytes=2 * _MB) as c:
        out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1, stream=True)
    assert not out.ok and "stream exceeds the cap of 2097152 bytes" in (out.error or "")
    assert server.sent["hugesse"] < 100 * _MB


async def test_redirects_are_not_followed() -> None:
    with fault_server() as target, fault_server() as redirector:
        redirector.redirect_to = f"http://127.0.0.1:{target.server_address[1]}/ok"
        async with client(redirector, "redirect") as c:
            out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1)
            with pytest.raises(EndpointError) as info:
                await c.models()
        assert target.hits == {}  # nothing reached the redirect's target
    assert not out.ok and "HTTP 302 Found" in (out.error or "")
    assert "redirects are not followed" in (out.error or "")
    assert "redirects are not followed" in str(info.value)


async def test_error_pages_are_reported_by_status_line_only(server: _FaultServer) -> None:
    async with client(server, "secret") as c:
        chat = await c.chat([{"role": "user", "content": "x"}], max_tokens=1)
        streamed = await c.chat([{"role": "user", "content": "x"}], max_tokens=1, stream=True)
        comp = await c.complete("x", max_tokens=1)
    for out in (chat, streamed, comp):
        assert out.error == "HTTP 400 Bad Request" and out.status_code == 400
    async with client(server, "secret500", retries=2) as c:
        out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1)
        with pytest.raises(EndpointError) as info:
            await probe(c)
    assert out.error is not None and out.error.startswith("HTTP 500 Internal Server Error")
    assert SECRET not in out.error and SECRET not in str(info.value)
    assert "HTTP 500" in str(info.value)


async def test_malformed_bodies_are_not_quoted(server: _FaultServer) -> None:
    async with client(server, "garbage") as c:
        out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1)
    assert out.error == "malformed JSON body (HTTP 200 OK)"  # not "<html>not json"


async def test_a_probe_that_times_out_is_an_endpoint_error_not_a_missing_feature() -> None:
    """An engine that lists its models but answers generations past the deadline is overloaded,
    not chat-less: the probe raises (the run is an infrastructure error) instead of recording
    ``chat: False`` and refusing every chat suite as unsupported."""
    # Generations come after 120 s, far past the 5 s deadline; the model list and the info
    # routes, which must arrive within it, come at once.
    with fault_server(slow_s=120) as slow:
        async with client(slow, "slowgen", timeout_s=5.0) as c:
            with pytest.raises(EndpointError) as info:
                await probe(c)
    assert "did not answer the probe's 2-token chat request" in str(info.value)
    assert "timeout" in str(info.value)
