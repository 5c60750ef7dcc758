"""A real OpenAI-compatible chat server on loopback that answers the bundled lm-eval generate
task ``evalsvc_gen`` (``evalsvc.suites.kinds._gen_task``) right with a planted probability.

It knows every question of ``gen_docs()``. Document ``i`` is answered right with probability
``accuracy`` shifted by a fixed per-document offset in [−0.3, 0.3] (``i % 7``), clipped to
[0, 1], when the request's temperature is above 0, and right iff that probability is at least ½
at temperature 0 (greedy). The n-th request for a question draws a hash of (``rng_seed``,
question, n): lm-eval runs one sample index after another, so draw n is sample n whatever order
the concurrent requests of a run arrive in, and a verdict does not depend on scheduling (give
each side its own server). Right: " <answer>."; wrong: " I am not sure." (no number).

It serves the completions API too, the way lm-eval's engine-tokenizer model
(``evalsvc-engine-completions``) sends it: ``POST /tokenize`` gives each character's code point
as its token id, and a completion's prompt of ids is read back as text. With ``fail_after`` N,
every chat request after the N-th is answered 500 (an endpoint that dies mid-run). ``bodies``
keeps each request's decoding fields (``temperature``, ``top_p``, ``max_tokens``, whether a
``seed`` key was present and its value); ``answers`` each question's right/wrong draws in order.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from evalsvc.domain import EndpointRef, Item, Sample
from evalsvc.suites.kinds._gen_task import gen_docs
from tests.fixtures.loopback import JSONHandler, LoopbackHTTPServer, serving

_QUESTION = re.compile(r"Question: (.*?)\nAnswer:", re.S)


class _Handler(JSONHandler):
    server: GenServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/").endswith("/v1/models"):
            self._reply({"data": [{"id": "gen-model", "max_model_len": 4096}]})
        else:
            self._reply({})

    def do_POST(self) -> None:  # noqa: N802
        body = self._json_body()
        if self.path.endswith("/tokenize"):
            self._reply({"tokens": [ord(c) for c in str(body.get("prompt") or "")]})
            return
        if self.path.endswith("/v1/completions"):
            prompts = body.get("prompt")
            if not (isinstance(prompts, list) and prompts and isinstance(prompts[0], list)):
                prompts = [prompts]
            texts = [p if isinstance(p, str) else "".join(map(chr, p)) for p in prompts]
            self._reply({
                "choices": [{"index": i, "text": self.server.answer(t, body),
                             "finish_reason": "stop"} for i, t in enumerate(texts)],
                "usage": {"prompt_tokens": 12, "completion_tokens": 4},
            })
            return
        if not self.path.endswith("/chat/completions"):
            self._reply({})
            return
        if self.server.dead():
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        text = self.server.answer(str(body["messages"][-1]["content"]), body)
        self._reply({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 4},
        })


class GenServer(LoopbackHTTPServer):
    def __init__(self, accuracy: float, *, rng_seed: int = 0,
                 fail_after: int | None = None) -> None:
        super().__init__(_Handler)
        self.accuracy, self.rng_seed, self.fail_after = accuracy, rng_seed, fail_after
        self.requests = 0
        self.lock = threading.Lock()
        self.table = {d["question"]: (int(d["id"]), d["answer"]) for d in gen_docs()}
        self.draws: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.answers: dict[str, list[bool]] = defaultdict(list)

    @property
    def url(self) -> str:
        return f"{self.origin}/v1"

    def dead(self) -> bool:
        with self.lock:
            self.requests += 1
            return self.fail_after is not None and self.requests > self.fail_after

    def p_doc(self, i: int) -> float:
        return min(1.0, max(0.0, self.accuracy + (i % 7 - 3) / 10.0))

    def answer(self, content: str, body: dict[str, Any]) -> str:
        found = _QUESTION.search(content)
        known = self.table.get(found.group(1).strip()) if found else None
        with self.lock:
            self.bodies.append({
                "temperature": body.get("temperature"), "top_p": body.get("top_p"),
                "max_tokens": body.get("max_tokens"), "has_seed": "seed" in body,
                "seed": body.get("seed"),
            })
            if known is None:
                return " I am not sure."
            question = found.group(1).strip() if found else ""
            n = self.draws[question]
            self.draws[question] += 1
        i, answer = known
        p = self.p_doc(i)
        if float(body.get("temperature") or 0.0) > 0:
            digest = hashlib.blake2b(f"{self.rng_seed}|{question}|{n}".encode(), digest_size=8)
            right = int.from_bytes(digest.digest(), "big") / 2.0**64 < p
        else:
            right = p >= 0.5
        with self.lock:
            self.answers[question].append(right)
        return f" {answer}." if right else " I am not sure."


@contextmanager
def gen_server(accuracy: float, **kw: Any) -> Iterator[GenServer]:
    with serving(GenServer(accuracy, **kw)) as server:
        yield server


def run_baseline(suite: Any, items: list[Item], url: str, *,
                 done: set[tuple[str, int]] | None = None, model: str = "gen-model",
                 concurrency: int = 4) -> list[Sample]:
    """Run ``suite``'s ``items`` (less ``done``) as the baseline on the endpoint at ``url``
    serving ``model``; the samples it emits, in order."""
    from evalsvc.endpoints import EndpointClient

    emitted: list[Sample] = []

    async def emit(sample: Sample) -> None:
        emitted.append(sample)

    async def go() -> None:
        client = EndpointClient(EndpointRef(url=url, model=model))
        try:
            await suite.run(items, client, role="baseline", emit=emit,
                            done=set() if done is None else done, concurrency=concurrency)
        finally:
            await client.aclose()

    asyncio.run(go())
    return emitted
