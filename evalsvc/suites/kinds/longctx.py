"""``longctx``: long-context tasks harder than a plain needle, and the effective context length.

Plain needles saturate: a small model finds nearly every one up to its context limit, on BF16
and FP8 KV cache alike. Published work finds quantization damage where retrieval is harder, so
each ``task`` here is one of those:

- ``nolima``: NoLiMa-style needles (Modarressi et al. 2025, "NoLiMa: Long-Context Evaluation
  Beyond Literal Matching", arXiv 2502.05167). The needle names a landmark ("Yuki lives next to
  the Semper Opera"), the question only its city ("Which character has been to Dresden?"): they
  share no content word (``content_words``; checked for every template and pair by a test), so
  the answer must be found by association, not by string match. Binary score: the first name
  the answer gives must be the needle's.
- ``common_words`` / ``frequent_words``: RULER's aggregation tasks CWE and FWE (Hsieh et al.
  2024, arXiv 2404.06654, §3.2). Marked words (``[word: …]``, ``[code: …]``) are spread evenly
  through the haystack; CWE: ``num_common`` words appear ``common_freq`` times each and
  ``uncommon_per_1k`` words per 1k tokens ``uncommon_freq`` times; FWE: coded words drawn from a
  Zipf distribution (α = ``zipf_alpha``, RULER's 2.0) over ``vocab_size`` words. The answer is
  the ``top_k`` most frequent. Here the marks sit in a haystack (RULER's CWE context is the list
  alone) so that the multilingual haystacks and exact lengths apply to them as to the others.
- ``variable_tracking``: RULER's VT. ``VAR ABCDE = 12345.`` then ``VAR FGHIJ = ABCDE.`` …
  (``num_hops`` copies) spread from the item's depth to the end, with ``num_chains − 1``
  distractor chains of other values spread over the whole text; the answer is every variable
  holding the value.

The partial-credit tasks score as RULER's ``string_match_all`` (the share of expected words in
the answer), but over the first ``k`` distinct candidate words the answer names (``k`` = the
number expected), so that listing every marked word or variable cannot score.

Every task is placed in a seeded **haystack** in one of several languages (``languages``:
``en``, ``de``, ``es``, ``ko``; ``evalsvc.suites.kinds._filler``, written here); the task's own
text (instructions, needle, question) stays English. Each item's user message is exactly the
longest haystack prefix with the task text that fits ``length`` tokens of the **endpoint's own
tokenizer** (``/tokenize``, or ``params.tokenizer``'s ``tokenizer.json`` as for ``needle``),
found by an interpolation search on the token count (``fit``; from a cluster neighbour's
answer when there is one).

Slices: length, language, depth (``nolima``, ``variable_tracking``), length × language. The
report adds the score by length and language for both endpoints and the **effective length**
(``evalsvc.stats.effective_length``: the longest length keeping ≥ ``effective_ratio`` of the
shortest length's score) of baseline and candidate with its shift, as a finding; with
``gate: {metric: effective_length}`` the suite is gated on that shift instead
(``evalsvc.stats.effective_length_test``; margin relative).
"""

from __future__ import annotations

import asyncio
import bisect
import random
import re
import string
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalsvc import limits
from evalsvc.domain import Item, Provenance, Sample
from evalsvc.gates import KURTIC_SOURCE, GateDefaults, GateOutcome, ResolvedGate
from evalsvc.stats import (
    EFFECTIVE_RATIO,
    effective_length,
    effective_length_test,
    scores_by_length,
)
from evalsvc.suites._base import (
    Analysis,
    Suite,
    SuiteDoesNotFit,
    SuiteSpec,
    lengths_over_context,
    paired_scores,
)
from evalsvc.suites._present import Chart, Finding, ViewInput, markdown_table, pct
from evalsvc.suites.kinds._filler import LANGUAGES, filler, filler_names, filler_words
from evalsvc.suites.kinds.needle import Tokenizes, local_tokenizer

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import EndpointClient

Task = Literal["nolima", "common_words", "frequent_words", "variable_tracking"]

RULER_SOURCE = "Hsieh et al. 2024, RULER, arXiv 2404.06654"
NOLIMA_SOURCE = "Modarressi et al. 2025, NoLiMa, arXiv 2502.05167"

# ---------------------------------------------------------------------------- NoLiMa material

# (landmark, city): the needle names the landmark, the question the city; no shared word.
LANDMARKS: tuple[tuple[str, str], ...] = (
    ("Semper Opera", "Dresden"),
    ("Kinkaku-ji temple", "Kyoto"),
    ("Sagrada Familia", "Barcelona"),
    ("Hagia Sophia", "Istanbul"),
    ("Golden Gate Bridge", "San Francisco"),
    ("Charles Bridge", "Prague"),
    ("Atomium", "Brussels"),
    ("Space Needle", "Seattle"),
    ("CN Tower", "Toronto"),
    ("Table Mountain", "Cape Town"),
    ("Petronas Towers", "Kuala Lumpur"),
    ("Acropolis", "Athens"),
    ("Colosseum", "Rome"),
    ("Brandenburg Gate", "Berlin"),
    ("Alhambra", "Granada"),
    ("Gyeongbokgung Palace", "Seoul"),
    ("Burj Khalifa", "Dubai"),
    ("Eiffel Tower", "Paris"),
    ("Rijksmuseum", "Amsterdam"),
    ("Prado Museum", "Madrid"),
    ("Uffizi Gallery", "Florence"),
    ("Angkor Wat", "Siem Reap"),
    ("Little Mermaid statue", "Copenhagen"),
    ("Forbidden City", "Beijing"),
)

# (needle, question): {name}/{landmark} in the needle, {city} in the question.
NOLIMA_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("Actually, {name} lives next to the {landmark}.", "Which character has been to {city}?"),
    ("{name} once sketched the {landmark} from a café table.",
     "Which character has visited {city}?"),
    ("From the hotel window, {name} could see the {landmark}.",
     "Which person has stayed in {city}?"),
    ("In front of the {landmark}, {name} proposed to a sweetheart.",
     "Which character has travelled to {city}?"),
)

# Needle names: a list of its own (the filler's names are others), so that a name in the
# haystack is never the answer by accident.
NEEDLE_NAMES = ("Yuki", "Arjun", "Leila", "Bruno", "Chiara", "Dmitri", "Amara", "Kenji",
                "Rosa", "Tariq", "Ingrid", "Mateus", "Sione", "Zara", "Emeka", "Noor")

_STOPWORDS_TEXT = (
    "a an the of to in on at from for by with and or but if then once which who whom whose "
    "what when where why how has have had been be is are was were do does did could would "
    "should can will shall may might must actually character person next"
)
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
# "character"/"person" name the answer's type (NoLiMa's questions say "Which character"): they
# carry no content of the needle; "next" is part of the idiom "next to".


def _stem(word: str) -> str:
    # A light suffix stripper (enough to make "visit"/"visited", "tower"/"towers" collide).
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    """Lower-cased, stemmed words of ``text`` without stopwords: the NoLiMa overlap check."""
    words = re.findall(r"[^\W\d_]+", text.lower().replace("'s", ""))
    return {_stem(w) for w in words if w not in _STOPWORDS}


# ---------------------------------------------------------------------------- generated words

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def _pseudo_word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))


# Generated words never coincide with a word the filler can write (Spanish "madera" is a
# consonant-vowel word): a task word must occur only where the task put it.
_FILLER_WORDS = frozenset().union(*(filler_words(lang) for lang in LANGUAGES))


def _distinct(rng: random.Random, count: int, make: Callable[[random.Random], str]) -> list[str]:
    out: list[str] = []
    seen: set[str] = set(_FILLER_WORDS)
    while len(out) < count:
        w = make(rng)
        if w.lower() not in seen:
            seen.add(w.lower())
            out.append(w)
    return out


def _var_name(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_uppercase) for _ in range(5))


# ---------------------------------------------------------------------------- parameters


class LongContextParams(BaseModel):
    """Parameters of a long-context suite (validated from the YAML ``params`` mapping)."""

    model_config = ConfigDict(extra="forbid")

    task: Task
    """Which task: ``nolima``, ``common_words``, ``frequent_words``, ``variable_tracking``."""
    lengths: list[Annotated[int, Field(ge=64, le=limits.MAX_CONTEXT_TOKENS)]] = Field(
        default=[1024, 2048, 4096], min_length=1, max_length=limits.MAX_PARAM_LIST
    )
    """Target user-message lengths in tokens of the endpoint's tokenizer; the shortest is the
    reference of the effective length."""
    depths: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        default=[0.25, 0.5, 0.75], min_length=1, max_length=limits.MAX_PARAM_LIST
    )
    """Needle / chain-start positions (``nolima``, ``variable_tracking``; the aggregation tasks
    spread their marks over the whole text and ignore this)."""
    languages: list[str] = Field(default=["en"], min_length=1, max_length=len(LANGUAGES))
    """Haystack languages (``en``, ``de``, ``es``, ``ko``)."""
    haystacks: int = Field(default=2, ge=1, le=limits.MAX_PARAM_LIST)
    """Haystack draws per (length, language): each is one cluster across its depths."""
    n: int | None = Field(default=None, ge=1, le=limits.MAX_ITEMS)
    """Cap on the number of items (``--samples``); the grid is sampled evenly when set."""
    max_tokens: int = Field(default=64, ge=1, le=limits.MAX_TOKENS)
    tokenizer: str | None = None
    """The checkpoint's tokenizer (directory with ``tokenizer.json``, or the file) for endpoints
    without ``/tokenize``; when set it is used instead of the endpoint's ``/tokenize``."""
    effective_ratio: float = Field(default=EFFECTIVE_RATIO, gt=0, le=1)
    """Share of the shortest length's score a length must keep to count as effective."""
    # nolima
    literal_match: bool = False
    """``nolima`` only: the question names the needle's landmark itself ("Which character is
    mentioned together with the Semper Opera?"), the literal-match control that NoLiMa's
    one-hop questions are contrasted with: for models that lack the landmark → city knowledge
    the one-hop question needs (SmolLM2-135M scores 0 on it, docs/suites.md)."""
    haystack_names: bool = True
    """The haystack's people have names (NoLiMa's setting: the needle's name is one of many).
    ``false``: the haystack has nobody in it (scenes: "Before dawn, a bell rang at the
    market."), so the needle's name (and the distractors') are the only names: the level a
    small model can answer (docs/suites.md).
    Every task takes it; it matters to ``nolima``."""
    distractors: int = Field(default=0, ge=0, le=8)
    """``nolima`` only: other needles (other names, landmarks of other cities) at random
    depths; with ``haystack_names: false`` the answer is then one of ``distractors + 1``
    names and only the landmark → city association tells which."""
    # common_words
    num_common: int = Field(default=3, ge=1, le=50)
    common_freq: int = Field(default=6, ge=2, le=200)
    uncommon_freq: int = Field(default=1, ge=1, le=100)
    uncommon_per_1k: int = Field(default=10, ge=0, le=200)
    # frequent_words
    vocab_size: int = Field(default=16, ge=4, le=1000)
    zipf_alpha: float = Field(default=2.0, gt=0, le=5)
    marks_per_1k: int = Field(default=30, ge=4, le=400)
    top_k: int = Field(default=3, ge=1, le=20)
    # variable_tracking
    num_hops: int = Field(default=3, ge=1, le=20)
    num_chains: int = Field(default=2, ge=1, le=20)

    @model_validator(mode="after")
    def _check(self) -> LongContextParams:
        bad = [x for x in self.languages if x not in LANGUAGES]
        if bad:
            raise ValueError(f"unknown languages {bad}: one of {', '.join(LANGUAGES)}")
        if len(set(self.lengths)) != len(self.lengths):
            raise ValueError("lengths must be distinct")
        if self.task == "frequent_words" and self.top_k >= self.vocab_size:
            raise ValueError("top_k must be smaller than vocab_size")
        grid = len(self.lengths) * len(self.languages) * self.haystacks * len(self.cell_depths())
        if self.n is None and grid > limits.MAX_ITEMS:
            raise ValueError(
                f"lengths x languages x haystacks x depths = {grid} items; at most "
                f"{limits.MAX_ITEMS} (set n to sample the grid)"
            )
        return self

    def cell_depths(self) -> list[float | None]:
        if self.task in ("nolima", "variable_tracking"):
            return list(self.depths)
        return [None]


# ---------------------------------------------------------------------------- task material


class Draft(BaseModel):
    """One item before its length is fitted: the text around the haystack and what goes in."""

    intro: str
    question: str
    inserts: list[tuple[float, str]]
    """(relative position, text): placed at the sentence boundary nearest the position."""
    expected: list[str]
    universe: list[str]
    """Every candidate answer word the context holds (names, marked words, variables)."""


_INTROS = {
    "nolima": "Read the following text and answer the question after it.",
    "common_words": (
        "The following text contains marked words written like [word: ...]. Some of the marked "
        "words appear more often than others. Memorize them: I will ask which are the most common."
    ),
    "frequent_words": (
        "The following text contains coded words written like [code: ...]. Track how often each "
        "coded word appears: I will ask which are the most frequent."
    ),
    "variable_tracking": (
        "Memorize and track the chain(s) of variable assignments (VAR ... = ...) hidden in the "
        "following text."
    ),
}


def _draft(p: LongContextParams, rng: random.Random, length: int, depth: float | None) -> Draft:
    intro = _INTROS[p.task]
    if p.task == "nolima":
        assert depth is not None
        needle_t, question_t = rng.choice(NOLIMA_TEMPLATES)
        landmark, city = rng.choice(LANDMARKS)
        name = rng.choice(NEEDLE_NAMES)
        asked = (
            f"Which character is mentioned together with the {landmark}?"
            if p.literal_match
            else question_t.format(city=city)
        )
        needles = [(depth, needle_t.format(name=name, landmark=landmark))]
        others = rng.sample([n for n in NEEDLE_NAMES if n != name], p.distractors)
        sites = rng.sample([lm for lm, c in LANDMARKS if c != city], p.distractors)
        for other, site in zip(others, sites, strict=True):
            template, _ = rng.choice(NOLIMA_TEMPLATES)
            needles.append((rng.uniform(0.05, 0.95), template.format(name=other, landmark=site)))
        return Draft(
            intro=intro,
            # Saying that the answer is a name from the text (no content word of any needle)
            # took SmolLM2-135M from 4 to 5–8 of 12 at 1k tokens (docs/suites.md): without it,
            # it answered "not specified" or rephrased the question.
            question=(f"Question: {asked} The answer is a name that appears in the text. "
                      "Answer with the name only."),
            inserts=sorted(needles),
            expected=[name],
            universe=[],  # filled with the haystack's names by the caller
        )
    if p.task == "common_words":
        n_uncommon = max(1, p.uncommon_per_1k * length // 1000)
        words = _distinct(rng, p.num_common + n_uncommon, lambda r: _pseudo_word(r, 3))
        common, uncommon = words[: p.num_common], words[p.num_common :]
        marks = [w for w in common for _ in range(p.common_freq)]
        marks += [w for w in uncommon for _ in range(p.uncommon_freq)]
        rng.shuffle(marks)
        k = p.num_common
        return Draft(
            intro=intro,
            question=_most_often_question("word", k),
            inserts=_spread(f"[word: {w}]" for w in marks),
            expected=common,
            universe=words,
        )
    if p.task == "frequent_words":
        vocab = _distinct(rng, p.vocab_size, lambda r: _pseudo_word(r, 2) + r.choice(_CONSONANTS))
        total = max(p.vocab_size, p.marks_per_1k * length // 1000)
        weights = [1.0 / (r + 1) ** p.zipf_alpha for r in range(p.vocab_size)]
        for _ in range(1000):
            marks = rng.choices(vocab, weights=weights, k=total)
            counts = sorted(((marks.count(w), w) for w in vocab), reverse=True)
            # The top k must be strictly ahead of the rest, or the answer is ambiguous.
            if counts[p.top_k - 1][0] > counts[p.top_k][0]:
                break
        else:
            raise ValueError("frequent_words: no unambiguous top words; raise marks_per_1k")
        k = p.top_k
        return Draft(
            intro=intro,
            question=_most_often_question("code", k),
            inserts=_spread(f"[code: {w}]" for w in marks),
            expected=[w for _, w in counts[:k]],
            universe=vocab,
        )
    # variable_tracking
    assert depth is not None
    names = _distinct(rng, p.num_chains * (p.num_hops + 1), _var_name)
    values = [str(v) for v in rng.sample(range(10000, 99999), p.num_chains)]
    inserts: list[tuple[float, str]] = []
    for c in range(p.num_chains):
        chain = names[c * (p.num_hops + 1) : (c + 1) * (p.num_hops + 1)]
        lines = [f"VAR {chain[0]} = {values[c]}."]
        lines += [f"VAR {chain[j]} = {chain[j - 1]}." for j in range(1, len(chain))]
        if c == 0:  # the queried chain: from the depth to near the end, in order
            start, end = depth, max(depth, 0.95)
        else:  # distractors: over the whole text
            start, end = rng.uniform(0.02, 0.5), 0.98
        span = end - start
        inserts += [(start + span * j / max(1, len(lines) - 1), t) for j, t in enumerate(lines)]
    chain0 = names[: p.num_hops + 1]
    return Draft(
        intro=intro,
        question=(
            f"Question: Find all variables that are assigned the value {values[0]} in the text "
            "above, directly or through other variables. Answer with the variable names only, "
            "separated by commas."
        ),
        inserts=inserts,
        expected=chain0,
        universe=names,
    )


def _most_often_question(tag: str, k: int) -> str:
    """The aggregation tasks' question. It restates what a mark looks like and asks for the
    words themselves: asked "What are the k most common marked words?", SmolLM2-135M named no
    marked word in 6 of 6 items at 1k tokens (it answered with haystack phrases); asked this way,
    it named the most frequent one in 11 of 12 (one word 8 times against 4 singletons) and in
    6-8 of 12 against 10 singletons (docs/suites.md)."""
    what = "Which bracketed word is" if k == 1 else f"Which {k} bracketed words are"
    reply = "just that word" if k == 1 else f"just those {k} words, separated by commas"
    return (
        f"Question: In the text above, some words are written in brackets like [{tag}: ...]. "
        f"{what} written most often? Reply with {reply}."
    )


def _spread(texts: Iterable[str]) -> list[tuple[float, str]]:
    items = list(texts)
    n = len(items)
    return [((i + 0.5) / n, t) for i, t in enumerate(items)]


_BOUNDARY = re.compile(r"[.!?]\s")


def place(prefix: str, inserts: Sequence[tuple[float, str]]) -> str:
    """``prefix`` with each insert at the sentence boundary nearest its relative position (the
    inserts' order kept where several land on one boundary)."""
    bounds = [0] + [m.end() for m in _BOUNDARY.finditer(prefix)]
    size = len(prefix)
    at: dict[int, list[str]] = {}
    for frac, text in sorted(inserts, key=lambda x: x[0]):
        target = frac * size
        i = bisect.bisect_left(bounds, target)
        cands = [bounds[j] for j in (i - 1, i) if 0 <= j < len(bounds)]
        pos = min(cands, key=lambda b: abs(b - target))
        at.setdefault(pos, []).append(text)
    out: list[str] = []
    last = 0
    for pos in sorted(at):
        out.append(prefix[last:pos])
        out.append(" ".join(at[pos]) + " ")
        last = pos
    out.append(prefix[last:])
    return "".join(out)


def build_message(draft: Draft, prefix: str) -> str:
    return f"{draft.intro}\n\n{place(prefix, draft.inserts)}\n\n{draft.question}"


async def fit(
    tok: Tokenizes,
    build: Callable[[int], str],
    max_chars: int,
    length: int,
    *,
    start: int | None = None,
) -> tuple[str, int, int]:
    """The largest ``chars`` ≤ ``max_chars`` whose ``build(chars)`` is ≤ ``length`` tokens:
    ``(message, tokens, chars)``, for a token count monotone in ``chars``.

    An interpolation search (Peterson 1957): the count is nearly linear in the prefix, so the
    next probe is where the line through the bracket's ends (or, with one end known, the last
    probe's characters per token) reaches ``length``; a probe that fails to halve the bracket
    is followed by a bisection step, which bounds the worst case at twice binary search's
    calls. ``start`` (a cluster neighbour's answer) is the first probe. The bracket is exact:
    it ends with ``lo`` fitting and ``lo + 1`` not.
    """
    cache: dict[int, tuple[str, int]] = {}

    async def count(chars: int) -> int:
        if chars not in cache:
            message = build(chars)
            cache[chars] = (message, len(await tok.tokenize(message)))
        return cache[chars][1]

    # Invariant: every c ≤ lo fits (lo = -1: none known), every c ≥ hi does not.
    lo, hi = -1, max_chars + 1
    n_lo: int | None = None
    n_hi: int | None = None
    guess = start if start is not None else min(max_chars, 4 * length)
    bisect_next = False
    while hi - lo > 1:
        width = hi - lo
        probe = (lo + hi) // 2 if bisect_next else min(max(guess, lo + 1), hi - 1)
        n = await count(probe)
        if n <= length:
            lo, n_lo = probe, n
        else:
            hi, n_hi = probe, n
        bisect_next = hi - lo > width // 2
        if n_lo is not None and n_hi is not None and n_hi > n_lo:
            # Aim just past the crossing, so that the bracket closes from both sides.
            guess = lo + max(1, round((length + 0.5 - n_lo) * (hi - lo) / (n_hi - n_lo)))
        else:
            guess = probe + round((length + 0.5 - n) * probe / max(n, 1))
    if lo < 0:
        bare = await count(0)
        raise SuiteDoesNotFit(
            f"params.lengths: {length} tokens is shorter than the task's own text with no "
            f"haystack ({bare} tokens in this endpoint's tokenizer): use lengths above {bare}")
    message, n = cache[lo]
    if lo >= max_chars and n < length:
        raise SuiteDoesNotFit(
            f"params.lengths: the haystack ends at {n} tokens, short of {length}: use shorter "
            "lengths")
    return message, n, lo


# ---------------------------------------------------------------------------- scoring


def named(output: str, universe: Sequence[str]) -> list[str]:
    """The universe's words the output names, in order of first mention (case-insensitive,
    whole words)."""
    low = output.lower()
    hits = []
    for w in set(universe):
        m = re.search(rf"(?<!\w){re.escape(w.lower())}(?!\w)", low)
        if m:
            hits.append((m.start(), w))
    return [w for _, w in sorted(hits)]


def credit(output: str, expected: Sequence[str], universe: Sequence[str]) -> float:
    """RULER's ``string_match_all`` (share of expected words present), counted over the first
    ``len(expected)`` distinct universe words the output names, so that naming every candidate
    does not score."""
    first = named(output, universe)[: len(expected)]
    return sum(1 for w in expected if w in first) / len(expected)


# ---------------------------------------------------------------------------- gates

_SCORE_GATE_BINARY = GateDefaults.paired_noninferiority(
    "longctx",
    margin=0.10,
    rationale=(
        "NoLiMa-style retrieval is scored right or wrong; a drop of up to 10 accuracy points is "
        "accepted at the sizes a CPU host can run (the needle kind's 5 points needs several "
        "hundred items); harder retrieval is where quantization loses first."
    ),
    sources=(NOLIMA_SOURCE, KURTIC_SOURCE),
)
_SCORE_GATE_PARTIAL = GateDefaults.paired_noninferiority(
    "longctx",
    margin=0.10,
    kind="continuous",
    metric="score",
    rationale=(
        "Aggregation and variable tracking score partial credit (RULER's string_match_all); a "
        "mean drop of up to 10 points is accepted, more is a regression."
    ),
    sources=(RULER_SOURCE, KURTIC_SOURCE),
)
_EFFECTIVE_GATE = GateDefaults(
    suite_kind="longctx",
    metric="effective_length",
    gate="noninferiority",
    kind="ratio",
    margin=0.2,
    threshold=None,
    alpha=0.05,
    higher_is_better=True,
    paired=True,
    required=True,
    rationale=(
        "The effective length may shrink by at most 20%: on a grid doubling or adding 1k per "
        "step, losing the longest step fails (4k to 3k is -25%, 128k to 64k is -50%). Tested by "
        "a paired cluster bootstrap of the ratio (evalsvc.stats.effective_length_test)."
    ),
    sources=(RULER_SOURCE,),
)


#: Tokens the chat template adds around the user message (SmolLM2's adds about 10).
_TEMPLATE_HEADROOM = 64


class LongContextSuite(Suite):
    kind = "longctx"
    scores_answers = True
    version = "1"
    Params = LongContextParams
    requires = frozenset({"chat", "tokenize"})
    gate_default = _SCORE_GATE_BINARY
    description = (
        "Long-context tasks beyond a plain needle (NoLiMa needles, RULER aggregation and "
        "variable tracking) over multilingual haystacks, with the effective context length."
    )
    slice_fields = (("context_length", "int"), ("language", "str"), ("depth", "float"))
    params: LongContextParams

    def __init__(self, spec: SuiteSpec) -> None:
        super().__init__(spec)
        self._local = local_tokenizer(self, self.params.tokenizer)

    def default_gate(self) -> GateDefaults:
        if self.spec.gate.metric == "effective_length":
            return _EFFECTIVE_GATE
        return _SCORE_GATE_BINARY if self.params.task == "nolima" else _SCORE_GATE_PARTIAL

    # -- items

    def _cells(self) -> list[tuple[int, str, int, float | None]]:
        p = self.params
        cells = [
            (length, lang, h, depth)
            for length in p.lengths
            for lang in p.languages
            for h in range(p.haystacks)
            for depth in p.cell_depths()
        ]
        if p.n and p.n < len(cells):
            step = len(cells) / p.n
            cells = [cells[int(i * step)] for i in range(p.n)]
        return cells

    def item_count(self) -> int:
        return len(self._cells())

    async def preflight(self, provenance: Provenance) -> list[str]:
        # Refuse before any item is sent when a length cannot fit the baseline's context (a
        # llama.cpp slot of 4,096 tokens, a GPU suite's 128k on a small server), naming the
        # lengths that would; plan() checks again on the endpoint it sizes items with.
        p = self.params
        return lengths_over_context(p.lengths, p.max_tokens, _TEMPLATE_HEADROOM,
                                    provenance.max_context)

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        p = self.params
        max_ctx = provenance.max_context
        tok: Tokenizes = self._local or client
        haystacks: dict[tuple[int, str, int], str] = {}
        drafts: list[tuple[tuple[int, str, int], float | None, Draft]] = []
        for length, lang, h, depth in self._cells():
            if max_ctx is not None and length + p.max_tokens + _TEMPLATE_HEADROOM > max_ctx:
                raise ValueError(
                    f"suite {self.name}: length {length} + answer does not fit the endpoint's "
                    f"max context {max_ctx}"
                )
            key = (length, lang, h)
            if key not in haystacks:
                # ~4 characters per token in English; Korean takes fewer per token, so 8 per
                # token leaves headroom for the search in every language.
                haystacks[key] = filler(lang, f"{self.spec.seed}-{length}-{h}", length * 8,
                                        people=p.haystack_names)
            rng = random.Random(f"{self.spec.seed}-{p.task}-{length}-{lang}-{h}-{depth}")
            draft = _draft(p, rng, length, depth)
            if p.task == "nolima":
                draft.universe = [*NEEDLE_NAMES, *filler_names(lang)]
            drafts.append((key, depth, draft))

        async def build(
            key: tuple[int, str, int], depth: float | None, draft: Draft, start: int | None
        ) -> tuple[Item, int]:
            length, lang, h = key
            text = haystacks[key]
            message, n_tokens, chars = await fit(
                tok, lambda c: build_message(draft, text[:c]), len(text), length, start=start
            )
            dlabel = "all" if depth is None else f"{depth:.2f}"
            item = Item(
                id=f"L{length}-{lang}-h{h}-d{dlabel}",
                prompt=[{"role": "user", "content": message}],
                expected=draft.expected,
                cluster=f"L{length}-{lang}-h{h}",
                metadata={
                    "context_length": length,
                    "context_tokens": n_tokens,
                    "language": lang,
                    "depth": depth,
                    "haystack": h,
                    "task": p.task,
                    "universe": draft.universe,
                },
            )
            return item, chars

        groups: dict[tuple[int, str, int], list[int]] = {}
        for i, (key, _, _) in enumerate(drafts):
            groups.setdefault(key, []).append(i)

        async def cluster(idx: list[int]) -> list[tuple[int, Item]]:
            first, chars = await build(*drafts[idx[0]], None)
            rest = await asyncio.gather(*(build(*drafts[i], chars) for i in idx[1:]))
            return [(idx[0], first), *((i, it) for i, (it, _) in zip(idx[1:], rest, strict=True))]

        built: list[list[tuple[int, Item]]] = await asyncio.gather(
            *(cluster(idx) for idx in groups.values())
        )
        return [it for _, it in sorted((x for g in built for x in g), key=lambda x: x[0])]

    # -- scoring

    async def solve(self, item: Item, client: EndpointClient) -> Sample:
        assert isinstance(item.prompt, list)
        out = await client.chat(item.prompt, max_tokens=self.params.max_tokens)
        universe = list(item.metadata.get("universe") or item.expected)
        score = None if out.error else credit(out.text if out.ok else "", item.expected, universe)
        return Sample(
            suite=self.name,
            item_id=item.id,
            endpoint="",
            output=out.text,
            score=score,
            prompt_tokens=out.prompt_tokens,
            completion_tokens=out.completion_tokens,
            latency_s=out.latency_s,
            error=out.error,
            data={
                "cluster": item.cluster,
                "expected": item.expected,
                "named": named(out.text, universe)[: len(item.expected)] if out.ok else [],
                **{
                    k: item.metadata[k]
                    for k in ("context_length", "context_tokens", "language", "depth", "task")
                },
            },
        )

    # -- analysis

    def slice_of(self, sample: Sample) -> dict[str, str]:
        length, lang = sample.data.get("context_length"), sample.data.get("language")
        if length is None or lang is None:
            return {}
        out = {
            "length": f"{length} tokens",
            "language": str(lang),
            "length × language": f"{length} tokens, {lang}",
        }
        depth = sample.data.get("depth")
        if depth is not None:
            out["depth"] = f"depth {float(depth):g}"
        return out

    def analyze(
        self,
        baseline: list[Sample],
        candidate: list[Sample],
        *,
        provenance: tuple[Provenance, Provenance] | None = None,
    ) -> Analysis:
        on_length = self.gate_bound and self.gate.metric == "effective_length"
        analysis = paired_scores(baseline, candidate, slicer=None if on_length else self.slice_of)
        base = {(s.item_id, s.repeat): s for s in baseline}
        lengths: list[int] = []
        langs: list[str] = []
        for key in analysis.keys or []:
            item_id, _, rep = key.partition("#")
            s = base[(item_id, int(rep or 0))]
            lengths.append(int(s.data["context_length"]))
            langs.append(str(s.data.get("language", "en")))
        ratio = self.params.effective_ratio
        details: dict[str, Any] = {
            "task": self.params.task,
            "by_length": by_length(lengths, langs, analysis.baseline, analysis.candidate),
            "effective_length": {
                "ratio": ratio,
                **_effective(lengths, analysis.baseline, analysis.candidate, ratio),
                "by_language": {
                    lang: _effective(
                        [x for x, g in zip(lengths, langs, strict=True) if g == lang],
                        [v for v, g in zip(analysis.baseline, langs, strict=True) if g == lang],
                        [v for v, g in zip(analysis.candidate, langs, strict=True) if g == lang],
                        ratio,
                    )
                    for lang in sorted(set(langs))
                },
            },
        }
        analysis.details = {**analysis.details, **details}
        # Every task scores a share of what it asked for (right or wrong, or RULER's partial
        # credit), so an endpoint against itself can pass once enough pairs agree exactly.
        analysis.value_range = (0.0, 1.0)
        if on_length:
            clusters = analysis.clusters or [str(i) for i in range(len(lengths))]
            analysis.gate_test = partial(
                effective_length_gate, lengths, analysis.baseline, analysis.candidate, clusters,
                ratio,
            )
        return analysis

    # -- presentation

    @classmethod
    def slice_label(cls, data: dict[str, Any]) -> str | None:
        depth = data.get("depth")
        where = "" if depth is None else f" @ depth {depth}"
        return f"{data.get('context_length')} tokens, {data.get('language')}{where}"

    @classmethod
    def findings(cls, entry: dict[str, Any]) -> list[Finding]:
        d = dict(entry.get("details") or {})
        return [*super().findings(entry), *_length_findings(d, entry.get("verdict"))]

    @classmethod
    def view_model(cls, view: ViewInput) -> dict[str, Any]:
        # The score by length of both endpoints, from the report entry (no store query).
        rows = [r for r in view.details.get("by_length") or [] if r.get("language") == "all"]
        if not rows:
            return {}
        rows.sort(key=lambda r: r["context_length"])
        chart = Chart(
            "longctx-by-length", "line", "Score by context length (%)",
            labels=[str(r["context_length"]) for r in rows],
            series=[
                {"name": side, "color": side,
                 "data": [round(100 * float(r[side]), 1) for r in rows]}
                for side in ("baseline", "candidate")
            ],
            y_name="%", x_name="tokens",
        )
        return {"charts": [chart.to_dict()]}

    @classmethod
    def headline(cls, entry: dict[str, Any]) -> str | None:
        eff = (entry.get("details") or {}).get("effective_length") or {}
        if "baseline" not in eff:
            return super().headline(entry)
        return f"effective length {_tokens(eff)}"


def by_length(
    lengths: Sequence[int], langs: Sequence[str], b: Sequence[float], c: Sequence[float]
) -> list[dict[str, Any]]:
    """Mean score per (length, language) and per length over all languages, both endpoints."""
    cells: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for length, lang, x, y in zip(lengths, langs, b, c, strict=True):
        cells.setdefault((length, lang), []).append((x, y))
        cells.setdefault((length, "all"), []).append((x, y))
    return [
        {
            "context_length": length,
            "language": lang,
            "n": len(v),
            "baseline": sum(x for x, _ in v) / len(v),
            "candidate": sum(y for _, y in v) / len(v),
        }
        for (length, lang), v in sorted(cells.items())
    ]


def _effective(
    lengths: Sequence[int], b: Sequence[float], c: Sequence[float], ratio: float
) -> dict[str, Any]:
    eb = effective_length(scores_by_length(lengths, b), ratio) if lengths else None
    ec = effective_length(scores_by_length(lengths, c), ratio) if lengths else None
    longest = max(lengths) if lengths else None
    return {
        "baseline": eb,
        "candidate": ec,
        "shift": (ec or 0) - eb if eb is not None else None,
        "longest": longest,
    }


def effective_length_gate(
    lengths: Sequence[int],
    baseline: Sequence[float],
    candidate: Sequence[float],
    clusters: Sequence[str],
    ratio: float,
    gate: ResolvedGate,
    seed: int = 0,
) -> GateOutcome:
    """The optional gate: the effective length's relative shift, by a paired cluster bootstrap
    (``evalsvc.stats.effective_length_test``)."""
    assert gate.margin is not None
    t = effective_length_test(
        lengths, baseline, candidate, clusters, margin=gate.margin, alpha=gate.alpha,
        ratio=ratio, seed=seed,
    )
    verdict: Literal["pass", "fail", "inconclusive"] = (
        "pass" if t.verdict == "pass" else "fail" if t.verdict == "fail" else "inconclusive"
    )
    details: dict[str, Any] = {
        "p_inferiority": t.p_fail,
        "effective_length": {"baseline": t.baseline, "candidate": t.candidate},
        "bootstrap_draws": t.n_boot,
        "censored": t.censored,
    }
    if t.baseline is None:
        details["note"] = "the baseline scores 0 at the shortest length: no effective length"
    return GateOutcome(
        verdict=verdict,
        metric="effective_length",
        baseline=float(t.baseline or 0),
        candidate=float(t.candidate or 0),
        delta=t.shift,
        ci=t.ci,
        p_value=t.p_pass,
        margin=t.margin,
        alpha=t.alpha,
        n=t.n,
        mde=None,
        test="paired cluster bootstrap of the effective-length ratio (percentile)",
        details=details,
    )


def _tokens(eff: dict[str, Any]) -> str:
    b, c, longest = eff.get("baseline"), eff.get("candidate"), eff.get("longest")

    def one(x: Any) -> str:
        if x is None:  # effective_length: the shortest length scores 0
            return "none (0 at the shortest length)"
        return f"≥ {x} tokens" if x == longest else f"{x} tokens"

    return f"{one(b)} → {one(c)}"


def _length_findings(d: dict[str, Any], verdict: Any) -> list[Finding]:
    rows = d.get("by_length") or []
    eff = d.get("effective_length") or {}
    if not rows or "baseline" not in eff:
        return []
    langs = sorted({r["language"] for r in rows} - {"all"})
    lengths = sorted({r["context_length"] for r in rows})
    cell = {(r["context_length"], r["language"]): r for r in rows}
    columns = ["tokens", *langs, *(["all"] if len(langs) > 1 else [])]
    table = []
    for n in lengths:
        row: list[Any] = [n]
        for lang in columns[1:]:
            r = cell.get((n, lang))
            row.append(f"{pct(r['baseline'])} / {pct(r['candidate'])}" if r else "—")
        table.append(row)
    by_lang = eff.get("by_language") or {}
    lines = [
        f"Score by context length and haystack language (baseline / candidate), task "
        f"`{d.get('task')}`:",
        "",
        *markdown_table(columns, table),
        "",
        f"Effective length (longest context keeping ≥ {pct(eff.get('ratio'))} of the shortest "
        f"length's score): {_tokens(eff)}.",
    ]
    if len(by_lang) > 1:
        lines.append(
            "By language: " + "; ".join(f"{lang} {_tokens(v)}" for lang, v in sorted(by_lang.items()))
            + "."
        )
    lines.append("")
    shift = eff.get("shift")
    gated = ((d.get("gate") or {}).get("metric")) == "effective_length"
    severity: Literal["fail", "warn", "info"] = (
        "fail" if gated and verdict == "fail"
        else "warn" if isinstance(shift, (int, float)) and shift < 0
        else "info"
    )
    return [Finding(
        title=f"effective length {_tokens(eff)}",
        markdown=lines,
        severity=severity,
        data={"effective_length": eff, "by_length": rows},
    )]


__all__ = ["LongContextParams", "LongContextSuite", "content_words", "credit", "named", "place"]
