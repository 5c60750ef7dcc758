"""``evalsvc plan`` agrees with the statistics module and refuses bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsvc.services.planning import band_discordance, plan
from evalsvc.services.runs import UsageError
from evalsvc.stats import (
    mde_paired_binary,
    power_paired_binary,
    required_n,
    retention_mde,
    retention_required_n,
)
from tests.fixtures.cli import CliResult, run_cli


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
    # Never below the exact minimum: with no loss at all a pass needs 42 probes at α/4.
    assert row["min_items_to_pass"] == 42
    assert row["required_items"] == max(-(-row["required_pairs"] // per), 42)
    assert row["mde_at_planned"] == retention_mde(row["planned_items"] * per, 0.3, 0.05, 0.8, looks=4)
    assert row["mde_at_cap"] < row["mde_at_planned"]
    assert "lower bound" in row["note"] and "48-item stage" in row["note"]


def test_a_calibrating_suite_says_so_and_is_sized_at_the_band() -> None:
    """``reasoning`` calibrates (``calibrate: auto``): the plan gives the pilot's baseline
    requests (one rung per family, up to the whole ladder), the main run's items, and without
    a discordance it sizes the run at the band's bound 2p(1 − p), p = ½ inside 40–90%."""
    (row,) = plan(suites=["reasoning"], margin=None, alpha=None)
    cal = row["calibration"]
    assert cal["band"] == [0.4, 0.9] and cal["pilot_n"] == 10 and cal["groups"] == 4
    assert len(cal["ladder"]) == 20 and cal["pilot_requests"] == [40, 200]
    assert cal["main_items"] == [680, 680]  # reasoning keeps n whatever the levels
    assert row["discordance"] == band_discordance((0.4, 0.9)) == 0.5
    assert row["discordance_source"] == "band bound"
    assert row["required_items"] == required_n(0.05, 0.5, 0.05, 0.8)
    assert "40–200 baseline requests" in row["note"] and "upper bound" in row["note"]
    # A given discordance wins over the bound; --no-calibrate plans the suite as written.
    (given,) = plan(suites=["reasoning"], margin=None, alpha=None, discordance=0.2)
    assert given["discordance_source"] == "given"
    assert given["required_items"] == required_n(0.05, 0.2, 0.05, 0.8)
    assert "Calibrates first" in given["note"] and "upper bound" not in given["note"]
    (off,) = plan(suites=["reasoning"], margin=None, alpha=None, calibrate=False)
    assert "calibration" not in off and "required_items" not in off
    # --calibrate turns it on for a suite whose YAML does not ask (reasoning-smoke, 3 families).
    (on,) = plan(suites=["reasoning-smoke"], margin=None, alpha=None, calibrate=True)
    assert on["calibration"]["pilot_requests"][0] == 10 * on["calibration"]["groups"]


def test_band_bound_is_the_largest_binary_variance_in_the_band() -> None:
    assert band_discordance((0.6, 0.9)) == pytest.approx(2 * 0.6 * 0.4)
    assert band_discordance((0.1, 0.3)) == pytest.approx(2 * 0.3 * 0.7)
    assert band_discordance((0.3, 0.8)) == 0.5


def test_needle_calibration_plan_climbs_to_the_given_max_context(tmp_path: Path) -> None:
    """needle's ladder rises to the baseline's max context (llama.cpp's 4,096-token slot: the
    longest message is 4096 − max_tokens − 64), and the main run keeps at most as many lengths
    as the suite configures, each at every depth."""
    path = tmp_path / "n.yaml"
    path.write_text(
        "name: n\nkind: needle\nseed: 1\ncalibrate: {band: [0.6, 0.9], pilot_n: 5}\n"
        "params: {lengths: [512, 1024], depths: [0.2, 0.8], haystacks: 3, max_tokens: 32}\n"
    )
    (row,) = plan(suites=[str(path)], margin=None, alpha=None, max_context=4096)
    cal = row["calibration"]
    assert cal["ladder"] == ["512 tokens", "1024 tokens", "2048 tokens", "4000 tokens"]
    assert cal["pilot_requests"] == [5, 20]
    assert cal["main_items"] == [2 * 3, 2 * 2 * 3]
    assert row["discordance"] == pytest.approx(0.48)
    # Without a max context the ladder stops at the longest configured length.
    (short,) = plan(suites=[str(path)], margin=None, alpha=None)
    assert short["calibration"]["ladder"] == ["512 tokens", "1024 tokens"]
    # A max context too small for any message: the suite runs as written, and the plan says so.
    (tiny,) = plan(suites=[str(path)], margin=None, alpha=None, max_context=64)
    assert "pilot_requests" not in tiny["calibration"] and "as written" in tiny["note"]


def test_plan_cli_flags_reach_the_calibration_plan(tmp_path: Path) -> None:
    """``evalsvc plan --calibrate --max-context`` through the real CLI, in-process (JSON and the
    table)."""
    path = tmp_path / "n.yaml"
    path.write_text("name: n\nkind: needle\nseed: 1\n"
                    "params: {lengths: [512], depths: [0.5], haystacks: 2, max_tokens: 32}\n")

    def cli(*args: str) -> CliResult:
        return run_cli("plan", "--suite", str(path), *args, env={"COLUMNS": "400"})

    r = cli("--calibrate", "--max-context", "2048", "--json")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert row["calibration"]["ladder"] == ["512 tokens", "1024 tokens", "1952 tokens"]
    assert row["calibration"]["max_context"] == 2048
    (off,) = json.loads(cli("--json").stdout)  # the YAML does not calibrate
    assert "calibration" not in off
    table = cli("--calibrate", "--max-context", "2048")
    assert table.returncode == 0 and "Calibrates first: a pilot of 10–30 baseline" in table.stdout
    # Without a max context the ladder is the configured length alone.
    assert "a pilot of 10 baseline requests" in cli("--calibrate").stdout
