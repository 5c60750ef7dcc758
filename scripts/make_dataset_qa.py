"""Generate the catalog's small QA dataset (``evalsvc/suites/catalog/data/dataset/qa.jsonl``).

Every row is generated here from a fixed seed, with its answer computed, not copied from any
benchmark: arithmetic (addition, subtraction, multiplication), counting (the number after or
before N) and unit facts (minutes in N hours, legs of N spiders...). Every answer is a number,
so the ``dataset-qa`` suite scores it with the ``numeric`` scorer. Columns: ``id``,
``category``, ``difficulty`` (``easy``: single-digit operands or small counts; ``hard``: two
digits), ``question``, ``answer`` (a string).

Run from the repository root: ``python scripts/make_dataset_qa.py`` (rewrites the file; the
output is byte-for-byte the same on every run).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

SEED = 20261201
OUT = Path(__file__).resolve().parent.parent / "evalsvc/suites/catalog/data/dataset/qa.jsonl"

# (unit asked for, unit given, factor): "How many <a> are in <n> <b>?" = n * factor.
_UNITS = [
    ("minutes", "hours", 60),
    ("seconds", "minutes", 60),
    ("days", "weeks", 7),
    ("months", "years", 12),
    ("hours", "days", 24),
    ("centimeters", "meters", 100),
    ("grams", "kilograms", 1000),
    ("eggs", "dozen boxes of eggs", 12),
]
# (animal, legs): "How many legs do <n> <animal> have?".
_LEGS = [("dogs", 4), ("spiders", 8), ("birds", 2), ("cats", 4), ("ants", 6), ("horses", 4)]


def _addition(rng: random.Random, hard: bool) -> tuple[str, int]:
    lo, hi = (10, 99) if hard else (1, 9)
    a, b = rng.randint(lo, hi), rng.randint(lo, hi)
    return f"What is {a} + {b}?", a + b


def _subtraction(rng: random.Random, hard: bool) -> tuple[str, int]:
    lo, hi = (10, 99) if hard else (1, 9)
    a, b = sorted((rng.randint(lo, hi), rng.randint(lo, hi)), reverse=True)
    return f"What is {a} - {b}?", a - b


def _multiplication(rng: random.Random, hard: bool) -> tuple[str, int]:
    a, b = rng.randint(2, 9), rng.randint(11, 30) if hard else rng.randint(2, 9)
    return f"What is {a} times {b}?", a * b


def _counting(rng: random.Random, hard: bool) -> tuple[str, int]:
    n = rng.randint(100, 999) if hard else rng.randint(2, 50)
    if rng.random() < 0.5:
        return f"What number comes right after {n}?", n + 1
    return f"What number comes right before {n}?", n - 1


def _units(rng: random.Random, hard: bool) -> tuple[str, int]:
    n = rng.randint(2, 12) if hard else rng.randint(2, 4)
    if rng.random() < 0.5:
        animal, legs = rng.choice(_LEGS)
        return f"How many legs do {n} {animal} have in total?", n * legs
    asked, given, factor = rng.choice(_UNITS)
    return f"How many {asked} are in {n} {given}?", n * factor


_CATEGORIES: list[tuple[str, Callable[[random.Random, bool], tuple[str, int]], int]] = [
    ("addition", _addition, 70),
    ("subtraction", _subtraction, 60),
    ("multiplication", _multiplication, 50),
    ("counting", _counting, 60),
    ("units", _units, 60),
]


def rows() -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for name, make, count in _CATEGORIES:
        rng = random.Random(f"{SEED}:{name}")
        k = 0
        while k < count:
            hard = k % 2 == 1
            question, answer = make(rng, hard)
            if question in seen:  # a duplicate question would be one item counted twice
                continue
            seen.add(question)
            out.append(
                {
                    "id": f"{name}-{k:03d}",
                    "category": name,
                    "difficulty": "hard" if hard else "easy",
                    "question": question,
                    "answer": str(answer),
                }
            )
            k += 1
    return out


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as fh:
        for row in rows():
            fh.write(json.dumps(row, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({len(rows())} rows)")


if __name__ == "__main__":
    main()
