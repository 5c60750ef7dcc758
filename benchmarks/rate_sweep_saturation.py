"""How close the rate sweep lands to a known saturation rate (the speed figure
``tests/speed/test_engine.py`` no longer asserts: a loaded host only lowers it).

A FIFO loopback server with a 50 ms service time (``tests/fixtures/queue_server.py``: an M/D/1
queue, at most 20 req/s) is swept as the test sweeps it (TTFT SLO 250 ms at 90%, from 8 req/s
by ×1.25, 80 requests a point) ``--repeats`` times; printed: each sweep's saturation and
capacity, and their medians with the error of the median saturation against 20 req/s.

Usage::

    python benchmarks/rate_sweep_saturation.py [--repeats 5] [--service-ms 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from evalsvc.domain import EndpointRef  # noqa: E402
from evalsvc.endpoints import EndpointClient  # noqa: E402
from evalsvc.speed import Outcome, Slo, SweepConfig, rate_sweep  # noqa: E402
from tests.fixtures.loopback import free_port  # noqa: E402

SERVER = REPO_ROOT / "tests" / "fixtures" / "queue_server.py"


async def one_sweep(url: str, seed: int) -> tuple[float | None, float | None, str]:
    client = EndpointClient(EndpointRef(url=url, model="queue-model"), concurrency=512)

    def sender(tag: str):  # noqa: ANN202 - rate_sweep's Send factory
        async def send(i: int) -> Outcome:
            out = await client.complete(f"{tag}-{i}", max_tokens=4, stream=True)
            return Outcome(out.ttft_s, out.completion_tokens or 0, out.itl_s, out.error)

        return send

    cfg = SweepConfig(slo=Slo(ttft_ms=250, attainment=0.9), start_rps=8.0, growth=1.25,
                      max_points=10, requests=80, warmup=4, seed=seed)
    try:
        result = await rate_sweep(sender, cfg)
    finally:
        await client.aclose()
    return result.saturation_rps, result.capacity_rps, result.stop_reason


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--service-ms", type=float, default=50.0)
    args = ap.parse_args()
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), "--service-ms",
                             str(args.service_ms)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/v1"
        true_rps = 1000.0 / args.service_ms
        sats, caps = [], []
        for i in range(args.repeats):
            sat, cap, why = asyncio.run(one_sweep(url, seed=7 + i))
            print(f"sweep {i + 1}: saturation {sat} req/s, capacity {cap} req/s ({why})")
            if sat is not None:
                sats.append(sat)
            if cap is not None:
                caps.append(cap)
        if sats:
            med = statistics.median(sats)
            print(f"median saturation {med:.2f} req/s against {true_rps:.1f} "
                  f"({(med / true_rps - 1) * 100:+.1f}%); median capacity "
                  f"{statistics.median(caps) if caps else None} req/s; {len(sats)} of "
                  f"{args.repeats} sweeps saturated")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
