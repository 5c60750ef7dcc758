"""``structured``: seeded extraction into a JSON schema, sent with structured-output decoding and
gated on validity and field accuracy against the baseline.

Method:
- **Items.** A short seeded text (a person, a support ticket, an order, a shopping list, an
  event, a payment) and the JSON schema to extract it into, with the expected value known from
  the draw. The six shapes spread over the schema features whose engine support JSONSchemaBench
  found uneven (Geng et al. 2025, arXiv 2501.10868: coverage of real-world schemas differs by
  up to 2× between constrained-decoding engines and collapses with nesting, patterns and
  unions): flat scalars, enums, nested objects, arrays of objects with ``minItems``, optional
  fields with ``format``/``pattern``, and a nullable union (``anyOf`` with ``null``). Item ``k``
  of a shape is drawn from ``Random("{seed}:{shape}:{k}")``.
- **Sent** with the schema in the prompt and, by ``mode``: ``response_format`` (OpenAI's
  ``{"type": "json_schema", "json_schema": {"name", "schema", "strict": true}}``; the default,
  which needs the probe's ``json_schema`` capability: an endpoint that ignores it is refused
  before any item), or an engine's own field: ``structured_outputs`` (vLLM ≥ 0.12:
  ``{"structured_outputs": {"json": schema}}``), ``guided_json`` (vLLM before 0.12, which
  removed it), ``json_schema`` (llama.cpp's server), or ``prompt`` (no constraint: what the
  model does alone).
- **Scored per item**: ``valid`` (the content is one JSON value, nothing around it, valid
  against the schema by the ``jsonschema`` package) and ``field_accuracy`` (share of the
  expected leaves present with the expected value; 0 when not JSON). ``Sample.score`` is 1 when
  valid and every field is right.
- **Gated** (``Analysis.gate_test``, ``_paired_gates``) on two paired non-inferiority tests at
  the suite's margin and α: validity (binary) and field accuracy (continuous, range 0-1); fail
  when either fails. Slices: shape.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalsvc import limits
from evalsvc.domain import Item, Provenance, Sample
from evalsvc.gates import GateDefaults
from evalsvc.suites._base import Analysis, Suite, SuiteSpec, paired_scores, prompt_text
from evalsvc.suites._present import Chart, Finding, ViewInput, markdown_table, pct
from evalsvc.suites.kinds._jsonschema import field_accuracy, parse_json, schema_errors
from evalsvc.suites.kinds._paired_gates import _NO_SAMPLING, paired_gates

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import EndpointClient

Shape = Literal["flat", "enum", "nested", "array", "optional", "union"]
SHAPES: tuple[Shape, ...] = ("flat", "enum", "nested", "array", "optional", "union")
Mode = Literal["response_format", "structured_outputs", "guided_json", "json_schema", "prompt"]

JSONSCHEMABENCH_SOURCE = (
    "Geng et al. 2025, JSONSchemaBench (arXiv 2501.10868): constrained-decoding engines differ "
    "up to 2x in the real-world schemas they support; coverage falls with nesting, patterns and "
    "unions"
)

_NAMES = ["Ann Berg", "Bo Chen", "Carla Diaz", "Dev Patel", "Eva Novak", "Femi Ade", "Gus Holm"]
_CITIES = ["Lisbon", "Oslo", "Lima", "Kyoto", "Accra", "Porto", "Quito"]
_GOODS = ["apples", "rice", "soap", "batteries", "coffee", "bread", "tea", "eggs"]
_TITLES = ["planning meeting", "yoga class", "board review", "team dinner", "code review"]


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


SCHEMAS: dict[str, dict[str, Any]] = {
    "flat": _obj({"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                  "member": {"type": "boolean"}}, ["name", "age", "member"]),
    "enum": _obj({"category": {"type": "string", "enum": ["billing", "shipping", "technical"]},
                  "priority": {"type": "string", "enum": ["low", "medium", "high"]},
                  "product": {"type": "string"}}, ["category", "priority", "product"]),
    "nested": _obj({
        "customer": _obj({"name": {"type": "string"}, "city": {"type": "string"}},
                         ["name", "city"]),
        "order": _obj({"id": {"type": "string", "pattern": r"^A\d{3}$"},
                       "total": {"type": "number", "minimum": 0}}, ["id", "total"]),
    }, ["customer", "order"]),
    "array": _obj({"items": {"type": "array", "minItems": 1, "items": _obj(
        {"name": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}},
        ["name", "quantity"])}}, ["items"]),
    "optional": _obj({"title": {"type": "string"},
                      "date": {"type": "string", "format": "date"},
                      "time": {"type": "string", "pattern": r"^\d{2}:\d{2}$"},
                      "location": {"type": "string"}}, ["title", "date", "time"]),
    "union": _obj({"method": {"type": "string", "enum": ["card", "cash", "transfer"]},
                   "amount": {"type": "number"},
                   "card_last4": {"anyOf": [{"type": "string", "pattern": r"^\d{4}$"},
                                            {"type": "null"}]}},
                  ["method", "amount", "card_last4"]),
}


def draw(seed: int, shape: str, k: int) -> tuple[str, dict[str, Any]]:
    """Item ``k`` of ``shape``: the text and the value it holds (a pure function)."""
    rng = random.Random(f"{seed}:{shape}:{k}")
    if shape == "flat":
        name, age, member = rng.choice(_NAMES), rng.randint(19, 80), rng.random() < 0.5
        text = (f"{name} is {age} years old and {'is' if member else 'is not'} a member of "
                "the club.")
        return text, {"name": name, "age": age, "member": member}
    if shape == "enum":
        cat, pri = rng.choice(["billing", "shipping", "technical"]), rng.choice(
            ["low", "medium", "high"])
        product = rng.choice(["router", "laptop", "printer", "phone"])
        what = {"billing": "I was charged twice for my", "shipping": "I am still waiting for my",
                "technical": "I cannot turn on my"}[cat]
        text = f"Ticket ({pri} priority, {cat}): {what} {product}."
        return text, {"category": cat, "priority": pri, "product": product}
    if shape == "nested":
        name, city = rng.choice(_NAMES), rng.choice(_CITIES)
        oid, total = f"A{rng.randint(100, 999)}", rng.randint(5, 500)
        text = f"Order {oid} for {name} in {city}, total {total} euros."
        return text, {"customer": {"name": name, "city": city},
                      "order": {"id": oid, "total": total}}
    if shape == "array":
        goods = rng.sample(_GOODS, rng.randint(2, 3))
        qty = [rng.randint(1, 6) for _ in goods]
        text = "Shopping list: " + ", ".join(f"{q} {g}" for q, g in zip(qty, goods, strict=True)) + "."
        return text, {"items": [{"name": g, "quantity": q} for q, g in zip(qty, goods, strict=True)]}
    if shape == "optional":
        title = rng.choice(_TITLES)
        date = f"2027-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        time = f"{rng.randint(8, 19):02d}:{rng.choice(['00', '15', '30', '45'])}"
        value: dict[str, Any] = {"title": title, "date": date, "time": time}
        text = f"The {title} is on {date} at {time}"
        if rng.random() < 0.5:
            value["location"] = rng.choice(_CITIES)
            text += f" in {value['location']}"
        return text + ".", value
    if shape == "union":
        method = rng.choice(["card", "cash", "transfer"])
        amount = rng.randint(3, 900)
        last4 = f"{rng.randint(0, 9999):04d}" if method == "card" else None
        text = f"Paid {amount} dollars by {method}" + (
            f" with the card ending in {last4}." if last4 else ".")
        return text, {"method": method, "amount": amount, "card_last4": last4}
    raise ValueError(f"unknown shape {shape!r}")


class StructuredParams(BaseModel):
    """Parameters of a structured-output suite (validated from the YAML ``params`` mapping)."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(default=60, ge=1, le=limits.MAX_ITEMS)
    """Total items, spread evenly over ``shapes`` (``--samples``)."""
    shapes: list[Shape] = Field(default_factory=lambda: list(SHAPES), min_length=1)
    mode: Mode = "response_format"
    """How the schema is enforced (see the module docstring); ``prompt`` sends none."""
    max_tokens: int = Field(default=160, ge=16, le=limits.MAX_TOKENS)


_ID = re.compile(r"^(flat|enum|nested|array|optional|union)-(\d+)$")


class StructuredSuite(Suite):
    kind = "structured"
    version = "1"
    Params = StructuredParams
    requires = frozenset({"chat", "json_schema"})
    gate_default = GateDefaults.paired_noninferiority(
        "structured",
        metric="structured_accuracy",
        margin=0.05,
        rationale=(
            "Two paired gates at the answer kinds' 5-point margin: schema validity (binary) and "
            "field accuracy (continuous, 0-1). Constrained decoding should keep validity at the "
            "baseline's whatever the weights; field accuracy is where quantization shows. "
            "Slices: schema shape."
        ),
        sources=(JSONSCHEMABENCH_SOURCE,),
    )
    description = (
        "Seeded extraction into JSON schemas of six shapes, sent with response_format (or an "
        "engine's guided decoding); gated on validity and field accuracy."
    )
    slice_fields = (("shape", "str"),)
    view_template = "structured.html"
    #: A reasoning model's trace is split from the answer before it is scored (``Suite.sample``:
    #: ``reasoning_content`` or ``<think>`` markers), so markup and JSON are judged on the answer.
    scores_answers = True
    params: StructuredParams

    def __init__(self, spec: SuiteSpec) -> None:
        if spec.sampling is not None:
            raise ValueError(_NO_SAMPLING.format(kind=self.kind))
        super().__init__(spec)
        # Only response_format needs the probe's json_schema check; an engine's own field is
        # the user's statement that the engine has it, and `prompt` constrains nothing.
        if self.params.mode != "response_format":
            self.requires = frozenset({"chat"})  # type: ignore[misc]

    @property
    def sampleable(self) -> bool:
        # Greedy only, like the block: its two gates pair one answer per item, so a run's
        # --sampling-k passes this suite by (docs/suites.md, "Sampled evaluation").
        return False

    def item_count(self) -> int:
        return self.params.n

    def _messages(self, shape: str, text: str) -> list[dict[str, str]]:
        import json

        return [{"role": "user", "content": (
            "Extract the information in the text as JSON that follows this JSON schema. Answer "
            f"with the JSON only.\nSchema: {json.dumps(SCHEMAS[shape])}\nText: {text}")}]

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        shapes = list(dict.fromkeys(self.params.shapes))
        items = []
        for i in range(self.params.n):
            shape, k = shapes[i % len(shapes)], i // len(shapes)
            text, value = draw(self.spec.seed, shape, k)
            items.append(Item(id=f"{shape}-{k}", prompt=self._messages(shape, text),
                              expected=value, metadata={"shape": shape}))
        return items

    def _constraint(self, shape: str) -> dict[str, Any]:
        schema = SCHEMAS[shape]
        mode = self.params.mode
        if mode == "response_format":
            return {"response_format": {"type": "json_schema", "json_schema": {
                "name": shape, "schema": schema, "strict": True}}}
        if mode == "structured_outputs":
            return {"extra": {"structured_outputs": {"json": schema}}}
        if mode == "guided_json":
            return {"extra": {"guided_json": schema}}
        if mode == "json_schema":
            return {"extra": {"json_schema": schema}}
        return {}

    async def solve(self, item: Item, client: EndpointClient) -> Sample:
        assert isinstance(item.prompt, list)
        shape = item.metadata["shape"]
        out = await client.chat(item.prompt, max_tokens=self.params.max_tokens,
                                **self._constraint(shape))
        data: dict[str, Any] = {"shape": shape, "expected": item.expected, "mode": self.params.mode,
                                "finish_reason": out.finish_reason}
        score = None
        if out.ok:
            value, err, fenced = parse_json(out.text.strip())
            errors = [err] if err else schema_errors(SCHEMAS[shape], value)
            acc = field_accuracy(item.expected, value) if err is None else 0.0
            data.update(valid=not errors, field_accuracy=acc, errors=errors, fenced=fenced,
                        truncated=out.finish_reason == "length")
            score = float(not errors and acc == 1.0)
        return Sample(
            suite=self.name, item_id=item.id, endpoint="", output=out.text, score=score,
            prompt_tokens=out.prompt_tokens, completion_tokens=out.completion_tokens,
            latency_s=out.latency_s, error=out.error, data=data,
        )

    def slice_of(self, sample: Sample) -> dict[str, str]:
        return {"shape": str(sample.data.get("shape"))}

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
        analysis.details["by_shape"] = by_shape(pairs)
        analysis.details["invalid_examples"] = [
            {"item": c.item_id, "shape": c.data.get("shape"),
             "errors": (c.data.get("errors") or [])[:2]}
            for _, c in pairs if not c.data.get("valid")][:10]
        analysis.gate_test = partial(paired_gates, {
            "valid": ([float(bool(b.data.get("valid"))) for b, _ in pairs],
                      [float(bool(c.data.get("valid"))) for _, c in pairs], "binary"),
            "field_accuracy": ([float(b.data.get("field_accuracy") or 0) for b, _ in pairs],
                               [float(c.data.get("field_accuracy") or 0) for _, c in pairs],
                               "continuous"),
        }, n_pairs=len(pairs))
        return analysis

    # ---- presentation

    @classmethod
    def slice_label(cls, data: dict[str, Any]) -> str | None:
        return str(data.get("shape"))

    def prompt(self, item_id: str, data: dict[str, Any]) -> str | None:
        m = _ID.match(item_id)
        if not m:
            return None
        text, _ = draw(self.spec.seed, m.group(1), int(m.group(2)))
        return prompt_text(self._messages(m.group(1), text))

    @classmethod
    def findings(cls, entry: dict[str, Any]) -> list[Finding]:
        d = dict(entry.get("details") or {})
        out = list(super().findings(entry))
        gates = d.get("tool_gates") or {}
        if gates:
            rows = [[n, g.get("verdict"), pct(g.get("baseline")), pct(g.get("candidate")),
                     g.get("n")] for n, g in gates.items()]
            failed = [n for n, g in gates.items() if g.get("verdict") == "fail"]
            head = ("Failed: " + ", ".join(
                f"{n} ({pct(gates[n].get('baseline'))} → {pct(gates[n].get('candidate'))})"
                for n in failed) + ".") if failed else "Gates: " + ", ".join(
                f"{n} {g.get('verdict')}" for n, g in gates.items()) + "."
            out.append(Finding(
                title="gates: " + ", ".join(f"{n} {g.get('verdict')}" for n, g in gates.items()),
                markdown=[head, "", *markdown_table(["gate", "verdict", "baseline", "candidate",
                                                     "n"], rows), ""],
                severity="fail" if any(g.get("verdict") == "fail" for g in gates.values())
                else "info",
                data={"gates": gates},
            ))
        shapes = d.get("by_shape") or []
        if shapes:
            table = markdown_table(
                ["shape", "n", "valid (baseline)", "valid (candidate)", "fields (baseline)",
                 "fields (candidate)"],
                [[r["shape"], r["n"], pct(r["valid_baseline"]), pct(r["valid_candidate"]),
                  pct(r["fields_baseline"]), pct(r["fields_candidate"])] for r in shapes])
            bad = d.get("invalid_examples") or []
            lines = [*table, ""]
            if bad:
                lines += ["Invalid candidate answers: " + "; ".join(
                    f"{x['item']} ({'; '.join(x['errors'])})" for x in bad[:5]) + ".", ""]
            out.append(Finding(title="validity and field accuracy by schema shape",
                               markdown=lines, severity="warn" if bad else "info",
                               data={"by_shape": shapes, "invalid_examples": bad}))
        return out

    @classmethod
    def headline(cls, entry: dict[str, Any]) -> str | None:
        gates = (entry.get("details") or {}).get("tool_gates") or {}
        if not gates:
            return super().headline(entry)
        return "; ".join(f"{n.replace('_', ' ')} {pct(g.get('baseline'))} → "
                         f"{pct(g.get('candidate'))}" for n, g in gates.items())

    @classmethod
    def view_model(cls, view: ViewInput) -> dict[str, Any]:
        rows = view.details.get("by_shape") or []

        def pc(x: Any) -> float | None:
            return None if x is None else round(1000 * float(x)) / 10

        charts = [Chart("structured-by-shape", "bar", "Valid answers by schema shape (%)",
                        [r["shape"] for r in rows], [
            {"name": "baseline", "color": "baseline", "data": [pc(r["valid_baseline"]) for r in rows]},
            {"name": "candidate", "color": "candidate", "data": [pc(r["valid_candidate"]) for r in rows]},
        ], y_name="%").to_dict()] if rows else []
        return {"by_shape": rows, "gates": view.details.get("tool_gates") or {},
                "invalid": view.details.get("invalid_examples") or [], "charts": charts}


def by_shape(pairs: Sequence[tuple[Sample, Sample]]) -> list[dict[str, Any]]:
    """Validity and field accuracy of both sides per schema shape."""
    groups: dict[str, list[tuple[Sample, Sample]]] = defaultdict(list)
    for b, c in pairs:
        groups[str(b.data.get("shape"))].append((b, c))

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    return [
        {"shape": shape, "n": len(ps),
         "valid_baseline": mean([float(bool(b.data.get("valid"))) for b, _ in ps]),
         "valid_candidate": mean([float(bool(c.data.get("valid"))) for _, c in ps]),
         "fields_baseline": mean([float(b.data.get("field_accuracy") or 0) for b, _ in ps]),
         "fields_candidate": mean([float(c.data.get("field_accuracy") or 0) for _, c in ps])}
        for shape, ps in sorted(groups.items())
    ]
