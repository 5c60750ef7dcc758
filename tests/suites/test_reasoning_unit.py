"""Pure parts of the reasoning kind: seeded generation, answer extraction, allocation."""

from __future__ import annotations

import asyncio

import pytest

from evalsvc.domain import Provenance, Sample
from evalsvc.suites import SuiteSpec
from evalsvc.suites.kinds._extract import extract_choice, extract_number
from evalsvc.suites.kinds.reasoning import (
    GENERATORS,
    ReasoningSuite,
    _allocate,
    by_task,
    extract,
    generate,
)


def _plan(seed: int, **params: object) -> list:
    suite = ReasoningSuite(SuiteSpec(name="r", kind="reasoning", seed=seed, params=params))
    return asyncio.run(suite.plan(None, Provenance()))  # type: ignore[arg-type]  # plan sends nothing


def test_same_seed_same_items_and_different_seed_differs() -> None:
    a, b, c = _plan(3, n=40), _plan(3, n=40), _plan(4, n=40)
    assert [i.model_dump() for i in a] == [i.model_dump() for i in b]
    assert [i.prompt for i in a] != [i.prompt for i in c]
    assert len({i.id for i in a}) == 40


def test_adding_a_task_keeps_the_other_tasks_items() -> None:
    one = [{"family": "arithmetic", "level": 2}]
    two = one + [{"family": "lists", "level": 1}]
    a = {i.id: i.prompt for i in _plan(5, n=10, tasks=one)}
    b = {i.id: i.prompt for i in _plan(5, n=20, tasks=two)}
    assert all(b[k] == v for k, v in a.items())


@pytest.mark.parametrize("family", sorted(GENERATORS))
@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_every_problem_has_its_answer_checkable(family: str, level: int) -> None:
    for k in range(30):
        p = generate(9, family, level, k)
        assert p.answer
        if p.answer_type == "number":
            assert int(p.answer) >= 0
        else:
            assert p.answer in {v.lower() for v in p.vocabulary}
        # The canonical answer, stated plainly, is extracted back.
        assert extract(p.answer_type, f"The answer is {p.answer}.", list(p.vocabulary)) == p.answer


def test_arithmetic_answer_matches_the_story() -> None:
    # Recompute the total from the generated text: a start value, then +b / -b per step.
    import re

    for k in range(50):
        p = generate(1, "arithmetic", 3, k)
        numbers = [int(x) for x in re.findall(r"\d+", p.question)]
        total = numbers[0]
        sentences = p.question.split(". ")[1:]
        signs = [
            -1 if re.search(r"gives \d+ \w+ to|loses|takes|get off|spends|pays", s) else 1
            for s in sentences
            if re.search(r"\d", s)
        ]
        for sign, b in zip(signs, numbers[1:], strict=True):
            total += sign * b
        assert str(total) == p.answer, p.question


def test_variable_tracking_answer_is_the_chain_value() -> None:
    p = generate(2, "variable_tracking", 3, 0)
    stmts = dict(
        s.split(" = ")
        for s in p.question.split("?")[0].rsplit(" What", 1)[0].rstrip(".").split(". ")
    )
    target = p.question.split("value of ")[1].split("?")[0]
    value = target
    while not value.isdigit():
        value = stmts[value]
    assert value == p.answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7", "7"),
        ("The answer is 12.", "12"),
        ("Ava has 3 apples and buys 4, so she has 7 apples.", "7"),
        ("Answer: 1,250", "1250"),
        ("The result is 8.0", "8"),
        ("There are 5 + 3 = 8 marbles. The answer is 8. I hope 2 helps", "8"),  # first after marker
        ("no number here", None),
        ("-4", "-4"),
    ],
)
def test_extract_number(text: str, expected: str | None) -> None:
    assert extract_number(text) == expected


def test_extract_choice_takes_the_last_vocabulary_word() -> None:
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    assert extract_choice("Today is Monday, so tomorrow is Tuesday.", days) == "tuesday"
    assert extract_choice("The answer is Friday. Not Monday? No.", days) == "friday"
    assert extract_choice("Answer: 42 then Sunday", days) == "sunday"
    assert extract_choice("Saturday", days) == "saturday"
    assert extract_choice("Mondays are hard", days) is None  # whole words only
    assert extract_choice("apple pie", ["pineapple", "apple"]) == "apple"


def test_allocation_follows_weights() -> None:
    assert _allocate(10, [1, 1]) == [5, 5]
    assert _allocate(7, [1, 1, 1]) == [3, 2, 2]
    assert _allocate(12, [1, 2, 3]) == [2, 4, 6]
    assert sum(_allocate(101, [3, 1, 1, 2])) == 101


def test_by_task_pairs_and_counts_flips() -> None:
    def s(item: str, score: float | None, fam: str = "lists", level: int = 1) -> Sample:
        return Sample(
            suite="r", item_id=item, endpoint="x", score=score, data={"family": fam, "level": level}
        )

    base = [s("a", 1), s("b", 0), s("c", 1), s("d", 1, "dates")]
    cand = [s("a", 0), s("b", 1), s("c", 1), s("d", None, "dates")]
    rows = by_task(base, cand)
    assert rows == [
        {
            "family": "lists",
            "level": 1,
            "n": 3,
            "baseline": 2 / 3,
            "candidate": 2 / 3,
            "correct_to_incorrect": 1,
            "incorrect_to_correct": 1,
        }
    ]


def _choice_by_regex(text: str, vocabulary: list[str]) -> str | None:
    """The alternation rule the word path replaces: ``\\b(longest|...|shortest)\\b``."""
    import re

    from evalsvc.suites.kinds._extract import answer_span

    words = sorted({w.lower() for w in vocabulary}, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\b", re.IGNORECASE)
    span = answer_span(text)
    if span is not None and (found := pattern.findall(span)):
        return found[0].lower()
    found = pattern.findall(text)
    return found[-1].lower() if found else None


def test_extract_choice_of_plain_words_equals_the_alternation_rule() -> None:
    """Plain-word vocabularies are matched by splitting into words; the result must equal the
    regex alternation's on every text (prefixes of each other, case, punctuation, markers)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    alphabet = st.sampled_from(["sun", "Sunday", "day", "mon", "Monday", "apple", "pie",
                                "answer is", "Answer:", " ", ",", ".", "'s", "-", "_", "x2",
                                "SUN", "ünter", "ü"])
    vocab = st.lists(st.sampled_from(["sun", "sunday", "day", "monday", "apple", "pie", "x2",
                                      "ünter", "mon"]), min_size=1, max_size=5)

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(st.lists(alphabet, max_size=14).map("".join), vocab)
    def check(text: str, words: list[str]) -> None:
        assert extract_choice(text, words) == _choice_by_regex(text, words)

    check()
    # Vocabularies that are not plain words keep the regex path.
    assert extract_choice("I like ice cream.", ["ice cream", "tea"]) == "ice cream"


def test_an_answer_is_read_from_its_end_so_a_huge_one_costs_what_a_short_one_does() -> None:
    # An endpoint that ignores max_tokens: 8 MB of working, then the answer (issue 48). Read
    # from its last 65,536 characters, where the rules look, it scores as the short one does.
    padding = "word, 12 the. " * 600_000
    assert extract_number(f"The answer is: 7. {padding} so the answer is 42.") == "42"
    assert extract_choice(f"{padding} The answer is Tuesday.", ["monday", "tuesday"]) == "tuesday"
    # A marker further back than that is not seen: the last number in the read part wins.
    assert extract_number(f"The answer is 7. {padding}") == "12"
