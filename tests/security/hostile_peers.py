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

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _ModelHandler(BaseHTTPRequestHandler):
    server: _ModelServer

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

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


class _ModelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, model_id: str) -> None:
        super().__init__(("127.0.0.1", 0), _ModelHandler)
        self.model_id = model_id

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


@contextmanager
def _serving(server: ThreadingHTTPServer) -> Iterator[Any]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def model_server(model_id: str) -> Iterator[_ModelServer]:
    with _serving(_ModelServer(model_id)) as server:
        yield server


class _PageServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        super().__init__(("127.0.0.1", 0), _PageHandler)
        self.status, self.headers, self.body = status, headers, body
        self.requests: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


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
    with _serving(_PageServer(status, headers, body)) as server:
        yield server


class RawServer:
    """Answers every TCP connection with ``reply`` (after reading what the client sent)."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            with suppress(OSError), conn:
                conn.settimeout(2)
                conn.recv(65536)
                conn.sendall(self.reply)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@contextmanager
def raw_server(reply: bytes) -> Iterator[RawServer]:
    server = RawServer(reply)
    server._thread.start()
    try:
        yield server
    finally:
        server._stop.set()
        server._thread.join(5)
        server.sock.close()
