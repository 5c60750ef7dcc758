"""Issue 17 break 4: response caps held against gzip bombs, but httpx inflated each received
chunk whole (~70 MB per in-flight request): 16 concurrent requests against an endpoint sending
2 MB of gzip that inflates to 2 GiB peaked at 1,269 MB RSS. The client now asks for
``identity`` and inflates what it gets anyway in bounded pieces, counted against the cap.

A real loopback server sends the bomb whatever was asked; the client runs in a fresh process so
its peak RSS (``VmHWM``: ``ru_maxrss`` would carry the forking pytest process's size across exec) is its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from evalsvc.domain import EndpointRef
from evalsvc.endpoints import EgressPolicy, EndpointClient
from tests.fixtures.db import REPO_ROOT
from tests.fixtures.gzipbomb import bomb_server

CONCURRENCY = 16
CAP = 8 * 1024 * 1024  # the default EVALSVC_MAX_RESPONSE_BYTES

_CLIENT = r"""
import asyncio, json, resource, sys
from evalsvc.domain import EndpointRef
from evalsvc.endpoints import EgressPolicy, EndpointClient

async def main(url, n, stream):
    ref = EndpointRef(url=url, model="m")
    async with EndpointClient(ref, concurrency=n, retries=1,
                              egress=EgressPolicy.parse("127.0.0.0/8")) as client:
        done = await asyncio.gather(*(
            client.chat([{"role": "user", "content": "hi"}], max_tokens=4, stream=stream)
            for _ in range(n)))
    # VmHWM is this image's own peak: ru_maxrss survives exec, so it would report the forking
    # pytest process's size (716 MB in a full session) instead of the client's.
    with open("/proc/self/status") as f:
        peak = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
    print(json.dumps({"errors": [c.error for c in done], "peak_mb": peak}))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "stream"))
"""


def _peak(url: str, mode: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", _CLIENT, url, str(CONCURRENCY), mode],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "EVALSVC_MAX_RESPONSE_BYTES": str(CAP),
             "EVALSVC_MAX_STREAM_BYTES": str(CAP)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["json", "stream"])
def test_a_gzip_bomb_costs_bounded_memory_and_ends_at_the_cap(mode: str) -> None:
    with bomb_server() as server:
        result = _peak(server.url, mode)
        asked = set(server.accept_encodings)
    errors = result["errors"]
    peak = float(result["peak_mb"])  # type: ignore[arg-type]
    print(f"{mode}: peak RSS {peak:.0f} MB with {CONCURRENCY} requests in flight")
    assert asked == {"identity"}
    assert isinstance(errors, list) and len(errors) == CONCURRENCY
    cap_error = "exceeds the cap of 8388608 bytes" if mode == "json" else (
        "stream exceeds the cap of 8388608 bytes")
    assert all(e and cap_error in e for e in errors), [e for e in errors if not (e and cap_error in e)]
    # Before: 1,269 MB. Now: the interpreter plus at most one capped body per request
    # (16 x 8 MiB) and one 64 KiB piece each.
    assert peak < 400, peak


async def test_a_gzip_body_within_the_cap_still_reads() -> None:
    """An endpoint that compresses (despite ``identity``) still works: bodies are decoded."""
    import gzip
    from http.server import BaseHTTPRequestHandler

    from tests.fixtures.loopback import LoopbackHTTPServer, serving

    answer = json.dumps({"choices": [{"message": {"content": "OK"}, "finish_reason": "stop"}]})

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = gzip.compress(answer.encode())
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving(LoopbackHTTPServer(Handler)) as server:
        url = f"{server.origin}/v1"
        async with EndpointClient(EndpointRef(url=url), egress=EgressPolicy.parse("127.0.0.0/8")
                                  ) as client:
            done = await client.chat([{"role": "user", "content": "hi"}], max_tokens=4)
        assert done.error is None and done.text == "OK"
