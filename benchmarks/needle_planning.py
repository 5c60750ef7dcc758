"""Needle planning time: sizing every item by its own full binary search on ``/tokenize`` (the
first implementation) against one full search per haystack cluster plus a galloping search
from it for the cluster's other items (the current ``needle`` kind).

Both variants size the same items (a check asserts identical prompts) against a real endpoint,
alternating A/B for ``--repeats`` rounds, and report per-variant medians, the number of
``/tokenize`` calls, and the ratio. Needs a running endpoint with ``/tokenize`` (vLLM), e.g.
the local bf16 baseline from ``evalsvc local up``::

    python benchmarks/needle_planning.py http://127.0.0.1:8100/v1 --suite needle-smoke --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from evalsvc.domain import EndpointRef  # noqa: E402
from evalsvc.endpoints import EndpointClient, probe  # noqa: E402
from evalsvc.suites import resolve  # noqa: E402
from evalsvc.suites.kinds import needle as needle_kind  # noqa: E402


class CountingClient:
    """Forwards ``tokenize`` to the real client and counts the calls."""

    def __init__(self, client: EndpointClient) -> None:
        self.client, self.calls = client, 0

    async def tokenize(self, text: str) -> list[int]:
        self.calls += 1
        return await self.client.tokenize(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


async def plan_once(suite: Any, client: EndpointClient, prov: Any, per_item: bool) -> tuple[float, int, list[str]]:
    counting = CountingClient(client)
    original = needle_kind._fit
    if per_item:  # the first implementation: every item searches from scratch

        async def fit_alone(*args: Any, start: int | None = None, **kw: Any) -> Any:
            return await original(*args, **kw)

        needle_kind._fit = fit_alone  # type: ignore[assignment]
    try:
        t0 = time.perf_counter()
        items = await suite.plan(counting, prov)
        elapsed = time.perf_counter() - t0
    finally:
        needle_kind._fit = original  # type: ignore[assignment]
    return elapsed, counting.calls, [it.prompt[0]["content"] for it in items]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--suite", default="needle-smoke")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    (suite,) = resolve([args.suite])
    async with EndpointClient(EndpointRef(url=args.url), concurrency=args.concurrency) as client:
        prov = await probe(client)
        times: dict[str, list[float]] = {"per-item": [], "cluster+gallop": []}
        calls: dict[str, int] = {}
        prompts: dict[str, list[str]] = {}
        for r in range(args.repeats):
            for name in (("per-item", "cluster+gallop") if r % 2 == 0 else ("cluster+gallop", "per-item")):
                t, n, p = await plan_once(suite, client, prov, per_item=name == "per-item")
                times[name].append(t)
                calls[name], prompts[name] = n, p
                print(f"round {r + 1} {name:15s} {t:6.2f} s  {n} /tokenize calls", flush=True)
    same = prompts["per-item"] == prompts["cluster+gallop"]
    print(f"\n{args.suite}: {len(prompts['per-item'])} items, identical prompts: {same}")
    for name, ts in times.items():
        print(f"{name:15s} median {statistics.median(ts):6.2f} s  ({calls[name]} /tokenize calls)")
    ratio = statistics.median(times["per-item"]) / statistics.median(times["cluster+gallop"])
    print(f"speed-up (median per-item / median cluster+gallop): x{ratio:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
