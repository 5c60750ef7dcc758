"""A real OpenAI-compatible server on loopback whose correctness depends on difficulty in a known
way (the kind of fake the house rules allow: "a server with known behaviour").

- **reasoning**: it knows every item the ``reasoning`` generator can draw for the given seeds
  (``evalsvc.suites.kinds.reasoning.generate``, levels 1-5, ``k`` < ``per_level``), so it reads
  the question's family, level and index ``k`` back from the prompt. It answers item ``k`` of a
  level correctly ("The answer is X.") iff ``k % 10 < round(10 * accuracy[level])``, else "I do
  not know." (no answer extracted), so 10 consecutive items of a level score exactly
  ``accuracy[level]``.
- **needle**: ``/tokenize`` counts whitespace-separated words; a chat with a hidden "special
  magic" needle is answered with the needle's value iff the message has at most ``needle_easy``
  words, or at most ``needle_hard`` words and the needle sits in the second half of the text;
  otherwise "I cannot find it.".

``server.prompts`` counts chat requests, ``server.seen`` keeps each reasoning (family, level).

A slow engine on long prompts: a chat whose message has more than ``slow_words`` words is
answered only after ``slow_s`` seconds (an overloaded endpoint's long requests; set both on the
server to change it mid-test), ``server.long_prompts`` counts them.

What the comparability guard reads is shaped like vLLM's: ``/tokenize`` with ``messages``
renders them with the server's ``chat_template`` (a name: two servers with different names
render differently) and ``/detokenize`` gives the rendered text back; ``tokenizer_offset``
shifts every token id (another tokenizer). ``refuse`` is the share of reasoning items (by
``k``) answered ``HTTP 400`` as a server with a shorter context refuses a long prompt.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from evalsvc.suites.kinds.reasoning import GENERATORS, _display, generate
from tests.fixtures.loopback import JSONHandler, LoopbackHTTPServer, serving


class _Handler(JSONHandler):
    server: LevelServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/").endswith("/v1/models"):
            self._reply({"data": [{"id": "level-model", "max_model_len": self.server.max_len}]})
        else:
            self._reply({})

    def do_POST(self) -> None:  # noqa: N802
        body = self._json_body()
        if self.path.endswith("/tokenize"):
            if isinstance(body.get("messages"), list):
                text = self.server.render(body["messages"])
                ids = self.server.ids(text)
                with self.server.lock:
                    self.server.rendered[tuple(ids)] = text
                self._reply({"tokens": ids, "count": len(ids)})
                return
            text = body.get("prompt") or ""
            ids = self.server.ids(text)
            self._reply({"tokens": ids, "count": len(ids)})
            return
        if self.path.endswith("/detokenize"):
            with self.server.lock:
                text = self.server.rendered.get(tuple(body.get("tokens") or []))
            self._reply({"prompt": text} if text is not None else {}, 200 if text else 400)
            return
        if self.path.endswith("/chat/completions"):
            content = str(body["messages"][-1]["content"])
            if self.server.slow_words is not None and len(content.split()) > self.server.slow_words:
                with self.server.lock:
                    self.server.long_prompts += 1
                time.sleep(self.server.slow_s)
            if self.server.refuses(content):
                self._reply({"error": {"message": "maximum context length exceeded"}}, 400)
                return
            text = self.server.answer(content)
            with suppress(OSError):  # a slow answer's client may have given up (its timeout)
                self._reply({
                    "choices": [{"message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                })
            return
        self._reply({})


_NEEDLE = re.compile(r"special magic \w+ for \w+ is: (\S+?)\.")


class LevelServer(LoopbackHTTPServer):
    #: Both sides of a run at ``--concurrency 8`` connect at once: socketserver's default backlog
    #: of 5 dropped the rest's SYNs, each retried after 1 s (a short request "timed out").
    request_queue_size = 64

    def __init__(
        self,
        accuracy: dict[int, float],
        seeds: list[int],
        *,
        per_level: int = 400,
        needle_easy: int = 2500,
        needle_hard: int = 5000,
        max_len: int = 8192,
        chat_template: str = "chatml",
        tokenizer_offset: int = 0,
        refuse: float = 0.0,
        slow_words: int | None = None,
        slow_s: float = 0.0,
    ) -> None:
        super().__init__(_Handler)
        self.slow_words, self.slow_s, self.long_prompts = slow_words, slow_s, 0
        self.accuracy, self.max_len = accuracy, max_len
        self.chat_template, self.tokenizer_offset, self.refuse = chat_template, tokenizer_offset, refuse
        self.rendered: dict[tuple[int, ...], str] = {}
        self.needle_easy, self.needle_hard = needle_easy, needle_hard
        self.lock = threading.Lock()
        self.prompts = 0
        self.seen: list[tuple[str, int]] = []
        self.table: dict[str, tuple[str, str, int, int]] = {}
        for seed in seeds:
            for family in GENERATORS:
                for level in range(1, 6):
                    for k in range(per_level):
                        p = generate(seed, family, level, k)
                        self.table.setdefault(p.question, (_display(p), family, level, k))

    @property
    def url(self) -> str:
        return f"{self.origin}/v1"

    def ids(self, text: str) -> list[int]:
        """One token per word, its id shifted by ``tokenizer_offset``."""
        return [self.tokenizer_offset + i for i in range(len(text.split()))]

    def render(self, messages: list[dict[str, Any]]) -> str:
        return " ".join(f"<{self.chat_template}:{m.get('role')}> {m.get('content')}" for m in messages)

    def refuses(self, content: str) -> bool:
        known = self.table.get(content)
        return known is not None and known[3] % 10 < round(10 * self.refuse)

    def answer(self, content: str) -> str:
        with self.lock:
            self.prompts += 1
        if "special magic" in content:
            found = _NEEDLE.search(content)
            words = len(content.split())
            if found is None:
                return "I cannot find it."
            late = found.start() / max(1, len(content)) >= 0.45
            if words <= self.needle_easy or (words <= self.needle_hard and late):
                return f"The special magic number is {found.group(1)}."
            return "I cannot find it."
        known = self.table.get(content)
        if known is None:
            return "I do not know."
        answer, family, level, k = known
        with self.lock:
            self.seen.append((family, level))
        right = k % 10 < round(10 * self.accuracy.get(level, 0.0))
        return f"The answer is {answer}." if right else "I do not know."


@contextmanager
def level_server(accuracy: dict[int, float], seeds: list[int], **kw: Any) -> Iterator[LevelServer]:
    with serving(LevelServer(accuracy, seeds, **kw)) as server:
        yield server
