"""DEFAULTS: one documented gate per suite kind, usable by evaluate_gate/threshold_gate."""

from __future__ import annotations

import json

import numpy as np

from evalsvc.gates import DEFAULTS, evaluate_gate, threshold_gate

KINDS = {"needle", "reasoning", "determinism", "drift", "lmeval", "speed"}


def test_every_suite_kind_has_a_documented_default() -> None:
    assert set(DEFAULTS) == KINDS
    for kind, d in DEFAULTS.items():
        assert d.suite_kind == kind
        assert 0 < d.alpha < 0.5
        assert d.rationale and d.sources
        if d.gate == "noninferiority":
            assert d.margin is not None and d.margin >= 0 and d.threshold is None
        else:
            assert d.threshold is not None and d.margin is None
        json.dumps(d.to_dict())


def test_specific_values() -> None:
    assert DEFAULTS["needle"].margin == 0.05 and DEFAULTS["reasoning"].margin == 0.05
    assert DEFAULTS["determinism"].margin == 0.10 and not DEFAULTS["determinism"].paired
    assert DEFAULTS["drift"].gate == "threshold" and not DEFAULTS["drift"].higher_is_better
    assert DEFAULTS["speed"].kind == "ratio" and not DEFAULTS["speed"].required


def test_defaults_drive_the_gates() -> None:
    rng = np.random.default_rng(0)
    for d in DEFAULTS.values():
        if d.gate == "threshold":
            assert d.threshold is not None
            out = threshold_gate(
                rng.gamma(0.5, 0.002, 200),
                metric=d.metric,
                threshold=d.threshold,
                higher_is_better=d.higher_is_better,
                alpha=d.alpha,
                kind="continuous",
            )
        else:
            assert d.margin is not None
            if d.kind == "binary":
                base = (rng.random(300) < 0.8).astype(float)
                cand = base.copy()
            else:
                base = rng.lognormal(3, 0.2, 300)
                cand = base * 1.2
            out = evaluate_gate(
                base,
                cand,
                metric=d.metric,
                kind=d.kind,
                margin=d.margin,
                alpha=d.alpha,
                higher_is_better=d.higher_is_better,
                paired=d.paired,
            )
        assert out.verdict == "pass", d.suite_kind
