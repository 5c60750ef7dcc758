"""combine_verdicts: Holm on fail calls, intersection-union on pass."""

from __future__ import annotations

import pytest
from statsmodels.stats.multitest import multipletests

from evalsvc.gates import GateOutcome, combine_verdicts, holm_inferiority


def _outcome(verdict: str, p_inf: float | None, alpha: float = 0.05) -> GateOutcome:
    return GateOutcome(
        verdict=verdict,  # type: ignore[arg-type]
        metric="m",
        baseline=0.5,
        candidate=0.5,
        delta=0.0,
        ci=(-0.1, 0.1),
        p_value=None if p_inf is None else 1 - p_inf,
        margin=0.05,
        alpha=alpha,
        n=100,
        mde=0.05,
        test="t",
        details={"p_inferiority": p_inf},
    )


def test_all_pass_is_pass() -> None:
    assert combine_verdicts([_outcome("pass", 0.99), _outcome("pass", 0.97)]) == "pass"


def test_one_inconclusive_blocks_pass() -> None:
    assert combine_verdicts([_outcome("pass", 0.99), _outcome("inconclusive", 0.3)]) == (
        "inconclusive"
    )


def test_fail_must_survive_holm() -> None:
    # Alone, p_inf = 0.03 < 0.05 is a fail.
    assert combine_verdicts([_outcome("fail", 0.03)]) == "fail"
    # With two other gates Holm needs 0.03 < 0.05/3: it does not survive → inconclusive.
    gates = [_outcome("fail", 0.03), _outcome("pass", 0.99), _outcome("pass", 0.98)]
    assert combine_verdicts(gates) == "inconclusive"
    # A strong fail survives.
    gates[0] = _outcome("fail", 0.001)
    assert combine_verdicts(gates) == "fail"


def test_holm_inferiority_matches_statsmodels() -> None:
    ps = [0.001, 0.02, 0.04, 0.3, None]
    gates = [_outcome("fail" if p is not None and p < 0.05 else "inconclusive", p) for p in ps]
    expected = multipletests([0.001, 0.02, 0.04, 0.3, 1.0], method="holm")[1]
    assert holm_inferiority(gates) == pytest.approx(list(expected), abs=1e-12)
    # 0.001·5 = 0.005 < 0.05 survives; 0.02·4 = 0.08 does not.
    assert combine_verdicts(gates) == "fail"


def test_family_alpha_defaults_to_strictest_gate() -> None:
    gates = [_outcome("fail", 0.02, alpha=0.05), _outcome("inconclusive", 0.9, alpha=0.01)]
    assert combine_verdicts(gates) == "inconclusive"  # 0.04 adjusted ≥ 0.01
    assert combine_verdicts(gates, alpha=0.05) == "fail"


def test_empty_is_inconclusive() -> None:
    assert combine_verdicts([]) == "inconclusive"
