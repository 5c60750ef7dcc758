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
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from evalsvc.suites.kinds.reasoning import GENERATORS, _display, generate


class _Handler(BaseHTTPRequestHandler):
    server: LevelServer

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/").endswith("/v1/models"):
            self._reply({"data": [{"id": "level-model", "max_model_len": self.server.max_len}]})
        else:
            self._reply({})

    def do_POST(self) -> None:  # noqa: N802
        size = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(size) or b"{}")
        if self.path.endswith("/tokenize"):
            text = body.get("prompt") or ""
            self._reply({"tokens": list(range(len(text.split()))), "count": len(text.split())})
            return
        if self.path.endswith("/chat/completions"):
            text = self.server.answer(str(body["messages"][-1]["content"]))
            self._reply({
                "choices": [{"message": {"role": "assistant", "content": text},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            })
            return
        self._reply({})


_NEEDLE = re.compile(r"special magic \w+ for \w+ is: (\S+?)\.")


class LevelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        accuracy: dict[int, float],
        seeds: list[int],
        *,
        per_level: int = 400,
        needle_easy: int = 2500,
        needle_hard: int = 5000,
        max_len: int = 8192,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.accuracy, self.max_len = accuracy, max_len
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
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

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
    server = LevelServer(accuracy, seeds, **kw)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
