"""What one sample may store: its output and its ``data`` bounded alike (docs/security.md,
"Hostile endpoints").

Contract: ``bound_sample(sample, cap)`` is called by the runner on every scored sample before it
is collected for the gate and handed to the sink (``_cap_output``), so what the views and the
analysis read is what the store holds. ``cap`` is ``EVALSVC_MAX_OUTPUT_CHARS``.

- ``output`` keeps its first ``cap`` characters; ``data.output_truncated`` and
  ``data.output_chars`` (the original length) say so. The score was computed on the whole
  answer.
- ``data``: every string keeps its first ``cap`` characters, nesting is kept to
  ``MAX_DATA_DEPTH`` levels (a deeper part is replaced by a note), and every string (keys too)
  is storable: lone surrogates (the store writes UTF-8) and NUL characters (PostgreSQL's text
  cannot hold one: one such answer ended a run) become U+FFFD. What was cut is
  listed in ``data.data_truncated`` (JSON paths, the first ``MAX_LISTED``). Lists are never
  shortened here: a kind's analysis may need every entry (drift's per-position logprobs), so
  the kinds bound what they keep from an answer at the source (``toolcalls`` keeps 16 calls,
  ``_jsonschema`` parses at most 64 KiB); this is the backstop for the rest (an extracted
  answer, a reference, a trace).
- ``output`` and ``error`` are storable too.

Nothing is walked for a sample whose ``data`` serialises short and clean (the common case):
one ``json.dumps`` in C and two regular-expression scans decide.
"""

from __future__ import annotations

import json
import re
from typing import Any

from evalsvc.domain import Sample
from evalsvc.endpoints import unicode_text

#: Nesting kept in a sample's ``data`` (a kind's own records nest a few levels; parsed tool
#: arguments at most ``_jsonschema.MAX_JSON_DEPTH``).
MAX_DATA_DEPTH = 64
#: Paths listed in ``data.data_truncated``.
MAX_LISTED = 10
_DEEP_NOTE = f"[nested deeper than {MAX_DATA_DEPTH} levels: not kept]"

#: ASCII JSON (non-ASCII and lone surrogates as \u escapes), without the cycle check: a sample
#: is a tree, and a cycle recurses past the limit, which is read as "walk it" like any depth.
_encode = json.JSONEncoder(check_circular=False).encode
# A surrogate as ``json.dumps`` escapes it: a pair is a high escape then a low one.
_SURROGATE = re.compile(r"\\ud[89a-f][0-9a-f]{2}")


def bound_sample(sample: Sample, cap: int) -> None:
    """Bound ``sample`` in place (the module contract); ``cap`` ≤ 0 leaves lengths alone."""
    if cap > 0 and len(sample.output) > cap:
        sample.data = {**sample.data, "output_truncated": True, "output_chars": len(sample.output)}
        sample.output = sample.output[:cap]
    sample.output = _storable(sample.output)
    if sample.error is not None:
        sample.error = _storable(sample.error)
    if _needs_walk(sample.data, cap):
        cut: list[str] = []
        data = _bounded(sample.data, cap, "$", 0, cut)
        assert isinstance(data, dict)
        if cut:
            data["data_truncated"] = cut[:MAX_LISTED]
        sample.data = data


def _needs_walk(data: dict[str, Any], cap: int) -> bool:
    try:
        text = _encode(data)
    except RecursionError:
        return True
    except (TypeError, ValueError):
        return False  # not JSON at all: the sink says so, as it did before
    if "\\u0000" in text or _has_lone_surrogate(text):
        return True
    return cap > 0 and len(text) > cap and _has_long_text(text, cap)


def _storable(text: str) -> str:
    """``text`` as the store can write it: valid Unicode, no NUL (both as U+FFFD)."""
    text = unicode_text(text)
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _has_lone_surrogate(text: str) -> bool:
    """Whether the escaped JSON text holds a surrogate escape that is not half of a pair (a
    literal backslash-u in a string may read as one: that only costs a walk)."""
    pending = -1  # where the low half of the last high one must start
    for m in _SURROGATE.finditer(text):
        high = m.group()[3] in "89ab"
        if pending >= 0 and (high or m.start() != pending):
            return True
        if high:
            pending = m.end()
        elif pending < 0:
            return True
        else:
            pending = -1
    return pending >= 0


def _has_long_text(text: str, cap: int) -> bool:
    """Whether the JSON text may hold a string of more than ``cap`` characters. Escaped
    backslashes and quotes are blanked (same length) so that every quote left delimits a
    string; a run between two quotes longer than ``cap`` may be one (an escaped string is at
    least as long as the string: it over-counts, never under-counts, and that costs a walk)."""
    plain = text.replace("\\\\", "__").replace('\\"', "__")
    return max(map(len, plain.split('"'))) > cap


def _bounded(value: Any, cap: int, path: str, depth: int, cut: list[str]) -> Any:
    if isinstance(value, str):
        if cap > 0 and len(value) > cap:
            cut.append(path)
            value = value[:cap]
        return _storable(value)
    if isinstance(value, dict | list | tuple) and depth >= MAX_DATA_DEPTH:
        cut.append(path)
        return _DEEP_NOTE
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = _storable(str(key))
            out[name[:cap] if cap > 0 else name] = _bounded(
                item, cap, f"{path}.{name[:40]}", depth + 1, cut
            )
        return out
    if isinstance(value, list | tuple):
        return [_bounded(v, cap, f"{path}[{i}]", depth + 1, cut) for i, v in enumerate(value)]
    return value
