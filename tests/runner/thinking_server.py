"""A real OpenAI-compatible server on loopback whose thinking is planted
(``tests/runner/level_server.py``'s reasoning answers, with a thinking trace before each).

- ``mode``: ``reasoning_content`` or ``reasoning`` (the trace in that field of the message or
  of the streamed deltas, as vLLM and SGLang with a reasoning parser send it), or ``markers``
  (``<think>…</think>`` in ``content``, as an engine without a parser sends it);
- ``think_words``: words of thinking per answer on average (0.5 to 1.5 times it by item, the
  same on every server, with ±10% noise per server), all distinct (no repetition); 0: none;
- ``truncate_wrong``: items the server gets wrong end at the token budget instead
  (``finish_reason: length``, the trace unclosed, no answer): the accuracy is unchanged, the
  truncation rate is the share of wrong items;
- ``loop``: the trace is one sentence said over and over;
- ``leak``: the answer starts with gpt-oss harmony markup (``<|channel|>final<|message|>``);
- ``usage_reasoning``: the usage names ``completion_tokens_details.reasoning_tokens``.

Streams (``"stream": true``) are sent as server-sent events, the trace in pieces of 8 words.
``/v1/completions`` streams ``max_tokens`` one-word chunks (a speed suite's requests).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.fixtures.loopback import serving
from tests.runner.level_server import LevelServer, _Handler


class _ThinkingHandler(_Handler):
    server: ThinkingServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.endswith("/v1/completions"):
            self._completion()
            return
        if not self.path.endswith("/chat/completions"):
            super().do_POST()
            return
        body = self._json_body()
        content = str(body["messages"][-1]["content"])
        answer = self.server.answer(content)
        thinking, answer, finish = self.server.plant(content, answer)
        with self.server.lock:
            self.server.planted.append(len(thinking.split()))
        words = len(thinking.split()) + len(answer.split())
        usage: dict[str, Any] = {"prompt_tokens": 10, "completion_tokens": words}
        if self.server.usage_reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": len(thinking.split())}
        mode = self.server.mode
        if body.get("stream"):
            self._stream(thinking, answer, finish, usage)
            return
        message: dict[str, Any] = {"role": "assistant"}
        if mode == "markers":
            message["content"] = (f"<think>{thinking}</think>" if finish == "stop" else
                                  f"<think>{thinking}") + answer
        else:
            message["content"] = answer
            message[mode] = thinking
        self._reply({"choices": [{"message": message, "finish_reason": finish}], "usage": usage})

    def _completion(self) -> None:
        """A streamed completion of exactly ``max_tokens`` one-word chunks (what a speed suite
        sends: ``ignore_eos``), as fast as the loopback goes."""
        body = self._json_body()
        n = int(body.get("max_tokens") or 16)
        if not body.get("stream"):  # the probe's request
            self._reply({"choices": [{"text": " ".join(f"w{i}" for i in range(n)),
                                      "finish_reason": "length"}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": n}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(n):
            last = i == n - 1
            chunk = {"choices": [{"text": f"w{i} ", "finish_reason": "length" if last else None}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        usage = {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": n}}
        self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        self.close_connection = True

    def _stream(self, thinking: str, answer: str, finish: str, usage: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def event(payload: dict[str, Any]) -> None:
            self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")

        mode = self.server.mode
        words = thinking.split()
        pieces = [" ".join(words[i : i + 8]) + " " for i in range(0, len(words), 8)]
        if mode == "markers":
            pieces = ["<think>", *pieces] + (["</think>"] if finish == "stop" else [])
        for piece in pieces:
            key = "content" if mode == "markers" else mode
            event({"choices": [{"delta": {key: piece}, "finish_reason": None}]})
        if answer:
            event({"choices": [{"delta": {"content": answer}, "finish_reason": None}]})
        event({"choices": [{"delta": {}, "finish_reason": finish}]})
        event({"choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


class ThinkingServer(LevelServer):
    def __init__(
        self,
        accuracy: dict[int, float],
        seeds: list[int],
        *,
        mode: str = "reasoning_content",
        think_words: int = 40,
        truncate_wrong: bool = False,
        loop: bool = False,
        leak: bool = False,
        usage_reasoning: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(accuracy, seeds, **kw)
        self.RequestHandlerClass = _ThinkingHandler
        self.mode, self.think_words = mode, think_words
        self.truncate_wrong, self.loop, self.leak = truncate_wrong, loop, leak
        self.usage_reasoning = usage_reasoning
        self.planted: list[int] = []
        """Words of thinking sent, one per chat answer."""

    def plant(self, content: str, answer: str) -> tuple[str, str, str]:
        """(thinking, answer, finish_reason) for one request."""
        tag = zlib.crc32(content.encode()) % 100_000
        # Per item: think_words × (0.5 … 1.5), the same on every server (the item's own
        # difficulty), times this server's ±10% noise: paired lengths with a real spread.
        noise = zlib.crc32(f"{content}|{self.think_words}".encode()) % 21 - 10
        words = max(1, round(self.think_words * (0.5 + tag % 101 / 100) * (1 + noise / 100)))
        if self.think_words <= 0:  # a model that never thinks: no trace at all
            thinking = ""
        elif self.loop:
            thinking = " ".join(["Wait, let me check that again."] * (words // 6 + 1))
        else:
            thinking = " ".join(f"t{tag}w{i}" for i in range(words))
        if self.truncate_wrong and not answer.startswith("The answer is"):
            return thinking, "", "length"
        if self.leak:
            answer = "<|channel|>final<|message|>" + answer
        return thinking, answer, "stop"


@contextmanager
def thinking_server(
    accuracy: dict[int, float], seeds: list[int], **kw: Any
) -> Iterator[ThinkingServer]:
    # Items k < 40 of each level are known: the tests plan at most 30 per task (fast start).
    with serving(ThinkingServer(accuracy, seeds, **{"per_level": 40, **kw})) as server:
        yield server
