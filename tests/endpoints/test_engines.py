"""The probe knows each engine: a real loopback server speaks each engine's own routes.

Each server answers the OpenAI routes minimally and, besides them, only the engine's own info
routes and its own ``/tokenize`` shape (a body in another engine's shape gets 400, as the real
engines answer): so a probe that guessed the shape would find no tokenizer. Shapes as each
project documents them (see ``evalsvc/endpoints/_engines.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from evalsvc.domain import EndpointRef
from evalsvc.endpoints import EndpointClient, probe
from tests.fixtures.loopback import JSONHandler, LoopbackHTTPServer, serving

TEXT_IDS = [11, 22, 33]

ENGINES: dict[str, dict[str, Any]] = {
    "llama.cpp": {
        "owned_by": "llamacpp",
        "info": {
            "/props": {
                "default_generation_settings": {"n_ctx": 8192},
                "model_path": "/models/SmolLM2-135M-Instruct-Q8_0.gguf",
                "build_info": "b6000-abc",
                "total_slots": 4,
            }
        },
    },
    "sglang": {
        "owned_by": "sglang",
        "info": {
            "/get_model_info": {"model_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
                                "is_generation": True},
            "/get_server_info": {"context_length": 4096, "kv_cache_dtype": "fp8_e5m2",
                                 "quantization": None, "version": "0.5.1"},
        },
    },
    # TGI's /v1/models names no engine: the probe must find it by its /info route.
    "tgi": {
        "owned_by": "system",
        "info": {
            "/info": {"model_id": "HuggingFaceTB/SmolLM2-135M-Instruct", "model_sha": "abc123",
                      "model_dtype": "torch.bfloat16", "max_total_tokens": 2048,
                      "max_input_tokens": 2047, "version": "3.3.4"},
        },
    },
    "generic": {"owned_by": "openai", "info": {}},
}


def _tokenize(engine: str, body: dict[str, Any]) -> tuple[int, Any]:
    if engine == "llama.cpp" and set(body) <= {"content", "add_special", "with_pieces"} and "content" in body:
        return 200, {"tokens": TEXT_IDS}
    if engine == "sglang" and "prompt" in body:
        return 200, {"tokens": TEXT_IDS, "count": 3, "max_model_len": 4096}
    if engine == "tgi" and set(body) == {"inputs"}:
        return 200, [{"id": i, "text": "x", "start": 0, "stop": 1} for i in TEXT_IDS]
    return (404, {"error": "not found"}) if engine == "generic" else (400, {"error": "bad body"})


class _Handler(JSONHandler):
    server: _EngineServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        spec = ENGINES[self.server.engine]
        if self.path == "/v1/models":
            self._reply({"object": "list", "data": [
                {"id": "smollm2", "object": "model", "owned_by": spec["owned_by"]}]})
        elif self.path in spec["info"]:
            self._reply(spec["info"][self.path])
        else:
            self._reply({"error": "not found"}, 404)

    def do_POST(self) -> None:
        body = self._json_body()
        self.server.paths.append(self.path)
        if self.path == "/tokenize":
            status, payload = _tokenize(self.server.engine, body)
            self._reply(payload, status)
        elif self.path == "/v1/chat/completions":
            self._reply({"choices": [{"message": {"role": "assistant", "content": "OK"},
                                      "finish_reason": "stop"}]})
        elif self.path == "/v1/completions":
            self._reply({"choices": [{"text": " OK", "finish_reason": "length"}]})
        else:
            self._reply({"error": "not found"}, 404)


class _EngineServer(LoopbackHTTPServer):
    def __init__(self, engine: str) -> None:
        super().__init__(_Handler)
        self.engine = engine
        self.paths: list[str] = []


@contextmanager
def engine_server(engine: str) -> Iterator[str]:
    with serving(_EngineServer(engine)) as server:
        yield f"{server.origin}/v1"


@pytest.mark.parametrize(
    ("engine", "max_context", "version", "root"),
    [
        ("llama.cpp", 8192, "b6000-abc", "/models/SmolLM2-135M-Instruct-Q8_0.gguf"),
        ("sglang", 4096, "0.5.1", "HuggingFaceTB/SmolLM2-135M-Instruct"),
        ("tgi", 2048, "3.3.4", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    ],
)
async def test_probe_identifies_the_engine_and_speaks_its_tokenize(
    engine: str, max_context: int, version: str, root: str
) -> None:
    with engine_server(engine) as url:
        async with EndpointClient(EndpointRef(url=url), retries=1) as client:
            prov = await probe(client)
            assert prov.engine == engine
            assert prov.max_context == max_context
            assert prov.version == version
            assert prov.root == root
            assert prov.capabilities["tokenize"] is True
            assert prov.tokenizer_source == f"endpoint /tokenize ({engine})"
            assert prov.tokenizer_fingerprint
            # Suites that size prompts in tokens (needle, drift) call this after the probe.
            assert await client.tokenize("any text") == TEXT_IDS
    if engine == "sglang":
        assert prov.kv_cache_dtype == "fp8_e5m2"
    if engine == "tgi":
        assert prov.dtype == "torch.bfloat16"


async def test_a_generic_server_has_no_tokenizer_and_is_named_by_its_owner() -> None:
    with engine_server("generic") as url:
        async with EndpointClient(EndpointRef(url=url), retries=1) as client:
            prov = await probe(client)
    assert prov.engine == "openai"
    assert prov.capabilities["tokenize"] is False
    # No route, none registered, and the served model's tokenizer is not on the hub (or the
    # hub is not reachable here): the source says which (tests/endpoints/test_hub_tokenizer.py).
    assert (prov.tokenizer_source or "").startswith(
        "none: no tokenize route, no registered tokenizer; ")
    assert prov.max_context is None
