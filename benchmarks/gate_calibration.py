"""Seeded audit of every gate kind at the boundaries: false PASS at a true effect exactly at the
margin (small n, cluster-level effects) and false FAIL when the candidate equals the baseline.

Each cell draws ``reps`` synthetic runs from a seeded generator, puts them through the same
function the runner calls (``evaluate_gate``, ``threshold_gate``, ``recovery_gate``,
``slice_gates``, ``retention_test`` behind the determinism kind's gate over its staged looks,
``sequential_decision``) and counts verdicts. A rate's Monte Carlo standard error is
``√(r(1 − r)/reps)``; a cell is flagged ``ABOVE α`` when ``rate − 2·MC error > α``, i.e. above
the nominal level beyond Monte Carlo noise. docs/statistics.md ("Audit at the boundaries")
prints the table this writes::

    python benchmarks/gate_calibration.py --reps 2000 --seed 41

``tests/stats/test_gate_audit.py`` runs a few cells at fewer repetitions.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from evalsvc.gates import evaluate_gate, recovery_gate, slice_gates, threshold_gate  # noqa: E402
from evalsvc.stats import retention_test, sequential_decision  # noqa: E402

ALPHA = 0.05
MARGIN = 0.10
Rng = np.random.Generator
Draw = Callable[[Rng, int], str]
"""One simulated run → its verdict ("pass", "fail" or "inconclusive"); the int is a seed."""


@dataclass(frozen=True)
class Cell:
    gate: str
    setting: str
    error: str  # "false pass" (truth at the margin) or "false fail" (A/A)
    draw: Draw
    share: float = 1.0
    """Share of ``--reps`` this cell runs (below 1 where one run is slow: the gate's reported
    Wilcoxon check runs scipy's exact permutation test when n ≤ 13 and some differences are 0)."""


# ------------------------------------------------------------------------------- generators


def _at_margin_binary(rng: Rng, n: int, cluster: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Baseline always right; the candidate loses each item (or each cluster of ``cluster``
    items together) with probability = the margin: a true Δ of exactly −δ."""
    lost = np.repeat(rng.random(n // cluster) < MARGIN, cluster)
    return np.ones(n), (~lost).astype(float)


def _aa_binary(rng: Rng, n: int, p: float = 0.7, cluster: int = 1) -> tuple[np.ndarray, ...]:
    """Both endpoints right with probability ``p``, independently per item, around a per-cluster
    difficulty shared by both (clusters of items that are hard together)."""
    g = n // cluster
    shift = np.repeat(rng.normal(0.0, 1.0, g) if cluster > 1 else np.zeros(g), cluster)
    prob = 1.0 / (1.0 + np.exp(-(math.log(p / (1 - p)) + shift)))
    return (rng.random(n) < prob).astype(float), (rng.random(n) < prob).astype(float)


def _clusters(n: int, cluster: int) -> np.ndarray | None:
    return np.repeat(np.arange(n // cluster), cluster) if cluster > 1 else None


def _binary(n: int, cluster: int, aa: bool) -> Draw:
    def draw(rng: Rng, seed: int) -> str:
        b, c = _aa_binary(rng, n, cluster=cluster) if aa else _at_margin_binary(rng, n, cluster)
        out = evaluate_gate(b, c, metric="acc", kind="binary", margin=MARGIN,
                            clusters=_clusters(n, cluster), seed=seed)
        return out.verdict

    return draw


def _continuous01(n: int, cluster: int, bounded: bool = False) -> Draw:
    """0/1 scores through the continuous gate (a per-item mean that is often exactly 0 or 1);
    ``bounded``: with the scores' range (0, 1), as the runner gives a kind that states it
    (``Analysis.value_range``), so identical pairs are decided by the exact bound."""

    def draw(rng: Rng, seed: int) -> str:
        b, c = _at_margin_binary(rng, n, cluster)
        return evaluate_gate(b, c, metric="score", kind="continuous", margin=MARGIN,
                             clusters=_clusters(n, cluster), seed=seed,
                             value_range=(0.0, 1.0) if bounded else None).verdict

    return draw


def _pass_at_1(n: int, k: int, aa: bool) -> Draw:
    """Per-item pass@1 over ``k`` samples: most items solved every time on both sides. At the
    margin the candidate's per-item success probability drops by δ on average (by 0.5 on a
    fifth of the items); A/A both sides draw from the same per-item probabilities."""

    def draw(rng: Rng, seed: int) -> str:
        p = np.where(rng.random(n) < 0.8, 1.0, rng.uniform(0.3, 1.0, n))
        drop = np.where(rng.random(n) < 0.2, 0.5, 0.0) if not aa else np.zeros(n)
        pc = np.clip(p - drop, 0.0, 1.0)
        b = rng.binomial(k, p) / k
        c = rng.binomial(k, pc) / k
        # The true mean drop is E[min(p, 0.5)]·0.2 ≈ 0.1 · (share of p ≥ 0.5) ≤ δ: at (or just
        # inside) the margin, so a pass rate above α would be a defect.
        return evaluate_gate(b, c, metric="pass@1", kind="continuous", margin=MARGIN,
                             seed=seed).verdict

    return draw


def _sampled_item_means(n: int, k: int, aa: bool) -> Draw:
    """A sampled suite's gate (``evalsvc.suites._sampling.item_means``): k samples per item,
    the paired unit each side's mean over them, the continuous gate with ``value_range``
    (0, 1). Per-item solve rates p = 0.1 + 0.8·Beta(0.7, 0.7) (items differ: σ²_B of one
    side's rates ≈ 0.07); at the margin the candidate's rate is p − δ on every item (a true
    drop of exactly δ), A/A the same p on both sides with independent draws."""

    def draw(rng: Rng, seed: int) -> str:
        p = 0.1 + 0.8 * rng.beta(0.7, 0.7, n)
        pc = p if aa else p - MARGIN
        b = rng.binomial(k, p) / k
        c = rng.binomial(k, pc) / k
        return evaluate_gate(b, c, metric="pass@1", kind="continuous", margin=MARGIN,
                             seed=seed, value_range=(0.0, 1.0)).verdict

    return draw


def sampled_sizes() -> dict[int, int]:
    """The items ``evalsvc plan`` asks of a sampled suite at k = 1, 4, 10 for this module's
    margin, α and 80% power, with σ²_B = 0 (an equal candidate) and σ²_W = 2·E[p(1 − p)] of the
    rates ``_sampled_item_means`` draws (by Monte Carlo over 200,000 rates)."""
    from evalsvc.stats import required_items_sampled

    rng = np.random.default_rng(0)
    p = 0.1 + 0.8 * rng.beta(0.7, 0.7, 200_000)
    within = float(2 * np.mean(p * (1 - p)))
    return {k: required_items_sampled(MARGIN, 0.0, within, k, ALPHA, 0.8) for k in (1, 4, 10)}


def sampled_power(reps: int, seed: int) -> list[tuple[int, int, float, float]]:
    """The A/A pass rate of the sampled gate at ``plan``'s sizes (planned for 80% power):
    (k, n, rate, Monte Carlo error) per k."""
    out = []
    for k, n in sampled_sizes().items():
        rng = np.random.default_rng([seed, k])
        draw = _sampled_item_means(n, k, True)
        rate = sum(draw(rng, r) == "pass" for r in range(reps)) / reps
        out.append((k, n, rate, math.sqrt(rate * (1 - rate) / reps)))
    return out


def _continuous_aa(n: int, cluster: int) -> Draw:
    def draw(rng: Rng, seed: int) -> str:
        g = n // cluster
        base = rng.uniform(0.0, 1.0, n)
        shared = np.repeat(rng.normal(0.0, 0.15, g), cluster) if cluster > 1 else 0.0
        c = base + shared + rng.normal(0.0, 0.2, n)
        return evaluate_gate(base, c, metric="score", kind="continuous", margin=MARGIN,
                             clusters=_clusters(n, cluster), seed=seed).verdict

    return draw


def _threshold(n: int, kind: str, aa_fail: bool) -> Draw:
    """Candidate 0/1 values with a true mean exactly at the threshold 0.9 (false pass) — for
    the false-fail side the same values against a threshold exactly at the truth, oriented
    lower-is-better, so both one-sided errors are measured at the boundary."""

    def draw(rng: Rng, seed: int) -> str:
        v = (rng.random(n) < 0.9).astype(float)
        out = threshold_gate(v, metric="acc", threshold=0.9, higher_is_better=not aa_fail,
                             kind=kind, seed=seed)  # type: ignore[arg-type]
        return out.verdict

    return draw


def _recovery(n: int, aa: bool, p: float = 1.0) -> Draw:
    """At the floor: the baseline solves each item with probability ``p`` and the candidate
    loses a share 1 − ρ0 = δ of the baseline's solved items (a true recovery of exactly ρ0)."""

    def draw(rng: Rng, seed: int) -> str:
        if aa:
            b, c = _aa_binary(rng, n, p=0.8)
        else:
            b = (rng.random(n) < p).astype(float)
            c = b * (rng.random(n) >= MARGIN)
        return recovery_gate(b, c, metric="acc", recovery_min=1.0 - MARGIN, seed=seed).verdict

    return draw


def _slices(n: int, n_slices: int, aa: bool) -> Draw:
    def draw(rng: Rng, seed: int) -> str:
        b, c = _aa_binary(rng, n) if aa else _at_margin_binary(rng, n)
        labels = [f"s{i % n_slices}" for i in range(n)]
        whole = evaluate_gate(b, c, metric="acc", kind="binary", margin=MARGIN, seed=seed)
        out = slice_gates(whole, b.tolist(), c.tolist(), {"slice": labels}, kind="binary",
                          margin=MARGIN, alpha=ALPHA, higher_is_better=True, min_items=10,
                          seed=seed)
        return out.verdict

    return draw


def _retention_data(
    rng: Rng, g: int, m: int, q: float, loss: float, per_prompt: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stable indicators of ``g`` probes × ``m`` answers. Both endpoints unstable per answer
    with probability ``q`` independently (the baseline's noise floor); the candidate also
    loses a share ``loss`` of the rest: whole probes (batch nondeterminism hits prompts) or
    single answers. The true retention is exactly ``1 − loss``."""
    n = g * m
    b = (rng.random(n) >= q).astype(float)
    c = (rng.random(n) >= q).astype(float)
    lost = np.repeat(rng.random(g) < loss, m) if per_prompt else rng.random(n) < loss
    c[lost] = 0.0
    return b, c, np.repeat(np.arange(g), m)


def _retention(g: int, m: int, q: float, loss: float, per_prompt: bool = True) -> Draw:
    def draw(rng: Rng, seed: int) -> str:
        b, c, cl = _retention_data(rng, g, m, q, loss, per_prompt)
        return retention_test(b, c, margin=MARGIN, alpha=ALPHA, clusters=cl).verdict

    return draw


def _staged(stages: tuple[int, ...], m: int, q: float, loss: float) -> Draw:
    """The determinism suite's staged design: looks after each stage at α/looks, stop at the
    first pass or fail (the runner's rule)."""

    def draw(rng: Rng, seed: int) -> str:
        b, c, cl = _retention_data(rng, stages[-1], m, q, loss, True)
        for g in stages:
            k = g * m
            v = retention_test(b[:k], c[:k], margin=MARGIN, alpha=ALPHA, clusters=cl[:k],
                               looks=len(stages)).verdict
            if v != "inconclusive":
                return v
        return "inconclusive"

    return draw


def _sequential(n: int, aa: bool) -> Draw:
    def draw(rng: Rng, seed: int) -> str:
        b, c = _aa_binary(rng, n) if aa else _at_margin_binary(rng, n)
        d = c - b
        for t in range(10, n + 1, 10):  # a look every 10 items, stop at the first verdict
            verdict, _, _ = sequential_decision(d[:t], MARGIN, ALPHA)
            if verdict is not None:
                return verdict
        return "inconclusive"

    return draw


def cells() -> list[Cell]:
    """Every audited cell: (gate, setting, which error, simulation)."""
    fp, ff = "false pass", "false fail"
    out: list[Cell] = []
    for n in (10, 20, 40, 80):
        out.append(Cell("binary (Tango)", f"iid n = {n}", fp, _binary(n, 1, False)))
    for g in (4, 8, 16, 32):
        out.append(Cell("binary (Tango)", f"{g} clusters × 5 lost together", fp,
                        _binary(5 * g, 5, False)))
    out.append(Cell("binary (Tango)", "A/A iid n = 40, p = 0.7", ff, _binary(40, 1, True)))
    out.append(Cell("binary (Tango)", "A/A 16 clusters × 5", ff, _binary(80, 5, True)))
    for n in (10, 20, 40):
        out.append(Cell("continuous", f"0/1 scores n = {n}", fp, _continuous01(n, 1),
                        0.05 if n <= 13 else 1.0))
    out.append(Cell("continuous", "0/1 scores, 8 clusters × 5", fp, _continuous01(40, 5)))
    for n in (30, 40):
        out.append(Cell("continuous, range (0, 1)", f"0/1 scores n = {n}", fp,
                        _continuous01(n, 1, bounded=True)))
    out.append(Cell("continuous, range (0, 1)", "0/1 scores, 8 clusters × 5", fp,
                    _continuous01(40, 5, bounded=True)))
    out.append(Cell("continuous", "pass@1 of 4 samples, n = 40", fp, _pass_at_1(40, 4, False)))
    out.append(Cell("continuous", "A/A pass@1 of 4, n = 40", ff, _pass_at_1(40, 4, True)))
    for k, n in sampled_sizes().items():
        out.append(Cell("sampled item means, range (0, 1)", f"k = {k}, n = {n} (plan's)", fp,
                        _sampled_item_means(n, k, False)))
        out.append(Cell("sampled item means, range (0, 1)", f"A/A k = {k}, n = {n} (plan's)",
                        ff, _sampled_item_means(n, k, True)))
    out.append(Cell("continuous", "A/A n = 10", ff, _continuous_aa(10, 1)))
    out.append(Cell("continuous", "A/A 8 clusters × 5", ff, _continuous_aa(40, 5)))
    for n in (10, 40):
        out.append(Cell("threshold (binary, exact)", f"n = {n}", fp, _threshold(n, "binary",
                                                                                  False)))
        out.append(Cell("threshold (continuous)", f"0/1 values n = {n}", fp,
                        _threshold(n, "continuous", False)))
        out.append(Cell("threshold (continuous)", f"0/1 values n = {n}", ff,
                        _threshold(n, "continuous", True)))
    for n in (20, 40, 80):
        out.append(Cell("recovery ratio ≥ 0.9", f"n = {n}, baseline all right", fp,
                        _recovery(n, False)))
    for n in (20, 40, 80):
        out.append(Cell("recovery ratio ≥ 0.9", f"n = {n}, baseline 80% right", fp,
                        _recovery(n, False, 0.8)))
    out.append(Cell("recovery ratio ≥ 0.9", "A/A n = 80, p = 0.8", ff, _recovery(80, True)))
    out.append(Cell("slices (4 × 20 items)", "n = 80", fp, _slices(80, 4, False)))
    out.append(Cell("slices (4 × 20 items)", "A/A n = 80", ff, _slices(80, 4, True)))
    for g, m in ((4, 2), (12, 10), (24, 10), (29, 2), (30, 10), (48, 10)):
        out.append(Cell("retention (determinism)", f"{g} probes × {m}, stable baseline", fp,
                        _retention(g, m, 0.0, MARGIN)))
    out.append(Cell("retention (determinism)", "30 probes × 10, answer-level loss", fp,
                    _retention(30, 10, 0.0, MARGIN, per_prompt=False)))
    out.append(Cell("retention (determinism)", "48 probes × 10, 30% unstable baseline", fp,
                    _retention(48, 10, 0.3, MARGIN)))
    out.append(Cell("retention (determinism)", "A/A 12 probes × 10, 30% unstable", ff,
                    _retention(12, 10, 0.3, 0.0)))
    out.append(Cell("retention (determinism)", "A/A 4 probes × 2, 30% unstable", ff,
                    _retention(4, 2, 0.3, 0.0)))
    stages = (12, 24, 48, 96)
    out.append(Cell("staged looks (12/24/48/96 × 10)", "stable baseline", fp,
                    _staged(stages, 10, 0.0, MARGIN)))
    out.append(Cell("staged looks (12/24/48/96 × 10)", "30% unstable baseline", fp,
                    _staged(stages, 10, 0.3, MARGIN)))
    out.append(Cell("staged looks (12/24/48/96 × 10)", "A/A 30% unstable", ff,
                    _staged(stages, 10, 0.3, 0.0)))
    out.append(Cell("sequential (EB CS, look every 10)", "0/1 at the margin, up to 200", fp,
                    _sequential(200, False)))
    out.append(Cell("sequential (EB CS, look every 10)", "A/A up to 200", ff,
                    _sequential(200, True)))
    return out


@dataclass(frozen=True)
class Row:
    cell: Cell
    rate: float
    mc_error: float
    reps: int
    seconds: float

    @property
    def above_alpha(self) -> bool:
        return self.rate - 2.0 * self.mc_error > ALPHA


def run_cell(cell: Cell, reps: int, seed: int, index: int) -> Row:
    """The cell's error rate over ``reps`` seeded runs (the generator is seeded per cell, so a
    cell's rate does not depend on which other cells ran)."""
    rng = np.random.default_rng([seed, index])
    target = "pass" if cell.error == "false pass" else "fail"
    t0 = time.perf_counter()
    hits = sum(cell.draw(rng, r) == target for r in range(reps))
    rate = hits / reps
    return Row(cell, rate, math.sqrt(max(rate * (1 - rate), 1e-12) / reps), reps,
               time.perf_counter() - t0)


def table(rows: list[Row]) -> str:
    lines = [
        f"| gate | setting | error | rate (α = {ALPHA:g}) | MC error | reps |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        flag = " **ABOVE α**" if r.above_alpha else ""
        lines.append(f"| {r.cell.gate} | {r.cell.setting} | {r.cell.error} | "
                     f"{r.rate:.3f}{flag} | {r.mc_error:.3f} | {r.reps} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2000, help="runs per cell (default 2000)")
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--only", default=None, help="run only cells whose gate contains this")
    ap.add_argument("--start", type=int, default=0, help="skip the first START cells")
    ap.add_argument("--sampled-power", type=int, default=0, metavar="REPS",
                    help="print the sampled gate's A/A pass rate at plan's sizes instead")
    args = ap.parse_args(argv)
    if args.sampled_power:
        for k, n, rate, err in sampled_power(args.sampled_power, args.seed):
            print(f"k = {k}, n = {n}: pass rate {rate:.3f} ± {err:.3f}")
        return 0
    rows = []
    for i, cell in enumerate(cells()):
        if i < args.start or (args.only and args.only not in cell.gate):
            continue
        row = run_cell(cell, max(50, round(args.reps * cell.share)), args.seed, i)
        print(f"{cell.gate} | {cell.setting} | {cell.error}: {row.rate:.3f} ± "
              f"{row.mc_error:.3f} ({row.seconds:.1f} s)", file=sys.stderr, flush=True)
        rows.append(row)
    print(table(rows))
    return 1 if any(r.above_alpha for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
