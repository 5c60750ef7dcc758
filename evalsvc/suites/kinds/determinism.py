"""``determinism``: does greedy output depend on what else is in the batch?

Method (after SGLang's ``test_deterministic`` and the batch-invariance work it comes from:
He et al., "Defeating Nondeterminism in LLM Inference", Thinking Machines Lab, 2025): at
temperature 0, each probe prompt sent *alone* (sequentially, batch size 1) gives the
reference output. The same prompts are then sent under conditions that change the batch:

- ``mixed``: all probes at once, mixed with background requests of varied prompt and output
  lengths, on a schedule of start times, so prefill and decode share batches;
- ``c{k}``: probes in groups of ``k`` concurrent requests (padded with background requests when
  ``k`` exceeds the number of probes);
- ``prefix_warm``: a shared-prefix variant of each probe, first sent alone with a cold prefix cache
  (``prefix_ref``, a fresh vLLM ``cache_salt``), then again alone with the cache warm;
- every condition is repeated ``repeats`` times.

The background schedule (start times, prompt slices, output lengths) and the grouping are drawn
from the seed, so a rerun reproduces the traffic (the server's timing still varies).

Metrics, per endpoint and condition: identical-output rate against the reference, distinct
outputs per prompt, index of the first divergent token, largest logprob delta on the common
prefix, and tie flips (the reference's top-2 logprob margin at the divergence is below
``tie_epsilon``) against confident flips.

Gate: **excess instability under load**. The bf16 baseline itself is not batch-invariant on
vLLM-CPU (on some hosts about half of its batched outputs differ from its batch-1 output), and a
candidate may differ from its *own* batch-1 output in a fixed way whenever it is batched (fp8-kv
measured here: the same 3 of 8 prompts under every batched condition, every batched output the
same). Neither is what users fear: answers that change from request to request under load,
beyond what the numerics already do. Per (prompt, condition, repeat) each endpoint scores 1 when
its output differs from the prompt's **modal output** on that endpoint (the most frequent text
among its batch-1 reference and every batched sample of the prompt; the plain and the
prefixed variants apart; a tie goes to the reference). The candidate's indicator is paired with
the baseline's under the same traffic — the baseline's own instability is the noise floor — and
gated on **stable-answer retention**: the share of the baseline's stable answers the candidate
keeps, ``R = stable_c / stable_b``, must not fall below ``1 − δ`` (δ = 0.10), samples of one
prompt forming a cluster (``evalsvc.stats.retention_test``). A difference of unstable rates
would saturate on a noisy baseline (an answer that already varies cannot vary more: a fault that
changes 28% of the answers adds 28 points at 0% baseline instability, 11 at 60%); the retention
it leaves, about ``1 − 0.28``, is the same on every host, and on a stable host the reported loss
``1 − R`` equals the difference of unstable rates. Staged sizing (``max_n``): the runner gates
after ``n``, ``2n``, … probes up to the cap and stops once every candidate passes or fails; each
look tests at α/looks, and ``details.stages`` says how far it went and why it stopped.
Per-condition identity to the batch-1 output, unstable rates, distinct outputs per prompt and
tie/confident flips stay in the report (not gated per condition). A response without the
logprobs the suite asked for is reported as a finding (``details.missing_logprobs``): its flips
cannot be classified. ``gate.threshold`` in the YAML switches to an absolute threshold on the
candidate's unstable rate (one look, at the first stage's size).

Contract: ``run()`` is overridden (the traffic shape is the measurement); it emits a sample per
(probe, condition, repeat) including the two references, and ``expected_samples()`` counts them.
"""

from __future__ import annotations

import asyncio
import math
import random
import statistics
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalsvc import limits
from evalsvc.domain import Item, Provenance, Sample
from evalsvc.gates import ALPHA, GateDefaults, GateOutcome, ResolvedGate, Verdict
from evalsvc.stats import (
    quieter_than_floor,
    retention_mde,
    retention_min_clusters,
    retention_required_n,
    retention_test,
)
from evalsvc.suites._base import Analysis, Emit, Suite, first_divergent_token
from evalsvc.suites._paths import catalog_dir
from evalsvc.suites._present import Chart, Finding, ViewInput, markdown_table, num, pct

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import Completion, EndpointClient

Condition = Literal["mixed", "concurrency", "prefix"]
REFERENCE = "ref"
PREFIX_REFERENCE = "prefix_ref"

_SUBJECTS = (
    "a lighthouse keeper",
    "a lost kitten",
    "a robot gardener",
    "a young baker",
    "an old map",
    "a quiet library",
    "a mountain village",
    "a paper boat",
    "a clockmaker",
    "a winter market",
    "a fox and a crow",
    "a night train",
)
_TOPICS = (
    "rainbows",
    "bread rising",
    "tides",
    "compasses",
    "bicycles",
    "volcanoes",
    "recycling",
    "thunder",
    "seasons",
    "bees making honey",
)
_ACTIVITIES = (
    "learning to swim",
    "growing tomatoes",
    "saving money",
    "studying for a test",
    "keeping a diary",
    "cooking rice",
    "planning a trip",
    "sleeping well",
)
_PROBE_TEMPLATES = (
    "Write a short story about {subject}.",
    "Explain how {topic} work in simple words.",
    "Give three tips for {activity}.",
    "Describe {subject} in a few sentences.",
    "Write a short poem about {topic}.",
)


# Bounds (evalsvc.limits): each multiplies the requests of a run or the size of a prompt.
BoundedChars = Annotated[int, Field(ge=0, le=limits.MAX_PROMPT_CHARS)]
BoundedTokens = Annotated[int, Field(ge=1, le=limits.MAX_TOKENS)]


class DeterminismParams(BaseModel):
    """Parameters of a determinism suite (validated from the YAML ``params`` mapping)."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(default=8, ge=1, le=limits.MAX_ITEMS)
    """Probe prompts of the first stage (``--samples``)."""
    max_n: int | None = Field(default=None, ge=1, le=limits.MAX_ITEMS)
    """Cap of the staged design: the run gates after ``n``, ``2n``, ``4n``, … probes (the last
    stage is ``max_n``) and stops at the first stage where every candidate's gate decides; each
    look tests at α/stages. ``None`` (or ``≤ n``): one stage of ``n`` probes."""
    max_tokens: int = Field(default=48, ge=1, le=limits.MAX_TOKENS)
    top_logprobs: int = Field(default=5, ge=2, le=20)
    """Alternatives per generated token (≥ 2 to measure the top-2 margin)."""
    repeats: int = Field(default=2, ge=1, le=limits.MAX_REPEATS)
    """K: every non-reference condition is repeated K times."""
    conditions: list[Condition] = Field(
        default=["mixed", "concurrency", "prefix"], min_length=1, max_length=limits.MAX_PARAM_LIST
    )
    concurrency_levels: list[Annotated[int, Field(ge=1, le=limits.MAX_CONCURRENCY)]] = Field(
        default=[2, 8], min_length=1, max_length=limits.MAX_PARAM_LIST
    )
    """Concurrent requests per group for the ``concurrency`` condition (each level runs at its own
    concurrency, whatever the run's ``--concurrency``; the report gives the effective level)."""
    background_requests: int = Field(default=8, ge=0, le=limits.MAX_CONCURRENCY * 4)
    """Background requests per ``mixed`` repeat."""
    background_prompt_chars: tuple[BoundedChars, BoundedChars] = (200, 3000)
    background_max_tokens: tuple[BoundedTokens, BoundedTokens] = (8, 96)
    schedule_window_s: float = Field(default=2.0, ge=0, le=600)
    """Start times of probes and background requests are spread over this window."""
    prefix_chars: int = Field(default=1200, ge=0, le=limits.MAX_PROMPT_CHARS)
    """Length of the shared document prefix of the ``prefix`` condition."""
    cache_salt: bool = True
    """Send vLLM's ``cache_salt`` so the prefix reference runs with a cold prefix cache."""
    ignore_eos: bool = True
    """Ask background requests to decode their full length (vLLM ``ignore_eos``)."""
    tie_epsilon: float = Field(default=0.1, gt=0)
    """Top-2 logprob margin (nats) below which a flip counts as a tie: bf16 logits carry about
    3 significant digits, so logits of magnitude 10-20 are uncertain at the ~0.05-0.1 level."""

    @model_validator(mode="after")
    def _ranges(self) -> DeterminismParams:
        for name in ("background_prompt_chars", "background_max_tokens"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi:
                raise ValueError(f"{name} must be [low, high] with 1 <= low <= high")
        return self


@dataclass
class Trace:
    """A generated token sequence with each token's logprob and top-2 margin."""

    text: str
    tokens: list[str]
    logprobs: list[float | None]
    margins: list[float | None]
    """top-1 minus top-2 logprob at each position (None when fewer than 2 alternatives)."""


@dataclass
class Divergence:
    identical: bool
    first: int | None
    """Index of the first token that differs (None when the token sequences are equal)."""
    max_lp_delta: float
    """Largest |Δ logprob| on the common prefix (same context, same token: pure numeric noise)."""
    flip: Literal["tie", "confident"] | None
    margin: float | None
    """The reference's top-2 margin at the divergence."""


def trace_of(out: Completion) -> Trace:
    tokens: list[str] = []
    lps: list[float | None] = []
    margins: list[float | None] = []
    for tok in out.logprobs or []:
        tokens.append(tok.token)
        lps.append(tok.logprob)
        top = sorted(tok.top.values(), reverse=True)
        margins.append(top[0] - top[1] if len(top) >= 2 else None)
    return Trace(out.text, tokens, lps, margins)


def compare(ref: Trace, out: Trace, *, tie_epsilon: float) -> Divergence:
    """Compare one output with its reference, token by token."""
    common = min(len(ref.tokens), len(out.tokens))
    first: int | None = next((i for i in range(common) if ref.tokens[i] != out.tokens[i]), None)
    if first is None and len(ref.tokens) != len(out.tokens):
        first = common  # one stopped (end of sequence) where the other went on
    identical = first is None and ref.text == out.text
    if first is None and not identical:
        first = common  # same tokens reported but different text: count as a tail divergence
    upto = common if first is None else first
    deltas = [
        abs(a - b)
        for a, b in zip(ref.logprobs[:upto], out.logprobs[:upto], strict=True)
        if a is not None and b is not None
    ]
    flip: Literal["tie", "confident"] | None = None
    margin: float | None = None
    if first is not None:
        margin = ref.margins[first] if first < len(ref.margins) else None
        if margin is None and first < len(out.margins):
            margin = out.margins[first]
        flip = "tie" if margin is not None and margin < tie_epsilon else "confident"
    return Divergence(identical, first, max(deltas, default=0.0), flip, margin)


@dataclass(frozen=True)
class Background:
    """One scheduled background request."""

    start_s: float
    prompt: str
    max_tokens: int


def probe_prompt(seed: int, index: int) -> str:
    rng = random.Random(f"{seed}:probe:{index}")
    return rng.choice(_PROBE_TEMPLATES).format(
        subject=rng.choice(_SUBJECTS), topic=rng.choice(_TOPICS), activity=rng.choice(_ACTIVITIES)
    )


def background_schedule(
    seed: int,
    label: str,
    count: int,
    corpus: str,
    prompt_chars: tuple[int, int],
    max_tokens: tuple[int, int],
    window_s: float,
) -> list[Background]:
    """The seeded background traffic of one condition repeat: start time, prompt, length."""
    rng = random.Random(f"{seed}:background:{label}")
    out = []
    for _ in range(count):
        length = rng.randint(*prompt_chars)
        start = rng.randrange(max(1, len(corpus) - length))
        out.append(
            Background(
                round(rng.uniform(0, window_s), 3),
                corpus[start : start + length],
                rng.randint(*max_tokens),
            )
        )
    return out


def _corpus() -> str:
    text = (Path(catalog_dir()) / "data" / "haystack.txt").read_text(encoding="utf-8")
    while len(text) < 8000:
        text += "\n\n" + text
    return text


class DeterminismSuite(Suite):
    kind = "determinism"
    version = "1"
    Params = DeterminismParams
    requires = frozenset({"chat", "completions"})
    exclusive = False
    sequential_ok = False  # its own staged design (stage_sizes), valid over its planned looks
    # Its statistic is the variation of each side under the same concurrent traffic: a baseline
    # answered in another run, under other load, measures nothing the candidate is compared with.
    baseline_reusable = False
    gate_default = GateDefaults(
        suite_kind="determinism",
        metric="unstable_rate",
        gate="noninferiority",
        kind="binary",
        margin=0.10,
        threshold=None,
        alpha=ALPHA,
        higher_is_better=False,
        paired=True,
        required=True,
        rationale=(
            "Share of greedy answers under load that differ from the prompt's modal answer on "
            "the same endpoint, paired with the baseline under the same traffic (prompt, "
            "condition, repeat): the baseline's own batch variance is the noise floor. The "
            "candidate must keep at least 90% of the baseline's stable answers (on a stable "
            "baseline: at most 10 points more unstable answers), a ratio that a noisy baseline "
            "does not saturate; staged until the gate decides, α split over the looks."
        ),
        sources=(
            "Horace He & Thinking Machines Lab, 'Defeating Nondeterminism in LLM Inference' "
            "(Sep 2025): 1000 temperature-0 runs of one prompt on Qwen3-235B gave 80 distinct "
            "completions with standard kernels, 1 with batch-invariant kernels",
            "The 0.10 margin itself is a policy choice of evalsvc, not a published figure",
        ),
    )
    description = (
        "Greedy output stability under mixed batching, concurrency, prefix caching and "
        "repeats, against the batch-1 output (SGLang test_deterministic style)."
    )
    view_template = "determinism.html"
    params: DeterminismParams

    # Presentation (functions at the end of the module). A "flip" here is identical → different
    # against the prompt's own reference, not correct → incorrect: no flips page.

    @classmethod
    def shows_flips(cls) -> bool:
        return False

    @classmethod
    def findings(cls, entry: dict[str, Any]) -> list[Finding]:
        return _determinism_findings(entry.get("details") or {})

    @classmethod
    def sample_logprobs(cls, data: dict[str, Any]) -> dict[str, Any] | None:
        return _determinism_logprobs(data)

    @classmethod
    def headline(cls, entry: dict[str, Any]) -> str | None:
        return _determinism_headline(entry.get("details") or {})

    @classmethod
    def view_model(cls, view: ViewInput) -> dict[str, Any]:
        return _determinism_view(view)

    def item_count(self) -> int:
        return self.params.n

    def stage_sizes(self) -> list[int] | None:
        """Probes after each look: ``n, 2n, 4n, …``, the last one ``max_n`` (the cap)."""
        p = self.params
        if p.max_n is None or p.max_n <= p.n:
            return None
        sizes = [p.n]
        while sizes[-1] * 2 < p.max_n:
            sizes.append(sizes[-1] * 2)
        return [*sizes, p.max_n]

    def required_pairs(
        self, margin: float, discordance: float, alpha: float, power: float
    ) -> int:
        # The retention test at α/looks (evalsvc.stats.retention_required_n).
        return retention_required_n(margin, discordance, alpha, power, looks=self.looks())

    def mde_pairs(self, n: int, discordance: float, alpha: float, power: float) -> float:
        return retention_mde(n, discordance, alpha, power, looks=self.looks())

    def min_items_to_pass(self, margin: float, alpha: float) -> int | None:
        # Probes are the retention test's clusters: with no loss at all a pass needs
        # (1 − δ)^G < α/looks (evalsvc.stats.retention_min_clusters): 29 at δ = 0.10 in one
        # look, 42 over the catalog suite's four.
        return retention_min_clusters(margin, alpha, looks=self.looks())

    def looks(self) -> int:
        """Planned looks of the staged design (1 without stages): each tests at α/looks."""
        return len(self.stage_sizes() or [0])

    def traffic_concurrency(self) -> int:
        p = self.params
        levels = max(p.concurrency_levels) if "concurrency" in p.conditions else 0
        mixed = p.n + p.background_requests if "mixed" in p.conditions else 0
        return max(levels, mixed)

    def _labels(self) -> list[str]:
        """Non-reference condition labels, in run order."""
        p = self.params
        labels: list[str] = []
        if "prefix" in p.conditions:
            labels.append("prefix_warm")
        if "mixed" in p.conditions:
            labels.append("mixed")
        if "concurrency" in p.conditions:
            labels.extend(f"c{k}" for k in p.concurrency_levels)
        return labels

    def expected_samples(self, items: Sequence[Item]) -> int:
        refs = 2 if "prefix" in self.params.conditions else 1
        return len(items) * (refs + self.gated_per_item())

    def gated_per_item(self) -> int:
        return self.params.repeats * len(self._labels())

    def pairs_per_item(self) -> int:
        return self.gated_per_item()

    def gated_pairs(self, items: Sequence[Item]) -> int:
        # The references are what each condition is compared with, not gated observations.
        return len(items) * self.gated_per_item()

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        p = self.params
        corpus = _corpus()
        start = random.Random(f"{self.spec.seed}:prefix").randrange(len(corpus) - p.prefix_chars)
        document = corpus[start : start + p.prefix_chars]
        items = []
        for i in range((self.stage_sizes() or [p.n])[-1]):
            question = probe_prompt(self.spec.seed, i)
            prefixed = (
                f"Read the following notes.\n\n{document}\n\nNow, setting the notes aside: "
                f"{question}"
            )
            items.append(
                Item(
                    id=f"probe{i:02d}",
                    prompt=[{"role": "user", "content": question}],
                    cluster=f"probe{i:02d}",
                    metadata={"prefixed": [{"role": "user", "content": prefixed}]},
                )
            )
        return items

    async def _send(
        self, client: EndpointClient, messages: list[dict[str, str]], salt: str | None = None
    ) -> Completion:
        extra = {"cache_salt": salt} if salt else None
        return await client.chat(
            messages,
            max_tokens=self.params.max_tokens,
            temperature=0.0,
            logprobs=True,
            top_logprobs=self.params.top_logprobs,
            extra=extra,
        )

    async def _background(self, client: EndpointClient, bg: Background) -> None:
        await asyncio.sleep(bg.start_s)
        extra = {"ignore_eos": True} if self.params.ignore_eos else None
        # Background outputs are not scored; a failed one only weakens the mixing.
        await client.complete(bg.prompt, max_tokens=bg.max_tokens, temperature=0.0, extra=extra)

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
        seed = self.spec.seed
        corpus = _corpus()
        refs: dict[str, Trace | None] = {}
        prefix_refs: dict[str, Trace | None] = {}

        async def record(
            item: Item,
            label: str,
            repeat: int,
            out: Completion,
            ref: Trace | None,
            extra: dict[str, Any] | None = None,
        ) -> Trace | None:
            key = (f"{item.id}/{label}", repeat)
            trace = None if out.error else trace_of(out)
            if key in done:
                return trace
            sample = Sample(
                suite=self.name,
                item_id=key[0],
                endpoint=role,
                repeat=repeat,
                output=out.text,
                prompt_tokens=out.prompt_tokens,
                completion_tokens=out.completion_tokens,
                latency_s=out.latency_s,
                error=out.error,
                data={"probe": item.id, "cluster": item.id, "condition": label, **(extra or {})},
            )
            if trace is not None and not trace.tokens and out.text:
                # Asked for logprobs and got none: the divergence cannot be classified.
                sample.data["missing_logprobs"] = True
            if trace is not None and label in (REFERENCE, PREFIX_REFERENCE):
                sample.score = 1.0
            elif trace is not None and ref is not None:
                div = compare(ref, trace, tie_epsilon=p.tie_epsilon)
                sample.score = float(div.identical)
                sample.data.update(
                    {
                        "first_divergence": div.first,
                        "max_lp_delta": round(div.max_lp_delta, 6),
                        "flip": div.flip,
                        "margin": div.margin,
                    }
                )
            elif trace is not None:
                sample.error = "reference request failed"
            await emit(sample)
            return trace

        # 1. References: every probe alone, one after another (batch size 1). Recomputed on a
        #    resumed run even when stored: sequential greedy output is reproducible run to run.
        for item in items:
            refs[item.id] = await record(
                item, REFERENCE, 0, await self._send(client, _msgs(item.prompt)), None
            )

        # 2. Prefix cache: cold reference (fresh salt per probe), then warm repeats, all alone.
        if "prefix" in p.conditions:
            run_salt = uuid.uuid4().hex[:12]  # per run: a rerun must start cold again
            for item in items:
                salt = f"{run_salt}-{item.id}" if p.cache_salt else None
                prefixed = item.metadata["prefixed"]
                prefix_refs[item.id] = await record(
                    item, PREFIX_REFERENCE, 0, await self._send(client, prefixed, salt), None
                )
                for r in range(p.repeats):
                    await record(
                        item,
                        "prefix_warm",
                        r,
                        await self._send(client, prefixed, salt),
                        prefix_refs[item.id],
                    )

        # 3. Mixed: probes and background requests start on a seeded schedule.
        if "mixed" in p.conditions:
            for r in range(p.repeats):
                rng = random.Random(f"{seed}:mixed-probes:{r}")
                starts = [round(rng.uniform(0, p.schedule_window_s), 3) for _ in items]
                bgs = background_schedule(
                    seed,
                    f"mixed:{r}",
                    p.background_requests,
                    corpus,
                    p.background_prompt_chars,
                    p.background_max_tokens,
                    p.schedule_window_s,
                )

                async def probe(item: Item, start: float, r: int = r) -> None:
                    await asyncio.sleep(start)
                    out = await self._send(client, _msgs(item.prompt))
                    await record(item, "mixed", r, out, refs[item.id], {"start_s": start})

                await asyncio.gather(
                    *(probe(it, s) for it, s in zip(items, starts, strict=True)),
                    *(self._background(client, bg) for bg in bgs),
                )

        # 4. Concurrency levels: groups of k requests launched together.
        if "concurrency" in p.conditions:
            for k in p.concurrency_levels:
                effective = min(k, concurrency)
                for r in range(p.repeats):
                    order = list(items)
                    random.Random(f"{seed}:c{k}:{r}").shuffle(order)
                    for g in range(0, len(order), k):
                        group = order[g : g + k]
                        fillers = background_schedule(
                            seed,
                            f"c{k}:{r}:{g}",
                            max(0, k - len(group)),
                            corpus,
                            p.background_prompt_chars,
                            p.background_max_tokens,
                            0.0,
                        )

                        async def one(
                            item: Item, k: int = k, r: int = r, eff: int = effective
                        ) -> None:
                            out = await self._send(client, _msgs(item.prompt))
                            await record(
                                item,
                                f"c{k}",
                                r,
                                out,
                                refs[item.id],
                                {"concurrency": k, "effective_concurrency": eff},
                            )

                        await asyncio.gather(
                            *(one(it) for it in group),
                            *(self._background(client, bg) for bg in fillers),
                        )

    def analyze(
        self,
        baseline: list[Sample],
        candidate: list[Sample],
        *,
        provenance: tuple[Provenance, Provenance] | None = None,
    ) -> Analysis:
        def scored(samples: list[Sample]) -> dict[tuple[str, int], Sample]:
            return {
                (s.item_id, s.repeat): s
                for s in samples
                if s.data.get("condition") not in (REFERENCE, PREFIX_REFERENCE)
            }

        base, cand = scored(baseline), scored(candidate)
        mode_b, mode_c = modal_outputs(baseline), modal_outputs(candidate)
        b: list[float] = []
        c: list[float] = []
        clusters: list[str] = []
        conditions: list[str] = []
        ids: list[str] = []
        tokens: list[tuple[str | None, str | None] | None] = []
        errors = 0
        for key in sorted(base.keys() | cand.keys()):
            sb, sc = base.get(key), cand.get(key)
            if sb is None or sc is None or sb.score is None or sc.score is None:
                errors += 1
                continue
            b.append(unstable(sb, mode_b))
            c.append(unstable(sc, mode_c))
            clusters.append(str(sb.data.get("probe")))
            conditions.append(str(sb.data.get("condition")))  # the kind's slices
            ids.append(f"{key[0]}#{key[1]}")
            tokens.append(first_divergent_token(sb.output, sc.output))
        # References that failed make their probe's samples fail too; count them once more here
        # only if they are not already reflected (they are: those samples carry an error).
        details: dict[str, Any] = {
            "baseline": summarize(baseline),
            "candidate": summarize(candidate),
            "tie_epsilon": self.params.tie_epsilon,
            "note": (
                "gated: answers under load that differ from the prompt's modal answer on the "
                "same endpoint, candidate paired with the baseline under the same traffic"
            ),
        }
        details["noise"] = {
            "baseline": noise_figures(b, clusters),
            "candidate": noise_figures(c, clusters),
        }
        missing = {
            side: sum(1 for s in samples if s.data.get("missing_logprobs"))
            for side, samples in (("baseline", baseline), ("candidate", candidate))
        }
        if any(missing.values()):
            details["missing_logprobs"] = {
                **missing,
                "note": f"responses without the {self.params.top_logprobs} top logprobs the "
                "suite asked for: their flips cannot be told from near-ties",
            }
        return Analysis(
            baseline=b,
            candidate=c,
            clusters=clusters if len(set(clusters)) < len(clusters) else None,
            n_errors=errors,
            details=details,
            # Per-condition figures stay in the details; a per-condition gate would test the
            # absolute difference, which a noisy baseline saturates (section 6a of
            # docs/statistics.md), at one look of a staged design.
            keys=ids,
            first_tokens=tokens,
            gate_test=partial(
                retention_gate, b, c, clusters if len(set(clusters)) < len(clusters) else None,
                self.looks(), varying=noise_figures(b, clusters),
            ),
        )


def noise_figures(unstable_: Sequence[float], clusters: Sequence[str]) -> dict[str, Any]:
    """One endpoint's batch instability in a run: the share of its gated answers that differ
    from their prompt's modal answer (``unstable_rate``) and the prompts with at least one such
    answer (``varying_clusters`` of ``clusters``): the figures an A/A calibration stores as the
    endpoint's noise floor (``evalsvc.services.calibration``)."""
    varying: dict[str, bool] = {}
    for x, g in zip(unstable_, clusters, strict=True):
        varying[g] = varying.get(g, False) or x > 0
    return {
        "answers": len(unstable_),
        "unstable": int(sum(1 for x in unstable_ if x > 0)),
        "unstable_rate": statistics.fmean(unstable_) if unstable_ else None,
        "clusters": len(varying),
        "varying_clusters": sum(varying.values()),
    }


def retention_gate(
    unstable_b: Sequence[float],
    unstable_c: Sequence[float],
    clusters: Sequence[str] | None,
    looks: int,
    gate: ResolvedGate,
    seed: int = 0,
    *,
    varying: dict[str, Any] | None = None,
) -> GateOutcome:
    """The determinism gate: stable-answer retention ``R = stable_c / stable_b`` at relative
    margin δ (``evalsvc.stats.retention_test``), reported as the *loss* ``1 − R`` (lower is
    better; equal to the difference of unstable rates when the baseline is fully stable), with
    α split over the staged design's ``looks``. With the baseline's calibrated noise floor on
    the gate (``gate.noise_floor``) and ``varying`` (the baseline's :func:`noise_figures`), a
    pass whose baseline varied significantly less than the floor reads inconclusive
    (:func:`_below_floor`)."""
    del seed  # the test is analytic
    outcome = _retention_outcome(unstable_b, unstable_c, clusters, looks, gate)
    return _below_floor(outcome, gate, varying)


def _below_floor(
    outcome: GateOutcome, gate: ResolvedGate, varying: dict[str, Any] | None
) -> GateOutcome:
    """The noise floor as evidence (docs/statistics.md, "Noise floor on file"): an A/A
    calibration found a share v₀ of the prompts varying under this suite's traffic on this
    baseline (same provenance fingerprint). When this run's baseline varied on K of G prompts
    with ``P(Bin(G, v₀) ≤ K) < α`` (``evalsvc.stats.quieter_than_floor``), its traffic did not
    reach the batching the calibration measured, and agreement under it is no evidence of
    stability under load: a pass becomes inconclusive, with the reason. Other verdicts stand
    (a fail under less load is still a fail)."""
    floor = gate.noise_floor
    if floor is None or varying is None or floor.varying_clusters is None:
        return outcome
    k, g = int(varying["varying_clusters"]), int(varying["clusters"])
    check: dict[str, Any] = {
        **floor.to_dict(),
        "observed_instability": varying.get("unstable_rate"),
        "observed_varying_clusters": k,
        "observed_clusters": g,
    }
    if g == 0 or floor.varying_clusters <= 0:
        check["p_quieter"] = None
        return replace(outcome, details={**outcome.details, "noise_floor": check})
    p = quieter_than_floor(k, g, floor.varying_clusters)
    check["p_quieter"] = p
    details = {**outcome.details, "noise_floor": check}
    if outcome.verdict == "pass" and p < gate.alpha:
        details["verdict_before_floor"] = "pass"
        details["reason"] = (
            f"below the noise floor: the baseline varied on {k} of {g} prompts under load, "
            f"against {floor.varying_clusters:.0%} of its prompts in calibration "
            f"{floor.calibration} ({floor.measured_at[:10]}; P = {p:.3g} < α): this run's "
            "traffic did not reach the batching the calibration measured, so agreement is no "
            "evidence; rerun under the suite's load (or recalibrate: evalsvc calibrate)"
        )
        return replace(outcome, verdict="inconclusive", details=details)
    return replace(outcome, details=details)


def _retention_outcome(
    unstable_b: Sequence[float],
    unstable_c: Sequence[float],
    clusters: Sequence[str] | None,
    looks: int,
    gate: ResolvedGate,
) -> GateOutcome:
    assert gate.margin is not None
    b = [1.0 - x for x in unstable_b]
    c = [1.0 - x for x in unstable_c]
    n = len(b)
    ub = statistics.fmean(unstable_b) if n else float("nan")
    uc = statistics.fmean(unstable_c) if n else float("nan")
    test_name = (
        "stable-answer retention: cluster-robust (CR1) skewness-corrected t of s_c − (1 − δ)·s_b, "
        f"Fieller-type interval, floored by the exact zero-loss bound, α/{looks} per look"
    )
    if n == 0:
        return GateOutcome("inconclusive", gate.metric, ub, uc, float("nan"),
                           (-math.inf, math.inf), None, gate.margin, gate.alpha, 0, None,
                           test_name, {"reason": "no paired samples"})
    res = retention_test(b, c, margin=gate.margin, alpha=gate.alpha, clusters=clusters,
                         looks=looks)
    verdict: Verdict = "inconclusive"
    details: dict[str, Any] = {
        "p_inferiority": res.p_fail,
        "retention": res.retention,
        "retention_ci": list(res.ci),
        "stable_rate": {"baseline": res.stable_baseline, "candidate": res.stable_candidate},
        "absolute_delta": uc - ub,
        "looks": looks,
        "alpha_per_look": gate.alpha / looks,
        "n_clusters": res.n_clusters,
        "design_effect": res.design_effect,
        "t": res.t,
        "discordance": sum(1 for x, y in zip(b, c, strict=True) if x != y) / n,
        "statistic": (
            "delta = 1 − R, the share of the baseline's stable answers the candidate loses under "
            "the same traffic (R = candidate's stable rate / baseline's); CI at level "
            f"1 − 2α/{looks}"
        ),
    }
    details["method"] = res.method
    details["informative_clusters"] = res.informative_clusters
    details["min_clusters_to_pass"] = res.min_clusters
    if res.stable_baseline == 0:
        details["reason"] = "the baseline has no stable answer: retention is not identified"
    elif res.p_pass < gate.alpha:
        verdict = "pass"
    elif res.p_fail < gate.alpha:
        verdict = "fail"
    if verdict == "inconclusive" and "reason" not in details and (
        res.min_clusters is None or res.informative_clusters < res.min_clusters
    ):
        # No loss at all in this few probes is still no evidence (the exact bound of
        # evalsvc.stats.retention_test): say so instead of a bare "inconclusive", as the
        # report's "underpowered" reason (the runner's own note, when the MDE is above the
        # margin, says the same in other words).
        need = (
            "no number of probes can show a retention of exactly 1"
            if res.min_clusters is None
            else f"even with no loss at all a pass needs at least {res.min_clusters} probes with "
            f"a stable baseline answer at α/{looks} (the exact bound 1 − (α/looks)^(1/G) on "
            f"the loss must fall below the margin {gate.margin:g})"
        )
        details["underpowered"] = (
            f"underpowered: {res.informative_clusters} informative probes, and {need}"
        )
    lo, hi = res.ci
    return GateOutcome(
        verdict=verdict,
        metric=gate.metric,
        baseline=ub,
        candidate=uc,
        delta=1.0 - res.retention,
        ci=(1.0 - hi, 1.0 - lo),
        p_value=res.p_pass,
        margin=gate.margin,
        alpha=gate.alpha,
        n=n,
        mde=res.mde,
        test=test_name,
        details=details,
        method=res.method,
    )


def _variant(sample: Sample) -> str:
    cond = str(sample.data.get("condition"))
    prefixed = cond in (PREFIX_REFERENCE, "prefix_warm")
    return f"{sample.data.get('probe')}/{'prefix' if prefixed else 'plain'}"


def modal_outputs(samples: Sequence[Sample]) -> dict[str, str]:
    """The most frequent output text per (probe, variant) among one endpoint's error-free
    samples, its batch-1 reference included; a tie goes to the reference's text, then to the
    smallest text (deterministic)."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    refs: dict[str, str] = {}
    for s in samples:
        if s.error is not None or s.score is None:
            continue
        key = _variant(s)
        counts[key][s.output] += 1
        if s.data.get("condition") in (REFERENCE, PREFIX_REFERENCE):
            refs[key] = s.output
    return {
        key: min(texts, key=lambda t: (-texts[t], t != refs.get(key), t))
        for key, texts in counts.items()
    }


def unstable(sample: Sample, modes: dict[str, str]) -> float:
    """1 when the sample's output differs from its prompt's modal output on its endpoint."""
    mode = modes.get(_variant(sample))
    return float(mode is not None and sample.output != mode)


def confident_divergence(sample: Sample) -> float:
    """1 when the sample left its batch-1 output at a confident token (or could not be
    classified for lack of logprobs), 0 when identical or diverging at a near-tie."""
    if sample.score == 1.0:
        return 0.0
    return 0.0 if sample.data.get("flip") == "tie" else 1.0


def summarize(samples: list[Sample]) -> dict[str, Any]:
    """Per-condition and overall determinism metrics of one endpoint's samples."""
    by_cond: dict[str, list[Sample]] = defaultdict(list)
    texts: dict[str, set[str]] = defaultdict(set)
    for s in samples:
        cond = str(s.data.get("condition"))
        if s.error is None:
            # The prefixed variant is a different prompt: count its outputs separately.
            variant = "prefix" if cond in (PREFIX_REFERENCE, "prefix_warm") else "plain"
            texts[f"{s.data.get('probe')}/{variant}"].add(s.output)
        if cond not in (REFERENCE, PREFIX_REFERENCE):
            by_cond[cond].append(s)
    modes = modal_outputs(samples)
    out: dict[str, Any] = {
        "conditions": {c: _condition_metrics(v, modes) for c, v in sorted(by_cond.items())}
    }
    out["overall"] = _condition_metrics([s for v in by_cond.values() for s in v], modes)
    # Distinct outputs per prompt (plain and prefixed variants apart) across every condition and
    # its reference: 1 = fully stable.
    out["overall"]["distinct_outputs_per_prompt"] = (
        statistics.fmean(len(v) for v in texts.values()) if texts else None
    )
    return out


def _condition_metrics(
    samples: Sequence[Sample], modes: dict[str, str] | None = None
) -> dict[str, Any]:
    ok = [s for s in samples if s.score is not None]
    firsts = [
        int(s.data["first_divergence"]) for s in ok if s.data.get("first_divergence") is not None
    ]
    deltas = [float(s.data.get("max_lp_delta") or 0.0) for s in ok]
    distinct: dict[str, set[str]] = defaultdict(set)
    for s in ok:
        distinct[str(s.data.get("probe"))].add(s.output)
    eff = {s.data.get("effective_concurrency") for s in ok} - {None}
    return {
        "n": len(ok),
        "n_errors": len(samples) - len(ok),
        "identical_rate": statistics.fmean(s.score for s in ok if s.score is not None)
        if ok
        else None,
        "distinct_outputs_per_prompt": statistics.fmean(len(v) for v in distinct.values())
        if distinct
        else None,
        "first_divergence_median": statistics.median(firsts) if firsts else None,
        "first_divergence_min": min(firsts) if firsts else None,
        "max_logprob_delta": max(deltas, default=0.0),
        "tie_flips": sum(1 for s in ok if s.data.get("flip") == "tie"),
        "confident_flips": sum(1 for s in ok if s.data.get("flip") == "confident"),
        "confident_divergence_rate": statistics.fmean(confident_divergence(s) for s in ok)
        if ok
        else None,
        **(
            {"unstable_rate": statistics.fmean(unstable(s, modes) for s in ok)}
            if modes is not None and ok
            else {}
        ),
        **({"effective_concurrency": min(int(e) for e in eff if e is not None)} if eff else {}),
    }


def _msgs(prompt: str | list[dict[str, str]]) -> list[dict[str, str]]:
    return prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]


# ---------------------------------------------------------------------------- presentation


def _conditions(sides: dict[str, dict[str, Any]]) -> list[str]:
    conds: list[str] = []
    for side in sides.values():
        for c in side.get("conditions") or {}:
            if c not in conds:
                conds.append(c)
    # Concurrency levels in numeric order (c2, c8, c32), then the other conditions.
    conds.sort(key=lambda c: (0, int(c[1:]), c) if c[1:].isdigit() else (1, 0, c))
    return conds


def _determinism_findings(d: dict[str, Any]) -> list[Finding]:
    sides: dict[str, dict[str, Any]] = {
        s: d[s] for s in ("baseline", "candidate") if isinstance(d.get(s), dict)
    }
    if not sides:
        return []
    conds = _conditions(sides)

    def metrics(side: str, cond: str | None) -> dict[str, Any]:
        s = sides.get(side) or {}
        return ((s.get("conditions") or {}).get(cond) if cond else s.get("overall")) or {}

    def pair(cond: str | None, key: str, fmt: Any) -> str:
        return " / ".join(fmt(metrics(side, cond).get(key)) for side in ("baseline", "candidate"))

    def flips(cond: str | None) -> str:
        return " / ".join(
            f"{metrics(side, cond).get('tie_flips', '—')}·{metrics(side, cond).get('confident_flips', '—')}"
            for side in ("baseline", "candidate")
        )

    rows = [
        [cond or "**overall**", pair(cond, "identical_rate", pct), pair(cond, "unstable_rate", pct),
         pair(cond, "distinct_outputs_per_prompt", lambda x: num(x, 2)),
         pair(cond, "first_divergence_median", lambda x: num(x, 0)),
         pair(cond, "max_logprob_delta", num), flips(cond)]
        for cond in [*conds, None]
    ]
    lines = [
        "Against each prompt's batch-1 output, under the same traffic (baseline / candidate); "
        "the gate tests the unstable answers (differing from the prompt's modal answer):",
        "",
        *markdown_table(
            ["condition", "identical", "unstable", "distinct outputs / prompt",
             "first divergent token (median)", "max Δ logprob", "tie / confident flips"],
            rows,
        ),
    ]
    out = [Finding(title="stability per condition", markdown=[*lines, ""],
                   data={side: sides[side] for side in sides})]
    ret = d.get("retention")
    if ret is not None:
        stable = d.get("stable_rate") or {}
        lo, hi = (d.get("retention_ci") or [None, None])[:2]
        out.append(Finding(
            title="stable answers kept",
            markdown=[
                f"Stable answers kept: {pct(stable.get('candidate'))} of the candidate's against "
                f"{pct(stable.get('baseline'))} of the baseline's, a retention of {num(ret)} "
                f"[{num(lo)}, {num(hi)}] (the gate needs more than 1 − margin).",
                "",
            ],
            data={"retention": ret, "retention_ci": [lo, hi], "stable_rate": stable},
        ))
    stages = d.get("stages")
    if isinstance(stages, dict):
        out.append(Finding(
            title="stages",
            markdown=[
                f"Staged: looks after {', '.join(str(x) for x in stages.get('stages') or [])} "
                f"probes (cap {stages.get('cap')}, each at α/{stages.get('looks')}); "
                f"{stages.get('reason')}.",
                "",
            ],
            data=dict(stages),
        ))
    return out


def _determinism_headline(d: dict[str, Any]) -> str:
    overall = [((d.get(side) or {}).get("overall") or {}) for side in ("baseline", "candidate")]
    rates = [pct(o.get("identical_rate")) for o in overall]
    unstable = [pct(o.get("unstable_rate")) for o in overall]
    return (
        f"unstable under load: baseline {unstable[0]}, candidate {unstable[1]} "
        f"(identical to batch-1 output: {rates[0]} / {rates[1]})"
    )


def _determinism_view(view: ViewInput) -> dict[str, Any]:
    """First-divergence positions per side and condition, tie vs confident flips, charts."""
    d = view.details
    samples = view.samples()
    divergence: dict[str, Any] = {}
    for side, name in (("baseline", "baseline"), (view.role, "candidate")):
        firsts: dict[str, list[int]] = defaultdict(list)
        counted: dict[str, int] = {}
        for s in samples:
            if s.endpoint != side or s.score is None:
                continue
            cond = str(s.data.get("condition"))
            if s.data.get("first_divergence") is not None:
                firsts[cond].append(int(s.data["first_divergence"]))
            if s.data.get("flip") in ("tie", "confident"):
                counted[str(s.data["flip"])] = counted.get(str(s.data["flip"]), 0) + 1
        divergence[name] = {"first_divergence": {k: sorted(v) for k, v in sorted(firsts.items())},
                            "flips": counted}
    bc = (d.get("baseline") or {}).get("conditions") or {}
    cc = (d.get("candidate") or {}).get("conditions") or {}
    conds = list(dict.fromkeys([*bc, *cc]))

    def pc(x: Any) -> float | None:
        return None if x is None else round(1000 * float(x)) / 10

    scatter = []
    for si, side in enumerate(("baseline", "candidate")):
        fd = divergence[side]["first_divergence"]
        pts = [[ci + (0.12 if si else -0.12), pos] for ci, c in enumerate(conds)
               for pos in fd.get(c, [])]
        scatter.append({"name": side, "color": side, "data": pts})
    charts = [
        Chart("determinism-rate", "bar", "Identical to the batch-1 output, per condition (%)",
              conds, [
                  {"name": "baseline", "color": "baseline",
                   "data": [pc((bc.get(c) or {}).get("identical_rate")) for c in conds]},
                  {"name": "candidate", "color": "candidate",
                   "data": [pc((cc.get(c) or {}).get("identical_rate")) for c in conds]},
              ], y_name="%").to_dict(),
        Chart("determinism-divergence", "scatter",
              "First divergent token position (outputs that differ)", conds, scatter,
              y_name="token").to_dict(),
    ]
    return {"divergence": divergence, "charts": charts,
            "conditions": {"baseline": bc, "candidate": cc, "order": conds}}


def _determinism_logprobs(data: dict[str, Any]) -> dict[str, Any] | None:
    """What a sample keeps of its logprobs against its prompt's reference (the summary of
    ``compare``; the token logprobs themselves are not stored)."""
    if data.get("missing_logprobs"):
        return {"summary": [["logprobs", "asked for, none returned"]], "tokens": [],
                "positions": 0}
    if "max_lp_delta" not in data:
        return None  # a reference sample, or one whose reference failed
    first = data.get("first_divergence")
    summary: list[list[Any]] = [
        ["first divergent token", "none (identical)" if first is None else first],
        ["max |Δ logprob| on the common prefix", data.get("max_lp_delta")],
    ]
    if first is not None:
        summary.append(["reference top-2 margin at the divergence (nats)", data.get("margin")])
        summary.append(["flip", data.get("flip")])
    return {"summary": summary, "tokens": [], "positions": 0}
