"""Degeneration signals of one free-text answer, for reference-free replays (``compare: quality``).

Contract: pure functions over an answer's text (and its finish reason when the endpoint gave
one); no model, no network. :func:`signals` returns the answer's record (stored in the sample's
``data["degeneration"]``): which of the signals below it shows, and ``degenerate``, whether any
of the gated ones does. Each signal is a property of the answer alone, so it is computed the same
way on the baseline's answer and on the candidate's, and the gate compares the two shares per
item (paired): a model whose answers the baseline's own pass shows as degenerate as often is not
penalized for it.

Gated signals (any one makes the answer ``degenerate``):

- ``empty``: no letter or digit at all (an empty or whitespace/punctuation-only answer);
- ``loop``: the answer repeats itself: seq-rep-3 (the share of repeated word trigrams, Welleck et
  al. 2019, "Neural Text Generation with Unlikelihood Training", arXiv 1908.04319, section 5: the
  measure they gate degeneration on, there seq-rep-4 over continuations) of at least
  ``LOOP_THRESHOLD`` over at least ``LOOP_MIN_WORDS`` words, one non-empty line repeated
  ``LINE_REPEATS`` times or more, or a short span repeated back to back (``abcabcabcabc``, which
  has no word boundaries to count);
- ``leaked``: chat-template or special-token markup in the answer (``<|im_end|>``, ``</s>``,
  ``[INST]``, ``<end_of_turn>``...: the model writing its own template, a sign of a broken
  end-of-turn token);
- ``gibberish``: not language: more than ``GIBBERISH_SHARE`` of its whitespace-separated tokens
  are neither words (letters of any script, with inner apostrophes or hyphens), numbers nor
  arithmetic, or it holds a Unicode replacement character (bytes that decode to nothing).

Reported, not gated: ``truncated`` (the endpoint stopped at the token budget,
``finish_reason: length``): a greedy baseline at a short budget is cut as often as a good
candidate, so the share is compared in the report, with the items where only one side was cut.

What the signals cannot see: an answer that is fluent, on topic and wrong. A degeneration check
that passes is evidence of no more degenerate answers, not of answers that mean the same: that
needs a judge or a reference (``dataset``'s ``compare: quality`` says so in its verdict).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from evalsvc.suites._thinking import leaked_markers

LOOP_N = 3
LOOP_MIN_WORDS = 12
#: Natural text repeats almost no word trigram (Welleck et al. measure seq-rep-4 of 0.006 on
#: human text, 0.4+ on greedy degenerate continuations); 0.3 leaves room for lists and formulas.
LOOP_THRESHOLD = 0.3
LINE_REPEATS = 3
GIBBERISH_SHARE = 0.5
#: Characters of an answer examined (its tail for the loop: a loop runs to the budget).
MAX_CHARS = 4000

_TEMPLATE = re.compile(
    r"</?s>|\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>|<\|?(?:im_start|im_end|eot_id|endoftext)"
    r"\|?>|^\s*(?:###\s*)?(?:Human|Assistant|User)\s*:\s*$",
    re.MULTILINE | re.IGNORECASE,
)
# A span of 2–40 characters repeated four more times back to back (lazy span: the shortest
# period first). Run on a bounded tail, so the backtracking stays small.
_SPAN_REPEAT = re.compile(r"(\S.{1,39}?)\1{4,}", re.DOTALL)
_STRIP = "\"'`“”‘’«»()[]{}<>.,;:!?¿¡…*_~|-–—#"
_WORD = re.compile(r"^[^\W\d_]+(?:['’\-][^\W\d_]+)*$")
_NUMBER = re.compile(r"^[+\-−]?[$€£]?\d[\d,.]*%?$|^[\d+\-−*/×÷=^().,%xX]+$")
# Code and identifiers (``foo(x):``, ``os.path``, ``x9``): not language, not gibberish either.
_CODE = re.compile(r"^[A-Za-z_][\w.]*(?:\([\w.,'\"=\s]*\)?)?[:;,]?$")


def repetition(text: str, n: int = LOOP_N) -> float | None:
    """seq-rep-n: 1 − distinct word n-grams ÷ n-grams (None below ``LOOP_MIN_WORDS`` words)."""
    words = text.lower().split()
    if len(words) < max(LOOP_MIN_WORDS, n + 1):
        return None
    grams = list(zip(*(words[i:] for i in range(n)), strict=False))
    return 1.0 - len(set(grams)) / len(grams)


def _looping(text: str) -> bool:
    rep = repetition(text)
    if rep is not None and rep >= LOOP_THRESHOLD:
        return True
    lines = [ln.strip() for ln in text.splitlines() if len(ln.strip()) >= 4]
    if lines and max(lines.count(ln) for ln in set(lines)) >= LINE_REPEATS:
        return True
    # A rule of dashes or equals signs repeats too: only a span with a letter or digit counts.
    return any(any(ch.isalnum() for ch in m.group(1)) for m in _SPAN_REPEAT.finditer(text[-600:]))


def _gibberish(text: str) -> bool:
    if "\ufffd" in text:
        return True
    tokens = [t.strip(_STRIP) for t in text.split()]
    tokens = [t for t in tokens if t]
    if len(tokens) < 3:
        return False
    odd = sum(not (_WORD.match(t) or _NUMBER.match(t) or _CODE.match(t)) or _scripts(t) > 1
              for t in tokens)
    return odd / len(tokens) > GIBBERISH_SHARE


def _scripts(token: str) -> int:
    """How many scripts the token's letters come from (LATIN, CYRILLIC, CJK...): a word mixes
    none; decoding that has lost its tokens does (``Ñаbc``)."""
    names = set()
    for ch in token:
        if ch.isalpha():
            names.add(unicodedata.name(ch, "?").split(" ")[0])
    return len(names)


def signals(text: str, finish_reason: str | None = None) -> dict[str, Any]:
    """The answer's degeneration record (module docstring)."""
    tail = (text or "")[-MAX_CHARS:]
    empty = not any(ch.isalnum() for ch in tail)
    leaked = leaked_markers(tail) + [m.group(0).strip() for m in _TEMPLATE.finditer(tail)][:5]
    record: dict[str, Any] = {
        "empty": empty,
        "loop": (not empty) and _looping(tail),
        "leaked": sorted(set(leaked))[:5],
        "gibberish": (not empty) and _gibberish(tail),
        "truncated": finish_reason == "length",
    }
    record["degenerate"] = bool(
        record["empty"] or record["loop"] or record["leaked"] or record["gibberish"]
    )
    return record


SIGNALS = ("empty", "loop", "leaked", "gibberish")
"""The gated signals, in the order the report lists them."""


def tally(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """Per signal, the baseline's and the candidate's count over the paired items, and the
    items only one side shows (``only_candidate``, ``only_baseline``); truncation the same."""
    out: dict[str, Any] = {"n": len(pairs)}
    for key in (*SIGNALS, "truncated", "degenerate"):
        def hit(r: dict[str, Any], key: str = key) -> bool:
            return bool(r.get(key))

        out[key] = {
            "baseline": sum(hit(b) for b, _ in pairs),
            "candidate": sum(hit(c) for _, c in pairs),
            "only_candidate": sum(hit(c) and not hit(b) for b, c in pairs),
            "only_baseline": sum(hit(b) and not hit(c) for b, c in pairs),
        }
    return out
