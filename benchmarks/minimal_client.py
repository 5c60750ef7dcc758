"""The minimal client: the floor the evaluator is measured against (``evaluator_speed.py``).

Contract: the same chat requests ``evalsvc compare --suite reasoning --samples N`` sends (the
items planned by the ``reasoning`` kind itself, same seed and ``max_tokens``), sent to every
endpoint at once with aiohttp, at most ``--concurrency`` in flight per endpoint; each answer is
read whole and parsed as JSON, its text kept in a list. No retries, no deadlines, no caps, no
scoring, no store: what any evaluator has to do at least. Prints one JSON line:
``{"send_s": ..., "requests": ..., "errors": ...}`` (``send_s``: first request to last answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalsvc.domain import Item, Provenance  # noqa: E402
from evalsvc.suites import load_suite  # noqa: E402


async def _items(suite_name: str, n: int) -> tuple[list[Item], int]:
    suite = load_suite(suite_name).with_overrides(samples=n, seed=None)
    items = await suite.plan(None, Provenance(model="stub"))  # type: ignore[arg-type]
    return items, int(suite.params.max_tokens)  # type: ignore[attr-defined]


async def _send_all(url: str, items: list[Item], max_tokens: int, concurrency: int) -> tuple[int, list[str]]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    sem = asyncio.Semaphore(concurrency)
    texts: list[str] = []
    errors = 0
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(f"{url}/models") as resp:
            model = (await resp.json())["data"][0]["id"]

        async def one(item: Item) -> None:
            nonlocal errors
            body: dict[str, Any] = {
                "model": model,
                "messages": item.prompt,
                "max_tokens": max_tokens,
                "temperature": 0.0,
            }
            async with sem:
                try:
                    async with session.post(f"{url}/chat/completions", json=body) as resp:
                        data = await resp.json()
                    texts.append(data["choices"][0]["message"]["content"])
                except (aiohttp.ClientError, KeyError, ValueError):
                    errors += 1

        await asyncio.gather(*(one(it) for it in items))
    return errors, texts


async def run(urls: list[str], suite: str, n: int, concurrency: int) -> dict[str, Any]:
    items, max_tokens = await _items(suite, n)
    start = time.perf_counter()
    results = await asyncio.gather(*(_send_all(u, items, max_tokens, concurrency) for u in urls))
    send_s = time.perf_counter() - start
    return {
        "send_s": round(send_s, 4),
        "requests": sum(len(t) for _, t in results) + sum(e for e, _ in results),
        "errors": sum(e for e, _ in results),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="+", help="base URLs (http://127.0.0.1:PORT/v1)")
    parser.add_argument("--suite", default="reasoning")
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(run(args.urls, args.suite, args.samples, args.concurrency))))


if __name__ == "__main__":
    main()
