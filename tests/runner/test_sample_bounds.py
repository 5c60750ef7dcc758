"""What one sample may store (``evalsvc.runner._bounds``, issue 48 item 2): every string of its
``data`` bounded like its output, valid Unicode, nesting kept to 64 levels, the cut listed.
The runner calls it on every sample (``_cap_output``); a real run with hostile answers is in
``tests/security/test_round5_answers.py``."""

from __future__ import annotations

import json

from evalsvc.domain import Sample
from evalsvc.runner._bounds import MAX_DATA_DEPTH, bound_sample


def _sample(output: str = "ok", **data: object) -> Sample:
    return Sample(suite="s", item_id="i", endpoint="e", output=output, score=1.0,
                  data=dict(data))


def test_long_strings_in_data_are_cut_and_listed() -> None:
    s = _sample("x" * 100, answer="y" * 500, calls=[{"arguments": "z" * 300}],
                drift={"top_keys": [["a"] * 50] * 50}, n=3)
    bound_sample(s, 200)
    assert s.output == "x" * 100 or len(s.output) <= 200
    assert s.data["answer"] == "y" * 200 and s.data["calls"][0]["arguments"] == "z" * 200
    assert s.data["data_truncated"] == ["$.answer", "$.calls[0].arguments"]
    # Lists are never shortened (a kind's analysis may need every entry), nor numbers touched.
    assert len(s.data["drift"]["top_keys"]) == 50 and s.data["n"] == 3


def test_the_output_is_cut_as_before() -> None:
    s = _sample("x" * 500)
    bound_sample(s, 200)
    assert s.output == "x" * 200 and s.data == {"output_truncated": True, "output_chars": 500}


def test_lone_surrogates_become_replacement_characters_everywhere() -> None:
    s = _sample("a\ud800b", text="c\udc00", pair="\U0001f600", **{"k\ud800": 1})
    s.error = "bad \ud800"
    bound_sample(s, 65_536)
    json.dumps(s.data).encode()  # storable
    for text in (s.output, s.error, s.data["text"], *s.data):
        text.encode("utf-8")
    assert s.output.startswith("a\ufffd") and s.data["pair"] == "\U0001f600"
    assert "data_truncated" not in s.data  # replaced, not cut


def test_nul_characters_become_replacement_characters() -> None:
    # PostgreSQL's text cannot hold a NUL: one in an answer ended the run there.
    s = _sample("a\x00b", parsed={"city": "Os\x00lo", "k\x00": ["\x00"]})
    bound_sample(s, 65_536)
    assert s.output == "a\ufffdb"
    assert s.data["parsed"] == {"city": "Os\ufffdlo", "k\ufffd": ["\ufffd"]}


def test_nesting_past_the_bound_is_replaced_by_a_note() -> None:
    deep: list = []
    for _ in range(2000):
        deep = [deep]
    s = _sample(parsed=deep)
    bound_sample(s, 65_536)
    json.dumps(s.data)  # no RecursionError any more
    assert s.data["data_truncated"] == ["$.parsed" + "[0]" * (MAX_DATA_DEPTH - 1)]


def test_a_small_clean_sample_is_left_as_it_is() -> None:
    s = _sample("answer", valid=True, errors=["$.a: bad"], nested={"a": [1, 2, {"b": "c"}]})
    before = dict(s.data)
    bound_sample(s, 65_536)
    assert s.data == before and s.data is not None
