"""Adaptive difficulty, the pure parts: the walk up a ladder, the choice of rungs, the policy's
YAML forms, and the ladders and calibrated copies of the reasoning and needle kinds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from evalsvc.domain import Provenance, RunOptions
from evalsvc.suites import (
    CalibrationPolicy,
    Rung,
    RungScore,
    SuiteSpec,
    calibration_record,
    choose,
    next_rungs,
    pilot_name,
    pilot_seed,
    suite_kinds,
)

BAND = (0.4, 0.9)


def _ladder(groups: dict[str, int]) -> list[Rung]:
    return [Rung(g, lvl, f"{g} L{lvl}", lvl) for g, top in groups.items() for lvl in range(1, top + 1)]


def _scores(ladder: list[Rung], table: dict[str, float], n: int = 10) -> dict[str, RungScore]:
    return {r.key: RungScore(r, n, table[r.label] * n) for r in ladder if r.label in table}


def test_the_walk_goes_up_each_group_and_stops_below_the_band() -> None:
    ladder = _ladder({"a": 5, "b": 5})
    assert [r.label for r in next_rungs(ladder, {}, BAND)] == ["a L1", "b L1"]
    # a: 100% at L1, keep walking; b: 20% at L1 (below 40%), its walk stops.
    res = _scores(ladder, {"a L1": 1.0, "b L1": 0.2})
    assert [r.label for r in next_rungs(ladder, res, BAND)] == ["a L2"]
    res = _scores(ladder, {"a L1": 1.0, "a L2": 0.8, "a L3": 0.3, "b L1": 0.2})
    assert next_rungs(ladder, res, BAND) == []
    # A group that is solved everywhere is walked to its end.
    res = _scores(ladder, {f"a L{i}": 1.0 for i in range(1, 6)} | {"b L1": 0.1})
    assert next_rungs(ladder, res, BAND) == []


def test_every_in_band_rung_is_kept_and_the_closest_when_none_is() -> None:
    ladder = _ladder({"a": 5, "b": 5, "c": 5})
    res = _scores(ladder, {
        "a L1": 1.0, "a L2": 0.9, "a L3": 0.6, "a L4": 0.1,  # 0.9 is in the band (closed)
        "b L1": 1.0, "b L2": 0.95, "b L3": 0.95, "b L4": 1.0, "b L5": 0.92,  # all above
        "c L1": 0.3,  # below at once
    })
    got = {c.group: c for c in choose(ladder, res, BAND)}
    assert [r.label for r in got["a"].chosen] == ["a L2", "a L3"] and got["a"].in_band
    assert got["a"].note is None
    # b: closest to the band is L5 (0.92, 0.02 away); c: its only rung.
    assert [r.label for r in got["b"].chosen] == ["b L5"] and not got["b"].in_band
    assert got["b"].note and "closest, b L5 (92%)" in got["b"].note
    assert [r.label for r in got["c"].chosen] == ["c L1"] and not got["c"].in_band


def test_ties_go_to_the_harder_rung_and_max_rungs_keeps_the_centre() -> None:
    ladder = _ladder({"a": 5})
    all_right = _scores(ladder, {f"a L{i}": 1.0 for i in range(1, 6)})
    (c,) = choose(ladder, all_right, BAND)
    assert [r.label for r in c.chosen] == ["a L5"]  # equally far: the hardest
    res = _scores(ladder, {"a L1": 0.9, "a L2": 0.8, "a L3": 0.6, "a L4": 0.5, "a L5": 0.45})
    (c,) = choose(ladder, res, BAND, max_rungs=2)
    # Centre 0.65: L3 (0.05 away), then L2 and L4 both 0.15 away -> the harder, L4.
    assert [r.label for r in c.chosen] == ["a L3", "a L4"]


def test_a_group_without_scored_items_keeps_nothing() -> None:
    ladder = _ladder({"a": 2})
    res = {ladder[0].key: RungScore(ladder[0], 0, 0.0, errors=10)}
    (c,) = choose(ladder, res, BAND)
    assert c.chosen == [] and not c.in_band and "no pilot item" in (c.note or "")


def test_record_lists_the_pilot_and_the_choice() -> None:
    ladder = _ladder({"a": 3})
    res = _scores(ladder, {"a L1": 1.0, "a L2": 0.7, "a L3": 0.2})
    policy = CalibrationPolicy()
    rec = calibration_record(policy, suite="r", seed=3, ladder=ladder, results=res,
                             choices=choose(ladder, res, BAND))
    assert rec["band"] == [0.4, 0.9] and rec["pilot_suite"] == "r:pilot"
    assert [(p["label"], p["n"], p["score"], p["in_band"]) for p in rec["pilot"]] == [
        ("a L1", 10, 1.0, False), ("a L2", 10, 0.7, True), ("a L3", 10, 0.2, False)]
    assert rec["chosen"] == ["a L2"] and rec["all_in_band"] and rec["baseline_requests"] == 30


@pytest.mark.parametrize(
    ("value", "mode", "band"),
    [("auto", "auto", (0.4, 0.9)), (True, "auto", (0.4, 0.9)), ("off", "off", (0.4, 0.9)),
     ({"band": [0.3, 0.8], "pilot_n": 6}, "auto", (0.3, 0.8))],
)
def test_policy_yaml_forms(value: object, mode: str, band: tuple[float, float]) -> None:
    spec = SuiteSpec.model_validate({"name": "r", "kind": "reasoning", "calibrate": value})
    assert spec.calibrate is not None and spec.calibrate.mode == mode
    assert spec.calibrate.band == band


@pytest.mark.parametrize("bad", [{"band": [0.9, 0.4]}, {"band": [0.2, 1.5]}, {"pilot_n": 1},
                                 {"bogus": 1}, "sometimes"])
def test_bad_policies_are_refused(bad: object) -> None:
    with pytest.raises(ValidationError):
        SuiteSpec.model_validate({"name": "r", "kind": "reasoning", "calibrate": bad})


def test_a_kind_without_a_ladder_refuses_calibrate_auto_and_ignores_the_flag() -> None:
    kinds = suite_kinds()
    with pytest.raises(ValueError, match="declares no difficulty ladder"):
        kinds["drift"](SuiteSpec(name="d", kind="drift", calibrate="auto"))  # type: ignore[arg-type]
    drift = kinds["drift"](SuiteSpec(name="d", kind="drift"))
    assert not drift.calibratable() and drift.calibration(True) is None


def test_run_option_switches_the_suite_policy() -> None:
    reasoning = suite_kinds()["reasoning"]
    plain = reasoning(SuiteSpec(name="r", kind="reasoning"))
    auto = reasoning(SuiteSpec.model_validate(
        {"name": "r", "kind": "reasoning", "calibrate": {"band": [0.3, 0.7]}}))
    assert plain.calibration(None) is None
    assert plain.calibration(True) == CalibrationPolicy()
    assert auto.calibration(None) is not None and auto.calibration(None).band == (0.3, 0.7)  # type: ignore[union-attr]
    assert auto.calibration(True).band == (0.3, 0.7)  # type: ignore[union-attr]
    assert auto.calibration(False) is None
    assert RunOptions(calibrate=True).calibrate is True


def test_reasoning_ladder_pilot_and_calibrated_copy() -> None:
    spec = SuiteSpec.model_validate({
        "name": "r", "kind": "reasoning", "seed": 5, "calibrate": "auto",
        "params": {"n": 90, "tasks": [{"family": "arithmetic", "level": 1, "weight": 2},
                                      {"family": "lists", "level": 2}]},
    })
    suite = suite_kinds()["reasoning"](spec)
    suite.bind_gate(RunOptions())
    ladder = suite.difficulty_ladder(Provenance())
    assert [r.label for r in ladder][:6] == [
        "arithmetic L1", "arithmetic L2", "arithmetic L3", "arithmetic L4", "arithmetic L5",
        "lists L1"]
    assert len(ladder) == 10
    pilot = suite.pilot_suite(ladder[2], 10)
    assert pilot.name == pilot_name("r") == "r:pilot" and pilot.spec.seed == pilot_seed(5) != 5
    assert pilot.params.n == 10  # type: ignore[attr-defined]
    assert [(t.family, t.level) for t in pilot.params.tasks] == [("arithmetic", 3)]  # type: ignore[attr-defined]
    chosen = [ladder[2], ladder[3], ladder[6]]  # arithmetic L3, L4; lists L2
    cal = suite.at_difficulty(chosen)
    assert cal.name == "r" and cal.spec.seed == 5 and cal.params.n == 90  # type: ignore[attr-defined]
    assert cal.spec.calibrate is None and cal.gate is suite.gate
    tasks = [(t.family, t.level, t.weight) for t in cal.params.tasks]  # type: ignore[attr-defined]
    # arithmetic keeps its double share, split over its two levels.
    assert tasks == [("arithmetic", 3, 60), ("arithmetic", 4, 60), ("lists", 2, 60)]


def test_needle_ladder_reaches_the_probed_max_context() -> None:
    spec = SuiteSpec.model_validate({
        "name": "n", "kind": "needle", "seed": 1, "calibrate": "auto",
        "params": {"lengths": [1024, 3072], "depths": [0.2, 0.8], "haystacks": 2},
    })
    suite = suite_kinds()["needle"](spec)
    suite.bind_gate(RunOptions())
    ladder = suite.difficulty_ladder(Provenance(max_context=32768))
    top = 32768 - 48 - 64  # the answer's max_tokens and plan()'s headroom
    assert [r.value for r in ladder] == [1024, 2048, 3072, 4096, 8192, 16384, top]
    assert {r.group for r in ladder} == {"length"} and suite.calibration_keep() == 2
    # Unknown max context: no longer than the longest configured length.
    assert [r.value for r in suite.difficulty_ladder(Provenance())] == [1024, 2048, 3072]
    pilot = suite.pilot_suite(ladder[4], 10)
    assert pilot.name == "n:pilot" and pilot.params.lengths == [8192]  # type: ignore[attr-defined]
    assert pilot.item_count() == 10
    cal = suite.at_difficulty([ladder[5], ladder[3]])
    assert cal.params.lengths == [4096, 16384] and cal.params.depths == [0.2, 0.8]  # type: ignore[attr-defined]


def test_the_catalog_sets_for_decisions_calibrate() -> None:
    from evalsvc.suites import resolve

    calibrated = {s.name for s in resolve(["release", "long-context"]) if s.calibration() is not None}
    assert calibrated == {"reasoning", "reasoning-hard", "needle-long-context"}
    # The smoke set stays a fixed, quick check.
    assert all(s.calibration() is None for s in resolve(["smoke"]))
