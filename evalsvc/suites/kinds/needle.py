"""``needle``: needle-in-a-haystack retrieval, in the style of RULER's NIAH tasks.

Method (Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
Models?", arXiv 2404.06654): hide "The special magic {type} for {key} is: {value}." sentences in
natural prose at a chosen depth, ask for the value(s), and score ``string_match_all``: the item
is correct when every expected value appears in the output. Variants follow RULER: ``single``,
``multikey`` (distractor needles with other keys), ``multivalue`` (all values of one key) and
``multiquery`` (several keys asked at once).

Lengths are in the endpoint's own tokens: the haystack prefix is sized by binary search on
characters with ``/tokenize`` on the whole user message, so each item's message is the largest
that fits the target (the achieved count is recorded). For an endpoint without ``/tokenize``,
``params.tokenizer`` names the checkpoint's tokenizer (a directory holding ``tokenizer.json``,
or the file), which is then used instead, and the suite no longer needs ``/tokenize``.

Items that share a haystack (one length, one haystack draw, every depth) form a cluster for
clustered standard errors.

The haystack is project-written prose (``evalsvc/suites/catalog/data/haystack.txt``, original text, Apache-2.0
with the project), shuffled by paragraph per haystack draw and repeated as needed.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalsvc import limits
from evalsvc.domain import Item, Provenance, Sample
from evalsvc.gates import KURTIC_SOURCE, VLLM_CI_SOURCE, GateDefaults
from evalsvc.stats import holm, mcnemar_exact
from evalsvc.suites._base import Suite, SuiteSpec, lengths_over_context
from evalsvc.suites._calibrate import Rung, pilot_seed
from evalsvc.suites._paths import catalog_dir
from evalsvc.suites._present import Finding, ViewInput, pct

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import EndpointClient, LocalTokenizer

# Tokens left for the chat template around the user message when an item is sized to a length.
_TEMPLATE_HEADROOM = 64

_KEYS = [
    "Lima",
    "Oslo",
    "Quito",
    "Accra",
    "Hanoi",
    "Perth",
    "Sofia",
    "Tunis",
    "Riga",
    "Dakar",
    "Cairo",
    "Lagos",
    "Minsk",
    "Porto",
    "Bern",
    "Kyiv",
    "Malmo",
    "Turin",
    "Fargo",
    "Tulsa",
    "Boise",
    "Omaha",
    "Reno",
    "Nice",
    "Lyon",
    "Graz",
    "Brno",
    "Split",
    "Cork",
    "Bath",
    "York",
    "Leeds",
]
_WORDS = [
    "amber",
    "banjo",
    "cactus",
    "dolphin",
    "ember",
    "falcon",
    "glacier",
    "harbor",
    "igloo",
    "jasmine",
    "kettle",
    "lantern",
    "meadow",
    "nutmeg",
    "orchid",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "tundra",
    "velvet",
    "walrus",
    "yarrow",
    "zephyr",
    "copper",
    "marble",
]

_TEMPLATE = (
    "Some special magic {type_plural} are hidden within the following text. Make sure to "
    "memorize them. I will quiz you about the {type_plural} afterwards.\n\n{context}\n\n{question}"
)


class NeedleParams(BaseModel):
    """Parameters of a needle suite (validated from the YAML ``params`` mapping)."""

    model_config = ConfigDict(extra="forbid")

    lengths: list[Annotated[int, Field(ge=1, le=limits.MAX_CONTEXT_TOKENS)]] = Field(
        default=[1024, 2048, 3072], min_length=1, max_length=limits.MAX_PARAM_LIST
    )
    """Target user-message lengths in tokens of the endpoint's tokenizer."""
    depths: list[float] = Field(
        default=[0.1, 0.3, 0.5, 0.7, 0.9], min_length=1, max_length=limits.MAX_PARAM_LIST
    )
    """Relative needle positions in the haystack, 0 = start, 1 = end."""
    haystacks: int = Field(default=2, ge=1, le=limits.MAX_PARAM_LIST)
    """Independent haystack draws per length (each is one cluster across the depths)."""
    n: int | None = Field(default=None, ge=1, le=limits.MAX_ITEMS)
    """Cap on the number of items (``--samples``); the grid is sampled evenly when set."""
    variant: Literal["single", "multikey", "multivalue", "multiquery"] = "single"
    value_type: Literal["number", "word", "uuid"] = "number"
    num_distractors: int = Field(default=3, ge=0, le=limits.MAX_PARAM_LIST)
    """multikey: needles with other keys."""
    num_values: int = Field(default=2, ge=1, le=limits.MAX_PARAM_LIST)
    """multivalue: values hidden for the one key."""
    num_queries: int = Field(default=2, ge=1, le=limits.MAX_PARAM_LIST)
    """multiquery: keys asked at once."""
    max_tokens: int = Field(default=48, ge=1, le=limits.MAX_TOKENS)
    tokenizer: str | None = None
    """The checkpoint's tokenizer (directory with ``tokenizer.json``, or the file) for endpoints
    without ``/tokenize``; when set it is used instead of the endpoint's ``/tokenize``."""
    calibrate_max_length: int | None = Field(default=None, ge=1, le=limits.MAX_CONTEXT_TOKENS)
    """Calibration: the ladder's longest rung, in tokens (default: as long as the baseline's
    probed max context allows). Keeps a suite meant for ordinary context lengths there on a
    128k-token model."""

    @model_validator(mode="after")
    def _bounded_grid(self) -> NeedleParams:
        # The grid (lengths x depths x haystacks) is what a suite plans when n is unset; each
        # list is bounded, their product is bounded here (evalsvc.limits.MAX_ITEMS).
        grid = len(self.lengths) * len(self.depths) * self.haystacks
        if self.n is None and grid > limits.MAX_ITEMS:
            raise ValueError(
                f"lengths x depths x haystacks = {grid} items; at most {limits.MAX_ITEMS} "
                "(set n to sample the grid)"
            )
        return self


def local_tokenizer(suite: Suite, path: str | None) -> LocalTokenizer | None:
    """The checkpoint tokenizer a suite counts tokens with instead of the endpoint's
    ``/tokenize`` (``params.tokenizer``), loaded now so that a bad path fails at load, not
    mid-run; with one the suite needs only ``chat`` from the endpoint. None without a path."""
    from evalsvc.endpoints import LocalTokenizer

    if not path:
        return None
    local = LocalTokenizer(path)
    suite.requires = frozenset({"chat"})  # type: ignore[misc]
    return local


class NeedleSuite(Suite):
    kind = "needle"
    scores_answers = True
    version = "2"
    Params = NeedleParams
    requires = frozenset({"chat", "tokenize"})
    gate_default = GateDefaults.paired_noninferiority(
        "needle",
        margin=0.05,
        rationale=(
            "Long-context retrieval is where FP8 KV cache fails first; a drop of up to 5 "
            "accuracy points is accepted, more is a regression. 5 points absolute is tighter "
            "than vLLM's 8% relative CI tolerance at typical accuracies and loose enough that an "
            "FP8 deployment (~99% recovery) passes with a few hundred items. Needles sharing a "
            "haystack are clustered."
        ),
        sources=(VLLM_CI_SOURCE, KURTIC_SOURCE),
    )
    description = "Needle-in-a-haystack retrieval over a context-length x depth grid (RULER style)."
    slice_fields = (("context_length", "int"), ("depth", "float"))
    view_template = "needle.html"
    params: NeedleParams

    # Needle prompts are thousands of tokens sized on the endpoint's tokenizer: the flips page
    # describes an item by its slice and expected value instead of rebuilding it.

    @classmethod
    def slice_label(cls, data: dict[str, Any]) -> str | None:
        return f"{data.get('context_length')} tokens @ depth {data.get('depth')}"

    @classmethod
    def findings(cls, entry: dict[str, Any]) -> list[Finding]:
        return [*super().findings(entry), *_heatmap_finding(entry.get("details") or {})]

    @classmethod
    def view_model(cls, view: ViewInput) -> dict[str, Any]:
        pairs = view.score_pairs(cls.slice_fields)
        return {"heatmap": needle_heatmap(pairs, alpha=view.alpha)}

    def __init__(self, spec: SuiteSpec) -> None:
        super().__init__(spec)
        self._local = local_tokenizer(self, self.params.tokenizer)

    def item_count(self) -> int:
        p = self.params
        grid = len(p.lengths) * len(p.depths) * p.haystacks
        return min(grid, p.n) if p.n else grid

    # ---- adaptive difficulty: one group, the context length -------------------------------

    def difficulty_ladder(self, provenance: Provenance) -> list[Rung]:
        # The configured lengths, then doublings of the shortest, up to the longest user message
        # the baseline's max context (from the probe) leaves room for with the answer (the same
        # headroom plan() checks); without a known max context, no longer than the longest
        # configured length.
        # Depths are not an axis of the ladder: the walk assumes a rung scores no higher than
        # the easier one before it, and depth has no such order (retrieval is U-shaped over
        # depth, "lost in the middle": Liu et al. 2023, arXiv 2307.03172, and which depths suffer
        # depends on the model). A length's pilot draws its items across the configured depths,
        # so its score is the mean over depths that the run at that length then has, and every
        # chosen length runs at every depth (the heatmap shows where it is lost).
        p = self.params
        top = max(p.lengths)
        if provenance.max_context is not None:
            top = provenance.max_context - p.max_tokens - _TEMPLATE_HEADROOM
        top = min(top, limits.MAX_CONTEXT_TOKENS)
        if p.calibrate_max_length is not None:
            top = min(top, p.calibrate_max_length)
        start = min(min(p.lengths), top)
        if top < 1:
            return []
        values = {length for length in p.lengths if length <= top} | {start, top}
        x = start
        while x * 2 <= top:
            x *= 2
            values.add(x)
        return [
            Rung(group="length", level=i, label=f"{v} tokens", value=v)
            for i, v in enumerate(sorted(values))
        ]

    def calibration_keep(self) -> int | None:
        return len(self.params.lengths)

    def pilot_suite(self, rung: Rung, n: int) -> Suite:
        params = self.params.model_dump(mode="json")
        haystacks = max(1, math.ceil(n / len(self.params.depths)))
        params.update(lengths=[int(rung.value)], haystacks=haystacks, n=n)
        return self._derived(params, pilot=True, seed=pilot_seed(self.spec.seed))

    def at_difficulty(self, rungs: Sequence[Rung]) -> Suite:
        params = self.params.model_dump(mode="json")
        params["lengths"] = sorted(int(r.value) for r in rungs)
        return self._derived(params)

    async def preflight(self, provenance: Provenance) -> list[str]:
        # A length past the baseline's context is refused before any item is sent (a 32k
        # needle on a 4,096-token server), naming the lengths that fit; plan() checks again on
        # the endpoint it sizes items with. A calibrating suite is not asked: its ladder is
        # sized to that context (difficulty_ladder).
        p = self.params
        return lengths_over_context(p.lengths, p.max_tokens, _TEMPLATE_HEADROOM,
                                    provenance.max_context)

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        p = self.params
        rng = random.Random(self.spec.seed)
        paragraphs = _paragraphs()
        max_ctx = provenance.max_context
        cells = [
            (length, h, depth)
            for length in p.lengths
            for h in range(p.haystacks)
            for depth in p.depths
        ]
        if p.n and p.n < len(cells):
            step = len(cells) / p.n
            cells = [cells[int(i * step)] for i in range(p.n)]
        drafts: list[tuple[int, int, float, tuple[int, int], list[str], str, list[str]]] = []
        haystack_cache: dict[tuple[int, int], str] = {}
        for length, h, depth in cells:
            if max_ctx is not None and length + p.max_tokens + _TEMPLATE_HEADROOM > max_ctx:
                raise ValueError(
                    f"suite {self.name}: length {length} + answer does not fit the endpoint's "
                    f"max context {max_ctx}"
                )
            # One haystack per (length, draw), shared by every depth: that is the cluster.
            key = (length, h)
            if key not in haystack_cache:
                hrng = random.Random(f"{self.spec.seed}-{length}-{h}")
                order = paragraphs[:]
                hrng.shuffle(order)
                text = "\n\n".join(order)
                while len(text) < length * 8:  # ~4 chars/token; 2x headroom for the search
                    hrng.shuffle(order)
                    text += "\n\n" + "\n\n".join(order)
                haystack_cache[key] = text
            needles, question, expected = self._needles(rng)  # drawn in order: seeded
            drafts.append((length, h, depth, key, needles, question, expected))

        Draft = tuple[int, int, float, tuple[int, int], list[str], str, list[str]]

        async def build(d: Draft, start: int | None = None) -> tuple[Item, int]:
            length, h, depth, key, needles, question, expected = d
            message, n_tokens, chars = await _fit(
                self._local or client,
                haystack_cache[key],
                needles,
                depth,
                length,
                question,
                self._type_plural(),
                start=start,
            )
            item = Item(
                id=f"L{length}-h{h}-d{depth:.2f}",
                prompt=[{"role": "user", "content": message}],
                expected=expected,
                cluster=f"L{length}-h{h}",
                metadata={
                    "context_length": length,
                    "context_tokens": n_tokens,
                    "depth": depth,
                    "haystack": h,
                    "variant": p.variant,
                },
            )
            return item, chars

        async def build_cluster(group: list[tuple[int, Draft]]) -> list[tuple[int, Item]]:
            # A full binary search (~15 sequential /tokenize calls) for the cluster's first item;
            # the others share its haystack, so a short search from its prefix length (usually
            # 2-4 calls) finds theirs. Clusters are searched concurrently (bounded by the client).
            (i0, d0), rest = group[0], group[1:]
            first, chars = await build(d0)
            others = await asyncio.gather(*(build(d, start=chars) for _, d in rest))
            return [(i0, first), *((i, it) for (i, _), (it, _) in zip(rest, others, strict=True))]

        groups: dict[tuple[int, int], list[tuple[int, Draft]]] = {}
        for i, d in enumerate(drafts):
            groups.setdefault(d[3], []).append((i, d))
        built = await asyncio.gather(*(build_cluster(g) for g in groups.values()))
        items = [it for _, it in sorted((pair for g in built for pair in g), key=lambda x: x[0])]
        return items

    def slice_of(self, sample: Sample) -> dict[str, str]:
        # Context length and needle depth, alone and crossed: an FP8 KV cache loses the long
        # lengths or the early depths first. (The key type and variant are one per suite.)
        length, depth = sample.data.get("context_length"), sample.data.get("depth")
        if length is None or depth is None:
            return {}
        return {
            "length": f"{length} tokens",
            "depth": f"depth {float(depth):g}",
            "length × depth": f"{length} tokens at depth {float(depth):g}",
        }

    def _type_plural(self) -> str:
        return {"number": "numbers", "word": "words", "uuid": "uuids"}[self.params.value_type]

    def _value(self, rng: random.Random) -> str:
        t = self.params.value_type
        if t == "number":
            return str(rng.randint(1_000_000, 9_999_999))
        if t == "word":
            return f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}"
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    def _needles(self, rng: random.Random) -> tuple[list[str], str, list[str]]:
        p = self.params
        kind = {"number": "number", "word": "word", "uuid": "uuid"}[p.value_type]
        keys = rng.sample(_KEYS, k=1 + max(p.num_distractors, p.num_queries))
        target = keys[0]

        def needle(key: str, value: str) -> str:
            return f"One of the special magic {kind}s for {key} is: {value}."

        if p.variant == "single":
            value = self._value(rng)
            return (
                [needle(target, value)],
                f"What is the special magic {kind} for {target} mentioned in the provided text?",
                [value],
            )
        if p.variant == "multikey":
            value = self._value(rng)
            needles = [needle(target, value)] + [
                needle(k, self._value(rng)) for k in keys[1 : 1 + p.num_distractors]
            ]
            rng.shuffle(needles)
            return (
                needles,
                f"What is the special magic {kind} for {target} mentioned in the provided text?",
                [value],
            )
        if p.variant == "multivalue":
            values = [self._value(rng) for _ in range(p.num_values)]
            return (
                [needle(target, v) for v in values],
                f"What are all the special magic {kind}s for {target} mentioned in the provided text?",
                values,
            )
        queried = keys[: p.num_queries]
        values = [self._value(rng) for _ in queried]
        return (
            [needle(k, v) for k, v in zip(queried, values, strict=True)],
            f"What are the special magic {kind}s for {', '.join(queried)} mentioned in the provided text?",
            values,
        )

    async def solve(self, item: Item, client: EndpointClient) -> Sample:
        assert isinstance(item.prompt, list)
        out = await client.chat(item.prompt, max_tokens=self.params.max_tokens)
        found = (
            [v for v in item.expected if _normalise(v) in _normalise(out.text)] if out.ok else []
        )
        return Sample(
            suite=self.name,
            item_id=item.id,
            endpoint="",
            output=out.text,
            score=None if out.error else float(len(found) == len(item.expected)),
            prompt_tokens=out.prompt_tokens,
            completion_tokens=out.completion_tokens,
            latency_s=out.latency_s,
            error=out.error,
            data={
                "cluster": item.cluster,
                "found": len(found),
                "expected": item.expected,
                **{k: item.metadata[k] for k in ("context_length", "context_tokens", "depth")},
            },
        )

    def heatmap(self, samples: list[Sample]) -> list[dict[str, float | int]]:
        """Accuracy per (context length, depth) cell, for the report's heatmap."""
        cells: dict[tuple[int, float], list[float]] = {}
        for s in samples:
            if s.score is not None:
                cells.setdefault(
                    (int(s.data["context_length"]), float(s.data["depth"])), []
                ).append(s.score)
        return [
            {"context_length": length, "depth": depth, "accuracy": sum(v) / len(v), "n": len(v)}
            for (length, depth), v in sorted(cells.items())
        ]


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower())


def _paragraphs() -> list[str]:
    path = Path(catalog_dir()) / "data" / "haystack.txt"
    return [p.strip() for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]


def _insert(haystack: str, needles: list[str], depth: float) -> str:
    """Insert the needles at sentence boundaries nearest to ``depth`` (spread a little for several)."""
    bounds = [m.end() for m in re.finditer(r"[.!?]\s", haystack)] or [len(haystack)]
    text = haystack
    for i, needle in enumerate(reversed(needles)):
        # Several needles go to nearby distinct boundaries around the depth, in order.
        target = min(1.0, max(0.0, depth + 0.02 * (len(needles) - 1 - i)))
        pos = min(bounds, key=lambda b: abs(b - target * len(haystack)))
        text = text[:pos] + needle + " " + text[pos:]
        bounds = [b for b in bounds if b < pos]
        if not bounds:
            bounds = [0]
    return text


class Tokenizes(Protocol):
    """What the length search needs: the endpoint client, or a :class:`LocalTokenizer`."""

    async def tokenize(self, text: str) -> list[int]: ...


async def _fit(
    client: Tokenizes,
    haystack: str,
    needles: list[str],
    depth: float,
    length: int,
    question: str,
    type_plural: str,
    *,
    start: int | None = None,
) -> tuple[str, int, int]:
    """The largest haystack prefix whose full message is ≤ ``length`` tokens of the endpoint's
    own tokenizer: ``(message, tokens, prefix chars)``.

    Token count is monotone in the prefix length, so this is a search on ``/tokenize``: a plain
    binary search over the whole haystack, or, given ``start`` (a neighbour's answer), a
    galloping search that brackets the answer from there first (Bentley & Yao 1976).
    """

    def build(chars: int) -> str:
        prefix = haystack[:chars]
        return _TEMPLATE.format(
            type_plural=type_plural, context=_insert(prefix, needles, depth), question=question
        )

    cache: dict[int, tuple[str, int]] = {}

    async def count(chars: int) -> int:
        if chars not in cache:
            message = build(chars)
            cache[chars] = (message, len(await client.tokenize(message)))
        return cache[chars][1]

    lo, hi = 0, len(haystack)
    if start is not None:
        start = min(max(start, 0), hi)
        step = 16
        if await count(start) <= length:
            lo = start  # fits: gallop up until it does not
            while lo < hi:
                probe = min(hi, lo + step)
                if await count(probe) > length:
                    hi = probe - 1
                    break
                lo, step = probe, step * 2
        else:
            hi = start - 1  # too long: gallop down until it fits
            while hi > 0:
                probe = max(0, hi - step)
                if await count(probe) <= length:
                    lo = probe
                    break
                hi, step = probe - 1, step * 2
            else:
                lo = 0
    # Invariant: the answer is in [lo, hi] when count(lo) <= length (or lo is 0).
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if await count(mid) <= length:
            lo = mid
        else:
            hi = mid - 1
    if await count(lo) > length:
        raise ValueError(f"length {length} is too short for the needle template")
    message, n = cache[lo]
    return message, n, lo


# ---------------------------------------------------------------------------- presentation


def _heatmap_finding(d: dict[str, Any]) -> list[Finding]:
    """The report's accuracy grid, baseline / candidate per (context length, depth)."""
    heat = d.get("heatmap") or {}
    base, cand = heat.get("baseline") or [], heat.get("candidate") or []
    if not base:
        return []
    cells_b = {(c["context_length"], c["depth"]): c for c in base}
    cells_c = {(c["context_length"], c["depth"]): c for c in cand}
    depths = sorted({c["depth"] for c in base})
    lengths = sorted({c["context_length"] for c in base})
    lines = [
        "Accuracy by context length × needle depth (baseline / candidate):",
        "",
        "| tokens | " + " | ".join(f"depth {x:g}" for x in depths) + " |",
        "|---|" + "---|" * len(depths),
    ]
    for n in lengths:
        row = []
        for x in depths:
            b, c = cells_b.get((n, x)), cells_c.get((n, x))
            row.append(f"{pct(b['accuracy']) if b else '—'} / {pct(c['accuracy']) if c else '—'}")
        lines.append(f"| {n} | " + " | ".join(row) + " |")
    return [Finding(title="accuracy by context length × depth", markdown=[*lines, ""],
                    data={"heatmap": heat})]


def needle_heatmap(pairs: list[tuple[Any, Any]], alpha: float = 0.05) -> dict[str, Any]:
    """Accuracy per (context length, depth) for baseline and candidate, and their paired Δ.

    ``pairs`` are (baseline, candidate) score rows (``evalsvc.suites.Scored``) carrying the
    ``context_length`` and ``depth`` data fields. A cell is marked significant when the exact
    McNemar test of its paired outcomes (McNemar 1947; ``evalsvc.stats.mcnemar_exact``) rejects
    "no difference" at ``alpha`` after Holm's adjustment over the grid's cells (Holm 1979): with
    20-odd cells, unadjusted tests would mark about one cell in twenty by chance.
    """
    cells: dict[tuple[int, float], dict[str, list[float]]] = {}
    for rb, rc in pairs:
        if rb[3] is None or rc[3] is None:
            continue
        key = (int(rb[4].get("context_length") or 0), float(rb[4].get("depth") or 0.0))
        cell = cells.setdefault(key, {"b": [], "c": []})
        cell["b"].append(float(rb[3]))
        cell["c"].append(float(rc[3]))
    keys = sorted(cells)
    out = []
    pvals = []
    for key in keys:
        b, c = cells[key]["b"], cells[key]["c"]
        worse = sum(1 for x, y in zip(b, c, strict=True) if x >= 0.5 > y)
        better = sum(1 for x, y in zip(b, c, strict=True) if y >= 0.5 > x)
        p = mcnemar_exact(worse, better)
        pvals.append(p)
        mb, mc = sum(b) / len(b), sum(c) / len(c)
        out.append({
            "context_length": key[0],
            "depth": key[1],
            "n": len(b),
            "baseline": float(mb),
            "candidate": float(mc),
            "delta": float(mc - mb),
            "regressions": worse,
            "improvements": better,
            "p": p,
        })
    adjusted: list[float] = [float(x) for x in holm(pvals)] if pvals else []
    for cell_out, p_adj in zip(out, adjusted, strict=True):
        cell_out["p_holm"] = float(p_adj)
        cell_out["significant"] = bool(p_adj <= alpha)
    return {
        "lengths": sorted({k[0] for k in keys}),
        "depths": sorted({k[1] for k in keys}),
        "cells": out,
        "alpha": alpha,
    }
