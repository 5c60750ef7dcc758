"""JSON-schema helpers shared by the ``toolcalls`` and ``structured`` kinds.

Contract: pure functions, no I/O. Validation is the ``jsonschema`` package's (the validator
class the schema's ``$schema`` names, Draft 2020-12 by default, with its format checker), never
a hand-written one; validators are cached per schema text. ``parse_json`` accepts a JSON text
with surrounding whitespace only: an answer wrapped in prose or a Markdown fence is not what
``response_format`` or a tool parser promises, so it counts as invalid (``fenced`` says which).
``field_accuracy`` compares two JSON values leaf by leaf (strings case- and space-insensitive,
numbers as floats), the field-level score of structured extraction (after SOB's value accuracy:
valid JSON with wrong values is a different failure from invalid JSON).

Every function here is handed an endpoint's answer and never raises on it: a JSON text past
the scoring budget is an invalid answer with its reason, like malformed JSON. The budget
(docs/security.md, "Hostile endpoints") bounds the work and memory one answer can cost:
``MAX_JSON_CHARS`` characters are parsed (an 8 MB ``[0,0,…]`` answer cost 16 s of event-loop
CPU and 658 MB when its every leaf was flattened), a value of at most ``MAX_JSON_VALUES``
values nested at most ``MAX_JSON_DEPTH`` deep is validated and compared (Python's ``json``
raises ``RecursionError`` near 1,000 levels and ``jsonschema`` recurses per level;
``uniqueItems`` over objects is quadratic in ``jsonschema``), validation stops after
``MAX_SCHEMA_ERRORS`` errors, and an answer is compared by looking up the expected value's
leaves in it, never by walking all of it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from itertools import islice
from typing import Any

import jsonschema
from jsonschema.protocols import Validator

#: Errors kept per checked value: enough to say what is wrong, bounded for the stored sample.
MAX_ERRORS = 3
#: Characters of an answer parsed as JSON. The kinds' answers are a few hundred characters (an
#: extraction, a call's arguments: ``max_tokens`` 160 and 256); a longer one is invalid unread.
MAX_JSON_CHARS = 65_536
#: Values (objects, arrays and scalars) of a parsed answer that are validated and compared: the
#: kinds' schemas have at most a few dozen; ``uniqueItems`` over objects compares every pair.
MAX_JSON_VALUES = 1_000
#: Nesting depth of a parsed answer (the schemas nest three levels).
MAX_JSON_DEPTH = 32
#: Errors ``jsonschema`` is asked for per value before they are sorted and cut to ``MAX_ERRORS``
#: (it yields one per offending part: 20,000 for an object of 20,000 unexpected keys).
MAX_SCHEMA_ERRORS = 50



@lru_cache(maxsize=256)
def _validator(schema_text: str) -> Validator:
    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def schema_errors(schema: dict[str, Any], value: Any) -> list[str]:
    """Why ``value`` does not hold to ``schema`` (at most ``MAX_ERRORS`` lines, each with the
    JSON path of the offending part); empty when it does. ``value`` is a ``parse_json`` value
    (within the budget); one deeper than the stack allows is reported, not raised."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    try:
        found = list(islice(validator.iter_errors(value), MAX_SCHEMA_ERRORS))
    except RecursionError:
        return [f"$: nested too deeply to validate (at most {MAX_JSON_DEPTH} levels are scored)"]
    errors = sorted(found, key=lambda e: [str(p) for p in e.absolute_path])
    return [
        f"{e.json_path[:200]}: {e.message[:160]}" for e in errors[:MAX_ERRORS]
    ]


def over_budget(value: Any) -> str | None:
    """Why a parsed value cannot be scored, or None: past the budget (``MAX_JSON_VALUES``
    values, ``MAX_JSON_DEPTH`` levels), or holding a string UTF-8 cannot encode (a lone
    surrogate, ``"\\ud800"``: I-JSON, RFC 7493, forbids it, and the store could not write
    it). Walks at most ``MAX_JSON_VALUES + 1`` values."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_JSON_VALUES:
            return (f"more than {MAX_JSON_VALUES:,} JSON values; at most {MAX_JSON_VALUES:,} "
                    "are scored")
        if depth > MAX_JSON_DEPTH:
            return (f"JSON nested more than {MAX_JSON_DEPTH} levels deep; at most "
                    f"{MAX_JSON_DEPTH} are scored")
        if isinstance(node, dict):
            if not all(map(_encodable, node)):
                return "a key that is not valid Unicode (a lone surrogate)"
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
        elif isinstance(node, str) and not _encodable(node):
            return "a string that is not valid Unicode (a lone surrogate)"
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise ValueError(f"a number out of range ({text[:24]})")
    return number


def _integer(text: str) -> int:
    # Compared as floats (``_norm``): an integer past the double range would raise there.
    number = int(text)
    if len(text) > 300 and abs(number) > 2**1023:
        raise ValueError(f"a number out of range ({text[:24]}…)")
    return number


def _loads(text: str) -> tuple[Any, str | None]:
    """``json.loads`` that reports instead of raising: malformed text, a number Python will not
    convert (an integer of more than 4,300 digits), nesting past the recursion limit."""
    try:
        # NaN, Infinity and 1e400 are not JSON numbers (RFC 8259; Python accepts them), and a
        # store on PostgreSQL refuses to write them back.
        return json.loads(text, parse_constant=_constant, parse_float=_finite,
                          parse_int=_integer), None
    except RecursionError:
        return None, (f"JSON nested too deeply to parse (at most {MAX_JSON_DEPTH} levels are "
                      "scored)")
    except ValueError as exc:  # JSONDecodeError, the int-digits limit
        return None, f"not JSON ({str(exc)[:80]})"


def parse_json(text: str) -> tuple[Any, str | None, bool]:
    """``(value, error, fenced)``: the JSON value of ``text`` or the reason it is not one (never
    an exception); ``fenced`` when the text is JSON inside a Markdown code fence (still an
    error). A text or value past the budget (module docstring) is an error too, unparsed or
    unwalked beyond what the budget allows."""
    text = text or ""
    if len(text) > MAX_JSON_CHARS:
        return None, (f"an answer of {len(text):,} characters; at most {MAX_JSON_CHARS:,} are "
                      "parsed as JSON"), False
    value, err = _loads(text)
    if err is None:
        budget = over_budget(value)
        return (None, budget, False) if budget else (value, None, False)
    fenced = _fenced(text)
    if fenced is not None and _loads(fenced)[1] is None:
        return None, "JSON inside a Markdown code fence", True
    return None, err, False


def _fenced(text: str) -> str | None:
    """The inside of a Markdown code fence (```` ```json … ``` ````) around the whole text, or
    None. String operations, not a regular expression: the pattern this replaces backtracked
    quadratically on an opening fence followed by whitespace (20,000 spaces: minutes)."""
    body = text.strip()
    if len(body) < 6 or not body.startswith("```") or not body.endswith("```"):
        return None
    inner = body[3:-3]
    return inner.removeprefix("json").strip()


def _norm(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    return value


def _leaf_paths(
    value: Any, prefix: tuple[str | int, ...] = ()
) -> list[tuple[tuple[str | int, ...], Any]]:
    """The scalar leaves of an expected value (the item's own, never an answer) with their
    paths; an empty object or array is one leaf. An answer is looked up along them (``_at``),
    never flattened whole."""
    if isinstance(value, dict) and value:
        return [leaf for key in sorted(value) for leaf in _leaf_paths(value[key], (*prefix, key))]
    if isinstance(value, list) and value:
        return [leaf for i, v in enumerate(value) for leaf in _leaf_paths(v, (*prefix, i))]
    return [(prefix, _norm(value))]


_MISSING = object()


def _at(value: Any, parts: tuple[str | int, ...]) -> Any:
    """The leaf of ``value`` at ``parts`` (normalised), or ``_MISSING`` when there is none there
    (a key or index absent, or a non-empty object or array: not a leaf)."""
    for part in parts:
        listed = isinstance(part, int) and isinstance(value, list) and part < len(value)
        keyed = isinstance(part, str) and isinstance(value, dict) and part in value
        if not (listed or keyed):
            return _MISSING
        value = value[part]
    if isinstance(value, dict | list) and value:
        return _MISSING
    return _norm(value)


def field_accuracy(expected: Any, got: Any) -> float:
    """Share of ``expected``'s leaves that ``got`` has with an equal value (0 when ``got`` is
    not JSON at all). The work is one lookup per expected leaf, whatever ``got`` holds."""
    want = _leaf_paths(expected)
    if not want:
        return 1.0
    return sum(1 for parts, v in want if _at(got, parts) == v) / len(want)


def values_match(expected: dict[str, Any], got: Any) -> bool:
    """Every field of ``expected`` present in ``got`` with an equal value (extra fields of
    ``got`` are allowed: optional arguments the user did not state)."""
    if not isinstance(got, dict):
        return False
    return all(_at(got, parts) == v for parts, v in _leaf_paths(expected))
