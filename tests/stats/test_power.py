"""Power, MDE and sample-size formulas: internal consistency and closed forms.

The simulated power at ``required_n`` is checked in test_calibration.py."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from evalsvc.stats import (
    mde_mean,
    mde_paired_binary,
    power_paired_binary,
    required_n,
    required_n_mean,
    tango_ci,
)


@pytest.mark.parametrize("psi", [0.02, 0.1, 0.3])
@pytest.mark.parametrize("margin", [0.02, 0.05, 0.1])
def test_required_n_is_smallest_n_with_power(psi: float, margin: float) -> None:
    n = required_n(margin, psi, alpha=0.05, power=0.8)
    assert power_paired_binary(n, margin, psi, alpha=0.05) >= 0.8 - 1e-9
    assert power_paired_binary(n - 1, margin, psi, alpha=0.05) < 0.8


def test_required_n_fail_side_and_symmetry() -> None:
    # Planning for a true drop of 2δ targets the fail call; it needs no more items than
    # planning for Δ = 0 because the variance ψ − Δ² is smaller.
    n0 = required_n(0.05, 0.2, true_delta=0.0)
    n_fail = required_n(0.05, 0.2, true_delta=-0.1)
    assert n_fail <= n0
    assert power_paired_binary(n0, 0.05, 0.2, true_delta=-0.1) >= 0.8


def test_no_discordance_plan_matches_tango_bound() -> None:
    # With ψ = 0 the gate passes iff the corrected Tango lower bound (b = c = 0) exceeds −δ.
    margin = 0.05
    n = required_n(margin, 0.0)
    assert tango_ci(0, 0, n, alpha=0.1, corrected=True)[0] > -margin - 2e-3
    z = stats.norm.isf(0.05)
    assert n >= z * z * (1 - margin) / margin  # uncorrected closed form is a lower bound


def test_required_n_validation() -> None:
    with pytest.raises(ValueError, match="cannot exceed"):
        required_n(0.05, 0.05, true_delta=-0.1)
    with pytest.raises(ValueError, match="boundary"):
        required_n(0.05, 0.2, true_delta=-0.05)
    with pytest.raises(ValueError, match="alpha"):
        required_n(0.05, 0.2, alpha=0.7)


def test_mde_formulas() -> None:
    k = stats.norm.isf(0.05) + stats.norm.ppf(0.8)
    assert mde_paired_binary(400, 0.1) == pytest.approx(k * math.sqrt(0.1 / 400))
    assert mde_mean(100, 2.0) == pytest.approx(k * 0.2)
    assert mde_mean(0, 1.0) == math.inf
    n = required_n_mean(0.1, 1.0)
    assert mde_mean(n, 1.0) <= 0.1 < mde_mean(n - 1, 1.0)
