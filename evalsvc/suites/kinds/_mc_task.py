"""The bundled lm-eval task ``evalsvc_mc``: procedurally generated multiple-choice questions.

Contract: ``mc_docs(seed, n)`` is a pure function; ``evalsvc/suites/catalog/data/lmeval/evalsvc_mc.jsonl`` is its
output for ``SEED`` and ``N`` (a test checks that), so the shipped data can be regenerated and
audited. The questions are written from project word lists and random numbers: licence-clean
and in no training set. Scoring is lm-eval's loglikelihood multiple choice (``acc``): the choice
whose continuation the model finds most likely wins, a route that gives a 135M model a signal
where free generation gives none (docs/local-endpoints.md).

Regenerate with ``python -m evalsvc.suites.kinds._mc_task evalsvc/suites/catalog/data/lmeval/evalsvc_mc.jsonl``.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SEED = 20261129
N = 80

_OPPOSITES = (
    ("hot", "cold"),
    ("big", "small"),
    ("up", "down"),
    ("fast", "slow"),
    ("happy", "sad"),
    ("light", "dark"),
    ("open", "closed"),
    ("early", "late"),
    ("full", "empty"),
    ("wet", "dry"),
    ("long", "short"),
    ("old", "young"),
    ("high", "low"),
    ("hard", "soft"),
    ("rich", "poor"),
    ("strong", "weak"),
    ("thick", "thin"),
    ("loud", "quiet"),
    ("clean", "dirty"),
    ("first", "last"),
)
_PLURALS = (
    ("child", "children"),
    ("mouse", "mice"),
    ("foot", "feet"),
    ("tooth", "teeth"),
    ("goose", "geese"),
    ("man", "men"),
    ("woman", "women"),
    ("person", "people"),
    ("box", "boxes"),
    ("city", "cities"),
    ("baby", "babies"),
    ("leaf", "leaves"),
    ("knife", "knives"),
    ("wolf", "wolves"),
    ("bus", "buses"),
    ("church", "churches"),
)
_CATEGORIES = {
    "an animal": ("horse", "rabbit", "lion", "sheep", "eagle", "dolphin", "mouse", "tiger"),
    "a fruit": ("banana", "cherry", "grape", "pear", "peach", "lemon", "mango", "plum"),
    "a colour": ("red", "green", "blue", "yellow", "purple", "orange", "brown", "pink"),
    "a tool": ("hammer", "saw", "wrench", "drill", "chisel", "shovel", "rake", "pliers"),
    "a vehicle": ("car", "bus", "truck", "bicycle", "train", "boat", "tractor", "van"),
}


def _plural(rng: random.Random) -> tuple[str, list[str], int]:
    word, right = rng.choice(_PLURALS)
    # Wrong forms a learner would write: regular -s / -es, and the right form's -s doubled.
    wrong = [f"{word}s", f"{word}es", f"{right}s"]
    if right in wrong:
        wrong.remove(right)
        wrong.append(f"{word}en")
    return (f'What is the plural of "{word}"?', *_shuffle(rng, right, wrong))


def _count_on(rng: random.Random) -> tuple[str, list[str], int]:
    n = rng.randint(3, 60)
    right = n + 1
    wrong = [n - 1, n + 2, n + 10]
    return (
        f"What number comes right after {n} when counting?",
        *_shuffle(rng, str(right), [str(w) for w in wrong]),
    )


def _opposite(rng: random.Random) -> tuple[str, list[str], int]:
    pair = rng.choice(_OPPOSITES)
    word, right = pair if rng.random() < 0.5 else pair[::-1]
    others = [w for p in _OPPOSITES if p != pair for w in p]
    return (f'What is the opposite of "{word}"?', *_shuffle(rng, right, rng.sample(others, 3)))


def _category(rng: random.Random) -> tuple[str, list[str], int]:
    cat, *rest = rng.sample(sorted(_CATEGORIES), 4)
    right = rng.choice(_CATEGORIES[cat])
    wrong = [rng.choice(_CATEGORIES[c]) for c in rest]
    return (f"Which of these is {cat}?", *_shuffle(rng, right, wrong))


def _largest(rng: random.Random) -> tuple[str, list[str], int]:
    nums = rng.sample(range(10, 100), 4)
    right = max(nums)
    listed = ", ".join(map(str, nums))
    return (
        f"Which is the largest of these numbers: {listed}?",
        *_shuffle(rng, str(right), [str(x) for x in nums if x != right]),
    )


def _shuffle(rng: random.Random, right: str, wrong: list[str]) -> tuple[list[str], int]:
    choices = [right, *wrong]
    rng.shuffle(choices)
    return choices, choices.index(right)


_FAMILIES: dict[str, Callable[[random.Random], tuple[str, list[str], int]]] = {
    "count_on": _count_on,
    "plural": _plural,
    "opposite": _opposite,
    "category": _category,
    "largest": _largest,
}


def mc_docs(seed: int = SEED, n: int = N) -> list[dict[str, Any]]:
    """``n`` documents ``{id, family, question, choices, answer}``, families in rotation."""
    names = sorted(_FAMILIES)
    docs = []
    for i in range(n):
        family = names[i % len(names)]
        question, choices, answer = _FAMILIES[family](random.Random(f"{seed}:{i}"))
        docs.append(
            {"id": i, "family": family, "question": question, "choices": choices, "answer": answer}
        )
    return docs


def write_jsonl(path: Path, docs: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(d, sort_keys=True) + "\n" for d in docs), encoding="utf-8")


if __name__ == "__main__":  # regenerate the bundled data
    write_jsonl(Path(sys.argv[1]), mc_docs())
