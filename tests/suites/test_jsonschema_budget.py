"""The JSON scoring of ``toolcalls`` and ``structured`` (``evalsvc.suites.kinds._jsonschema``)
never raises on an answer: what cannot be parsed, or is past the budget, is an invalid answer
with its reason (issue 48, item 2). Pure functions, checked directly; the same payloads go
through a real run in ``tests/security/test_round5_answers.py``."""

from __future__ import annotations

import json

import pytest

from evalsvc.endpoints import ToolCall
from evalsvc.suites.kinds import _jsonschema as js
from evalsvc.suites.kinds.structured import SCHEMAS
from evalsvc.suites.kinds.toolcalls import MAX_CALLS, TOOLS, score_answer


@pytest.mark.parametrize(("text", "reason"), [
    ("[" * 5000, "JSON nested too deeply to parse"),
    ("[" * 40 + "]" * 40, "JSON nested more than 32 levels deep"),
    ("[" + "0," * 40_000 + "0]", "an answer of 80,003 characters; at most 65,536"),
    (json.dumps(list(range(1001))), "more than 1,000 JSON values"),
    ('{"a": NaN}', "not JSON (NaN is not a JSON number)"),
    ("[1e400]", "not JSON (a number out of range (1e400))"),
    ("[" + "9" * 400 + "]", "not JSON (a number out of range"),
    ("1" * 5000, "not JSON (Exceeds the limit (4300 digits)"),
    ('"\\ud800"', "a string that is not valid Unicode (a lone surrogate)"),
    ('{"\\udc00": 1}', "a key that is not valid Unicode (a lone surrogate)"),
    ("```json\n{\"a\": 1}\n```", "JSON inside a Markdown code fence"),
], ids=["deep", "depth-40", "long", "values", "nan", "1e400", "big-int", "int-digits",
        "surrogate", "surrogate-key", "fence"])
def test_what_cannot_be_scored_is_an_error_never_an_exception(text: str, reason: str) -> None:
    value, error, _ = js.parse_json(text)
    assert value is None and error is not None and error.startswith(reason), error


def test_a_fence_followed_by_whitespace_is_read_in_linear_time() -> None:
    # The regular expression this replaced backtracked quadratically: minutes for this text.
    assert js.parse_json("```" + " " * 200_000)[1] is not None
    assert js.parse_json("```json" + "\n```" * 20_000)[1] is not None


def test_within_the_budget_values_are_scored_as_before() -> None:
    value, error, fenced = js.parse_json(' {"customer": {"name": "Ann", "city": "Oslo"}} ')
    assert error is None and not fenced
    expected = {"customer": {"name": "ann", "city": "Lima"}, "items": [1, 2]}
    assert js.field_accuracy(expected, value) == 0.25  # the name only (case-insensitive)
    assert js.field_accuracy(expected, {"customer": {"name": " ANN ", "city": "Lima"},
                                        "items": [1.0, 2, 3]}) == 1.0
    assert js.field_accuracy({"a": {}}, {"a": {}}) == 1.0
    assert js.field_accuracy({"a": 1}, {"a": [1]}) == 0.0
    assert js.values_match({"city": "Paris"}, {"city": "paris", "unit": "celsius"})
    assert not js.values_match({"city": "Paris"}, ["Paris"])
    assert js.parse_json('"\\ud83d\\ude00"')[0] == "\U0001f600"  # a pair is fine


def test_validation_is_bounded_and_recursion_is_reported() -> None:
    schema = TOOLS["create_event"]["function"]["parameters"]
    # 1,000 distinct objects where unique strings are due: quadratic uniqueItems in jsonschema
    # if it were reached; the errors are cut first.
    value = {"title": "x", "date": "2027-01-01", "start_time": "10:00",
             "attendees": [{"a": i} for i in range(450)]}
    errors = js.schema_errors(schema, value)
    assert len(errors) == js.MAX_ERRORS and "is not of type 'string'" in errors[0]
    deep: list = []
    for _ in range(2000):  # past the stack: built by hand, parse_json would refuse it
        deep = [deep]
    assert js.schema_errors(SCHEMAS["flat"], deep)[0].startswith("$: nested too deeply")


def test_more_tool_calls_than_kept_are_a_wrong_answer() -> None:
    calls = [ToolCall(name="get_weather", arguments='{"city": "Oslo"}')] * (MAX_CALLS + 5)
    scored = score_answer([("get_weather", {"city": "Oslo"})], ["get_weather"], "",
                          "tool_calls", calls)
    assert scored.calls_total == MAX_CALLS + 5 and len(scored.calls) == MAX_CALLS
    assert scored.schema_ok is False and not scored.names_ok
    assert scored.faults == ["too many calls"]
    one = score_answer([("get_weather", {"city": "Oslo"})], ["get_weather"], "",
                       "tool_calls", calls[:1])
    assert one.schema_ok and one.names_ok and one.args_ok and not one.faults
