"""JSON-schema helpers shared by the ``toolcalls`` and ``structured`` kinds.

Contract: pure functions, no I/O. Validation is the ``jsonschema`` package's (the validator
class the schema's ``$schema`` names, Draft 2020-12 by default, with its format checker), never
a hand-written one; validators are cached per schema text. ``parse_json`` accepts a JSON text
with surrounding whitespace only: an answer wrapped in prose or a Markdown fence is not what
``response_format`` or a tool parser promises, so it counts as invalid (``fenced`` says which).
``field_accuracy`` compares two JSON values leaf by leaf (strings case- and space-insensitive,
numbers as floats), the field-level score of structured extraction (after SOB's value accuracy:
valid JSON with wrong values is a different failure from invalid JSON).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema.protocols import Validator

#: Errors kept per checked value: enough to say what is wrong, bounded for the stored sample.
MAX_ERRORS = 3

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


@lru_cache(maxsize=256)
def _validator(schema_text: str) -> Validator:
    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def schema_errors(schema: dict[str, Any], value: Any) -> list[str]:
    """Why ``value`` does not hold to ``schema`` (at most ``MAX_ERRORS`` lines, each with the
    JSON path of the offending part); empty when it does."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    return [
        f"{e.json_path}: {e.message[:160]}" for e in errors[:MAX_ERRORS]
    ]


def parse_json(text: str) -> tuple[Any, str | None, bool]:
    """``(value, error, fenced)``: the JSON value of ``text`` or the reason it is not one;
    ``fenced`` when the text is JSON inside a Markdown code fence (still an error)."""
    try:
        return json.loads(text), None, False
    except ValueError as exc:
        fence = _FENCE.match(text or "")
        if fence:
            try:
                json.loads(fence.group(1))
                return None, "JSON inside a Markdown code fence", True
            except ValueError:
                pass
        return None, f"not JSON ({str(exc)[:80]})", False


def _norm(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    return value


def leaves(value: Any, path: str = "$") -> dict[str, Any]:
    """The scalar leaves of a JSON value by path (``$.items[0].quantity``); an empty object
    or array is one leaf."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(leaves(value[key], f"{path}.{key}"))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, v in enumerate(value):
            out.update(leaves(v, f"{path}[{i}]"))
        return out
    return {path: _norm(value)}


def field_accuracy(expected: Any, got: Any) -> float:
    """Share of ``expected``'s leaves that ``got`` has with an equal value (0 when ``got`` is
    not JSON at all)."""
    want = leaves(expected)
    have = leaves(got)
    if not want:
        return 1.0
    return sum(1 for k, v in want.items() if k in have and have[k] == v) / len(want)


def values_match(expected: dict[str, Any], got: Any) -> bool:
    """Every field of ``expected`` present in ``got`` with an equal value (extra fields of
    ``got`` are allowed: optional arguments the user did not state)."""
    if not isinstance(got, dict):
        return False
    have = leaves(got)
    return all(have.get(k) == v for k, v in leaves(expected).items())
