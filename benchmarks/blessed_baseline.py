"""The endpoint work a nightly saves with a blessed baseline (issue 40; docs/benchmarks.md).

A first run of ``--suite`` (default the ``smoke`` set) is blessed (``services.baselines.bless``);
then runs that reuse it alternate with full runs (``blessed_baseline=False``), each through
``services.runs.compare`` into a fresh SQLite database. Every request to each side passes a
counting loopback proxy (``tests/fixtures/fault_proxy.py`` with no faults), so the figure is the
HTTP requests each endpoint received (probe included), by kind: generation requests with
their body sizes, and the rest (models, tokenize); where the upstream is a llama.cpp or vLLM
server its own ``/metrics`` counters (prompt + generation seconds, tokens) are read too.

With no URLs, both sides are the zero-latency stub (``benchmarks/stub_server.py``, its own
process, two ports): it answers every kind of the ``smoke`` set (logprobs, echo, /tokenize), so
the counts are the runner's, whatever an engine costs per request. Run from the repository root:

    python benchmarks/blessed_baseline.py --rounds 2
    python benchmarks/blessed_baseline.py --baseline http://127.0.0.1:8104/v1 \\
        --candidate http://127.0.0.1:8105/v1 --suite reasoning-smoke
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalsvc.db import Store  # noqa: E402
from evalsvc.domain import EndpointRef, RunOptions, RunSpec  # noqa: E402
from evalsvc.services import baselines, runs  # noqa: E402
from tests.fixtures.fault_proxy import fault_proxy  # noqa: E402

_COUNTERS = {
    "llamacpp:prompt_seconds_total": "busy_s",
    "llamacpp:tokens_predicted_seconds_total": "busy_s",
    "llamacpp:prompt_tokens_total": "prompt_tokens",
    "llamacpp:tokens_predicted_total": "generated_tokens",
}


# vLLM's per-request histograms (vllm/v1/metrics): the seconds each request spent in prefill
# and in decode, summed over requests. Requests batched together each count their own time, so
# the sum exceeds the engine's wall time under concurrency; it is the same measure in a full and
# a reused run, which is what the ratio needs.
_VLLM = {
    "vllm:request_prefill_time_seconds_sum": "busy_s",
    "vllm:request_decode_time_seconds_sum": "busy_s",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "generated_tokens",
}


def engine_counters(url: str) -> dict[str, float] | None:
    """A llama.cpp or vLLM server's busy seconds and token counters from its ``/metrics``;
    None for another server."""
    root = url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{root}/metrics", timeout=5) as resp:  # noqa: S310
            text = resp.read().decode()
    except OSError:
        return None
    out = {"busy_s": 0.0, "prompt_tokens": 0.0, "generated_tokens": 0.0}
    known = {**_COUNTERS, **_VLLM}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        # vLLM labels its series (`name{model_name="..."} value`); llama.cpp does not.
        name, _, value = line.rpartition(" ")
        name = name.split("{", 1)[0]
        if name in known:
            out[known[name]] += float(value)
    return out if ("llamacpp:" in text or "vllm:" in text) else None


@contextlib.contextmanager
def stub() -> Iterator[tuple[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("stub_server.py")), "--watch-stdin"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line and line[0] == "STUB", line
        yield f"http://127.0.0.1:{line[1]}/v1", f"http://127.0.0.1:{line[2]}/v1"
    finally:
        proc.terminate()
        proc.wait(10)


def _count_routes(proxy: Any) -> collections.Counter[str]:
    """Count what ``proxy`` forwards by kind: generation requests (``chat``, ``completions``)
    and their prompt characters (``*_chars``), the rest (``other``: models, tokenize, health)."""
    counts: collections.Counter[str] = collections.Counter()
    forward = proxy._forward

    async def counted(request: Any, body: bytes, *, big: bool) -> Any:
        path = request.path
        kind = ("chat" if path.endswith("/chat/completions")
                else "completions" if path.endswith("/completions") else "other")
        counts[kind] += 1
        if kind != "other":
            counts[f"{kind}_chars"] += len(body)
        return await forward(request, body, big=big)

    proxy._forward = counted
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline")
    parser.add_argument("--candidate")
    parser.add_argument("--suite", action="append", help="repeatable; default: the smoke set")
    parser.add_argument("--rounds", type=int, default=1, help="pairs of (reused, full) runs")
    parser.add_argument("--no-final-full", action="store_true",
                        help="end with the last reused run (the blessed first run is the full "
                             "run it is compared with; halves a long set's time)")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="evalsvc-bless-bench-"))
    os.environ.setdefault("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")
    with contextlib.ExitStack() as stack:
        given = args.baseline and args.candidate
        upstream = (args.baseline, args.candidate) if given else stack.enter_context(stub())
        proxies = [stack.enter_context(fault_proxy(u.removesuffix("/v1"), lambda p, a: None))
                   for u in upstream]
        counts = [_count_routes(p) for p in proxies]
        store = stack.enter_context(Store.from_url(f"sqlite:///{out / 'bench.db'}"))
        store.upgrade()
        spec = RunSpec(baseline=EndpointRef(url=f"{proxies[0].url}/v1"),
                       candidates=[EndpointRef(url=f"{proxies[1].url}/v1")],
                       suites=args.suite or ["smoke"], options=RunOptions())

        def run(tag: str, *, reuse: bool = True) -> dict[str, Any]:
            before = [dict(c) for c in counts]
            engine = [engine_counters(u) for u in upstream]
            t0 = time.perf_counter()
            body = spec.model_copy(update={"options": RunOptions(blessed_baseline=reuse)})
            report = runs.compare(body, store=store)
            row: dict[str, Any] = {
                "run": tag, "verdict": report["verdict"], "wall_s": round(time.perf_counter() - t0, 2),
                "reused": [e["suite"] for e in report.get("baseline_reuse") or []
                           if e["status"] == "reused"],
                "requests": {side: {k: c[k] - b.get(k, 0) for k in sorted(c) if c[k] - b.get(k, 0)}
                             for side, c, b in zip(("baseline", "candidate"), counts, before,
                                                   strict=True)},
                "suites": {s["suite"]: s["verdict"] for s in report["candidates"][0]["suites"]},
                "run_id": report["run_id"],
            }
            after = [engine_counters(u) for u in upstream]
            if all(engine) and all(after):
                row["engine"] = {side: {k: round(a[k] - b[k], 2) for k in a} for side, a, b
                                   in zip(("baseline", "candidate"), after, engine, strict=True)
                                   if a is not None and b is not None}
            print(json.dumps(row), flush=True)
            return row

        first = run("full-0")
        made = baselines.bless(store, [first["run_id"]], note="benchmark")
        print(json.dumps({"blessed": [b["suite"] for b in made]}), flush=True)
        for i in range(args.rounds):
            run(f"reused-{i + 1}")
            if not (args.no_final_full and i == args.rounds - 1):
                run(f"full-{i + 1}", reuse=False)


if __name__ == "__main__":
    main()
