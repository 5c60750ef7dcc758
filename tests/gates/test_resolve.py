"""gates.resolve: the one place that decides how a suite is gated; each kind declares its default."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from evalsvc.domain import RunOptions
from evalsvc.gates import (
    GateLimits,
    GatePolicyError,
    evaluate_gate,
    resolve,
    threshold_gate,
)
from evalsvc.suites import GatePolicy, SuiteSpec, catalog, suite_kinds
from evalsvc.suites._base import Suite

BUILTIN = {"needle", "reasoning", "determinism", "drift", "lmeval", "speed", "dataset"}


# Kinds that cannot be built without parameters (the dataset kind needs its data).
_REQUIRED: dict[str, dict[str, object]] = {
    "dataset": {"path": "data/dataset/qa.jsonl", "prompt": {"template": "{question}"},
                "reference": "answer", "n": 10},
}


def _suite(kind: str, gate: dict[str, object] | None = None, **params: object) -> Suite:
    cls = suite_kinds()[kind]
    params = {**_REQUIRED.get(kind, {}), **params}
    spec = SuiteSpec(name=f"t-{kind}", kind=kind, params=dict(params), gate=GatePolicy(**(gate or {})))
    return cls(spec)


def test_every_builtin_kind_declares_a_documented_default() -> None:
    kinds = suite_kinds()
    assert set(kinds) >= BUILTIN
    for name in BUILTIN:
        d = kinds[name].gate_default
        assert d is not None and d.suite_kind == name
        assert 0 < d.alpha < 0.5 and d.rationale and d.sources
        # The declaration is the only place: no class variable repeats (or contradicts) it.
        for dup in ("metric", "gate_kind", "higher_is_better"):
            assert dup not in vars(kinds[name]), f"{name} repeats {dup} beside gate_default"
        if d.gate == "noninferiority":
            assert d.margin is not None and d.margin >= 0 and d.threshold is None
        else:
            assert d.threshold is not None and d.margin is None
        json.dumps(d.to_dict())


def test_specific_values_and_one_drift_threshold() -> None:
    kinds = suite_kinds()
    assert kinds["needle"].gate_default.margin == 0.05  # type: ignore[union-attr]
    assert kinds["determinism"].gate_default.margin == 0.10  # type: ignore[union-attr]
    assert kinds["speed"].gate_default.margin == 0.0  # type: ignore[union-attr]
    assert not kinds["speed"].gate_default.required  # type: ignore[union-attr]
    assert kinds["drift"].gate_default.threshold == 0.05  # type: ignore[union-attr]
    # No catalog YAML overrides the drift threshold: one value, the kind's.
    for entry in catalog():
        if isinstance(entry, Suite) and entry.kind == "drift":
            assert entry.spec.gate.threshold is None
            assert entry.bind_gate().threshold == 0.05


def test_margin_zero_is_a_margin() -> None:
    # The old bug: `flag or yaml or default` dropped 0.0.
    g = _suite("reasoning").bind_gate(RunOptions(margin=0.0))
    assert g.margin == 0.0 and g.origin["margin"] == "submitter"
    g = _suite("reasoning", {"margin": 0.0}).bind_gate(RunOptions())
    assert g.margin == 0.0 and g.origin["margin"] == "suite policy"
    g = _suite("speed").bind_gate(RunOptions())
    assert g.margin == 0.0 and g.origin["margin"] == "kind default" and not g.gated
    g = _suite("reasoning").bind_gate(RunOptions(alpha=0.01))
    assert g.alpha == 0.01 and g.origin["alpha"] == "submitter"


def test_precedence_and_origin() -> None:
    g = _suite("needle").bind_gate(None)
    assert (g.margin, g.alpha, g.gate) == (0.05, 0.05, "noninferiority")
    assert g.origin == {
        "metric": "kind default",
        "enabled": "kind default",
        "baseline_floor": "kind default",
        "slice_min_items": "kind default",
        "alpha": "kind default",
        "margin": "kind default",
    }
    g = _suite("needle", {"margin": 0.10, "alpha": 0.04}).bind_gate(RunOptions(margin=0.07))
    assert (g.margin, g.policy_margin, g.alpha) == (0.07, 0.10, 0.04)
    assert g.origin["margin"] == "submitter" and g.origin["alpha"] == "suite policy"
    # A YAML threshold switches a kind to a threshold gate; the submitter's margin is unused.
    g = _suite("determinism", {"threshold": 0.5}).bind_gate(RunOptions(margin=0.01))
    assert g.gate == "threshold" and g.threshold == 0.5 and g.margin is None
    assert "not applicable" in g.origin["margin"]
    d = _suite("drift").bind_gate(RunOptions(margin=0.01))
    assert d.threshold == 0.05 and not d.higher_is_better


# model_construct: the request schema already refuses some of these (non-finite, alpha > 0.5);
# resolve() must refuse them on its own too, whatever built the options.
@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (RunOptions.model_construct(margin=0.9), "loosen"),
        (RunOptions.model_construct(margin=1e308), "loosen"),
        (RunOptions.model_construct(margin=-0.1), "≥ 0"),
        (RunOptions.model_construct(margin=math.inf), "finite"),
        (RunOptions.model_construct(alpha=5), "(0, 0.5)"),
        (RunOptions.model_construct(alpha=0.2), "loosen"),
        (RunOptions.model_construct(alpha=0.0), "(0, 0.5)"),
        (RunOptions.model_construct(max_error_rate=-0.5), "max_error_rate"),
        (RunOptions.model_construct(max_error_rate=2.0), "max_error_rate"),
    ],
)
def test_submitter_may_only_tighten(options: RunOptions, needle: str) -> None:
    with pytest.raises(GatePolicyError) as exc:
        _suite("reasoning").bind_gate(options)
    assert needle in str(exc.value)
    if needle == "loosen":
        assert "t-reasoning" in str(exc.value) and "only tighten" in str(exc.value)


def test_informational_gate_ignores_a_looser_submitter_margin() -> None:
    g = _suite("speed").bind_gate(RunOptions(margin=0.1))
    assert g.margin == 0.0 and "ignored" in g.origin["margin"]


def test_server_limits_bound_the_policy() -> None:
    limits = GateLimits(max_margin=0.2, max_alpha=0.05)
    with pytest.raises(GatePolicyError, match="EVALSVC_GATE_MAX_MARGIN"):
        _suite("reasoning", {"margin": 0.3}).bind_gate(None, limits=limits)
    with pytest.raises(GatePolicyError, match="EVALSVC_GATE_MAX_ALPHA"):
        _suite("reasoning", {"alpha": 0.08}).bind_gate(None, limits=limits)
    assert _suite("reasoning", {"margin": 0.2}).bind_gate(None, limits=limits).margin == 0.2


def test_plugin_kind_without_a_declaration_gets_the_generic_default() -> None:
    from pydantic import BaseModel

    class P(BaseModel):
        n: int = 1

    class Plugin(Suite):
        kind = "plugin-test"
        Params = P

        async def plan(self, client, provenance):  # type: ignore[no-untyped-def]
            return []

    g = Plugin(SuiteSpec(name="p", kind="plugin-test")).bind_gate(None)
    assert (g.metric, g.kind, g.margin, g.gated) == ("accuracy", "binary", 0.05, True)


def test_resolved_defaults_drive_the_gates() -> None:
    rng = np.random.default_rng(0)
    for name in sorted(BUILTIN):
        g = _suite(name).bind_gate(None)
        if g.threshold is not None:
            out = threshold_gate(
                rng.gamma(0.5, 0.002, 200),
                metric=g.metric,
                threshold=g.threshold,
                higher_is_better=g.higher_is_better,
                alpha=g.alpha,
                kind="continuous",
            )
        else:
            assert g.margin is not None
            if g.kind == "binary":
                base = (rng.random(300) < 0.8).astype(float)
                cand = base.copy()
            else:
                base = rng.lognormal(3, 0.2, 300)
                cand = base * 1.2
            out = evaluate_gate(
                base, cand, metric=g.metric, kind=g.kind, margin=g.margin, alpha=g.alpha,
                higher_is_better=g.higher_is_better,
            )
        assert out.verdict == "pass", name
        json.dumps(g.to_dict())


def test_resolve_takes_a_plain_policy_object() -> None:
    d = suite_kinds()["needle"].gate_default
    assert d is not None
    g = resolve(d, None, None)
    assert g.margin == 0.05 and g.policy_alpha == 0.05


def test_every_catalog_suite_resolves_within_the_default_server_limits() -> None:
    for entry in catalog():
        if isinstance(entry, Suite):
            g = entry.bind_gate(None, limits=GateLimits())
            assert (g.margin is None) != (g.threshold is None), entry.name
