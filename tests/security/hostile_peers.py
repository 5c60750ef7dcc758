"""Real loopback servers that misbehave in the ways round 2 of the red-team pass used (issue 17):
the only kind of fake the project allows, to inject what a real engine does not do.

- ``model_server(model_id)``: an OpenAI-compatible HTTP server (``/v1/models``, chat and
  completions, every answer "OK") whose served model id is ``model_id``, e.g. one holding rich
  markup (``[/]``) or terminal escapes (``\\x1b[2J``).
- ``raw_server(reply)``: a TCP server that answers every connection with ``reply`` bytes and
  closes: a non-HTTP service on an allowed host, whose status or header line holds a secret.
- ``page_server(status, headers, body)``: an HTTP server that answers every request with one
  fixed page (an SSO login page, a 302 to an identity provider) instead of the evalsvc API.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fixtures.loopback import (
    JSONHandler,
    LoopbackHTTPServer,
    RawTCPServer,
    accepting,
    serving,
)


class _ModelHandler(JSONHandler):
    server: _ModelServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.startswith("/v1/models"):
            return self._reply({"data": [{"id": self.server.model_id, "max_model_len": 8192}]})
        self.send_error(404)
        return None

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path.startswith("/v1/chat/completions"):
            return self._reply({"choices": [{"message": {"content": "OK"},
                                             "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
        if self.path.startswith("/v1/completions"):
            return self._reply({"choices": [{"text": " OK", "finish_reason": "length"}],
                                "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        self.send_error(404)
        return None


class _ModelServer(LoopbackHTTPServer):
    def __init__(self, model_id: str) -> None:
        super().__init__(_ModelHandler)
        self.model_id = model_id

    @property
    def url(self) -> str:
        return f"{self.origin}/v1"


@contextmanager
def model_server(model_id: str) -> Iterator[_ModelServer]:
    with serving(_ModelServer(model_id)) as server:
        yield server


class _PageServer(LoopbackHTTPServer):
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        super().__init__(_PageHandler)
        self.status, self.headers, self.body = status, headers, body
        self.requests: list[str] = []

    @property
    def url(self) -> str:
        return self.origin


class _PageHandler(BaseHTTPRequestHandler):
    server: _PageServer

    def log_message(self, *args: Any) -> None:
        pass

    def _page(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.requests.append(f"{self.command} {self.path}")
        self.send_response(self.server.status)
        for key, value in self.server.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)

    do_GET = _page
    do_POST = _page


@contextmanager
def page_server(status: int, headers: dict[str, str], body: bytes) -> Iterator[_PageServer]:
    with serving(_PageServer(status, headers, body)) as server:
        yield server


class RawServer(RawTCPServer):
    """Answers every TCP connection with ``reply`` (after reading what the client sent)."""

    backlog = 64

    def __init__(self, reply: bytes) -> None:
        super().__init__()
        self.reply = reply

    def handle(self, conn: socket.socket) -> None:
        with suppress(OSError), conn:
            conn.settimeout(2)
            conn.recv(65536)
            conn.sendall(self.reply)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@contextmanager
def raw_server(reply: bytes) -> Iterator[RawServer]:
    with accepting(RawServer(reply)) as server:
        yield server
