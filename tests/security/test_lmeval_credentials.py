"""The lm-eval kind passes a key on to its subprocess: it must obey the same credential rule
as the client, and never start lm-eval for an endpoint the client refuses."""

from __future__ import annotations

import pytest

from evalsvc.domain import EndpointRef, Item, Sample
from evalsvc.endpoints import EgressPolicy, EndpointClient, EndpointError
from evalsvc.suites import resolve
from tests.fixtures.faults import listener


async def test_a_refused_key_never_reaches_lm_eval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSVC_DATABASE_URL", "postgresql://evalsvc:db-secret-41@db/evalsvc")
    # If the subprocess were started, it would have to find a Python with lm-eval: point that
    # at a path that does not exist, so a start would fail loudly with another message.
    monkeypatch.setenv("EVALSVC_LMEVAL_PYTHON", "/nonexistent/python")
    (suite,) = resolve(["lmeval-mc"])
    emitted: list[Sample] = []

    async def emit(sample: Sample) -> None:
        emitted.append(sample)

    with listener() as lst:
        ref = EndpointRef(url=lst.url(), api_key_env="EVALSVC_DATABASE_URL")
        async with EndpointClient(ref, egress=EgressPolicy.parse("127.0.0.0/8")) as client:
            assert client.api_key is None and client.refusal is not None
            items = [Item(id=f"doc{i}", metadata={"doc_id": i}) for i in range(2)]
            await suite.run(items, client, role="baseline", emit=emit, done=set(), concurrency=1)
    assert [s.item_id for s in emitted] == ["doc0", "doc1"]
    for s in emitted:
        assert s.error is not None and "api_key_env 'EVALSVC_DATABASE_URL' is refused" in s.error
    assert lst.connections == 0


async def test_an_allowed_key_is_resolved_for_lm_eval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSVC_ENDPOINT_KEY_LM", "lm-key-9")
    ref = EndpointRef(url="http://127.0.0.1:9/v1", api_key_env="EVALSVC_ENDPOINT_KEY_LM")
    async with EndpointClient(ref, egress=EgressPolicy.parse("127.0.0.0/8")) as client:
        assert client.refusal is None and client.api_key == "lm-key-9"


async def test_lm_eval_gets_the_checked_address_not_the_name() -> None:
    """lm-eval resolves on its own; in server mode it is handed the address the policy checked
    (http), so a DNS answer that changes after the check cannot steer it."""
    url = "http://localhost:8100/v1"
    allowed = EgressPolicy.parse("127.0.0.0/8,::1")  # localhost may resolve to either
    async with EndpointClient(EndpointRef(url=url), egress=allowed) as client:
        assert await client.pinned_base_url() in {
            "http://127.0.0.1:8100/v1", "http://[::1]:8100/v1"}
    async with EndpointClient(EndpointRef(url=url)) as local:  # local mode: left alone
        assert await local.pinned_base_url() == url
    async with EndpointClient(EndpointRef(url=url), egress=EgressPolicy.parse("")) as strict:
        with pytest.raises(EndpointError, match="loopback"):
            await strict.pinned_base_url()
