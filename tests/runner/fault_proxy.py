"""A real loopback HTTP server in front of a real endpoint that forwards every request and
damages answers (fault injection for the gates; the only kind of fake the project allows).

Paths pick the behaviour, as in ``tests/fixtures/faults.py``; everything after the mode is
forwarded to the upstream ``.../v1`` unchanged (probe, ``/tokenize``, ``/metrics`` included):

- ``/pass/v1/...``        forwarded untouched (the control);
- ``/blank/v1/...``       chat and completion texts replaced by the empty string (and their
  logprobs dropped): an endpoint that "answers" nothing, like a broken chat template;
- ``/concurrent/v1/...``  a chat answer to a request that *arrived while another request was in
  flight* is altered with probability ``alter_p`` (seeded, per arrival): its first confident
  token (top-2 logprob margin above 1 nat) is swapped for the runner-up, a planted
  batch-dependence far beyond numerical noise. Requests alone on the server pass untouched;
- ``/noisy/v1/...``     a noisy *baseline* under load: a chat answer to a request that arrived
  while another was in flight is changed with probability ``alter_p``, independently per request
  (seeded): the token at a random position is swapped for its runner-up, so the changed answers
  vary from request to request like batch-dependent numerics (an Intel AMX host's bf16 is about
  31% unstable under the determinism suite's traffic); in front of an upstream that returns no
  logprobs (``tests/fixtures/faults.py``'s ``ok``) a random number is appended to the text
  instead. Several proxies with their own rates and
  seeds make a noisy baseline, an equally noisy copy and a noisier candidate. With ``hold_s``
  each of its chat requests is held that long before it is forwarded, as a short answer takes on
  a real server: in front of an upstream that answers at once, requests of a schedule spread
  over seconds overlap only by chance (two starts 30 ms apart overlap if the first takes longer),
  so whether any answer is changed would depend on the host's load;
- ``/match/v1/...``       a chat answer to a request whose body contains ``match`` (e.g. one
  reasoning family's question wording) is replaced by ``wrong`` (its logprobs by one token that
  spells it): a planted slice collapse that does not depend on the host's kernels.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx

from tests.fixtures.loopback import LoopbackHTTPServer, serving


class _Handler(BaseHTTPRequestHandler):
    server: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        mode, _, rest = self.path.lstrip("/").partition("/")
        srv = self.server
        matched = bool(srv.match) and srv.match.encode() in body
        with srv.lock:
            concurrent = srv.in_flight > 0
            srv.in_flight += 1
            srv.arrivals += 1
            alter = concurrent and srv.rng.random() < srv.alter_p
        try:
            if mode == "noisy" and srv.hold_s and rest.startswith("v1/chat/completions"):
                time.sleep(srv.hold_s)  # in flight meanwhile: later arrivals see it
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() in ("content-type", "authorization", "accept")
            }
            if mode == "blank" or (mode == "match" and matched):
                body = _one_token(rest, body)
            try:
                resp = srv.client.request(
                    self.command, f"{srv.upstream}/{rest}", content=body or None, headers=headers
                )
            except httpx.HTTPError as exc:  # the upstream hung up: answer like a gateway would
                status, data, ctype = 502, json.dumps({"error": str(exc)}).encode(), "application/json"
            else:
                status, data = resp.status_code, resp.content
                ctype = resp.headers.get("content-type", "application/json")
                if status == 200 and ctype.startswith("application/json"):
                    data = self._damage(mode, rest, data, matched if mode == "match" else alter)
        finally:
            with srv.lock:
                srv.in_flight -= 1
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _damage(self, mode: str, route: str, data: bytes, alter: bool) -> bytes:
        if mode == "pass" or not route.startswith(("v1/chat/completions", "v1/completions")):
            return data
        payload = json.loads(data)
        if mode == "blank":
            for choice in payload.get("choices") or []:
                if isinstance(choice.get("message"), dict):
                    choice["message"]["content"] = ""
                if "text" in choice:
                    choice["text"] = ""
                choice["logprobs"] = None
                choice["finish_reason"] = "stop"  # an empty answer, not one cut short
            self.server.damaged += 1
        elif mode == "match" and alter and route.startswith("v1/chat/completions"):
            for choice in payload.get("choices") or []:
                _replace_answer(choice, self.server.wrong)
                self.server.damaged += 1
        elif mode == "noisy" and alter and route.startswith("v1/chat/completions"):
            for choice in payload.get("choices") or []:
                if _swap_random_token(choice, self.server.noise_rng):
                    self.server.damaged += 1
        elif mode == "concurrent" and alter and route.startswith("v1/chat/completions"):
            for choice in payload.get("choices") or []:
                if _swap_confident_token(choice):
                    self.server.damaged += 1
        return json.dumps(payload).encode()

    do_GET = _handle
    do_POST = _handle


def _one_token(route: str, body: bytes) -> bytes:
    """A generation request whose answer the proxy throws away (blanked or replaced) asks the
    upstream for one token: the request still takes the real path, without the model's cost of
    an answer nobody reads (on a 2-core host the baseline's model time is what `make test`
    waits on; docs/benchmarks.md, "The test loop")."""
    if not body or not route.startswith(("v1/chat/completions", "v1/completions")):
        return body
    payload = json.loads(body)
    for key in ("max_tokens", "max_completion_tokens"):
        payload.pop(key, None)
    payload["max_tokens"] = 1
    return json.dumps(payload).encode()


def _swap_confident_token(choice: dict[str, Any]) -> bool:
    content = ((choice.get("logprobs") or {}).get("content")) or []
    for i, tok in enumerate(content):
        tops = sorted(tok.get("top_logprobs") or [], key=lambda t: -t["logprob"])
        if len(tops) >= 2 and tops[0]["logprob"] - tops[1]["logprob"] > 1.0:
            content[i] = {**tok, "token": tops[1]["token"], "logprob": tops[1]["logprob"]}
            message = choice.get("message") or {}
            message["content"] = "".join(t["token"] for t in content)
            return True
    return False


def _swap_random_token(choice: dict[str, Any], rng: random.Random) -> bool:
    content = ((choice.get("logprobs") or {}).get("content")) or []
    message = choice.get("message") or {}
    if not content and isinstance(message.get("content"), str):
        # An upstream without logprobs (the loopback fault server): vary the text itself.
        message["content"] += f" ({rng.randrange(1000)})"
        return True
    swappable = [
        i for i, tok in enumerate(content)
        if any(t["token"] != tok["token"] for t in tok.get("top_logprobs") or [])
    ]
    if not swappable:
        return False
    i = rng.choice(swappable)
    tok = content[i]
    other = next(t for t in sorted(tok["top_logprobs"], key=lambda t: -t["logprob"])
                 if t["token"] != tok["token"])
    content[i] = {**tok, "token": other["token"], "logprob": other["logprob"]}
    message = choice.get("message") or {}
    message["content"] = "".join(t["token"] for t in content)
    return True


def _replace_answer(choice: dict[str, Any], wrong: str) -> None:
    choice["finish_reason"] = "stop"  # the whole (wrong) answer, not one cut short
    message = choice.get("message") or {}
    message["content"] = wrong
    logprobs = choice.get("logprobs") or {}
    if logprobs.get("content"):
        first = logprobs["content"][0]
        logprobs["content"] = [{**first, "token": wrong, "logprob": 0.0,
                                "top_logprobs": [{"token": wrong, "logprob": 0.0}]}]


class FaultProxy(LoopbackHTTPServer):
    def __init__(
        self, upstream: str, *, alter_p: float, seed: int, match: str = "", wrong: str = "Unknown.",
        hold_s: float = 0.0,
    ) -> None:
        super().__init__(_Handler)
        self.upstream = upstream.rstrip("/").removesuffix("/v1")  # the server's root
        self.client = httpx.Client(timeout=600)
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.noise_rng = random.Random(f"{seed}:noise")
        self.alter_p = alter_p
        self.match = match
        self.wrong = wrong
        self.hold_s = hold_s
        self.in_flight = 0
        self.arrivals = 0
        self.damaged = 0

    def url(self, mode: str) -> str:
        return f"{self.origin}/{mode}/v1"


@contextmanager
def fault_proxy(
    upstream: str, *, alter_p: float = 0.5, seed: int = 0, match: str = "", wrong: str = "Unknown.",
    hold_s: float = 0.0,
) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream, alter_p=alter_p, seed=seed, match=match, wrong=wrong,
                       hold_s=hold_s)
    try:
        with serving(proxy) as server:
            yield server
    finally:
        proxy.client.close()
