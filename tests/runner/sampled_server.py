"""A real OpenAI-compatible server on loopback that samples: the ``LevelServer`` of
``tests/runner/level_server.py`` (it knows every reasoning item of the given seeds), whose
answer to item ``k`` of a level is right with a per-item probability when the request's
temperature is above 0, and right iff that probability is at least ½ when it is 0 (greedy).
The n-th draw for a question is a hash of (``rng_seed``, question, n): whatever order
concurrent requests arrive in, each item's multiset of outcomes is fixed, so a test's verdict
does not depend on scheduling (give each side its own server).

Item ``k``'s probability is ``accuracy[level]`` shifted by a fixed per-item offset in
[−0.3, 0.3] (``k % 7``), clipped to [0, 1]: items differ (σ²_B > 0) and sampling adds noise
(σ²_W > 0), the two parts of a sampled unit's variance. ``bodies`` keeps every chat request's
decoding fields (temperature, top_p, seed, max_tokens).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.fixtures.loopback import serving
from tests.runner.level_server import LevelServer, _Handler


class _SampledHandler(_Handler):
    server: SampledServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        if not self.path.endswith("/chat/completions"):
            super().do_POST()
            return
        body = self._json_body()
        text = self.server.sampled_answer(str(body["messages"][-1]["content"]), body)
        self._reply({
            "choices": [{"message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        })


class SampledServer(LevelServer):
    def __init__(self, accuracy: dict[int, float], seeds: list[int], *, rng_seed: int = 0,
                 **kw: Any) -> None:
        super().__init__(accuracy, seeds, **kw)
        self.RequestHandlerClass = _SampledHandler
        self.rng_seed = rng_seed
        self.draws: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []

    def p_item(self, level: int, k: int) -> float:
        offset = (k % 7 - 3) / 10.0
        return min(1.0, max(0.0, self.accuracy.get(level, 0.0) + offset))

    def sampled_answer(self, content: str, body: dict[str, Any]) -> str:
        known = self.table.get(content)
        with self.lock:
            self.prompts += 1
            self.bodies.append({f: body.get(f) for f in ("temperature", "top_p", "seed",
                                                         "max_tokens")})
            if known is None:
                return "I do not know."
            answer, family, level, k = known
            self.seen.append((family, level))
            p = self.p_item(level, k)
            temperature = float(body.get("temperature") or 0.0)
            n = self.draws[content]
            self.draws[content] += 1
        digest = hashlib.blake2b(f"{self.rng_seed}|{content}|{n}".encode(), digest_size=8)
        u = int.from_bytes(digest.digest(), "big") / 2.0**64
        right = u < p if temperature > 0 else p >= 0.5
        return f"The answer is {answer}." if right else "I do not know."


@contextmanager
def sampled_server(accuracy: dict[int, float], seeds: list[int],
                   **kw: Any) -> Iterator[SampledServer]:
    with serving(SampledServer(accuracy, seeds, **kw)) as server:
        yield server
