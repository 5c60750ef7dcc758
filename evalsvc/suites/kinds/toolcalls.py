"""``toolcalls``: seeded function-calling items, scored against the expected behaviour and gated
against the baseline's.

Method:
- **Items.** Tools from six domains (weather, calendar, shop, travel, mail, home) whose JSON
  schemas carry what real tool definitions do: nested objects, enums, arrays of objects,
  patterns, bounds and optional fields. A user turn is drawn from the seed with its values
  (cities, dates, amounts...) and the call it asks for. Call types: ``single`` (one tool of one
  domain offered, one call), ``choice`` (tools of three domains offered, one is right),
  ``parallel`` (two calls in one answer), ``chitchat`` (tools offered, nothing to call) and
  ``missing`` (a tool fits but a required value is missing: ask, do not call). Item ``k`` is
  drawn from ``Random("{seed}:{call type}:{k}")``: a pure function, so every endpoint gets the
  same items and the flips page can rebuild one.
- **Sent** as chat with ``tools`` and ``tool_choice`` (``auto``; ``required`` plans only items
  that expect a call), temperature 0. The endpoint must serve tools: the kind requires the
  ``tools`` capability, which the probe grants only when ``tool_choice: required`` comes back as
  a parsed call, so an engine that silently drops ``tools`` is refused before any item.
- **Scored per item** (``Sample.score``, binary): the trigger (called or not) agrees with the
  expected behaviour, and, where a call is expected, every call names an offered tool, its
  arguments are a JSON object valid against that tool's schema (the ``jsonschema`` package,
  ``_jsonschema``), the names are the expected ones and each expected argument has the expected
  value, and no tool-call markup leaked into ``content``. ``data`` keeps each part, the calls,
  the markup that leaked into ``content`` and whether
  a call was dropped (``finish_reason`` ``tool_calls`` without a parsed call, or call markup in
  the text with none parsed). Scoring never raises on an answer: arguments that are not JSON,
  or past the JSON budget (``_jsonschema``: size, values, depth), are a schema error; an answer
  of more than ``MAX_CALLS`` calls is wrong (``too many calls``) with its first calls kept.
- **Gated** (``Analysis.gate_test``) on two paired binary non-inferiority tests, both at the
  suite's margin and α: *trigger agreement* over every item and *schema-valid calls* over the
  items that expect a call (a dropped call is not a valid one); the suite fails when either
  fails and passes when both pass. Slices: tool, call type.
- **Reported** beside them, K2-Vendor-Verifier's two numbers: ``tool_call_f1`` (trigger F1:
  TP both sides call, FP only the endpoint, FN only the reference; precision TP/(TP+FP), recall
  TP/(TP+FN), F1 their harmonic mean; MoonshotAI/K2-Vendor-Verifier README, "ToolCall-Trigger
  Similarity") of the candidate against the baseline and of each side against the expected
  behaviour, and ``schema_accuracy`` (schema-valid calls ÷ answers that called). K2VV triggers
  on ``finish_reason == "tool_calls"``; here a trigger is a parsed call, and a ``tool_calls``
  finish without one is counted as a dropped call.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalsvc import limits
from evalsvc.domain import Item, Provenance, Sample
from evalsvc.gates import GateDefaults
from evalsvc.suites._base import Analysis, Suite, SuiteSpec, paired_scores, prompt_text
from evalsvc.suites._present import Chart, Finding, ViewInput, markdown_table, pct
from evalsvc.suites.kinds._jsonschema import parse_json, schema_errors, values_match
from evalsvc.suites.kinds._paired_gates import _NO_SAMPLING, paired_gates

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import EndpointClient

CallType = Literal["single", "choice", "parallel", "chitchat", "missing"]
Domain = Literal["weather", "calendar", "shop", "travel", "mail", "home"]
CALL_TYPES: tuple[CallType, ...] = ("single", "choice", "parallel", "chitchat", "missing")
#: Call types whose expected behaviour is a call.
CALLING: frozenset[str] = frozenset({"single", "choice", "parallel"})

K2VV_SOURCE = (
    "MoonshotAI/K2-Vendor-Verifier README (2025-11): tool_call_f1 (trigger F1 against the "
    "reference) and schema_accuracy; pass bars >= 73% / >= 80% set from the reference API's own "
    "run-to-run spread (lowest 75.81% / 82.71%)"
)

#: Tool-call markup of the common chat templates that must never reach ``content`` when the
#: engine parsed the call (Hermes/Qwen, Mistral, Llama 3.x, Kimi K2, DeepSeek, gpt-oss Harmony,
#: Llama 4 / Functionary style).
LEAK_MARKERS: tuple[str, ...] = (
    "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>",
    "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>", "<|channel|>", "<|call|>", "<|start|>assistant", "<function=",
)


# ---- tools ----------------------------------------------------------------------------------

def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


_DATE = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": "YYYY-MM-DD"}
_UNIT = {"type": "string", "enum": ["celsius", "fahrenheit"]}

TOOLS: dict[str, dict[str, Any]] = {
    "get_weather": _fn(
        "get_weather", "Current weather for a city.",
        {"city": {"type": "string", "minLength": 1}, "unit": _UNIT}, ["city"],
    ),
    "get_forecast": _fn(
        "get_forecast", "Weather forecast for the next days in a city.",
        {"city": {"type": "string", "minLength": 1},
         "days": {"type": "integer", "minimum": 1, "maximum": 7}, "unit": _UNIT},
        ["city", "days"],
    ),
    "create_event": _fn(
        "create_event", "Create a calendar event.",
        {"title": {"type": "string", "minLength": 1}, "date": _DATE,
         "start_time": {"type": "string", "pattern": r"^\d{2}:\d{2}$", "description": "HH:MM"},
         "attendees": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
         "location": {"type": "object", "properties": {"name": {"type": "string"},
                                                       "room": {"type": "string"}},
                      "required": ["name"], "additionalProperties": False}},
        ["title", "date", "start_time"],
    ),
    "search_products": _fn(
        "search_products", "Search the shop's catalog.",
        {"query": {"type": "string", "minLength": 1},
         "category": {"type": "string", "enum": ["books", "electronics", "garden", "toys"]},
         "max_price": {"type": "number", "exclusiveMinimum": 0}},
        ["query"],
    ),
    "place_order": _fn(
        "place_order", "Order products for delivery.",
        {"items": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "properties": {"product_id": {"type": "string", "pattern": r"^P\d{4}$"},
                           "quantity": {"type": "integer", "minimum": 1}},
            "required": ["product_id", "quantity"], "additionalProperties": False}},
         "shipping": {"type": "string", "enum": ["standard", "express"]}},
        ["items", "shipping"],
    ),
    "book_flight": _fn(
        "book_flight", "Book a flight.",
        {"origin": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "IATA code"},
         "destination": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "IATA code"},
         "date": _DATE, "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
         "cabin": {"type": "string", "enum": ["economy", "business", "first"]}},
        ["origin", "destination", "date", "passengers"],
    ),
    "convert_currency": _fn(
        "convert_currency", "Convert an amount of money between currencies.",
        {"amount": {"type": "number", "exclusiveMinimum": 0},
         "source": {"type": "string", "pattern": "^[A-Z]{3}$"},
         "target": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        ["amount", "source", "target"],
    ),
    "send_email": _fn(
        "send_email", "Send an email.",
        {"to": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": "^[^@ ]+@[^@ ]+$"}},
         "subject": {"type": "string", "minLength": 1}, "body": {"type": "string"},
         "cc": {"type": "array", "items": {"type": "string"}}},
        ["to", "subject", "body"],
    ),
    "set_thermostat": _fn(
        "set_thermostat", "Set a room's thermostat.",
        {"room": {"type": "string", "enum": ["living room", "bedroom", "kitchen", "office"]},
         "temperature": {"type": "number", "minimum": 10, "maximum": 30},
         "mode": {"type": "string", "enum": ["heat", "cool", "auto"]}},
        ["room", "temperature"],
    ),
}

DOMAINS: dict[str, tuple[str, ...]] = {
    "weather": ("get_weather", "get_forecast"),
    "calendar": ("create_event",),
    "shop": ("search_products", "place_order"),
    "travel": ("book_flight", "convert_currency"),
    "mail": ("send_email",),
    "home": ("set_thermostat",),
}
_DOMAIN_OF = {tool: d for d, tools in DOMAINS.items() for tool in tools}

_CITIES = ["Paris", "Lisbon", "Oslo", "Tokyo", "Nairobi", "Lima", "Toronto", "Madrid", "Seoul"]
_AIRPORTS = {"Paris": "CDG", "Lisbon": "LIS", "Oslo": "OSL", "Tokyo": "HND", "Madrid": "MAD",
             "Seoul": "ICN", "Toronto": "YYZ", "Lima": "LIM", "Nairobi": "NBO"}
_PEOPLE = ["ana", "ben", "chen", "dara", "eli", "fatima", "goran", "hana"]
_TOPICS = ["budget review", "team lunch", "design sync", "dentist", "book club", "1:1"]
_PRODUCTS = ["headphones", "garden hose", "puzzle", "novel", "desk lamp", "kite"]
_CATEGORY = {"headphones": "electronics", "garden hose": "garden", "puzzle": "toys",
             "novel": "books", "desk lamp": "electronics", "kite": "toys"}
_CURRENCIES = ["EUR", "USD", "JPY", "GBP", "CHF"]
_ROOMS = ["living room", "bedroom", "kitchen", "office"]
_CHITCHAT = [
    "Thanks, that was really helpful!",
    "What is the capital of Italy?",
    "Tell me a short joke about cats.",
    "How do you say hello in Spanish?",
    "Good morning! How are you today?",
    "Can you explain what a noun is in one sentence?",
]


@dataclass(frozen=True)
class Scenario:
    """One drawn user turn: the tools offered, what it asks, and the calls it expects."""

    user: str
    tools: tuple[str, ...]
    calls: tuple[tuple[str, dict[str, Any]], ...]
    target: str
    """The tool the item is about (slices; for chit-chat, the first offered)."""
    template: str


def _date(rng: random.Random) -> str:
    return f"2027-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _one_call(rng: random.Random, tool: str) -> tuple[str, dict[str, Any]]:
    """A user request for ``tool`` with every required value stated, and the arguments."""
    if tool == "get_weather":
        city, unit = rng.choice(_CITIES), rng.choice(["celsius", "fahrenheit"])
        return f"What's the weather in {city} right now, in {unit}?", {"city": city, "unit": unit}
    if tool == "get_forecast":
        city, days = rng.choice(_CITIES), rng.randint(2, 7)
        return f"Give me the {days}-day forecast for {city}.", {"city": city, "days": days}
    if tool == "create_event":
        topic, date = rng.choice(_TOPICS), _date(rng)
        hour = f"{rng.randint(8, 17):02d}:{rng.choice(['00', '30'])}"
        who = rng.sample(_PEOPLE, 2)
        emails = [f"{p}@example.com" for p in who]
        return (
            f"Put a '{topic}' event in my calendar on {date} at {hour} with "
            f"{emails[0]} and {emails[1]}, in room {rng.randint(1, 9)}B of the main office.",
            {"title": topic, "date": date, "start_time": hour, "attendees": emails},
        )
    if tool == "search_products":
        product, price = rng.choice(_PRODUCTS), rng.choice([20, 50, 100, 250])
        return (
            f"Find me a {product} in the {_CATEGORY[product]} category for under {price} dollars.",
            {"query": product, "category": _CATEGORY[product], "max_price": price},
        )
    if tool == "place_order":
        a, b = rng.sample(range(1000, 9999), 2)
        qa, qb = rng.randint(1, 4), rng.randint(1, 4)
        ship = rng.choice(["standard", "express"])
        return (
            f"Order {qa} of product P{a} and {qb} of product P{b}, {ship} shipping.",
            {"items": [{"product_id": f"P{a}", "quantity": qa},
                       {"product_id": f"P{b}", "quantity": qb}], "shipping": ship},
        )
    if tool == "book_flight":
        src, dst = rng.sample(sorted(_AIRPORTS), 2)
        date, n = _date(rng), rng.randint(1, 4)
        return (
            f"Book a flight from {src} ({_AIRPORTS[src]}) to {dst} ({_AIRPORTS[dst]}) on {date} "
            f"for {n} passenger{'s' if n > 1 else ''}.",
            {"origin": _AIRPORTS[src], "destination": _AIRPORTS[dst], "date": date,
             "passengers": n},
        )
    if tool == "convert_currency":
        src, dst = rng.sample(_CURRENCIES, 2)
        amount = rng.choice([25, 80, 120, 300, 1500])
        return f"Convert {amount} {src} to {dst}.", {"amount": amount, "source": src, "target": dst}
    if tool == "send_email":
        person = rng.choice(_PEOPLE)
        topic = rng.choice(_TOPICS)
        return (
            f"Email {person}@example.com with the subject '{topic}' and the text 'See you there.'",
            {"to": [f"{person}@example.com"], "subject": topic, "body": "See you there."},
        )
    if tool == "set_thermostat":
        room, temp = rng.choice(_ROOMS), rng.randint(17, 25)
        return f"Set the {room} thermostat to {temp} degrees.", {"room": room, "temperature": temp}
    raise ValueError(f"unknown tool {tool!r}")


#: A request for a tool with a required value missing: the right answer asks for it.
_MISSING: dict[str, str] = {
    "book_flight": "Book me a flight for next week, please.",
    "send_email": "Send an email to my landlord about the heating.",
    "convert_currency": "How much is 300 in another currency?",
    "create_event": "Add a meeting to my calendar.",
    "place_order": "Order some more of that thing I bought last time.",
    "set_thermostat": "Change the thermostat.",
    "get_forecast": "What will the weather be like?",
}


_PARALLEL = ("get_weather", "convert_currency", "get_forecast", "set_thermostat")


def scenario(
    seed: int, call_type: str, k: int, domains: Sequence[str] | None = None
) -> Scenario:
    """Item ``k`` of ``call_type`` over the tools of ``domains`` (default: all six): a pure
    function of its arguments."""
    rng = random.Random(f"{seed}:{call_type}:{k}")
    chosen = sorted(domains) if domains else sorted(DOMAINS)
    tools = sorted(t for d in chosen for t in DOMAINS[d])
    if call_type == "single":
        tool = tools[k % len(tools)]
        user, args = _one_call(rng, tool)
        return Scenario(user, (tool,), ((tool, args),), tool, tool)
    if call_type == "choice":
        tool = tools[k % len(tools)]
        others = [d for d in chosen if d != _DOMAIN_OF[tool]]
        pool = sorted({t for d in rng.sample(others, min(2, len(others))) for t in DOMAINS[d]}
                      | set(DOMAINS[_DOMAIN_OF[tool]]))
        user, args = _one_call(rng, tool)
        return Scenario(user, tuple(rng.sample(pool, len(pool))), ((tool, args),), tool, tool)
    if call_type == "parallel":
        able = [t for t in _PARALLEL if t in tools] or tools
        tool = able[k % len(able)]
        u1, a1 = _one_call(rng, tool)
        u2, a2 = _one_call(rng, tool)
        while a2 == a1:
            u2, a2 = _one_call(rng, tool)
        user = f"Two things, please. {u1} And also: {u2}"
        return Scenario(user, (tool,), ((tool, a1), (tool, a2)), tool, f"{tool} x2")
    if call_type == "chitchat":
        offered = tuple(rng.sample(tools, min(3, len(tools))))
        line = _CHITCHAT[k % len(_CHITCHAT)]
        return Scenario(line, offered, (), offered[0], "chitchat")
    if call_type == "missing":
        names = sorted(t for t in _MISSING if t in tools) or sorted(_MISSING)
        tool = names[k % len(names)]
        return Scenario(_MISSING[tool], (tool,), (), tool, f"missing {tool}")
    raise ValueError(f"unknown call type {call_type!r}")


# ---- scoring --------------------------------------------------------------------------------

#: Calls of one answer that are scored and kept in its sample: an item expects at most two. An
#: answer with more is wrong (``too many calls``, not schema-valid) and its first ones are kept
#: to show what came (``calls_total`` counts them all): 60,000 calls in one 5 MB answer stored
#: 7.4 MB per sample before (docs/security.md, "Hostile endpoints").
MAX_CALLS = 16
#: Characters of a call's name and of its argument text kept in the sample.
MAX_NAME_CHARS = 200
MAX_ARGUMENT_CHARS = 2000


def leaked_markup(text: str) -> list[str]:
    """The tool-call markers that appear in an answer's text."""
    return [m for m in LEAK_MARKERS if m in (text or "")]


@dataclass
class Scored:
    """What one answer did, against what its item expected."""

    triggered: bool
    calls: list[dict[str, Any]] = field(default_factory=list)
    schema_ok: bool | None = None
    names_ok: bool = False
    args_ok: bool = False
    leaked: list[str] = field(default_factory=list)
    dropped: bool = False
    faults: list[str] = field(default_factory=list)
    calls_total: int = 0
    """Every call of the answer; ``calls`` holds the first ``MAX_CALLS``."""


def score_answer(
    expected: Sequence[tuple[str, dict[str, Any]]] | Sequence[list[Any]],
    offered: Sequence[str],
    text: str,
    finish_reason: str | None,
    tool_calls: Sequence[Any] | None,
) -> Scored:
    """Score one answer (``tool_calls``: ``ToolCall``-like objects with ``name`` and
    ``arguments``) against the expected calls of its item. Never raises on what the endpoint
    sent: arguments that cannot be parsed or are past the JSON budget (``_jsonschema``) are a
    schema error, more than ``MAX_CALLS`` calls make the answer wrong unscored."""
    calls = list(tool_calls or [])
    leaked = leaked_markup(text)
    out = Scored(triggered=bool(calls), leaked=leaked, calls_total=len(calls))
    out.dropped = not calls and (finish_reason == "tool_calls" or bool(leaked))
    too_many = len(calls) > MAX_CALLS
    valid = []
    for call in calls[:MAX_CALLS]:
        name = call.name[:MAX_NAME_CHARS]
        entry: dict[str, Any] = {"name": name, "arguments": call.arguments[:MAX_ARGUMENT_CHARS]}
        errors: list[str]
        if call.name not in offered or call.name not in TOOLS:
            errors = [f"{name!r} is not an offered tool"]
            args: Any = None
        else:
            args, err, _ = parse_json(call.arguments or "{}")
            schema = TOOLS[call.name]["function"]["parameters"]
            errors = [f"arguments are {err}"] if err else schema_errors(schema, args)
        entry["valid"] = not errors
        if errors:
            entry["errors"] = errors
        entry["parsed"] = args if not errors else None
        out.calls.append(entry)
        valid.append(not errors)
    if calls:
        out.schema_ok = all(valid) and not too_many
    want = [(str(n), dict(a)) for n, a in expected]
    got_names = sorted(c["name"] for c in out.calls)
    out.names_ok = bool(want) and not too_many and got_names == sorted(n for n, _ in want)
    if out.names_ok:
        # Each expected call matched by a distinct produced call with its values (order free:
        # parallel calls may come in either order).
        free = list(out.calls)
        matched = 0
        for name, args in want:
            hit = next((c for c in free if c["name"] == name and c["valid"]
                        and values_match(args, c["parsed"])), None)
            if hit is not None:
                free.remove(hit)
                matched += 1
        out.args_ok = matched == len(want)
    if out.dropped:
        out.faults.append("dropped call")
    if leaked:
        out.faults.append("leaked markup")
    if too_many:
        out.faults.append("too many calls")
    elif calls and not out.schema_ok:
        out.faults.append("schema error")
    if want and not calls and not out.dropped:
        out.faults.append("no call")
    if not want and calls:
        out.faults.append("spurious call")
    if want and calls and out.schema_ok and not out.names_ok:
        out.faults.append("wrong tool")
    if want and out.names_ok and out.schema_ok and not out.args_ok:
        out.faults.append("wrong arguments")
    return out


def trigger_f1(reference: Sequence[bool], endpoint: Sequence[bool]) -> dict[str, Any]:
    """K2-Vendor-Verifier's ``tool_call_f1`` of ``endpoint`` against ``reference`` (see the
    module docstring), with its counts; ``f1`` is ``None`` when neither side ever called."""
    tp = sum(1 for r, e in zip(reference, endpoint, strict=True) if r and e)
    fp = sum(1 for r, e in zip(reference, endpoint, strict=True) if e and not r)
    fn = sum(1 for r, e in zip(reference, endpoint, strict=True) if r and not e)
    tn = len(reference) - tp - fp - fn
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    if precision is None or recall is None:
        f1 = None if tp + fp + fn == 0 else 0.0
    else:
        f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return {"tp": tp, "fp": fp, "fn": fn, "tn": tn, "precision": precision, "recall": recall,
            "f1": f1}


# ---- the kind -------------------------------------------------------------------------------

def _all_domains() -> list[Domain]:
    return ["calendar", "home", "mail", "shop", "travel", "weather"]


def _default_mix() -> dict[str, int]:
    return {"single": 3, "choice": 3, "parallel": 2, "chitchat": 2, "missing": 2}


class ToolCallParams(BaseModel):
    """Parameters of a tool-call suite (validated from the YAML ``params`` mapping)."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(default=60, ge=1, le=limits.MAX_ITEMS)
    """Total items, spread over ``mix`` (``--samples``)."""
    mix: dict[CallType, int] = Field(default_factory=_default_mix)  # type: ignore[arg-type]
    """Relative weight of each call type (0 leaves one out)."""
    domains: list[Domain] = Field(default_factory=_all_domains, min_length=1)
    """The tool domains items are drawn from (the missing-information items fall back to every
    domain's tools when the chosen ones have none)."""
    tool_choice: Literal["auto", "required"] = "auto"
    """``auto``: the endpoint decides whether to call (every call type); ``required``: it must
    call, so only the call types that expect one are planned."""
    max_tokens: int = Field(default=256, ge=16, le=limits.MAX_TOKENS)
    """Room for two calls with their arguments."""
    stream: bool = False
    """Send streamed requests (the calls then arrive as ``delta.tool_calls`` pieces)."""
    system_prompt: str | None = (
        "You are a helpful assistant with tools. Call a tool only when the request needs it and "
        "gives every required value; otherwise answer in text or ask for what is missing."
    )


def _allocate(n: int, weights: list[int]) -> list[int]:
    total = sum(weights)
    exact = [n * w / total for w in weights]
    counts = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: exact[i] - counts[i], reverse=True)[
        : n - sum(counts)
    ]:
        counts[i] += 1
    return counts


_ID = re.compile(r"^(single|choice|parallel|chitchat|missing)-(\d+)$")


class ToolCallSuite(Suite):
    kind = "toolcalls"
    version = "1"
    Params = ToolCallParams
    requires = frozenset({"chat", "tools"})
    gate_default = GateDefaults.paired_noninferiority(
        "toolcalls",
        metric="tool_call_accuracy",
        margin=0.05,
        rationale=(
            "Two paired gates at the same 5-point margin as the answer kinds: trigger agreement "
            "(every item) and schema-valid calls (items that expect a call). K2-Vendor-Verifier's "
            "absolute bars (trigger F1 >= 73% / >= 80%) carry the reference's sampling noise at "
            "temperature 0.6-1; greedy against the BF16 endpoint itself that noise is near zero, "
            "so a paired margin gates what the quantization changed. Slices: tool, call type."
        ),
        sources=(K2VV_SOURCE,),
    )
    description = (
        "Seeded tool calls (six domains; one call, a choice among tools, parallel calls, "
        "chit-chat, missing information) with JSON-schema validation of the arguments."
    )
    slice_fields = (("tool", "str"), ("call_type", "str"))
    view_template = "toolcalls.html"
    #: A reasoning model's trace is split from the answer before it is scored (``Suite.sample``:
    #: ``reasoning_content`` or ``<think>`` markers), so markup and JSON are judged on the answer.
    scores_answers = True
    params: ToolCallParams

    def __init__(self, spec: SuiteSpec) -> None:
        if spec.sampling is not None:
            raise ValueError(_NO_SAMPLING.format(kind=self.kind))
        super().__init__(spec)

    @property
    def sampleable(self) -> bool:
        # Greedy only, like the block: its two gates pair one answer per item, so a run's
        # --sampling-k passes this suite by (docs/suites.md, "Sampled evaluation").
        return False

    def item_count(self) -> int:
        return self.params.n

    def _types(self) -> list[tuple[str, int]]:
        mix = self.params.mix
        return [
            (t, mix.get(t, 0)) for t in CALL_TYPES
            if mix.get(t, 0) > 0 and (self.params.tool_choice == "auto" or t in CALLING)
        ]

    def _calling_share(self) -> float:
        """The share of planned items that expect a call: the schema gate sees only those."""
        types = self._types()
        total = sum(w for _, w in types)
        return sum(w for t, w in types if t in CALLING) / total if total else 1.0

    def required_pairs(self, margin: float, discordance: float, alpha: float, power: float) -> int:
        # The schema-valid-calls gate runs on the calling items alone: plan enough items that
        # they reach the paired test's size (`evalsvc plan`).
        need = super().required_pairs(margin, discordance, alpha, power)
        return math.ceil(need / max(self._calling_share(), 1e-9))

    def min_items_to_pass(self, margin: float, alpha: float) -> int | None:
        least = super().min_items_to_pass(margin, alpha)
        return None if least is None else math.ceil(least / max(self._calling_share(), 1e-9))

    def load_warnings(self) -> list[str]:
        if self.params.tool_choice == "required" and any(
            self.params.mix.get(t, 0) for t in CALL_TYPES if t not in CALLING
        ):
            return ["tool_choice required: the chitchat and missing items are left out (an "
                    "endpoint cannot decline a required call)"]
        return []

    def _messages(self, sc: Scenario) -> list[dict[str, str]]:
        messages = [{"role": "user", "content": sc.user}]
        if self.params.system_prompt:
            messages.insert(0, {"role": "system", "content": self.params.system_prompt})
        return messages

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        types = self._types()
        if not types:
            raise ValueError("toolcalls: `mix` leaves no call type to plan")
        counts = _allocate(self.params.n, [w for _, w in types])
        items: list[Item] = []
        # Interleaved, so a partial run (--samples) still covers every call type.
        for i in range(max(counts)):
            for (call_type, _), count in zip(types, counts, strict=True):
                if i >= count:
                    continue
                sc = scenario(self.spec.seed, call_type, i, self.params.domains)
                items.append(Item(
                    id=f"{call_type}-{i}",
                    prompt=self._messages(sc),
                    expected=[[name, args] for name, args in sc.calls],
                    metadata={"call_type": call_type, "tool": sc.target, "tools": list(sc.tools),
                              "template": sc.template},
                ))
        return items

    async def solve(self, item: Item, client: EndpointClient) -> Sample:
        assert isinstance(item.prompt, list)
        meta = item.metadata
        out = await client.chat(
            item.prompt,
            max_tokens=self.params.max_tokens,
            stream=self.params.stream,
            tools=[TOOLS[t] for t in meta["tools"]],
            tool_choice=self.params.tool_choice,
        )
        expected = item.expected or []
        data: dict[str, Any] = {
            "call_type": meta["call_type"],
            "tool": meta["tool"],
            "domain": _DOMAIN_OF.get(meta["tool"], ""),
            "expect_call": bool(expected),
            "expected": expected,
            "prompt": item.prompt,
            "finish_reason": out.finish_reason,
        }
        score: float | None = None
        if out.ok:
            s = score_answer(expected, meta["tools"], out.text, out.finish_reason, out.tool_calls)
            agree = s.triggered == bool(expected)
            # Leaked markup makes the answer wrong even beside parsed calls: a client shows
            # that content to the user (gpt-oss's channel tokens, AIPerf PR #1318).
            correct = agree and not s.leaked and (
                not expected or bool(s.schema_ok and s.names_ok and s.args_ok))
            score = float(correct)
            data.update(
                triggered=s.triggered, trigger_agree=agree, schema_ok=s.schema_ok,
                names_ok=s.names_ok, args_ok=s.args_ok, calls=s.calls, leaked=s.leaked,
                dropped=s.dropped, faults=s.faults,
                valid_call=bool(expected) and s.triggered and bool(s.schema_ok),
            )
            if s.calls_total > len(s.calls):
                data["calls_total"] = s.calls_total
        output = out.text
        if out.tool_calls:
            rendered = "; ".join(f"{c.name[:MAX_NAME_CHARS]}({c.arguments[:300]})"
                                 for c in out.tool_calls[:MAX_CALLS])
            more = len(out.tool_calls) - MAX_CALLS
            if more > 0:
                rendered += f"; … {more:,} more calls"
            output = f"{output}\n[tool calls] {rendered}".strip()
        return Sample(
            suite=self.name, item_id=item.id, endpoint="", output=output, score=score,
            prompt_tokens=out.prompt_tokens, completion_tokens=out.completion_tokens,
            latency_s=out.latency_s, error=out.error, data=data,
        )

    def slice_of(self, sample: Sample) -> dict[str, str]:
        return {"tool": str(sample.data.get("tool")),
                "call type": str(sample.data.get("call_type"))}

    def analyze(
        self,
        baseline: list[Sample],
        candidate: list[Sample],
        *,
        provenance: tuple[Provenance, Provenance] | None = None,
    ) -> Analysis:
        analysis = paired_scores(baseline, candidate, slicer=self.slice_of)
        cand = {(s.item_id, s.repeat): s for s in candidate}
        pairs = [(b, cand[(b.item_id, b.repeat)]) for b in sorted(
            baseline, key=lambda s: (s.item_id, s.repeat))
            if (b.item_id, b.repeat) in cand and b.score is not None
            and cand[(b.item_id, b.repeat)].score is not None]
        analysis.details.update(tool_details(pairs))
        trig_b = [float(b.data.get("trigger_agree", False)) for b, _ in pairs]
        trig_c = [float(c.data.get("trigger_agree", False)) for _, c in pairs]
        calling = [(b, c) for b, c in pairs if b.data.get("expect_call")]
        valid_b = [float(b.data.get("valid_call", False)) for b, _ in calling]
        valid_c = [float(c.data.get("valid_call", False)) for _, c in calling]
        analysis.gate_test = partial(
            paired_gates, {"trigger_agreement": (trig_b, trig_c, "binary"),
                           "schema_valid_calls": (valid_b, valid_c, "binary")},
            n_pairs=len(pairs),
        )
        return analysis

    # ---- presentation

    @classmethod
    def slice_label(cls, data: dict[str, Any]) -> str | None:
        return f"{data.get('tool')} ({data.get('call_type')})"

    def prompt(self, item_id: str, data: dict[str, Any]) -> str | None:
        stored = prompt_text(data.get("prompt"))
        if stored:
            return stored
        m = _ID.match(item_id)
        if not m:
            return None
        sc = scenario(self.spec.seed, m.group(1), int(m.group(2)), self.params.domains)
        return prompt_text(self._messages(sc))

    @classmethod
    def findings(cls, entry: dict[str, Any]) -> list[Finding]:
        d = dict(entry.get("details") or {})
        out = list(super().findings(entry))
        gates = (d.get("tool_gates") or {})
        if gates:
            rows = [[name, g.get("verdict"), pct(g.get("baseline")), pct(g.get("candidate")),
                     g.get("n")] for name, g in gates.items()]
            failed = [n for n, g in gates.items() if g.get("verdict") == "fail"]
            head = [("Failed: " + ", ".join(
                f"{n} ({pct(gates[n].get('baseline'))} → {pct(gates[n].get('candidate'))})"
                for n in failed) + ".") if failed else
                "Gates: " + ", ".join(f"{n} {g.get('verdict')}" for n, g in gates.items()) + ".",
                ""]
            out.append(Finding(
                title="gates: " + ", ".join(f"{n} {g.get('verdict')}" for n, g in gates.items()),
                markdown=[*head, *markdown_table(["gate", "verdict", "baseline", "candidate",
                                                  "n"], rows), ""],
                severity="fail" if failed else "info",
                data={"tool_gates": gates},
            ))
        k2 = d.get("k2vv") or {}
        if k2:
            lines = []
            vs_base = (k2.get("candidate_vs_baseline") or {}).get("f1")
            lines.append(
                f"Trigger F1 (K2-Vendor-Verifier's tool_call_f1) of the candidate against the "
                f"baseline: {pct(vs_base)}; against the expected behaviour: baseline "
                f"{pct((k2.get('baseline_vs_expected') or {}).get('f1'))}, candidate "
                f"{pct((k2.get('candidate_vs_expected') or {}).get('f1'))}. Schema accuracy "
                f"(valid calls ÷ answers that called): baseline "
                f"{pct(k2.get('baseline_schema_accuracy'))}, candidate "
                f"{pct(k2.get('candidate_schema_accuracy'))}."
            )
            out.append(Finding(title="trigger F1 and schema accuracy", markdown=[*lines, ""],
                               data={"k2vv": k2}))
        faults = d.get("faults") or {}
        cand_faults = faults.get("candidate") or []
        if cand_faults or faults.get("baseline"):
            rows = [[r["tool"], r["fault"], r.get("baseline", 0), r.get("candidate", 0),
                     ", ".join(r.get("examples") or [])] for r in faults.get("rows") or []]
            worse = [r for r in faults.get("rows") or []
                     if r.get("candidate", 0) > r.get("baseline", 0)
                     and r["fault"] in ("leaked markup", "dropped call", "schema error",
                                        "too many calls")]
            said = ", ".join(
                f"{r['fault']} on {r['tool']} ({r.get('candidate', 0)} items, baseline "
                f"{r.get('baseline', 0)})" for r in worse[:6])
            title = "faults: " + (said or "as many on the candidate as on the baseline")
            lines = [f"Candidate faults beyond the baseline's: {said}." if said else
                     "The candidate has no tool-call fault the baseline does not have.", ""]
            markers = faults.get("leaked_markers") or []
            if markers:
                lines += ["Markup leaked into the candidate's content: "
                          + ", ".join(f"`{m}`" for m in markers) + ".", ""]
            out.append(Finding(
                title=title,
                markdown=[*lines, *markdown_table(
                    ["tool", "fault", "baseline", "candidate", "candidate items"], rows), ""],
                severity="warn" if worse else "info",
                data={"faults": faults.get("rows") or []},
            ))
        return out

    @classmethod
    def headline(cls, entry: dict[str, Any]) -> str | None:
        d = entry.get("details") or {}
        k2 = d.get("k2vv") or {}
        gates = d.get("tool_gates") or {}
        if not gates:
            return super().headline(entry)
        parts = [f"{n.replace('_', ' ')} {pct(g.get('baseline'))} → {pct(g.get('candidate'))}"
                 for n, g in gates.items()]
        f1 = (k2.get("candidate_vs_baseline") or {}).get("f1")
        return "; ".join(parts) + f"; trigger F1 vs baseline {pct(f1)}"

    @classmethod
    def view_model(cls, view: ViewInput) -> dict[str, Any]:
        d = view.details
        rows = d.get("by_tool") or []
        labels = [str(r.get("tool")) for r in rows]

        def pc(x: Any) -> float | None:
            return None if x is None else round(1000 * float(x)) / 10

        charts = []
        if rows:
            charts.append(Chart("toolcalls-by-tool", "bar", "Correct calls by tool (%)", labels, [
                {"name": "baseline", "color": "baseline", "data": [pc(r.get("baseline")) for r in rows]},
                {"name": "candidate", "color": "candidate", "data": [pc(r.get("candidate")) for r in rows]},
            ], y_name="%").to_dict())
        return {"by_tool": rows, "by_call_type": d.get("by_call_type") or [],
                "gates": d.get("tool_gates") or {}, "k2vv": d.get("k2vv") or {},
                "faults": (d.get("faults") or {}).get("rows") or [], "charts": charts}


def tool_details(pairs: Sequence[tuple[Sample, Sample]]) -> dict[str, Any]:
    """Per tool and call type rates, K2VV's numbers and the fault table of scored pairs."""
    def rate(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    def group(key: str) -> list[dict[str, Any]]:
        g: dict[str, list[tuple[Sample, Sample]]] = defaultdict(list)
        for b, c in pairs:
            g[str(b.data.get(key))].append((b, c))
        return [
            {key: name, "n": len(ps),
             "baseline": rate([float(b.score or 0) for b, _ in ps]),
             "candidate": rate([float(c.score or 0) for _, c in ps]),
             "regressions": sum(1 for b, c in ps if (b.score or 0) >= 0.5 > (c.score or 0))}
            for name, ps in sorted(g.items())
        ]

    expected = [bool(b.data.get("expect_call")) for b, _ in pairs]
    trig_b = [bool(b.data.get("triggered")) for b, _ in pairs]
    trig_c = [bool(c.data.get("triggered")) for _, c in pairs]

    def schema_acc(side: int) -> float | None:
        called = [p[side] for p in pairs if p[side].data.get("triggered")]
        return rate([float(bool(s.data.get("schema_ok"))) for s in called])

    k2 = {
        "candidate_vs_baseline": trigger_f1(trig_b, trig_c),
        "baseline_vs_expected": trigger_f1(expected, trig_b),
        "candidate_vs_expected": trigger_f1(expected, trig_c),
        "baseline_schema_accuracy": schema_acc(0),
        "candidate_schema_accuracy": schema_acc(1),
        "count_tool_calls": {"baseline": sum(trig_b), "candidate": sum(trig_c)},
    }
    counts: dict[str, Counter[tuple[str, str]]] = {"baseline": Counter(), "candidate": Counter()}
    examples: dict[tuple[str, str], list[str]] = defaultdict(list)
    for b, c in pairs:
        for role, s in (("baseline", b), ("candidate", c)):
            for fault in s.data.get("faults") or []:
                key = (str(s.data.get("tool")), str(fault))
                counts[role][key] += 1
                if role == "candidate" and len(examples[key]) < 3:
                    examples[key].append(s.item_id)
    keys = sorted(set(counts["baseline"]) | set(counts["candidate"]),
                  key=lambda k: (-counts["candidate"][k] + counts["baseline"][k], k))
    rows = [{"tool": t, "fault": f, "baseline": counts["baseline"][(t, f)],
             "candidate": counts["candidate"][(t, f)], "examples": examples[(t, f)]}
            for t, f in keys]
    leaked = sorted({m for _, c in pairs for m in c.data.get("leaked") or []})
    return {
        "by_tool": group("tool"),
        "by_call_type": group("call_type"),
        "k2vv": k2,
        "faults": {"rows": rows, "candidate": sum(counts["candidate"].values()),
                   "baseline": sum(counts["baseline"].values()), "leaked_markers": leaked},
    }
