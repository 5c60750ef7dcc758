"""``evalsvc plan`` agrees with the statistics module and refuses bad input."""

from __future__ import annotations

import pytest

from evalsvc.services.planning import plan
from evalsvc.services.runs import UsageError
from evalsvc.stats import (
    mde_paired_binary,
    power_paired_binary,
    required_n,
    retention_mde,
    retention_required_n,
)


def test_plan_matches_required_n() -> None:
    (row,) = plan(suites=["needle-smoke"], margin=0.1, alpha=0.05, discordance=0.05)
    assert row["required_items"] == required_n(0.1, 0.05, 0.05, 0.8)
    assert row["planned_items"] == 40
    assert row["mde_at_planned"] == mde_paired_binary(40, 0.05, 0.05, 0.8)
    # The required n is the smallest with power >= 0.8 to pass a candidate as good as the baseline.
    n = row["required_items"]
    assert power_paired_binary(n, 0.1, 0.05) >= 0.8 > power_paired_binary(n - 1, 0.1, 0.05)


def test_plan_needs_a_discordance_and_known_suites() -> None:
    (row,) = plan(suites=["needle-smoke"], margin=0.1, alpha=None)
    assert "required_items" not in row and "--discordance" in row["note"]
    with pytest.raises(UsageError, match="unknown suite"):
        plan(suites=["nope"], margin=0.1, alpha=None)


def test_plan_counts_pairs_for_kinds_with_several_per_item() -> None:
    """determinism gates one pair per (probe, condition, repeat): the plan converts pairs to
    probes and says the conversion is a lower bound. It is staged (12 → 96 probes, α/4 per
    look) and gated on stable-answer retention, so the plan uses that test's size."""
    (row,) = plan(suites=["determinism"], margin=0.1, alpha=0.05, discordance=0.3)
    per = row["pairs_per_item"]
    assert per == 2 * 5  # 2 repeats x (mixed, c2, c8, c32, prefix_warm)
    assert row["stages"] == [12, 24, 48, 96] and row["max_items"] == 96
    assert row["required_pairs"] == retention_required_n(0.1, 0.3, 0.05, 0.8, looks=4)
    assert row["required_items"] == -(-row["required_pairs"] // per)
    assert row["mde_at_planned"] == retention_mde(row["planned_items"] * per, 0.3, 0.05, 0.8, looks=4)
    assert row["mde_at_cap"] < row["mde_at_planned"]
    assert "lower bound" in row["note"] and "48-item stage" in row["note"]
