"""P2 (issue 21): the speed suite's output tokens/s against ``vllm bench serve`` on the same
endpoint, prompts, output length and concurrency.

Usage: ``python benchmarks/speed_vs_vllm_bench.py [--url URL] [--concurrency 4] [--requests 64]
[--prompt-chars 1000] [--max-tokens 64] [--rounds 3]``. Default URL: the local vLLM BF16 server
(``evalsvc local up``); its checkpoint is the tokenizer ``vllm bench serve`` needs.

Each round runs, in this order, ``evalsvc compare URL URL --suite <a speed suite>`` (the runner
measures the baseline role, then the candidate role: two measurements of the same endpoint, one
at a time) and ``vllm bench serve`` twice, so evalsvc's and vLLM's measurements alternate
around each other and drift in the host's speed falls on both. Both sides send the same seeded
prompt windows (``corpus_windows``, the speed suite's own) as streamed ``/v1/completions`` with
``ignore_eos`` and the same first-line prefix scheme, so that neither profits from the prefix
cache; both warm up with one request per slot. vLLM's benchmark runs from the managed vLLM venv
(``vllm.benchmarks.serve``, its ``custom`` dataset with ``--skip-chat-template``). Figures:
output tokens/s (all output tokens over the measurement's wall time), medians over rounds, and
the ratio of the medians (target 0.95-1.05).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from evalsvc import local
from evalsvc.local._paths import Layout
from evalsvc.suites.kinds.speed import corpus_windows

SEED = 1234

VLLM_BENCH = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "p = FlexibleArgumentParser()\n"
    "add_cli_args(p)\n"
    "main(p.parse_args(sys.argv[1:]))\n"
)


def children_cpu() -> float:
    """CPU seconds (user + sys) of this script's finished children: each side's client cost,
    which on a host the server shares is taken from the server."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def served_model(url: str) -> str:
    return str(httpx.get(f"{url}/models", timeout=30).json()["data"][0]["id"])


def evalsvc_round(url: str, args: argparse.Namespace, work: Path, k: int) -> list[float]:
    """One ``compare URL URL``: the baseline and the candidate role's output tokens/s."""
    suite = work / "speed-p2.yaml"
    suite.write_text(
        "name: speed-p2\nkind: speed\n"
        f"seed: {SEED}\n"
        "params:\n"
        f"  levels: [{args.concurrency}]\n"
        f"  requests: {args.requests}\n"
        f"  prompt_chars: {args.prompt_chars}\n"
        f"  max_tokens: {args.max_tokens}\n"
        f"  warmup: {args.concurrency}\n"
        "gate:\n  enabled: false\n"
    )
    out = work / f"evalsvc-{k}.json"
    env = {**os.environ, "EVALSVC_DATABASE_URL": f"sqlite:///{work / 'p2.db'}"}
    r = subprocess.run(
        [sys.executable, "-m", "evalsvc.cli.main", "compare", url, url, "--suite", str(suite),
         "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=3600,
    )
    if r.returncode not in (0, 1, 3):
        raise SystemExit(f"evalsvc compare failed ({r.returncode}): {r.stderr[-2000:]}")
    report = json.loads(out.read_text())
    entry = report["candidates"][0]["suites"][0]
    (level,) = entry["details"]["levels"]
    return [float(level["baseline"]["output_tok_s"]), float(level["candidate"]["output_tok_s"])]


def vllm_round(url: str, args: argparse.Namespace, work: Path, k: int, model: str,
               tokenizer: Path, python: Path) -> float:
    """One ``vllm bench serve`` over the same prompt windows: its output tokens/s."""
    prompts = work / f"prompts-{k}.jsonl"
    with prompts.open("w") as f:
        for i, text in enumerate(corpus_windows(SEED, "measured", args.requests,
                                                args.prompt_chars)):
            # The speed suite's first line is "Request <8 hex>-<level>-<i>."; the same length
            # and uniqueness here, so both sides prefill the same and neither hits the cache.
            f.write(json.dumps({"prompt": f"Request b{k:07d}-{args.concurrency}-{i}.\n{text}"})
                    + "\n")
    result = work / f"vllm-{k}.json"
    base = url.removesuffix("/v1")
    r = subprocess.run(
        [str(python), "-c", VLLM_BENCH, "--backend", "openai", "--base-url", base,
         "--endpoint", "/v1/completions", "--model", model, "--tokenizer", str(tokenizer),
         "--dataset-name", "custom", "--dataset-path", str(prompts), "--skip-chat-template",
         "--custom-output-len", str(args.max_tokens), "--ignore-eos",
         "--num-prompts", str(args.requests), "--max-concurrency", str(args.concurrency),
         "--num-warmups", str(args.concurrency), "--request-rate", "inf", "--disable-tqdm",
         "--save-result", "--result-dir", str(work), "--result-filename", result.name],
        capture_output=True, text=True, timeout=3600,
    )
    if r.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({r.returncode}): {r.stderr[-3000:]}")
    data = json.loads(result.read_text())
    if data.get("completed") != args.requests:
        raise SystemExit(f"vllm bench serve completed {data.get('completed')} of {args.requests}")
    return float(data["output_throughput"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=None, help="default: the local vLLM BF16 server")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt-chars", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    layout = Layout.current()
    url = args.url or local.ensure_up([], timeout=1200).baseline
    tokenizer = layout.models / local.BASELINE
    python = layout.vllm_venv / "bin" / "python"
    model = served_model(url)
    ours: list[float] = []
    theirs: list[float] = []
    cpu_ours: list[float] = []
    cpu_theirs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="p2-") as tmp:
        work = Path(tmp)
        for k in range(args.rounds):
            t0, c0 = time.perf_counter(), children_cpu()
            e = evalsvc_round(url, args, work, k)
            c1 = children_cpu()
            v = [vllm_round(url, args, work, 2 * k + j, model, tokenizer, python)
                 for j in range(2)]
            c2 = children_cpu()
            ours += e
            theirs += v
            cpu_ours.append((c1 - c0) / 2)  # one compare measures the endpoint twice
            cpu_theirs.append((c2 - c1) / 2)
            print(f"round {k + 1}: evalsvc {e[0]:.1f}, {e[1]:.1f} tok/s; vllm bench serve "
                  f"{v[0]:.1f}, {v[1]:.1f} tok/s ({time.perf_counter() - t0:.0f} s; load "
                  f"{os.getloadavg()[0]:.1f}; client CPU-s per measurement, start-up included: "
                  f"evalsvc {cpu_ours[-1]:.1f}, vllm bench serve {cpu_theirs[-1]:.1f})",
                  flush=True)
    mo, mt = statistics.median(ours), statistics.median(theirs)
    print(f"\n{url} ({model}), concurrency {args.concurrency}, {args.requests} requests of "
          f"~{args.prompt_chars} chars, {args.max_tokens} output tokens, {args.rounds} rounds")
    print(f"median output tokens/s: evalsvc speed suite {mo:.1f} (n={len(ours)}), "
          f"vllm bench serve {mt:.1f} (n={len(theirs)}); ratio {mo / mt:.3f} (target 0.95-1.05)")
    print(f"median client CPU-s per measurement: evalsvc {statistics.median(cpu_ours):.1f}, "
          f"vllm bench serve {statistics.median(cpu_theirs):.1f}")


if __name__ == "__main__":
    main()
