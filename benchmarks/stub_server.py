"""A zero-latency OpenAI-compatible server on loopback: the peer-free endpoint of the evaluator
speed benchmarks (``benchmarks/evaluator_speed.py``).

Contract:
- A real aiohttp server in its own process, listening on ``127.0.0.1`` on one or more ports
  (one per endpoint of a comparison; port 0 picks free ports). When ready it prints one line
  ``STUB <port> <port> ...`` on stdout; it stops on SIGTERM/SIGINT, and with ``--watch-stdin`` when stdin closes.
- It answers at once, with fixed, small bodies shaped like vLLM's: ``GET /v1/models``
  (``owned_by: vllm``), ``POST /v1/chat/completions`` and ``POST /v1/completions`` (with token
  logprobs, ``echo`` and ``prompt_logprobs`` when asked, so the capability probe finds them),
  both also as SSE streams, ``POST /tokenize``, ``GET /version`` and ``GET /health``. Every
  other route is a 404. The chat answer is ``The answer is <k>.`` with ``k`` taken from a hash
  of the messages: deterministic, the same on every port, right on some items.
- Nothing here models an engine's cost: the benchmark measures the evaluator, so the server
  must never be the bottleneck (it does no tokenizing, no sleeping, no per-request logging).
- ``--engine`` shapes the routes like one engine, for tests of what a run finds there:
  ``vllm`` (the default, above), ``sglang`` (``owned_by: sglang``, ``/get_model_info`` and
  ``/get_server_info`` with the context length, no ``/version``, no ``prompt_logprobs``), or
  ``openai`` (a generic server: no ``/tokenize``, no ``/version``). ``--max-model-len`` sets the
  context it reports (default 4096). A completions prompt may be token ids (as lm-eval sends
  them): each id is then one echoed token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import zlib
from typing import Any

from aiohttp import web

MODEL = "stub-model"
_WORDS = ("The", " answer", " is")


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _answer(messages: Any) -> str:
    # crc32 of the messages: the same item gets the same answer on every endpoint and whether
    # streamed or not (pairs agree).
    return f"The answer is {zlib.crc32(json.dumps(messages, sort_keys=True).encode()) % 10}."


async def models(request: web.Request) -> web.Response:
    engine, max_len = request.app["engine"], request.app["max_model_len"]
    entry: dict[str, Any] = {"id": MODEL, "object": "model", "owned_by": engine}
    if engine != "sglang":
        entry["max_model_len"] = max_len
    return web.json_response({"object": "list", "data": [entry]})


async def sglang_model_info(request: web.Request) -> web.Response:
    return web.json_response({"model_path": MODEL, "is_generation": True})


async def sglang_server_info(request: web.Request) -> web.Response:
    return web.json_response(
        {"context_length": request.app["max_model_len"], "kv_cache_dtype": "auto",
         "version": "0.0.0-stub"}
    )


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": "0.0.0-stub"})


async def health(request: web.Request) -> web.Response:
    return web.Response(text="")


async def tokenize(request: web.Request) -> web.Response:
    body = await request.json()
    text = str(body.get("prompt") or "")
    # One id per character: a stable, cheap stand-in (the stub has no tokenizer).
    return web.json_response({"tokens": [ord(c) % 50000 for c in text], "count": len(text)})


async def _sse(request: web.Request, chunks: list[dict[str, Any]]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for chunk in chunks:
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def chat(request: web.Request) -> web.StreamResponse:
    body = json.loads(await request.read())
    text = _answer(body.get("messages"))
    n = max(1, min(int(body.get("max_tokens") or 16), 6))
    logprobs = None
    if body.get("logprobs"):
        logprobs = {"content": [{"token": w, "logprob": -0.1, "top_logprobs": []} for w in _WORDS]}
    if body.get("stream"):
        pieces = [text[:4], text[4:]]
        chunks: list[dict[str, Any]] = [
            {"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
            for p in pieces
        ]
        chunks[-1]["choices"][0]["finish_reason"] = "stop"
        chunks.append({"choices": [], "usage": _usage(20, n)})
        return await _sse(request, chunks)
    return web.json_response(
        {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": logprobs,
                    "finish_reason": "stop",
                }
            ],
            "usage": _usage(20, n),
        }
    )


async def completions(request: web.Request) -> web.StreamResponse:
    raw = await request.read()
    body = json.loads(raw)
    raw_prompt = body.get("prompt") or ""
    if isinstance(raw_prompt, list) and raw_prompt and isinstance(raw_prompt[0], list):
        raw_prompt = raw_prompt[0]  # a batch of one (lm-eval's token-id requests)
    # Token ids (a list): one echoed token each; text: one per word.
    parts = [str(t) for t in raw_prompt] if isinstance(raw_prompt, list) else str(raw_prompt).split()
    words = parts or ["x"]
    max_tokens = int(body.get("max_tokens") or 0)
    out_words = list(_WORDS[: max(0, min(max_tokens, len(_WORDS)))])
    tokens = (words if body.get("echo") else []) + out_words
    text = ("".join(words) if body.get("echo") else "") + "".join(out_words)
    logprobs = None
    if body.get("logprobs") is not None:
        lps: list[float | None] = [-0.5] * len(tokens)
        if body.get("echo") and lps:
            lps[0] = None
        logprobs = {
            "tokens": tokens,
            "token_logprobs": lps,
            "top_logprobs": [None if lp is None else {t: lp} for t, lp in zip(tokens, lps, strict=True)],
            "text_offset": list(range(len(tokens))),
        }
    choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length"}
    if body.get("prompt_logprobs") is not None and request.app["engine"] == "vllm":
        choice["prompt_logprobs"] = [None] + [
            {str(i + 1): {"logprob": -1.0, "rank": 1, "decoded_token": w}}
            for i, w in enumerate(words[1:])
        ]
    if body.get("stream"):
        chunks: list[dict[str, Any]] = [
            {"choices": [{"index": 0, "text": w, "finish_reason": None}]} for w in out_words
        ]
        chunks.append({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        chunks.append({"choices": [], "usage": _usage(len(words), len(out_words))})
        return await _sse(request, chunks)
    return web.json_response(
        {
            "id": "cmpl-stub",
            "object": "text_completion",
            "model": MODEL,
            "choices": [choice],
            "usage": _usage(len(words), len(out_words)),
        }
    )


ENGINES = ("vllm", "sglang", "openai")


def make_app(engine: str = "vllm", max_model_len: int = 4096) -> web.Application:
    app = web.Application()
    app["engine"], app["max_model_len"] = engine, max_model_len
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    if engine != "openai":
        app.router.add_post("/tokenize", tokenize)
    if engine == "vllm":
        app.router.add_get("/version", version)
    if engine == "sglang":
        app.router.add_get("/get_model_info", sglang_model_info)
        app.router.add_get("/get_server_info", sglang_server_info)
    app.router.add_get("/health", health)
    return app


async def serve(
    ports: list[int],
    *,
    watch_stdin: bool = False,
    engine: str = "vllm",
    max_model_len: int = 4096,
) -> None:
    # access_log=None: a log line per request would make the stub, not the client, the cost.
    runner = web.AppRunner(
        make_app(engine, max_model_len), access_log=None, handle_signals=False
    )
    await runner.setup()
    bound: list[int] = []
    for port in ports:
        site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
        await site.start()
        server = site._server
        assert server is not None and isinstance(server, asyncio.base_events.Server)
        bound.append(server.sockets[0].getsockname()[1])
    print("STUB " + " ".join(str(p) for p in bound), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if watch_stdin:
        # stdin closing (the parent died or closed the pipe) stops the stub too: no orphans.
        loop.add_reader(sys.stdin.fileno(), lambda: None if sys.stdin.buffer.read1(1) else stop.set())
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", type=int, nargs="+", default=[0, 0], help="0 picks a free port")
    parser.add_argument(
        "--watch-stdin", action="store_true", help="stop when stdin closes (for a parent process)"
    )
    parser.add_argument("--engine", choices=ENGINES, default="vllm",
                        help="whose routes to answer like (default vllm)")
    parser.add_argument("--max-model-len", type=int, default=4096,
                        help="the context length the server reports")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.ports, watch_stdin=args.watch_stdin, engine=args.engine,
                      max_model_len=args.max_model_len))


if __name__ == "__main__":
    main()
