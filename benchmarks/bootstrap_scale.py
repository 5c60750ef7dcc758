"""The paired bootstrap at scale: resampling by counts of the distinct values (the current
``evalsvc.stats.bootstrap_mean`` for paired binary or graded differences) against drawing
indices (its first implementation, still used when most values are distinct).

For each n, times ``bootstrap_mean`` (BCa and studentized, 9,999 resamples, the gate's two
intervals) on paired differences of binary scores (values −1, 0, 1), alternating the two
variants for ``--repeats`` rounds in one process, and reports per-variant medians and the
ratio. Both variants run the same public function; the index variant is forced by raising the
distinct-value threshold.

Then the recovery interval (``bootstrap_ratio_ci``: scipy's paired BCa bootstrap of
candidate ÷ baseline on paired 0/1 scores) with scipy's resamples batched (current) and all at
once (the first implementation, forced by raising the batch size): CPU and traced peak memory.
CPU only, no endpoint::

    python benchmarks/bootstrap_scale.py --sizes 100 1000 5000 20000 --repeats 5
    python benchmarks/bootstrap_scale.py --sizes 100 --ratio-sizes 1000 5000 14000 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from evalsvc.stats import _continuous, _ratio, bootstrap_mean, bootstrap_ratio_ci  # noqa: E402


def _gate_pair(x: np.ndarray) -> None:
    """What a continuous gate computes: both bootstrap intervals."""
    bootstrap_mean(x, null_value=-0.05, alpha=0.1, seed=1, method="BCa")
    bootstrap_mean(x, null_value=-0.05, alpha=0.1, seed=1, method="studentized")


def _time(x: np.ndarray, *, by_counts: bool) -> float:
    saved = _continuous._FEW_DISTINCT
    if not by_counts:
        _continuous._FEW_DISTINCT = x.size + 1  # no data has that few distinct values
    try:
        start = time.process_time()
        _gate_pair(x)
        return time.process_time() - start
    finally:
        _continuous._FEW_DISTINCT = saved


def _time_ratio(b: np.ndarray, c: np.ndarray, *, batched: bool) -> tuple[float, float]:
    """CPU-s and traced peak MB of one recovery interval."""
    saved = _ratio._BATCH_ELEMENTS
    if not batched:
        _ratio._BATCH_ELEMENTS = 10**15  # a batch of every resample: scipy's all-at-once call
    tracemalloc.start()
    try:
        start = time.process_time()
        bootstrap_ratio_ci(b, c, alpha=0.1, seed=1)
        return time.process_time() - start, tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()
        _ratio._BATCH_ELEMENTS = saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000, 20000])
    parser.add_argument("--ratio-sizes", type=int, nargs="*", default=[1000, 5000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| n | by index (CPU-s, median) | by counts (CPU-s, median) | ratio |")
    print("|---|---|---|---|")
    for n in args.sizes:
        x = rng.choice([-1.0, 0.0, 1.0], size=n, p=[0.1, 0.82, 0.08])
        index_s: list[float] = []
        counts_s: list[float] = []
        for _ in range(args.repeats):  # alternated, so a change in host speed hits both
            index_s.append(_time(x, by_counts=False))
            counts_s.append(_time(x, by_counts=True))
        a, b = statistics.median(index_s), statistics.median(counts_s)
        print(f"| {n:,} | {a:.3f} | {b:.3f} | {a / b:.0f}× |", flush=True)
    if args.ratio_sizes:
        print()
        print("| n | all at once (CPU-s, peak MB) | batched (CPU-s, peak MB) |")
        print("|---|---|---|")
    for n in args.ratio_sizes:
        base = (rng.random(n) < 0.7).astype(float)
        cand = np.where(rng.random(n) < 0.9, base, 1.0 - base)
        runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for _ in range(args.repeats):
            for batched in (False, True):
                runs[batched].append(_time_ratio(base, cand, batched=batched))
        cells = [
            f"{statistics.median(t for t, _ in runs[v]):.2f}, {max(m for _, m in runs[v]):,.0f}"
            for v in (False, True)
        ]
        print(f"| {n:,} | {cells[0]} | {cells[1]} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
