"""Score one ``longctx`` task on one or more endpoints, by length and language (the figures of
docs/benchmarks.md, "Suite measurements", `longctx`).

Usage: ``python scripts/longctx_levels.py PARAMS_JSON URL[,URL...] [SEED]``. The items are
planned on the first endpoint (its ``/tokenize``) and solved on each, with the kind's own
``plan``/``solve`` (the code path ``evalsvc compare`` runs, without the store and the gate): a
quick way to see whether a level carries signal on a model before putting it in the catalog.
Prints the mean score per (length, language), the number of errors (timeouts) and a few answers.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from evalsvc.domain import EndpointRef
from evalsvc.endpoints import EndpointClient, probe
from evalsvc.suites import SuiteSpec
from evalsvc.suites.kinds.longctx import LongContextSuite


async def main(params: dict[str, object], urls: list[str], seed: int) -> None:
    suite = LongContextSuite(SuiteSpec(name="levels", kind="longctx", seed=seed, params=params))
    items = None
    for u in urls:
        # Two requests at a time, long deadlines: the endpoints may be shared and slow.
        async with EndpointClient(EndpointRef(url=u), concurrency=2, timeout_s=1500) as client:
            prov = await probe(client)
            if items is None:
                items = await suite.plan(client, prov)
            started = time.monotonic()
            samples = await asyncio.gather(*(suite.solve(it, client) for it in items))
        cells: dict[tuple[int, str], list[float]] = {}
        for it, s in zip(items, samples, strict=True):
            if s.score is not None:
                key = (it.metadata["context_length"], it.metadata["language"])
                cells.setdefault(key, []).append(s.score)
        errors = sum(1 for s in samples if s.error)
        print(f"{u} ({prov.model}): {len(items)} items in {time.monotonic() - started:.0f} s, "
              f"{errors} errors")
        for (length, lang), scores in sorted(cells.items()):
            print(f"  {length:>6} {lang}: n={len(scores)} mean={sum(scores) / len(scores):.3f} "
                  f"{[round(x, 2) for x in scores]}")
        for it, s in list(zip(items, samples, strict=True))[:4]:
            print(f"  expected {it.expected} -> {s.output[:100]!r}")


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1]), sys.argv[2].split(","),
                     int(sys.argv[3]) if len(sys.argv) > 3 else 0))
