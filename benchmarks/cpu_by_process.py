"""Where the CPU of a command goes, by process: run it under Linux process accounting and sum the
CPU-seconds of every process that exited meanwhile, grouped by kind.

Usage (as root, with Debian's ``acct`` package: ``apt-get install acct``)::

    python benchmarks/cpu_by_process.py [--top 15] -- make test

Process accounting (``accton``) writes one record per process at its exit with its user and
system time, pid and parent pid, whatever started it and however short it lived; ``dump-acct``
prints them. A sampler (``ps`` every few seconds) misses the short processes, which in
``make test`` are hundreds of interpreters of a second or two each. A record names a process by
its last thread (a Python process may end as ``jemalloc_bg_thd``, a vLLM worker as
``gloo_tcp_loop``), so the kinds below are told apart by name and by ancestry: a vLLM server is
the process tree under the parent of a ``VLLM::`` process. Processes still running when the
command ends (servers it did not stop) are not counted; accounting is system-wide, so whatever
else exits on the machine meanwhile is counted too (run it on a quiet host). Prints the total against the wall time,
i.e. how many cores the command kept busy on average; docs/benchmarks.md ("The test loop",
session 9) has ``.ci/run``'s figures.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_VLLM = ("VLLM::", "gloo", "pt_gloo", "ZMQ")  # a worker may end named by a torch thread
_BROWSER = ("chromium", "ThreadPool", "HangWatcher", "Perfetto", "node", "Compositor",
            "SignalInspector", "Chrome_")


def read_records(path: Path) -> list[dict[str, Any]]:
    """One dict per process record: comm, cpu and elapsed (s), pid, ppid."""
    out = subprocess.run(["dump-acct", str(path)], capture_output=True, text=True, check=True)
    rows = []
    for line in out.stdout.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 12:
            continue
        # dump-acct prints utime and stime in clock ticks (AHZ, 100 per second).
        rows.append({"comm": f[0], "cpu": (float(f[2]) + float(f[3])) / 100,
                     "elapsed": float(f[4]) / 100, "pid": int(f[9]), "ppid": int(f[10])})
    return rows


def categorize(rows: list[dict[str, Any]], wall: float) -> collections.Counter[str]:
    by_pid = {r["pid"]: r for r in rows}
    children: dict[int, list[int]] = collections.defaultdict(list)
    for r in rows:
        children[r["ppid"]].append(r["pid"])
    server: set[int] = set()
    for r in rows:
        if r["comm"].startswith(_VLLM):
            parent = by_pid.get(r["ppid"])
            while parent is not None and parent["comm"].startswith(_VLLM):
                parent = by_pid.get(parent["ppid"])
            stack = [parent["pid"] if parent is not None else r["pid"]]
            while stack:
                pid = stack.pop()
                if pid not in server:
                    server.add(pid)
                    stack.extend(children.get(pid, ()))
    cats: collections.Counter[str] = collections.Counter()
    for r in rows:
        comm = r["comm"]
        if r["pid"] in server or comm.startswith(_VLLM):
            kind = "vLLM servers (API server, engine core, model worker)"
        elif comm.startswith("llama"):
            kind = "llama.cpp servers"
        elif comm == "postgres":
            kind = "PostgreSQL"
        elif comm.startswith(_BROWSER):
            kind = "Chromium and Playwright"
        elif comm == "pip":
            kind = "pip"
        elif comm.startswith(("python", "evalsvc", "jemalloc")):
            # pytest and its xdist workers live through (almost) the whole command.
            kind = ("Python, alive through most of the run (pytest and its workers)"
                    if r["elapsed"] >= wall / 2
                    else "Python, shorter (CLI calls, servers, workers, lm-eval, benchmarks)")
        else:
            kind = f"other ({comm})"
        cats[kind] += r["cpu"]
    return cats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    for tool in ("accton", "dump-acct"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: install Debian's acct package (apt-get install acct)")
    with tempfile.TemporaryDirectory() as tmp:
        acct = Path(tmp) / "pacct"
        acct.touch()
        on = subprocess.run(["accton", str(acct)], capture_output=True, text=True)
        if on.returncode != 0:
            sys.exit(f"accton refused ({on.stderr.strip()}): process accounting needs root")
        t0 = time.monotonic()
        try:
            rc = subprocess.run(command).returncode
        finally:
            wall = time.monotonic() - t0
            subprocess.run(["accton", "off"], capture_output=True)
        rows = read_records(acct)
    cats = categorize(rows, wall)
    total = sum(cats.values())
    print(f"\n{' '.join(command)}: exit {rc}; {total:,.0f} CPU-s in {len(rows):,} processes over "
          f"{wall:,.0f} s of wall time = {total / wall:.2f} cores on average")
    for kind, cpu in cats.most_common(args.top):
        if cpu < 0.5:
            break
        print(f"{cpu:9,.0f} CPU-s  {kind}")
    sys.exit(rc)


if __name__ == "__main__":
    main()
