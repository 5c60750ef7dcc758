"""``speed``: serving latency and throughput at a list of concurrency levels, plus KV capacity.

Method (the metrics of vLLM's ``benchmark_serving`` / ``vllm bench serve``): the same prompts go
to baseline and candidate as streamed ``/v1/completions`` requests with a fixed output length
(``ignore_eos``), ``c`` requests in flight at a time (a closed loop of ``c`` workers). Per
request: TTFT (time to the first streamed token), ITL (gaps between streamed chunks), TPOT
((latency − TTFT) / (output tokens − 1)) and end-to-end latency. Per level: output tokens/s
(all output tokens over the level's wall time) and requests/s. Percentiles p50/p90/p99 use
numpy's linear interpolation, as ``benchmark_serving`` does. ``warmup`` requests at each level
are sent first and never recorded.

Beside them, the KV capacity the probe read from each endpoint's ``/metrics`` (vLLM's
``cache_config_info``: blocks × block size), so the report states the gain, e.g. "×2.0 KV
capacity, ×1.3 throughput at c=8".

**Open loop** (``rates`` set): instead of concurrency levels, requests arrive at each offered rate
(Poisson, or gamma-bursty with ``burstiness``) whatever is in flight, through the engine in
``evalsvc.speed``; per rate, the same latency percentiles plus the achieved rate, SLO attainment
and goodput against ``slo_ttft_ms``/``slo_tpot_ms``, and per endpoint the **capacity at SLO**: the
highest rate at which ``slo_attainment`` of requests met the SLO (below the first rate that did
not, the endpoint not saturated). The ratio of the two is one repetition, so it carries no CI
and is withheld below ``evalsvc.speed.MIN_REQUESTS`` requests per rate; ``evalsvc sweep``
repeats the measurement in ABBA order for a CI.

Contract: ``exclusive`` (the runner measures one endpoint at a time, never beside other traffic);
``run()`` is overridden. The gate is optional (``gate.enabled: false`` in the catalog): when on,
it is a paired ratio test of the candidate's per-request output rate against the baseline's.
Each level runs at its own concurrency, above the run's ``--concurrency`` too; the report gives the
effective level.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from evalsvc import limits
from evalsvc.domain import Item, Provenance, Sample
from evalsvc.gates import ALPHA, GateDefaults
from evalsvc.speed import (
    MIN_REQUESTS,
    Outcome,
    RatePoint,
    RequestRecord,
    Slo,
    arrival_offsets,
    capacity_at_slo,
    closed_loop,
    open_loop,
    summarize,
)
from evalsvc.suites._base import Analysis, Emit, Suite
from evalsvc.suites._paths import catalog_dir
from evalsvc.suites._present import Chart, Finding, ViewInput, num

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import Completion, EndpointClient


def request_throughput(
    error: str | None, output_tokens: int | None, latency_s: float | None
) -> tuple[float | None, str | None]:
    """One request's output tokens/s (the gated metric) and its error.

    The gate compares a paired log ratio, which needs positive values: a request that produced no
    token, or took no measurable time, has no throughput. It is counted as an error (so the run's
    error budget sees it and the reason is stored with the sample), never handed to the gate as
    0 (which stopped the whole run with a ValueError against a server that returned nothing)."""
    if error:
        return None, error
    if not output_tokens:
        return None, "no output tokens: this request's throughput is undefined"
    if not latency_s or latency_s <= 0:
        return None, "no measurable latency: this request's throughput is undefined"
    return output_tokens / latency_s, None


class SpeedParams(BaseModel):
    """Parameters of a speed suite (validated from the YAML ``params`` mapping)."""

    model_config = ConfigDict(extra="forbid")

    levels: list[Annotated[int, Field(ge=1, le=limits.MAX_CONCURRENCY)]] = Field(
        default=[1, 4, 8], min_length=1, max_length=limits.MAX_PARAM_LIST
    )
    """Concurrency levels (requests in flight)."""
    requests: int = Field(default=16, ge=1, le=limits.MAX_ITEMS)
    """Measured requests per level, the same prompts at every level (``--samples``)."""
    prompt_chars: int = Field(default=1000, ge=1, le=limits.MAX_PROMPT_CHARS)
    """Prompt length in characters of bundled prose (about 4 characters per token)."""
    max_tokens: int = Field(default=64, ge=2, le=limits.MAX_TOKENS)
    ignore_eos: bool = True
    """Decode exactly ``max_tokens`` (vLLM ``ignore_eos``) so both endpoints do the same work."""
    warmup: int | None = Field(default=None, ge=0, le=limits.MAX_ITEMS)
    """Unrecorded requests before each level; default: one per concurrent slot."""
    rates: list[Annotated[float, Field(gt=0, le=10_000)]] | None = Field(
        default=None, max_length=limits.MAX_PARAM_LIST
    )
    """Open loop: offered request rates (req/s, ascending) instead of concurrency levels."""
    arrival: Literal["poisson", "gamma"] = "poisson"
    burstiness: float = Field(default=1.0, gt=0, le=100)
    """Gamma shape of the inter-arrival gaps (1: Poisson; below 1: burstier)."""
    slo_ttft_ms: float | None = Field(default=None, gt=0)
    slo_tpot_ms: float | None = Field(default=None, gt=0)
    slo_attainment: float = Field(default=0.9, gt=0, le=1)
    saturation_tolerance: float = Field(default=0.1, gt=0, lt=1)

    def slo(self) -> Slo:
        return Slo(self.slo_ttft_ms, self.slo_tpot_ms, self.slo_attainment)


def corpus_windows(seed: int, label: str, count: int, chars: int) -> list[str]:
    """``count`` seeded windows of ``chars`` characters of the bundled prose."""
    text = (Path(catalog_dir()) / "data" / "haystack.txt").read_text(encoding="utf-8")
    while len(text) < 2 * chars:
        text += "\n\n" + text
    rng = random.Random(f"{seed}:{label}")
    starts = [rng.randrange(len(text) - chars) for _ in range(count)]
    return [text[s : s + chars] for s in starts]


def percentile_summary(values: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    """Mean, p50, p90 and p99 (numpy linear interpolation), multiplied by ``scale``."""
    if len(values) == 0:
        return {}
    arr = np.asarray(values, dtype=float) * scale
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {"mean": float(arr.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def tpot(latency_s: float, ttft_s: float, output_tokens: int) -> float | None:
    """Time per output token after the first: (latency − TTFT) / (tokens − 1)."""
    if output_tokens < 2:
        return None
    return (latency_s - ttft_s) / (output_tokens - 1)


def level_metrics(samples: Sequence[Sample]) -> dict[str, Any]:
    """Latency percentiles and throughput of one endpoint at one concurrency level."""
    ok = [s for s in samples if s.error is None and s.latency_s is not None]
    if not ok:
        return {"n": 0, "n_errors": len(samples)}
    ttft = [s.ttft_s for s in ok if s.ttft_s is not None]
    itl = [x for s in ok for x in s.data.get("itl_s", [])]
    tpots = [t for s in ok if (t := s.data.get("tpot_s")) is not None]
    out_tokens = sum(s.completion_tokens or 0 for s in ok)
    # Wall time of the level: first start to last end (offsets from the level's start).
    wall = max(float(s.data["t_end"]) for s in ok) - min(float(s.data["t_start"]) for s in ok)
    return {
        "n": len(ok),
        "n_errors": len(samples) - len(ok),
        "ttft_ms": percentile_summary(ttft, 1000.0),
        "itl_ms": percentile_summary(itl, 1000.0),
        "tpot_ms": percentile_summary(tpots, 1000.0),
        "latency_s": percentile_summary([s.latency_s for s in ok if s.latency_s is not None]),
        "output_tokens": out_tokens,
        "wall_s": wall,
        "output_tok_s": out_tokens / wall if wall > 0 else None,
        "requests_per_s": len(ok) / wall if wall > 0 else None,
        "effective_concurrency": min(int(s.data.get("effective_concurrency", 0)) for s in ok),
    }


def gain_summary(
    kv_ratio: float | None, throughput: dict[int, float], per_request: float | None = None
) -> str:
    """The one-line gain statement, e.g. "×2.0 KV capacity, ×1.3 throughput at c=8".

    ``per_request`` is the gated metric's ratio (the geometric mean of the paired per-request
    output rates: the verdict table's row, whose Δ is this ratio − 1); it is named apart from the
    throughput (all of a level's output tokens over its wall time), because the two can differ:
    a request can decode faster while the level as a whole finishes later, or the other way."""
    parts = []
    if kv_ratio is not None:
        parts.append(f"×{kv_ratio:.1f} KV capacity")
    if per_request is not None:
        parts.append(f"×{per_request:.2f} tokens/s per request (the gated row)")
    if throughput:
        top = max(throughput)
        what = " (all requests)" if per_request is not None else ""
        parts.append(f"×{throughput[top]:.2f} throughput at c={top}{what}")
    return ", ".join(parts) or "no comparable measurements"


class SpeedSuite(Suite):
    kind = "speed"
    version = "1"
    Params = SpeedParams
    requires = frozenset({"completions"})
    exclusive = True
    # Throughput and latency are measured on both sides in one run, one after the other on a
    # quiet endpoint: a baseline measured on another day is not the same conditions.
    baseline_reusable = False
    gate_default = GateDefaults(
        suite_kind="speed",
        metric="request_output_tok_s",
        gate="noninferiority",
        kind="ratio",
        margin=0.0,
        threshold=None,
        alpha=ALPHA,
        higher_is_better=True,
        paired=True,
        required=False,
        rationale=(
            "Output tokens/s per request, compared as a paired log ratio. Margin 0 means 'pass "
            "only if the candidate is significantly faster' (ratio > 1); informational by "
            "default because a capacity gain (KV cache) may be the goal even without a "
            "throughput gain."
        ),
        sources=("evalsvc policy: quantization must pay for itself",),
    )
    description = (
        "TTFT, ITL, TPOT, output tokens/s and latency percentiles per concurrency level, "
        "with KV capacity from the probe."
    )
    view_template = "speed.html"
    params: SpeedParams

    @classmethod
    def findings(cls, entry: dict[str, Any]) -> list[Finding]:
        return _speed_findings(entry.get("details") or {})

    @classmethod
    def headline(cls, entry: dict[str, Any]) -> str | None:
        summary = (entry.get("details") or {}).get("summary")
        return str(summary) if summary else None

    @classmethod
    def throughput(cls, details: dict[str, Any]) -> dict[str, Any] | None:
        # The closed loop's highest concurrency both sides were measured at: the throughput
        # the endpoint sustains (an open loop's capacity is in requests, not tokens: none).
        rows = [
            r for r in details.get("levels") or []
            if (r.get("baseline") or {}).get("output_tok_s")
            and (r.get("candidate") or {}).get("output_tok_s")
        ]
        if not rows:
            return None
        top = max(rows, key=lambda r: r.get("concurrency") or 0)
        return {
            "baseline": top["baseline"]["output_tok_s"],
            "candidate": top["candidate"]["output_tok_s"],
            "what": f"output tokens/s at concurrency {top.get('concurrency')}",
        }

    @classmethod
    def view_model(cls, view: ViewInput) -> dict[str, Any]:
        return _speed_view(view.details)

    def samples_param(self) -> str:
        return "requests"

    def traffic_concurrency(self) -> int:
        if self.params.rates:  # an open loop has as many in flight as the queue grows to
            return limits.MAX_CONCURRENCY
        return max(self.params.levels)

    def item_count(self) -> int:
        return self.params.requests

    def expected_samples(self, items: Sequence[Item]) -> int:
        return len(items) * len(self.params.rates or self.params.levels)

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        texts = corpus_windows(
            self.spec.seed, "measured", self.params.requests, self.params.prompt_chars
        )
        return [Item(id=f"r{i:03d}", prompt=t) for i, t in enumerate(texts)]

    async def _one(self, client: EndpointClient, prompt: str) -> Completion:
        extra = {"ignore_eos": True} if self.params.ignore_eos else None
        return await client.complete(
            prompt, max_tokens=self.params.max_tokens, temperature=0.0, stream=True, extra=extra
        )

    async def run(
        self,
        items: Sequence[Item],
        client: EndpointClient,
        *,
        role: str,
        emit: Emit,
        done: set[tuple[str, int]],
        concurrency: int,
    ) -> None:
        p = self.params
        run_tag = uuid.uuid4().hex[:8]  # a rerun on the same server must not hit its old cache
        if p.rates:
            await self._run_open(items, client, role=role, emit=emit, done=done, tag=run_tag)
            return
        for level in p.levels:
            keys = [(f"c{level}/{it.id}", 0) for it in items]
            if all(k in done for k in keys):
                continue  # a resumed run keeps a finished level; a partial one is redone whole
            effective = min(level, concurrency)
            # A per-level first line gives every request its own first KV block, so no level
            # profits from the prefix cache that an earlier level (or the warm-up) filled.
            prompts = [f"Request {run_tag}-{level}-{i}.\n{it.prompt}" for i, it in enumerate(items)]
            warm = p.warmup if p.warmup is not None else level
            warm_prompts = [
                f"Warm-up {run_tag}-{level}-{i}.\n{t}"
                for i, t in enumerate(
                    corpus_windows(self.spec.seed, f"warmup-{level}", warm, p.prompt_chars)
                )
            ]
            if warm_prompts:
                await self._closed_loop(client, warm_prompts, level, None)
            start = time.perf_counter()

            async def record(
                index: int,
                out: Completion,
                t0: float,
                t1: float,
                level: int = level,
                eff: int = effective,
                start: float = start,
                keys: list[tuple[str, int]] = keys,
            ) -> None:
                ttft = out.ttft_s
                n_out = out.completion_tokens or 0
                score, error = request_throughput(out.error, n_out, out.latency_s)
                await emit(
                    Sample(
                        suite=self.name,
                        item_id=keys[index][0],
                        endpoint=role,
                        output=out.text[:200],
                        score=score,
                        prompt_tokens=out.prompt_tokens,
                        completion_tokens=out.completion_tokens,
                        latency_s=out.latency_s,
                        ttft_s=ttft,
                        error=error,
                        data={
                            "concurrency": level,
                            "effective_concurrency": eff,
                            "t_start": round(t0 - start, 6),
                            "t_end": round(t1 - start, 6),
                            "itl_s": [round(x, 6) for x in out.itl_s],
                            "tpot_s": None
                            if ttft is None or out.latency_s is None
                            else tpot(out.latency_s, ttft, n_out),
                        },
                    )
                )

            await self._closed_loop(client, prompts, level, record)

    async def _run_open(
        self,
        items: Sequence[Item],
        client: EndpointClient,
        *,
        role: str,
        emit: Emit,
        done: set[tuple[str, int]],
        tag: str,
    ) -> None:
        """Open-loop arrivals at each rate (``evalsvc.speed``); one sample per request."""
        p = self.params
        warm = p.warmup if p.warmup is not None else 2
        if warm:
            texts = corpus_windows(self.spec.seed, "warmup-open", warm, p.prompt_chars)
            await closed_loop(self._sender(client, [f"Warm-up {tag}-{i}.\n{t}"
                                                    for i, t in enumerate(texts)]), warm, warm)
        for k, rate in enumerate(p.rates or []):
            keys = [(f"r{rate:g}/{it.id}", 0) for it in items]
            if all(key in done for key in keys):
                continue
            prompts = [f"Request {tag}-r{k}-{i}.\n{it.prompt}" for i, it in enumerate(items)]
            offsets = arrival_offsets(len(items), rate, arrival=p.arrival,
                                      burstiness=p.burstiness, seed=self.spec.seed * 1009 + k)
            records = await open_loop(self._sender(client, prompts), offsets.tolist())
            for r in records:
                score, error = request_throughput(r.error, r.output_tokens, r.latency_s)
                await emit(
                    Sample(
                        suite=self.name,
                        item_id=keys[r.index][0],
                        endpoint=role,
                        score=score,
                        completion_tokens=r.output_tokens,
                        latency_s=r.latency_s,
                        ttft_s=r.ttft_s,
                        error=error,
                        data={
                            "rate": rate,
                            "t_sched": round(r.t_sched, 6),
                            "t_start": round(r.t_start, 6),
                            "t_end": round(r.t_end, 6),
                            "itl_s": [round(x, 6) for x in r.itl_s],
                            "tpot_s": r.tpot_s,
                        },
                    )
                )

    def _sender(self, client: EndpointClient, prompts: Sequence[str]) -> Any:
        async def send(i: int) -> Outcome:
            out = await self._one(client, prompts[i])
            return Outcome(out.ttft_s, out.completion_tokens or 0, list(out.itl_s), out.error)

        return send

    async def _closed_loop(
        self, client: EndpointClient, prompts: Sequence[str], level: int, record: Any
    ) -> None:
        """``level`` workers, each sending the next prompt as soon as its previous one finished."""
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(prompts)):
            queue.put_nowait(i)

        async def worker() -> None:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                t0 = time.perf_counter()
                out = await self._one(client, prompts[i])
                t1 = time.perf_counter()
                if record is not None:
                    await record(i, out, t0, t1)

        await asyncio.gather(*(worker() for _ in range(max(1, level))))

    def analyze(
        self,
        baseline: list[Sample],
        candidate: list[Sample],
        *,
        provenance: tuple[Provenance, Provenance] | None = None,
    ) -> Analysis:
        if self.params.rates:
            return self._analyze_open(baseline, candidate, provenance)
        levels_b = _by_level(baseline)
        levels_c = _by_level(candidate)
        per_level: list[dict[str, Any]] = []
        ratios: dict[int, float] = {}
        for level in sorted(levels_b.keys() | levels_c.keys()):
            mb, mc = level_metrics(levels_b.get(level, [])), level_metrics(levels_c.get(level, []))
            row: dict[str, Any] = {"concurrency": level, "baseline": mb, "candidate": mc}
            if mb.get("output_tok_s") and mc.get("output_tok_s"):
                ratios[level] = mc["output_tok_s"] / mb["output_tok_s"]
                row["throughput_ratio"] = ratios[level]
            if mb.get("ttft_ms") and mc.get("ttft_ms"):
                row["ttft_p50_ratio"] = mc["ttft_ms"]["p50"] / mb["ttft_ms"]["p50"]
            per_level.append(row)
        kv: dict[str, Any] = {}
        kv_ratio = None
        if provenance is not None:
            kb, kc = provenance[0].kv_capacity_tokens, provenance[1].kv_capacity_tokens
            kv = {
                "baseline_tokens": kb,
                "candidate_tokens": kc,
                "baseline_kv_dtype": provenance[0].kv_cache_dtype,
                "candidate_kv_dtype": provenance[1].kv_cache_dtype,
            }
            if kb and kc:
                kv_ratio = kc / kb
                kv["ratio"] = kv_ratio
        # Gate arrays: each request's output rate, paired by (level, prompt).
        base = {s.item_id: s for s in baseline if s.score is not None}
        cand = {s.item_id: s for s in candidate if s.score is not None}
        keys = sorted(base.keys() & cand.keys())
        n_errors = len({s.item_id for s in baseline + candidate}) - len(keys)
        logs = [
            np.log(float(cand[k].score or 0.0) / float(base[k].score or 0.0))
            for k in keys
            if (base[k].score or 0.0) > 0 and (cand[k].score or 0.0) > 0
        ]
        per_request = float(np.exp(np.mean(logs))) if logs else None
        return Analysis(
            baseline=[float(base[k].score or 0.0) for k in keys],
            candidate=[float(cand[k].score or 0.0) for k in keys],
            paired=True,
            n_errors=n_errors,
            details={
                "levels": per_level,
                "kv_capacity": kv,
                "throughput_ratio": {str(k): v for k, v in ratios.items()},
                "summary": gain_summary(kv_ratio, ratios, per_request),
            },
        )


    def _analyze_open(
        self,
        baseline: list[Sample],
        candidate: list[Sample],
        provenance: tuple[Provenance, Provenance] | None,
    ) -> Analysis:
        p = self.params
        slo = p.slo()
        rows: list[dict[str, Any]] = []
        points: dict[str, list[RatePoint]] = {"baseline": [], "candidate": []}
        for rate in p.rates or []:
            row: dict[str, Any] = {"rate": rate}
            for side, samples in (("baseline", baseline), ("candidate", candidate)):
                recs = [_record(i, s) for i, s in enumerate(samples) if s.data.get("rate") == rate]
                if not recs:
                    continue
                summ = summarize(recs, slo)
                achieved, offered = summ.get("achieved_rps"), summ.get("offered_rps")
                saturated = bool(offered and (achieved is None or achieved
                                              < (1 - p.saturation_tolerance) * offered))
                held = not saturated and summ.get("slo_attainment", 0.0) >= slo.attainment
                points[side].append(RatePoint(rate, summ, saturated, False, held))
                row[side] = {**summ, "saturated": saturated, "slo_held": held}
            rows.append(row)
        cap_b, low_b = capacity_at_slo(points["baseline"])
        cap_c, low_c = capacity_at_slo(points["candidate"])
        capacity: dict[str, Any] = {
            "slo": slo.to_dict(), "slo_text": slo.describe(), "baseline": cap_b,
            "candidate": cap_c, "baseline_lower_bound": low_b, "candidate_lower_bound": low_c,
            "ratio": None, "repetitions": 1,
        }
        if p.requests < MIN_REQUESTS:
            capacity["ratio_withheld"] = f"{p.requests} requests per rate (< {MIN_REQUESTS})"
        elif not cap_b or not cap_c:
            capacity["ratio_withheld"] = "an endpoint met the SLO at no tested rate"
        else:
            capacity["ratio"] = cap_c / cap_b
        base = {s.item_id: s for s in baseline if s.score is not None}
        cand = {s.item_id: s for s in candidate if s.score is not None}
        keys = sorted(base.keys() & cand.keys())
        return Analysis(
            baseline=[float(base[k].score or 0.0) for k in keys],
            candidate=[float(cand[k].score or 0.0) for k in keys],
            paired=True,
            n_errors=len({s.item_id for s in baseline + candidate}) - len(keys),
            details={"rates": rows, "capacity": capacity, "kv_capacity": _kv(provenance),
                     "summary": capacity_summary(capacity)},
        )


def _kv(provenance: tuple[Provenance, Provenance] | None) -> dict[str, Any]:
    if provenance is None:
        return {}
    kb, kc = provenance[0].kv_capacity_tokens, provenance[1].kv_capacity_tokens
    out: dict[str, Any] = {"baseline_tokens": kb, "candidate_tokens": kc}
    if kb and kc:
        out["ratio"] = kc / kb
    return out


def _record(index: int, s: Sample) -> RequestRecord:
    d = s.data
    return RequestRecord(index, float(d.get("t_sched", 0.0)), float(d.get("t_start", 0.0)),
                         float(d.get("t_end", 0.0)), s.ttft_s, s.completion_tokens or 0,
                         list(d.get("itl_s") or []), s.error)


def capacity_summary(cap: dict[str, Any]) -> str:
    """E.g. "capacity at SLO (TTFT ≤ 300 ms for 90% of requests): 15 → 35 req/s (×2.33, one
    repetition: no CI)"."""

    def one(v: Any, lower: bool) -> str:
        return "none" if not v else f"{'≥' if lower else ''}{v:.3g}"

    text = (f"capacity at SLO ({cap['slo_text']}): "
            f"{one(cap['baseline'], cap['baseline_lower_bound'])} → "
            f"{one(cap['candidate'], cap['candidate_lower_bound'])} req/s")
    if cap.get("ratio") is not None:
        text += f" (×{cap['ratio']:.2f}, one repetition: no CI)"
    elif cap.get("ratio_withheld"):
        text += f" (no ratio: {cap['ratio_withheld']})"
    return text


def _by_level(samples: Sequence[Sample]) -> dict[int, list[Sample]]:
    out: dict[int, list[Sample]] = defaultdict(list)
    for s in samples:
        out[int(s.data.get("concurrency", 0))].append(s)
    return out


# ---------------------------------------------------------------------------- presentation


def _open_findings(d: dict[str, Any]) -> list[Finding]:
    rows = d.get("rates") or []
    lines = [f"**{d['summary']}**", ""] if d.get("summary") else []
    lines += [
        "| offered req/s | achieved (baseline / candidate) | TTFT p50 / p99 ms | TPOT p50 ms | "
        "E2E p90 s | SLO attainment | goodput req/s |",
        "|---|---|---|---|---|---|---|",
    ]

    def g(m: dict[str, Any], key: str, sub: str | None = None) -> Any:
        return (m.get(key) or {}).get(sub) if sub else m.get(key)

    def sat(m: dict[str, Any]) -> str:
        return " (saturated)" if m.get("saturated") else ""

    for r in rows:
        b, c = r.get("baseline") or {}, r.get("candidate") or {}

        def both(key: str, sub: str | None, digits: int, b: Any = b, c: Any = c) -> str:
            return f"{num(g(b, key, sub), digits)} / {num(g(c, key, sub), digits)}"

        lines.append(
            f"| {r.get('rate'):g} | {num(b.get('achieved_rps'), 2)}{sat(b)} / "
            f"{num(c.get('achieved_rps'), 2)}{sat(c)} | "
            f"{both('ttft_ms', 'p50', 0)} · {both('ttft_ms', 'p99', 0)} | "
            f"{both('tpot_ms', 'p50', 1)} | {both('e2e_s', 'p90', 2)} | "
            f"{both('slo_attainment', None, 2)} | {both('goodput_rps', None, 2)} |"
        )
    lines.append("")
    return [Finding(title=str(d.get("summary") or "capacity at SLO"), markdown=lines,
                    data={"rates": rows, "capacity": d.get("capacity")})]


def _speed_findings(d: dict[str, Any]) -> list[Finding]:
    if d.get("rates"):
        return _open_findings(d)
    levels = d.get("levels") or []
    lines = [f"**{d['summary']}**", ""] if d.get("summary") else []
    if levels:
        lines += [
            "| c | TTFT p50 ms | TPOT p50 ms | latency p90 s | output tok/s (baseline / candidate) |",
            "|---|---|---|---|---|",
        ]
        for lv in levels:
            b, c = lv.get("baseline") or {}, lv.get("candidate") or {}

            def both(key: str, sub: str | None, digits: int, b: Any = b, c: Any = c) -> str:
                vb = (b.get(key) or {}).get(sub) if sub else b.get(key)
                vc = (c.get(key) or {}).get(sub) if sub else c.get(key)
                return f"{num(vb, digits)} / {num(vc, digits)}"

            lines.append(
                f"| {lv.get('concurrency')} | {both('ttft_ms', 'p50', 0)} | "
                f"{both('tpot_ms', 'p50', 1)} | {both('latency_s', 'p90', 2)} | "
                f"{both('output_tok_s', None, 1)} |"
            )
        lines.append("")
    if not lines:
        return []
    return [Finding(title=str(d.get("summary") or "speed per concurrency"), markdown=lines,
                    data={"levels": levels, "kv_capacity": d.get("kv_capacity")})]


def _speed_view(d: dict[str, Any]) -> dict[str, Any]:
    if d.get("rates"):
        rows = d["rates"]
        xs = [f"{r.get('rate'):g}" for r in rows]

        def series(cid: str, title: str, key: str, sub: str | None, unit: str) -> dict[str, Any]:
            def val(side: str, r: dict[str, Any]) -> Any:
                m = r.get(side) or {}
                return (m.get(key) or {}).get(sub) if sub else m.get(key)

            return Chart(cid, "line", title, xs, [
                {"name": side, "color": side, "data": [val(side, r) for r in rows]}
                for side in ("baseline", "candidate")
            ], y_name=unit, x_name="offered req/s").to_dict()

        return {"levels": [], "charts": [
            series("speed-goodput", "Goodput (req/s meeting the SLO)", "goodput_rps", None,
                   "req/s"),
            series("speed-ttft-p99", "Time to first token, p99 (ms)", "ttft_ms", "p99", "ms"),
        ]}
    levels = d.get("levels") or []
    xs = [str(lv.get("concurrency")) for lv in levels]

    def line(cid: str, title: str, key: str, sub: str | None, unit: str) -> dict[str, Any]:
        def val(side: str, lv: dict[str, Any]) -> Any:
            m = lv.get(side) or {}
            return (m.get(key) or {}).get(sub) if sub else m.get(key)

        return Chart(cid, "line", title, xs, [
            {"name": side, "color": side, "data": [val(side, lv) for lv in levels]}
            for side in ("baseline", "candidate")
        ], y_name=unit, x_name="concurrency").to_dict()

    charts = [
        line("speed-throughput", "Output throughput (tok/s)", "output_tok_s", None, "tok/s"),
        line("speed-ttft", "Time to first token, p50 (ms)", "ttft_ms", "p50", "ms"),
        line("speed-itl", "Inter-token latency, p50 (ms)", "itl_ms", "p50", "ms"),
    ] if levels else []
    return {"levels": levels, "charts": charts}
