"""The ``toolcalls`` and ``structured`` kinds end to end on a real loopback server with planted
tool-call faults (``tests/fixtures/tool_server.py``), through the runner:

- the client reads tool calls whole and streamed (``delta.tool_calls`` pieces merged);
- the same faithful server on both sides passes both gates (trigger agreement and schema-valid
  calls), streamed and not;
- schema errors in a share of one tool's calls fail the schema gate, and the report names the
  tool and the fault; dropped calls (markup in ``content``, no parsed call) fail too and are
  listed as dropped with the leaked markup; a parsed call with ``<|python_tag|>`` left in
  ``content`` is listed as leaked markup;
- an endpoint that ignores ``tools`` (and ``response_format``) is refused before any item, with
  the capability and its fix;
- structured output: faithful passes; answers that break the schema on a share of items fail
  the validity gate.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evalsvc.domain import EndpointRef
from evalsvc.endpoints import EndpointClient
from evalsvc.reports._findings import findings
from evalsvc.runner._common import CapabilityError
from evalsvc.runner._runner import RunResult
from evalsvc.suites import Suite, SuiteSpec, suite_kinds
from evalsvc.suites.kinds.toolcalls import TOOLS
from tests.fixtures.runs import execute_pair
from tests.fixtures.tool_server import ToolServer, tool_server

SEED = 5
TRAVEL = ["travel"]


def _suite(kind: str = "toolcalls", n: int = 60, **params: Any) -> Suite:
    spec = SuiteSpec(name=kind, kind=kind, seed=SEED, params={"n": n, **params},
                     gate={"margin": 0.1})
    suite = suite_kinds()[kind](spec)
    suite.bind_gate()
    return suite


def _entry(result: RunResult) -> dict[str, Any]:
    res = result.candidates[0].suites[0]
    return {"kind": res.kind, "verdict": res.outcome.verdict,
            "details": {**res.outcome.details, **res.details}}


@pytest.fixture(scope="module")
def srv() -> Any:
    with tool_server([SEED], per_type=80, domain_sets=[None, TRAVEL]) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True])
def test_client_reads_tool_calls(srv: ToolServer, stream: bool) -> None:
    user = "Two things, please."
    sc = next(v for k, v in srv.calls.items() if k.startswith(user))

    async def ask() -> Any:
        async with EndpointClient(EndpointRef(url=srv.base_url("faithful"))) as client:
            return await client.chat(
                [{"role": "user", "content": sc.user}], max_tokens=64, stream=stream,
                tools=[TOOLS[t] for t in sc.tools], tool_choice="auto")

    out = asyncio.run(ask())
    assert out.ok and out.finish_reason == "tool_calls" and out.text == ""
    assert [(c.name, c.arguments) for c in out.tool_calls] == [
        (n, __import__("json").dumps(a)) for n, a in sc.calls]
    assert [c.id for c in out.tool_calls] == ["call_0", "call_1"]


@pytest.mark.parametrize("stream", [False, True])
def test_faithful_server_passes_both_gates(srv: ToolServer, stream: bool) -> None:
    url = srv.base_url("faithful")
    result, samples = execute_pair(url, url, _suite(stream=stream))
    entry = _entry(result)
    gates = entry["details"]["tool_gates"]
    assert set(gates) == {"trigger_agreement", "schema_valid_calls"}
    assert all(g["verdict"] == "pass" for g in gates.values()), gates
    assert entry["verdict"] == "pass"
    assert all(s.score == 1.0 for s in samples), [s.data for s in samples if s.score != 1.0][:2]
    k2 = entry["details"]["k2vv"]
    assert k2["candidate_vs_baseline"]["f1"] == 1.0 and k2["candidate_schema_accuracy"] == 1.0
    assert not entry["details"]["faults"]["rows"]


def test_schema_errors_on_one_tool_fail_and_name_the_tool(srv: ToolServer) -> None:
    srv.only_tool, srv.share = "book_flight", 1.0
    try:
        result, samples = execute_pair(srv.base_url("faithful"), srv.base_url("schema"),
                               _suite(domains=TRAVEL, mix={"single": 1, "choice": 1}))
    finally:
        srv.only_tool, srv.share = None, 0.3
    entry = _entry(result)
    assert entry["verdict"] == "fail"
    gates = entry["details"]["tool_gates"]
    assert gates["schema_valid_calls"]["verdict"] == "fail"
    assert gates["trigger_agreement"]["verdict"] == "pass"  # the calls came, broken
    broken = [s for s in samples if s.endpoint != "baseline" and "schema error" in s.data["faults"]]
    assert broken and {s.data["tool"] for s in broken} == {"book_flight"}
    assert all("is a required property" in s.data["calls"][0]["errors"][0] for s in broken)
    text = "\n".join(findings(entry))
    assert "schema error on book_flight" in text
    assert f"| book_flight | schema error | 0 | {len(broken)} |" in text
    # The slice of that tool fails by name; the other tool's does not.
    slices = entry["details"]["slices"]["slices"]
    tools = {r["slice"]: r for r in slices if r["dimension"] == "tool"}
    assert tools["book_flight"]["verdict"] == "fail"
    assert tools["convert_currency"]["verdict"] != "fail"
    assert "Slice failed: tool book_flight: 100% → 0%" in text


def test_dropped_calls_fail_and_are_listed_with_their_markup(srv: ToolServer) -> None:
    srv.share = 0.5
    try:
        result, samples = execute_pair(srv.base_url("faithful"), srv.base_url("drop"), _suite())
    finally:
        srv.share = 0.3
    entry = _entry(result)
    assert entry["verdict"] == "fail"
    dropped = [s for s in samples if s.endpoint != "baseline" and s.data.get("dropped")]
    assert dropped and all(s.data["leaked"] == ["<tool_call>", "</tool_call>"] for s in dropped)
    assert all(not s.data["triggered"] for s in dropped)
    details = entry["details"]
    assert details["faults"]["leaked_markers"] == ["</tool_call>", "<tool_call>"]
    rows = {(r["tool"], r["fault"]): r for r in details["faults"]["rows"]}
    for s in dropped:
        assert rows[(s.data["tool"], "dropped call")]["candidate"] >= 1
    assert sum(r["candidate"] for (t, f), r in rows.items() if f == "dropped call") == len(dropped)
    k2 = details["k2vv"]["candidate_vs_baseline"]
    assert k2["fn"] == len(dropped) and k2["fp"] == 0 and k2["f1"] < 1
    text = "\n".join(findings(entry))
    assert "dropped call on" in text and "Failed: trigger_agreement" in text
    assert "Markup leaked into the candidate's content: `</tool_call>`, `<tool_call>`" in text


def test_leaked_markup_beside_parsed_calls_is_listed(srv: ToolServer) -> None:
    result, samples = execute_pair(srv.base_url("faithful"), srv.base_url("leak"), _suite())
    entry = _entry(result)
    leaky = [s for s in samples if s.endpoint != "baseline" and s.data.get("leaked")]
    assert leaky and all(s.data["leaked"] == ["<|python_tag|>"] for s in leaky)
    assert all(s.data["triggered"] and s.data["schema_ok"] for s in leaky)  # calls intact
    assert all(s.score == 0.0 for s in leaky)  # but the answer is not clean
    assert entry["details"]["faults"]["leaked_markers"] == ["<|python_tag|>"]
    assert "leaked markup on" in "\n".join(findings(entry))


@pytest.mark.parametrize(("mode", "probes"), [("notools", 3), ("reject", 2)])
def test_an_endpoint_that_cannot_serve_tools_is_refused_before_any_item(
    srv: ToolServer, mode: str, probes: int
) -> None:
    """``notools`` accepts tools and answers in text (llama.cpp with a template without tool
    support); ``reject`` answers 400 (vLLM without its tool flags)."""
    before = srv.requests[mode]
    with pytest.raises(CapabilityError) as err:
        execute_pair(srv.base_url("faithful"), srv.base_url(mode), _suite())
    msg = str(err.value)
    assert "needs tools" in msg and "--enable-auto-tool-choice" in msg and "--jinja" in msg
    # The probe's chat and tool requests (the `required` one only after `auto` was accepted);
    # no item.
    assert srv.requests[mode] - before == probes


def test_required_tool_choice_plans_only_calling_items() -> None:
    suite = _suite(tool_choice="required")
    items = asyncio.run(suite.plan(None, None))  # type: ignore[arg-type]  # plan sends nothing
    assert items and all(i.expected for i in items)
    assert suite.load_warnings() and "left out" in suite.load_warnings()[0]


def test_structured_faithful_passes_and_invalid_answers_fail(srv: ToolServer) -> None:
    url = srv.base_url("faithful")
    result, samples = execute_pair(url, url, _suite("structured", n=60))
    entry = _entry(result)
    assert entry["verdict"] == "pass", entry["details"]["tool_gates"]
    assert all(s.data["valid"] and s.data["field_accuracy"] == 1.0 for s in samples)
    srv.share = 0.5
    try:
        result, samples = execute_pair(url, srv.base_url("invalid"), _suite("structured", n=60))
    finally:
        srv.share = 0.3
    entry = _entry(result)
    assert entry["verdict"] == "fail"
    assert entry["details"]["tool_gates"]["valid"]["verdict"] == "fail"
    bad = [s for s in samples if s.endpoint != "baseline" and not s.data["valid"]]
    assert bad and all("is a required property" in s.data["errors"][0] for s in bad)
    text = "\n".join(findings(entry))
    # The finding names examples of the invalid answers (a few, in its own order).
    assert "Failed: valid (100% →" in text and any(s.item_id in text for s in bad)


def test_structured_refused_where_response_format_is_ignored(srv: ToolServer) -> None:
    with pytest.raises(CapabilityError) as err:
        execute_pair(srv.base_url("faithful"), srv.base_url("notools"), _suite("structured"))
    assert "needs json_schema" in str(err.value)


def test_a_thinking_trace_is_split_before_scoring(srv: ToolServer) -> None:
    """A reasoning model's ``<think>`` block in ``content`` is the trace, not leaked markup or
    broken JSON: both kinds score the answer after it, and keep the trace's length."""
    for kind in ("toolcalls", "structured"):
        result, samples = execute_pair(srv.base_url("faithful"), srv.base_url("think"),
                               _suite(kind, n=36))
        cand = [s for s in samples if s.endpoint != "baseline"]
        assert all(s.score == 1.0 for s in cand), [s.data for s in cand if s.score != 1.0][:1]
        assert all(s.data["thinking"]["tokens"] > 0 for s in cand)


def test_sampling_is_refused_with_the_reason() -> None:
    for kind in ("toolcalls", "structured"):
        with pytest.raises(ValueError, match="not sampled yet"):
            suite_kinds()[kind](SuiteSpec(name=kind, kind=kind, sampling={"k": 4, "temperature": 0.6}))


def test_structured_needs_json_schema_only_for_response_format() -> None:
    """The probe's json_schema check is asked only of the mode that sends response_format."""
    from evalsvc.suites import SuiteSpec, suite_kinds

    cls = suite_kinds()["structured"]
    assert "json_schema" in cls(SuiteSpec(name="s", kind="structured")).requires
    for mode in ("prompt",):
        suite = cls(SuiteSpec(name="s", kind="structured", params={"mode": mode}))
        assert suite.requires == frozenset({"chat"})
