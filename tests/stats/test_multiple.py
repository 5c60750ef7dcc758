"""Holm's step-down adjustment against statsmodels."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from evalsvc.stats import holm


def test_matches_statsmodels_multipletests() -> None:
    rng = np.random.default_rng(0)
    # multipletests costs ~0.1 s a call, so a few vectors per size.
    for m in (1, 2, 3, 7, 30):
        for _ in range(3):
            p = rng.uniform(0, 0.2, m) ** 2
            if m > 2:
                p[1] = p[0]  # ties
            reject, adj, _, _ = multipletests(p, alpha=0.05, method="holm")
            ours = holm(p)
            np.testing.assert_allclose(ours, adj, rtol=0, atol=1e-12)
            np.testing.assert_array_equal(ours <= 0.05, reject)


def test_edge_cases() -> None:
    assert holm([]).size == 0
    np.testing.assert_allclose(holm([0.5, 1.0, 0.0]), [1.0, 1.0, 0.0])
    with pytest.raises(ValueError):
        holm([0.1, 1.2])
    with pytest.raises(ValueError, match="NaN"):
        holm([0.1, float("nan")])


def test_weighted_holm_equal_weights_is_holm_and_weights_scale_like_bonferroni() -> None:
    from evalsvc.stats import weighted_holm

    rng = np.random.default_rng(1)
    for m in (1, 2, 5, 7):
        p = rng.uniform(0, 0.2, m) ** 2
        np.testing.assert_allclose(
            weighted_holm(p, np.full(m, 3.0)), multipletests(p, method="holm")[1], atol=1e-12
        )
    # Two hypotheses, weights 0.8 / 0.2: the first step tests p/w against α (Σw = 1), so the
    # heavier one is rejected at p ≤ 0.8α and the lighter at p ≤ 0.2α; after one rejection the
    # other gets the full α.
    np.testing.assert_allclose(weighted_holm([0.04, 0.5], [0.8, 0.2]), [0.05, 0.5])
    np.testing.assert_allclose(weighted_holm([0.5, 0.01], [0.8, 0.2]), [0.5, 0.05])
    with pytest.raises(ValueError):
        weighted_holm([0.1, 0.2], [1.0, 0.0])
