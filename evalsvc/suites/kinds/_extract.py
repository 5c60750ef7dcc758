"""Answer extraction shared by the generative kinds (reasoning).

Contract: pure functions over the model's output text; no I/O.

Method: the "flexible extract" of GSM8K-style harnesses (the final number in the output), made
more robust for chatty small models: when the output states its answer explicitly ("the answer
is X", "Answer: X", "result = X"), the *first* candidate after the last such marker wins (as
GSM8K's strict "#### X" match does); otherwise the *last* candidate of the whole output wins,
because models put the conclusion after the working.

Bounded work: an answer is read from its last ``MAX_READ_CHARS`` characters, where both rules
look (after the last marker, the last candidate), so an endpoint that ignores ``max_tokens``
and sends 8 MB costs what 64 KiB does (it cost seconds of event-loop CPU per answer). An answer
longer than that whose marker is further back is read as if it had none (docs/security.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

# "answer is", "answer:", "Final answer -", "result is" ... (case-insensitive). The last match
# wins: models that restate the question first ("the answer to how many... The answer is 7").
_MARKER = re.compile(r"(?:final\s+answer|answer|result)\s*(?:is|:|=|-)\s*", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


#: Characters read from the end of an answer (the kinds' answers are a few hundred tokens).
MAX_READ_CHARS = 65_536


def answer_span(text: str) -> str | None:
    """The part of ``text`` after its last explicit answer marker, or None without a marker
    (in its last ``MAX_READ_CHARS`` characters)."""
    text = text[-MAX_READ_CHARS:]
    last = None
    for m in _MARKER.finditer(text):
        last = m
    if last is not None and text[last.end() :].strip():
        return text[last.end() :]
    return None


def extract_number(text: str) -> str | None:
    """The committed number, normalised (thousands separators and a ``.0`` dropped)."""
    text = text[-MAX_READ_CHARS:]
    span = answer_span(text)
    after = _NUMBER.findall(span) if span is not None else []
    matches = after[:1] or _NUMBER.findall(text)[-1:]
    if not matches:
        return None
    raw = str(matches[0]).replace(",", "").rstrip(".")
    if re.fullmatch(r"-?\d+\.0+", raw):
        raw = raw.split(".")[0]
    return raw


@lru_cache(maxsize=1024)
def _choice_pattern(words: tuple[str, ...]) -> re.Pattern[str]:
    # A suite's vocabularies repeat (weekdays, a family's word lists): compiled once each, not
    # once per answer (a zero-latency run scores thousands of answers a second).
    return re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + r")\b", re.IGNORECASE)


_WORD = re.compile(r"\w+")


def _word_choices(text: str, words: frozenset[str]) -> list[str]:
    # For a vocabulary of plain words, ``\b(w1|w2|...)\b`` matches exactly the maximal \w runs
    # that equal one of them, so splitting into words finds the same matches in the same order
    # without compiling a pattern per vocabulary (the ``lists`` family's differ per item: the
    # compile was 4% of the event loop's time against a zero-latency endpoint).
    return [t for t in _WORD.findall(text.lower()) if t in words]


def extract_choice(text: str, vocabulary: Iterable[str]) -> str | None:
    """The committed vocabulary entry (whole words, case-insensitive), by the same rule.

    The vocabulary is the closed set an answer may come from (weekday names, the words of a
    list), so a stray word of the model's prose is never taken for an answer.
    """
    lowered = {w.lower() for w in vocabulary}
    if not lowered:
        return None
    text = text[-MAX_READ_CHARS:]
    if all(_WORD.fullmatch(w) for w in lowered):
        plain = frozenset(lowered)
        span = answer_span(text)
        if span is not None and (hits := _word_choices(span, plain)):
            return hits[0]
        hits = _word_choices(text, plain)
        return hits[-1] if hits else None
    words = tuple(sorted(lowered, key=len, reverse=True))
    pattern = _choice_pattern(words)
    span = answer_span(text)
    if span is not None and (found := pattern.findall(span)):
        return str(found[0]).lower()
    found = pattern.findall(text)
    return str(found[-1]).lower() if found else None
