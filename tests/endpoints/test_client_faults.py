"""The endpoint client turns every fault into a recorded error, never an exception.

These use a real HTTP server on loopback (tests/fixtures/faults.py), which is the allowed way to
inject faults; behaviour against real engines is covered by the endpoint integration tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evalsvc.domain import EndpointRef
from evalsvc.endpoints import EndpointClient, EndpointError, probe
from tests.fixtures.faults import base_url, fault_server


@pytest.fixture(scope="module")
def server() -> Iterator[object]:
    with fault_server(slow_s=2.0) as srv:
        yield srv


def client(server: object, mode: str, **kw: float) -> EndpointClient:
    # The default deadline is for answers that must arrive (a loaded host can take seconds on
    # loopback); the timeout case passes its own, far below the fault server's delay.
    return EndpointClient(EndpointRef(url=base_url(server, mode), model="fake-model"),  # type: ignore[arg-type]
                          retries=int(kw.get("retries", 2)), backoff_s=0.01,
                          timeout_s=kw.get("timeout_s", 60.0))


async def test_ok_chat_and_completion(server: object) -> None:
    async with client(server, "ok") as c:
        chat = await c.chat([{"role": "user", "content": "hi"}], max_tokens=1)
        comp = await c.complete("hello", max_tokens=1, logprobs=1)
    assert chat.ok and chat.text == "OK" and chat.completion_tokens == 1
    assert chat.latency_s is not None and chat.latency_s > 0
    assert comp.ok and comp.logprobs is not None and comp.logprobs[0].logprob == -0.5
    assert comp.logprobs[0].top == {" world": -0.5}


async def test_500_is_retried_then_recorded(server: object) -> None:
    srv = server
    async with client(srv, "500", retries=3) as c:
        out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1)
    assert not out.ok and "500" in (out.error or "")
    assert srv.hits["/500/v1/chat/completions"] == 3  # type: ignore[attr-defined]


async def test_503_then_success_is_retried(server: object) -> None:
    async with client(server, "flaky", retries=3) as c:
        out = await c.complete("x", max_tokens=1)
    assert out.ok and out.text == " world"


async def test_timeout_is_recorded(server: object) -> None:
    async with client(server, "slow", retries=1, timeout_s=0.3) as c:
        out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1)
    assert not out.ok and "timeout" in (out.error or "").lower()


async def test_reset_is_recorded(server: object) -> None:
    async with client(server, "reset", retries=2) as c:
        out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1)
    assert not out.ok
    assert any(word in (out.error or "") for word in ("Error", "connection", "Disconnected"))


async def test_malformed_body_is_recorded(server: object) -> None:
    async with client(server, "garbage") as c:
        out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1)
    assert not out.ok and "malformed" in (out.error or "")
    async with client(server, "nochoices") as c:
        out = await c.complete("x", max_tokens=1)
    assert not out.ok and "no choices" in (out.error or "")


async def test_stream_error_is_recorded(server: object) -> None:
    async with client(server, "500", retries=1) as c:
        out = await c.chat([{"role": "user", "content": "x"}], max_tokens=1, stream=True)
    assert not out.ok and "500" in (out.error or "")


async def test_unreachable_probe_raises_with_url() -> None:
    ref = EndpointRef(url="http://127.0.0.1:9/v1")  # port 9 (discard) is closed on loopback
    async with EndpointClient(ref, retries=1, timeout_s=1.0) as c:
        with pytest.raises(EndpointError) as info:
            await probe(c)
    assert "127.0.0.1:9" in str(info.value)


async def test_probe_records_missing_capabilities(server: object) -> None:
    async with client(server, "ok") as c:
        prov = await probe(c)
    assert prov.model == "fake-model" and prov.max_context == 2048
    assert prov.capabilities["chat"] and prov.capabilities["completions"]
    # The fake echoes nothing and has no /tokenize or prompt_logprobs: those must read False.
    assert prov.capabilities["echo"] is False
    assert prov.capabilities["prompt_logprobs"] is False
    assert prov.capabilities["tokenize"] is False
