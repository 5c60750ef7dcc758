"""Generation and prompt throughput of the local llama.cpp servers (``evalsvc local up --engine
llamacpp``), one server measured at a time.

Usage: ``python benchmarks/llamacpp_throughput.py [--tokens 128] [--prompt-tokens 1000]``.

For each server (``f16``, ``q8_0``, ``q4_k_m``, ``q8_0-kv``): greedy chat requests of
``--tokens`` generated tokens (``ignore_eos``) at concurrency 1 and 4, and one prompt of about
``--prompt-tokens`` tokens with no prompt cache. Reports wall tokens/s, llama.cpp's own
``timings`` (prompt and generation tokens/s per request), and generated tokens per CPU-second
of the server process (utime + stime from /proc): on a shared host the wall figures follow the
load, the CPU-second figure much less. Prints the host's load average with each line. Servers
that this script started are stopped at the end; at most two run at once (f16 + one candidate).
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from evalsvc import local
from evalsvc.local import _llamacpp
from evalsvc.local._paths import Layout
from evalsvc.local._serve import stop_all
from evalsvc.local._state import state_lock

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its threads (llama.cpp computes in the server process)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def chat(url: str, model: str, content: str, max_tokens: int) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "cache_prompt": False,
    }
    resp = httpx.post(f"{url}/chat/completions", json=body, timeout=1800)
    resp.raise_for_status()
    return resp.json()


def measure(name: str, url: str, pid: int, tokens: int, prompt_tokens: int) -> None:
    model = _llamacpp.served_model_name(name)
    chat(url, model, "Hello", 4)  # warm-up
    for conc in (1, 4):
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        with ThreadPoolExecutor(conc) as pool:
            res = list(
                pool.map(
                    lambda i: chat(url, model, f"Write a long story about cat {i}.", tokens),
                    range(conc),
                )
            )
        wall, cpu = time.monotonic() - t0, cpu_seconds(pid) - cpu0
        gen = sum(r["usage"]["completion_tokens"] for r in res)
        per_req = [round(r["timings"]["predicted_per_second"], 1) for r in res]
        print(
            f"{name:8} c{conc}: {gen} tokens in {wall:.1f} s = {gen / wall:.1f} tok/s wall, "
            f"{gen / cpu:.1f} tok/CPU-s; llama.cpp per request {per_req} tok/s; "
            f"load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    filler = " ".join(f"Shelf {i} holds the box number {i * 7}." for i in range(prompt_tokens // 11))
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    r = chat(url, model, filler + " Which box is on shelf 3?", 8)
    wall, cpu = time.monotonic() - t0, cpu_seconds(pid) - cpu0
    n = r["usage"]["prompt_tokens"]
    print(
        f"{name:8} prompt: {n} tokens in {wall:.1f} s = {n / wall:.1f} tok/s wall "
        f"(llama.cpp {r['timings']['prompt_per_second']:.1f}), {n / cpu:.1f} tok/CPU-s; "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    args = parser.parse_args()
    before = local.status("llamacpp")
    try:
        for cand in _llamacpp.CANDIDATES:
            # The baseline stays up; one candidate at a time beside it.
            layout = Layout.current()
            with state_lock(layout.lock_file):
                stop_all(layout, [c for c in _llamacpp.CANDIDATES if c != cand])
            eps = local.ensure_up([cand], engine="llamacpp")
            infos = {i.name: i for i in local.server_info()}
            if cand == _llamacpp.CANDIDATES[0]:
                measure("f16", eps.baseline, infos["f16"].pid, args.tokens, args.prompt_tokens)
            measure(cand, eps.candidates[cand], infos[cand].pid, args.tokens, args.prompt_tokens)
    finally:
        if before is None:
            local.down("llamacpp")


if __name__ == "__main__":
    main()
