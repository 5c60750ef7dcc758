"""The queue server (tests/fixtures/queue_server.py) as a real process on loopback."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.fixtures.loopback import free_port, probe

SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "queue_server.py"


def wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"queue server exited with {proc.returncode}")
        try:
            if probe().get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("queue server not healthy")


@contextmanager
def queue_servers(*service_ms: str) -> Iterator[list[str]]:
    """One queue server process per service time (ms, saturating at 1000 / ms req/s); yields
    their base URLs in that order and stops them all."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        urls = []
        for ms in service_ms:
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, str(SCRIPT), "--port", str(port), "--service-ms", ms],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(proc)
            wait_healthy(port, proc)
            urls.append(f"http://127.0.0.1:{port}/v1")
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture
def queue_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """Base URL of a queue server; ``@pytest.mark.parametrize`` may pass the service time."""
    service_ms = getattr(request, "param", 50.0)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--port", str(port), "--service-ms", str(service_ms)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(port, proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
