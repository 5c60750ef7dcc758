"""The bundled lm-eval generate task ``evalsvc_gen``: short questions with one number as answer.

Contract: ``gen_docs(seed, n)`` is a pure function; ``evalsvc/suites/catalog/data/lmeval/
evalsvc_gen.jsonl`` is its output for ``SEED`` and ``N`` (a test checks that), so the shipped
data can be regenerated and audited. Questions are written from random numbers: licence-clean
and in no training set. The task (``evalsvc_gen.yaml``) is lm-eval ``generate_until``: the model
writes the answer, lm-eval keeps the first number of it (a regex filter) and scores
``exact_match`` against ``answer``; the ``lmeval`` kind can therefore sample it (a ``sampling:``
block: k lm-eval runs at a temperature), where the loglikelihood task ``evalsvc_mc`` has nothing
to sample.

Regenerate with ``python -m evalsvc.suites.kinds._gen_task evalsvc/suites/catalog/data/lmeval/evalsvc_gen.jsonl``.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SEED = 20261204
N = 40


def _add(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(2, 50), rng.randint(2, 50)
    return f"What is {a} + {b}?", a + b


def _count_on(rng: random.Random) -> tuple[str, int]:
    n = rng.randint(3, 90)
    return f"What number comes right after {n} when counting?", n + 1


def _double(rng: random.Random) -> tuple[str, int]:
    n = rng.randint(2, 40)
    return f"What is twice {n}?", 2 * n


def _largest(rng: random.Random) -> tuple[str, int]:
    nums = rng.sample(range(10, 100), 4)
    return f"Which is the largest of these numbers: {', '.join(map(str, nums))}?", max(nums)


_FAMILIES: dict[str, Callable[[random.Random], tuple[str, int]]] = {
    "add": _add,
    "count_on": _count_on,
    "double": _double,
    "largest": _largest,
}


def gen_docs(seed: int = SEED, n: int = N) -> list[dict[str, Any]]:
    """``n`` documents ``{id, family, question, answer}`` (answer: the number as text),
    families in rotation."""
    names = sorted(_FAMILIES)
    docs = []
    for i in range(n):
        family = names[i % len(names)]
        question, answer = _FAMILIES[family](random.Random(f"{seed}:{i}"))
        docs.append({"id": i, "family": family, "question": question, "answer": str(answer)})
    return docs


def write_jsonl(path: Path, docs: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(d, sort_keys=True) + "\n" for d in docs), encoding="utf-8")


if __name__ == "__main__":  # regenerate the bundled data
    write_jsonl(Path(sys.argv[1]), gen_docs())
