"""The needle length search: galloping from a neighbour's answer finds what a full search finds.

The tokenizer here is a whitespace splitter behind the same ``tokenize`` call the endpoint
client offers: the search only needs a monotone count, and this keeps the check exact and
instant. The real tokenizer is exercised by the endpoint tests (exact context lengths).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evalsvc.suites.kinds.needle import _TEMPLATE, _fit, _insert, _paragraphs


class WordTokenizer:
    def __init__(self) -> None:
        self.calls = 0

    async def tokenize(self, text: str) -> list[int]:
        self.calls += 1
        return list(range(len(text.split())))


HAYSTACK = "\n\n".join(_paragraphs() * 3)


def fit(length: int, depth: float, start: int | None = None) -> tuple[Any, int]:
    tok = WordTokenizer()
    out = asyncio.run(
        _fit(tok, HAYSTACK, ["The magic number is 7."], depth, length, "Which?", "numbers",
             start=start)
    )
    return out, tok.calls


@pytest.mark.parametrize("length", [300, 1000, 2500])
@pytest.mark.parametrize("depth", [0.1, 0.5, 0.9])
def test_gallop_matches_full_search(length: int, depth: float) -> None:
    (message, n, chars), full_calls = fit(length, depth)
    assert n <= length and len(message.split()) == n
    # The longest prefix that fits: a few more characters push the message over the length.
    longer = _TEMPLATE.format(
        type_plural="numbers",
        context=_insert(HAYSTACK[: chars + 12], ["The magic number is 7."], depth),
        question="Which?",
    )
    assert len(longer.split()) > length
    for start in (chars, chars - 37, chars + 41, chars // 2, 0, len(HAYSTACK)):
        (m2, n2, c2), _ = fit(length, depth, start=start)
        assert (m2, n2, c2) == (message, n, chars), start
    (_, _, _), near_calls = fit(length, depth, start=chars + 5)
    assert near_calls < full_calls  # the point of the neighbour's hint


def test_too_short_a_length_is_refused() -> None:
    with pytest.raises(ValueError, match="too short"):
        fit(5, 0.5)
    with pytest.raises(ValueError, match="too short"):
        fit(5, 0.5, start=400)


def test_needle_lengths_past_the_context_are_refused_before_any_item_unless_calibrating() -> None:
    """``needle-long-context`` (32k-128k) on a 4,096-token server: a fixed-length run is refused
    by the preflight, naming the lengths that fit (it failed inside planning before); with
    calibration the pilot's ladder is sized to the context, so the preflight leaves it alone."""
    from evalsvc.domain import Provenance
    from evalsvc.runner._common import CapabilityError
    from evalsvc.runner._runner import check_preflight
    from evalsvc.suites import resolve
    from evalsvc.suites.kinds.needle import NeedleSuite

    (suite,) = resolve(["needle-long-context"])
    assert isinstance(suite, NeedleSuite)
    slot = Provenance(max_context=4096)
    (problem,) = asyncio.run(suite.preflight(slot))
    assert "lengths [32768, 65536, 131072] do not fit the endpoint's max context of 4096" in problem
    assert "lengths up to 3968 fit" in problem
    assert asyncio.run(suite.preflight(Provenance())) == []
    # The catalog suite calibrates by default: not refused; with --no-calibrate it is.
    asyncio.run(check_preflight([suite], slot))
    with pytest.raises(CapabilityError, match="refused before sending any item"):
        asyncio.run(check_preflight([suite], slot, calibrate=False))
    # Its ladder on that server: lengths that fit.
    assert max(r.value for r in suite.difficulty_ladder(slot)) <= 3968
    (smoke,) = resolve(["needle-smoke"])
    assert asyncio.run(smoke.preflight(slot)) == []
