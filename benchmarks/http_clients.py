"""The HTTP stack chosen by measurement: the same chat requests through bare aiohttp and bare httpx.

Contract: against a running stub (``benchmarks/stub_server.py``), each client sends ``--requests``
small chat requests to every given endpoint at once, at most ``--concurrency`` in flight per
endpoint, reading each body whole (httpx: ``stream`` + ``aiter_raw``, the way the endpoint client
read bodies under a cap); alternated A/B for ``--repeats`` rounds; prints the medians as JSON.
Nothing of evalsvc is involved: this is the cost of the library alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable

import aiohttp
import httpx

BODY = {"model": "stub-model", "messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 8}


async def _aiohttp(url: str, n: int, concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency + 4)) as s:

        async def one() -> None:
            async with sem, s.post(f"{url}/chat/completions", json=BODY) as resp:
                await resp.read()

        await asyncio.gather(*(one() for _ in range(n)))


async def _httpx(url: str, n: int, concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(limits=limits, timeout=300.0) as c:

        async def one() -> None:
            async with sem, c.stream("POST", f"{url}/chat/completions", json=BODY) as resp:
                async for _ in resp.aiter_raw():
                    pass

        await asyncio.gather(*(one() for _ in range(n)))


CLIENTS: dict[str, Callable[[str, int, int], Awaitable[None]]] = {
    "aiohttp": _aiohttp,
    "httpx": _httpx,
}


async def _time(name: str, urls: list[str], n: int, concurrency: int) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(CLIENTS[name](u, n, concurrency) for u in urls))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="*", help="base URLs of a running stub")
    parser.add_argument(
        "--spawn-stub", action="store_true", help="start benchmarks/stub_server.py for the run"
    )
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.spawn_stub:
        from evaluator_speed import stub  # beside this file

        with stub() as urls:
            _measure(urls, args)
    elif args.urls:
        _measure(args.urls, args)
    else:
        parser.error("give the stub's base URLs or --spawn-stub")


def _measure(urls: list[str], args: argparse.Namespace) -> None:
    walls: dict[str, list[float]] = {name: [] for name in CLIENTS}
    for _ in range(args.repeats):
        for name in CLIENTS:
            walls[name].append(asyncio.run(_time(name, urls, args.requests, args.concurrency)))
    print(json.dumps({
        "requests_per_endpoint": args.requests,
        "endpoints": len(urls),
        "concurrency": args.concurrency,
        "median_s": {k: round(statistics.median(v), 3) for k, v in walls.items()},
        "runs_s": {k: [round(x, 3) for x in v] for k, v in walls.items()},
    }))


if __name__ == "__main__":
    main()
