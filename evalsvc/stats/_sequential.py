"""Sequential mode: always-valid confidence sequences for a bounded mean paired difference.

A fixed-n confidence interval is only valid if you look once. Recomputing it after every item
and stopping as soon as it clears the margin inflates the error rate far above α (the tests
show it). A *confidence sequence* (CS) ``(L_t, U_t)`` instead satisfies
``P(∃t: μ ∉ (L_t, U_t)) ≤ α`` uniformly over time, so a run may stop the moment the CS clears
``−margin`` on either side, with the same error guarantee as a single look (Howard, Ramdas,
McAuliffe & Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences",
Ann. Statist. 49:1055–1080).

Two CSs for observations bounded in ``[lo, hi]`` (default ``[−1, 1]``, the range of a paired
difference of 0/1 scores or of scores in [0, 1]):

* ``"eb"`` (default): the predictable-plug-in empirical-Bernstein ("PrPl-EB") CS of
  Waudby-Smith & Ramdas (2024, "Estimating means of bounded random variables by betting",
  JRSSB 86:1–27), built on the empirical-Bernstein supermartingale of Howard et al. (2021).
  It adapts to the variance, which matters here: paired 0/1 differences are mostly zeros.
* ``"hoeffding"``: Robbins' (1970) normal-mixture boundary with the sub-Gaussian variance proxy
  ``((hi − lo)/2)²`` from Hoeffding's lemma, one-sided (half-normal mixing). Valid but does not
  adapt to variance; kept as a simple, easily-audited reference.

Each side is a one-sided level-α CS, so a false pass and a false fail each have probability
≤ α, exactly the guarantee of the fixed-n gate. Running intersection (``max`` of lower bounds,
``min`` of upper bounds over time) keeps the CS valid and makes it monotone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from evalsvc.stats._binary import tango_statistic
from evalsvc.stats._common import FloatArray, as_vector, check_alpha
from evalsvc.stats._power import required_n

__all__ = [
    "SequentialSimulation",
    "confidence_sequence",
    "sequential_decision",
    "simulate_sample_use",
]

CSMethod = Literal["eb", "hoeffding"]
SequentialVerdict = Literal["pass", "fail"]

# Cap on the betting fraction λ (Waudby-Smith & Ramdas use 1/2 or 3/4); 1/2 keeps
# −log(1 − λ) − λ well-behaved.
_LAMBDA_CAP = 0.5


def _eb_bounds(y: FloatArray, alpha: float) -> tuple[FloatArray, FloatArray]:
    """PrPl-EB lower/upper bounds for observations ``y`` in [0, 1] along the last axis.

    Waudby-Smith & Ramdas (2024), PrPl-EB, one-sided version (``log(1/α)`` per side):
    ``μ̂_t = (1/2 + Σ_{i≤t} y_i)/(t + 1)``, ``σ̂²_t = (1/4 + Σ_{i≤t} (y_i − μ̂_i)²)/(t + 1)``,
    ``λ_t = min(√(2 log(1/α) / (σ̂²_{t−1} t log(1 + t))), 1/2)``, ``v_t = 4 (y_t − μ̂_{t−1})²``,
    ``ψ_E(λ) = (−log(1 − λ) − λ)/4``, and the bounds are
    ``(Σ λ_i y_i ∓ (log(1/α) + Σ v_i ψ_E(λ_i))) / Σ λ_i``.
    """
    t = np.arange(1, y.shape[-1] + 1, dtype=np.float64)
    mu_hat = (0.5 + np.cumsum(y, axis=-1)) / (t + 1.0)
    mu_prev = np.concatenate([np.full(y.shape[:-1] + (1,), 0.5), mu_hat[..., :-1]], axis=-1)
    sig2 = (0.25 + np.cumsum((y - mu_hat) ** 2, axis=-1)) / (t + 1.0)
    sig2_prev = np.concatenate([np.full(y.shape[:-1] + (1,), 0.25), sig2[..., :-1]], axis=-1)
    log_inv_alpha = math.log(1.0 / alpha)
    lam = np.minimum(np.sqrt(2.0 * log_inv_alpha / (sig2_prev * t * np.log1p(t))), _LAMBDA_CAP)
    v = 4.0 * (y - mu_prev) ** 2
    psi = (-np.log1p(-lam) - lam) / 4.0
    sum_lam = np.cumsum(lam, axis=-1)
    centre = np.cumsum(lam * y, axis=-1) / sum_lam
    width = (log_inv_alpha + np.cumsum(v * psi, axis=-1)) / sum_lam
    return centre - width, centre + width


@lru_cache(maxsize=64)
def _hoeffding_rho(alpha: float, v_opt: float) -> float:
    """Mixture precision ρ that makes the boundary tightest at intrinsic time ``v_opt``.

    Any ρ > 0 gives a valid CS; this only tunes where it is tightest (found numerically).
    """
    grid = v_opt * np.logspace(-3, 1, 161)
    widths = _hoeffding_radius(np.full(grid.size, v_opt), alpha, grid)
    return float(grid[int(np.argmin(widths))])


def _hoeffding_radius(v: FloatArray, alpha: float, rho: Any) -> FloatArray:
    """Smallest ``u`` with ``2 √(ρ/(v+ρ)) exp(u²/(2(v+ρ))) Φ(u/√(v+ρ)) ≥ 1/α``.

    The left side is the one-sided (half-normal) mixture of ``exp(λ S − λ² v / 2)`` over λ > 0
    (Robbins 1970, Ann. Math. Statist. 41:1397–1409; Howard et al. 2021). Solved for
    ``s = u/√(v+ρ)`` by vectorised bisection; the root is bracketed by
    ``[0, √(2 log(1/α) + log((v+ρ)/ρ))]``.
    """
    import scipy
    rho_a = np.asarray(rho, dtype=np.float64)
    log_target = math.log(1.0 / alpha)
    const = math.log(2.0) + 0.5 * np.log(rho_a / (v + rho_a))
    lo = np.zeros_like(v)
    hi = np.sqrt(2.0 * log_target + np.log((v + rho_a) / rho_a)) + 1e-9
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        f = const + 0.5 * mid * mid + scipy.stats.norm.logcdf(mid) - log_target
        hi = np.where(f >= 0, mid, hi)
        lo = np.where(f >= 0, lo, mid)
    return np.asarray(hi * np.sqrt(v + rho_a), dtype=np.float64)


def confidence_sequence(
    diffs: Any,
    *,
    alpha: float = 0.05,
    method: CSMethod = "eb",
    bounds: tuple[float, float] = (-1.0, 1.0),
    t_opt: int = 500,
) -> tuple[FloatArray, FloatArray]:
    """Always-valid lower and upper bounds for the running mean of bounded observations.

    Returns arrays ``(L, U)`` with the same shape as ``diffs`` (the last axis is time; a 2-D
    input is treated as independent sequences, which is what the simulations use). Each side is
    a one-sided level-``alpha`` confidence sequence: ``P(∃t: μ < L_t) ≤ alpha`` and
    ``P(∃t: μ > U_t) ≤ alpha``. See the module docstring for the two methods and references.
    ``t_opt`` only tunes where the Hoeffding mixture boundary is tightest.
    """
    alpha = check_alpha(alpha)
    lo_b, hi_b = float(bounds[0]), float(bounds[1])
    if not hi_b > lo_b:
        raise ValueError("bounds must satisfy lo < hi")
    x = np.asarray(diffs, dtype=np.float64)
    if x.ndim == 1:
        x = as_vector(x, name="differences")
    elif np.isnan(x).any():
        raise ValueError("differences contain NaN")
    if x.shape[-1] == 0:
        return np.empty(x.shape), np.empty(x.shape)
    if (x < lo_b - 1e-12).any() or (x > hi_b + 1e-12).any():
        raise ValueError(f"differences must lie in [{lo_b}, {hi_b}] for a bounded-mean CS")
    span = hi_b - lo_b
    if method == "eb":
        y = np.clip((x - lo_b) / span, 0.0, 1.0)
        ly, uy = _eb_bounds(y, alpha)
        lower, upper = lo_b + span * ly, lo_b + span * uy
    elif method == "hoeffding":
        t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
        sigma2 = (span / 2.0) ** 2
        v = sigma2 * t
        rho = _hoeffding_rho(alpha, sigma2 * float(t_opt))
        radius = _hoeffding_radius(v, alpha, rho) / t
        mean = np.cumsum(x, axis=-1) / t
        lower, upper = mean - radius, mean + radius
    else:
        raise ValueError("method must be 'eb' or 'hoeffding'")
    lower = np.clip(np.maximum.accumulate(lower, axis=-1), lo_b, hi_b)
    upper = np.clip(np.minimum.accumulate(upper, axis=-1), lo_b, hi_b)
    return np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)


def sequential_decision(
    diffs_so_far: Any,
    margin: float,
    alpha: float = 0.05,
    *,
    higher_is_better: bool = True,
    method: CSMethod = "eb",
    bounds: tuple[float, float] = (-1.0, 1.0),
) -> tuple[SequentialVerdict | None, float, float]:
    """Decide pass/fail as soon as an always-valid CS for the mean difference clears −margin.

    ``diffs_so_far`` are the per-item differences ``candidate − baseline`` in arrival order,
    in metric units and within ``bounds``. Returns ``(verdict, lower, upper)``: ``verdict`` is
    ``"pass"`` once the CS lower bound of the oriented difference exceeds ``−margin``,
    ``"fail"`` once its upper bound is below ``−margin``, else ``None`` (keep sampling); the
    bounds are for ``candidate − baseline`` in metric units. Because the CS holds uniformly over
    time (Howard et al. 2021), calling this after every item and stopping at the first verdict
    keeps P(false pass) ≤ alpha and P(false fail) ≤ alpha.
    """
    alpha = check_alpha(alpha)
    if margin < 0 or not math.isfinite(margin):
        raise ValueError("margin must be finite and non-negative")
    x = as_vector(diffs_so_far, name="diffs_so_far")
    lo_b, hi_b = float(bounds[0]), float(bounds[1])
    if higher_is_better:
        oriented, obounds = x, (lo_b, hi_b)
    else:
        oriented, obounds = -x, (-hi_b, -lo_b)
    if x.size == 0:
        return None, lo_b, hi_b
    lower_s, upper_s = confidence_sequence(oriented, alpha=alpha, method=method, bounds=obounds)
    lo_o, hi_o = float(lower_s[-1]), float(upper_s[-1])
    verdict: SequentialVerdict | None = None
    if lo_o > -margin:
        verdict = "pass"
    elif hi_o < -margin:
        verdict = "fail"
    if higher_is_better:
        return verdict, lo_o, hi_o
    return verdict, -hi_o, -lo_o


@dataclass(frozen=True)
class SequentialSimulation:
    """Monte Carlo comparison of the sequential gate with the fixed-n Tango gate."""

    true_delta: float
    discordance: float
    margin: float
    alpha: float
    n_fixed: int
    n_max: int
    n_sims: int
    mean_n_sequential: float
    median_n_sequential: float
    sample_ratio: float  # mean_n_sequential / n_fixed
    sequential_pass_rate: float
    sequential_fail_rate: float
    sequential_inconclusive_rate: float
    fixed_pass_rate: float
    fixed_fail_rate: float
    fixed_inconclusive_rate: float


def simulate_sample_use(
    *,
    true_delta: float,
    discordance: float,
    margin: float,
    alpha: float = 0.05,
    n_fixed: int | None = None,
    n_max: int | None = None,
    n_sims: int = 2000,
    seed: int = 0,
    method: CSMethod = "eb",
) -> SequentialSimulation:
    """Simulate paired 0/1 runs and compare sequential stopping with the fixed-n gate.

    Each simulated run draws per-item differences in {−1, 0, 1} with P(+1) = (ψ + Δ)/2 and
    P(−1) = (ψ − Δ)/2 (ψ = ``discordance``, Δ = ``true_delta``, oriented so bad is negative).
    The fixed-n gate (Tango score test at −margin) sees the first ``n_fixed`` items (default
    :func:`required_n` for ``true_delta = 0``); the sequential gate looks after every item up to
    ``n_max`` (default ``2·n_fixed``) and is inconclusive if it never decides. Both see the same
    item streams, so the comparison is paired.
    """
    import scipy
    alpha = check_alpha(alpha)
    if n_fixed is None:
        n_fixed = required_n(margin, discordance, alpha=alpha)
    if n_max is None:
        n_max = 2 * n_fixed
    if n_fixed < 1 or n_max < 1:
        raise ValueError("n_fixed and n_max must be positive")
    p_imp = (discordance + true_delta) / 2.0
    p_reg = (discordance - true_delta) / 2.0
    if p_imp < 0 or p_reg < 0 or discordance > 1:
        raise ValueError("need |true_delta| ≤ discordance ≤ 1")
    rng = np.random.default_rng(seed)
    length = max(n_max, n_fixed)
    stop_n = np.empty(n_sims, dtype=np.float64)
    seq_verdict = np.zeros(n_sims, dtype=np.int8)  # +1 pass, −1 fail, 0 none
    fix_verdict = np.zeros(n_sims, dtype=np.int8)
    chunk = max(1, 1_000_000 // length)
    for start in range(0, n_sims, chunk):
        stop = min(n_sims, start + chunk)
        u = rng.random((stop - start, length))
        d = np.where(u < p_imp, 1.0, np.where(u < p_imp + p_reg, -1.0, 0.0))
        # Fixed-n: Tango score test on the first n_fixed items.
        head = d[:, :n_fixed]
        z = tango_statistic(
            np.sum(head == 1.0, axis=1), np.sum(head == -1.0, axis=1), n_fixed, -margin
        )
        fix_verdict[start:stop] = np.where(
            scipy.stats.norm.sf(z) < alpha, 1, np.where(scipy.stats.norm.cdf(z) < alpha, -1, 0)
        )
        # Sequential: first time the CS clears −margin.
        lower, upper = confidence_sequence(d[:, :n_max], alpha=alpha, method=method)
        passed = lower > -margin
        failed = upper < -margin
        decided = passed | failed
        any_dec = decided.any(axis=1)
        first = np.where(any_dec, np.argmax(decided, axis=1), n_max - 1)
        rows = np.arange(stop - start)
        stop_n[start:stop] = np.where(any_dec, first + 1, n_max)
        seq_verdict[start:stop] = np.where(any_dec, np.where(passed[rows, first], 1, -1), 0)
    return SequentialSimulation(
        true_delta=true_delta,
        discordance=discordance,
        margin=margin,
        alpha=alpha,
        n_fixed=int(n_fixed),
        n_max=int(n_max),
        n_sims=n_sims,
        mean_n_sequential=float(stop_n.mean()),
        median_n_sequential=float(np.median(stop_n)),
        sample_ratio=float(stop_n.mean() / n_fixed),
        sequential_pass_rate=float(np.mean(seq_verdict == 1)),
        sequential_fail_rate=float(np.mean(seq_verdict == -1)),
        sequential_inconclusive_rate=float(np.mean(seq_verdict == 0)),
        fixed_pass_rate=float(np.mean(fix_verdict == 1)),
        fixed_fail_rate=float(np.mean(fix_verdict == -1)),
        fixed_inconclusive_rate=float(np.mean(fix_verdict == 0)),
    )
