"""Adaptive difficulty end to end on real loopback servers with known behaviour
(``tests/runner/level_server.py``), through ``evalsvc.services.runs.compare`` into the store
(SQLite and PostgreSQL):

- a baseline whose accuracy falls with the level (100, 100, 70, 50, 10%) is calibrated to the
  levels inside 40-90% (L3, L4), the pilot walks every level once and is recorded;
- a baseline that answers every item correctly moves the suite to the hardest level (L5), says
  that no level was in the band, and then fails a candidate that only solves 10% there;
- the pilot's samples are stored under ``<suite>:pilot`` on the baseline only, and never enter
  the gate: the calibrated run's gate equals that of a plain run at the chosen levels;
- ``evalsvc plan --pilot-run`` names the levels a calibrated run measured its discordance at,
  and flags a run that did not calibrate;
- needle: the pilot walks context lengths up to the probed max context and keeps the one where
  the baseline finds 3 of 5 depths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.reports import to_markdown
from evalsvc.services import runs
from evalsvc.services.planning import plan
from evalsvc.suites import pilot_seed
from tests.fixtures.db import (  # noqa: F401  (pytest fixtures)
    db_url,
    pg_session_url,
    sqlite_template,
)
from tests.runner.level_server import level_server
from tests.services.test_gatelogs import check_schema

SEED = 11
GRADED = {1: 1.0, 2: 1.0, 3: 0.7, 4: 0.5, 5: 0.1}
PERFECT = dict.fromkeys(range(1, 6), 1.0)

SUITE = f"""name: calib
kind: reasoning
seed: {SEED}
calibrate: auto
params:
  n: 40
  tasks:
    - {{family: arithmetic, level: 1}}
    - {{family: lists, level: 1}}
  max_tokens: 32
"""


def _compare(store: Store, base: str, cand: str, suite: Path, **opts: Any) -> dict[str, Any]:
    spec = RunSpec(
        baseline=EndpointRef(url=base, name="base"),
        candidates=[EndpointRef(url=cand, name="cand")],
        suites=[str(suite)],
        options=RunOptions(concurrency=4, **opts),
    )
    return runs.compare(spec, store=store)


@pytest.fixture
def store(db_url: str) -> Store:  # noqa: F811
    return Store.from_url(db_url)


def test_pilot_picks_the_band_records_it_and_never_enters_the_gate(
    store: Store, tmp_path: Path
) -> None:
    suite = tmp_path / "calib.yaml"
    suite.write_text(SUITE)
    with level_server(GRADED, [SEED, pilot_seed(SEED)], per_level=50) as srv:
        report = _compare(store, srv.url, srv.url, suite)
        entry = report["candidates"][0]["suites"][0]
        cal = entry["details"]["calibration"]
        assert cal["chosen"] == ["arithmetic L3", "arithmetic L4", "lists L3", "lists L4"]
        assert cal["all_in_band"] and cal["band"] == [0.4, 0.9] and cal["pilot_n"] == 10
        pilot = {p["label"]: (p["n"], p["score"]) for p in cal["pilot"]}
        assert pilot == {f"{f} L{lvl}": (10, GRADED[lvl]) for f in ("arithmetic", "lists")
                         for lvl in range(1, 6)}
        assert cal["baseline_requests"] == 100
        # The gated suite ran at the chosen levels only, 40 items, at the known accuracy.
        by_task = {(r["family"], r["level"]): r for r in entry["details"]["by_task"]}
        assert set(by_task) == {("arithmetic", 3), ("arithmetic", 4), ("lists", 3), ("lists", 4)}
        assert by_task[("lists", 3)]["baseline"] == pytest.approx(0.7)
        assert by_task[("lists", 4)]["baseline"] == pytest.approx(0.5)
        assert entry["n"] == 40 and entry["n_planned"] == 40 and entry["n_errors"] == 0

        # Stored as such: 100 pilot samples on the baseline alone, 40 gated per endpoint.
        samples = store.get_samples(report["run_id"])
        pilot_s = [s for s in samples if s.suite == "calib:pilot"]
        assert len(pilot_s) == 100 and {s.endpoint for s in pilot_s} == {"baseline"}
        assert all(s.data["pilot_rung"] and "/" in s.item_id for s in pilot_s)
        gated = [s for s in samples if s.suite == "calib"]
        assert sorted(s.endpoint for s in gated).count("baseline") == 40 and len(gated) == 80
        assert not {s.item_id for s in gated} & {s.item_id for s in pilot_s}
        assert store.get_report(report["run_id"])["candidates"][0]["suites"][0]["details"][
            "calibration"]["chosen"] == cal["chosen"]
        check_schema(report)
        # The dashboard's progress shows the pilot as the baseline's alone.
        from evalsvc.services import dashboard

        rows = dashboard.live_status(store, [report["run_id"]])[report["run_id"]]["progress"]
        pilot_rows = [r for r in rows["rows"] if r["suite"] == "calib:pilot"]
        assert [(r["endpoint"], r["done"]) for r in pilot_rows] == [("baseline", 100)]
        md = to_markdown(report)
        assert "Calibrated difficulty: ran at arithmetic L3, arithmetic L4, lists L3, lists L4" in md

        # The same suite without calibration, at the chosen levels: the very same gate.
        plain = tmp_path / "plain.yaml"
        plain.write_text(SUITE.replace("calibrate: auto\n", "").replace(
            "    - {family: arithmetic, level: 1}\n    - {family: lists, level: 1}\n",
            "".join(f"    - {{family: {f}, level: {lvl}}}\n" for f in ("arithmetic", "lists")
                    for lvl in (3, 4))))
        direct = _compare(store, srv.url, srv.url, plain)["candidates"][0]["suites"][0]
        for key in ("verdict", "n", "baseline", "candidate", "delta", "ci"):
            assert direct[key] == entry[key], key
        assert "calibration" not in direct["details"]
        # --no-calibrate (RunOptions.calibrate False) turns the YAML's calibrate off.
        off = _compare(store, srv.url, srv.url, suite, calibrate=False)
        off_entry = off["candidates"][0]["suites"][0]
        assert "calibration" not in off_entry["details"]
        assert {(r["family"], r["level"]) for r in off_entry["details"]["by_task"]} == {
            ("arithmetic", 1), ("lists", 1)}

        # `evalsvc plan --pilot-run`: a calibrated run's discordance was measured at the levels
        # a pilot picks, and the plan names them; an uncalibrated run's is flagged.
        (row,) = plan(suites=[str(suite)], margin=None, alpha=None,
                      pilot_run=report["run_id"], store=store)
        assert row["discordance_source"] == "pilot run"
        assert row["calibration"]["pilot_run_levels"] == cal["chosen"]
        assert "warning" not in row["calibration"] and "Calibrates first" in row["note"]
        (stale,) = plan(suites=[str(suite)], margin=None, alpha=None,
                        pilot_run=off["run_id"], store=store)
        assert stale["calibration"]["pilot_run_levels"] is None
        assert f"run {off['run_id']} did not calibrate calib" in stale["note"]


def test_a_perfect_baseline_moves_to_the_hardest_level(store: Store, tmp_path: Path) -> None:
    suite = tmp_path / "calib.yaml"
    suite.write_text(SUITE.replace("calibrate: auto\n", ""))  # the flag alone turns it on
    seeds = [SEED, pilot_seed(SEED)]
    with level_server(PERFECT, seeds, per_level=50) as perfect, \
            level_server(GRADED, seeds, per_level=50) as graded:
        report = _compare(store, perfect.url, graded.url, suite, calibrate=True)
        assert len(graded.seen) == 40  # the candidate got the gated items only, no pilot
    entry = report["candidates"][0]["suites"][0]
    cal = entry["details"]["calibration"]
    assert cal["chosen"] == ["arithmetic L5", "lists L5"] and not cal["all_in_band"]
    notes = [g["note"] for g in cal["groups"]]
    assert all("no level scored within 40%–90%" in n and "L5 (100%)" in n for n in notes)
    assert entry["baseline"] == 1.0 and entry["candidate"] == pytest.approx(0.1)
    assert entry["verdict"] == "fail"
    assert "**Not in band.** arithmetic: no level scored within 40%–90%" in to_markdown(report)


NEEDLE = f"""name: calib-needle
kind: needle
seed: {SEED}
calibrate: {{pilot_n: 5}}
params:
  lengths: [1024]
  depths: [0.1, 0.3, 0.5, 0.7, 0.9]
  haystacks: 2
  max_tokens: 16
"""


def test_needle_walks_lengths_up_to_the_probed_context(store: Store, tmp_path: Path) -> None:
    suite = tmp_path / "needle.yaml"
    suite.write_text(NEEDLE)
    # Found at any depth up to 2,500 words, only in the second half up to 5,000, never beyond;
    # the probe reports a max context of 8,192 tokens.
    with level_server({}, [], needle_easy=2500, needle_hard=5000, max_len=8192) as srv:
        report = _compare(store, srv.url, srv.url, suite)
    entry = report["candidates"][0]["suites"][0]
    cal = entry["details"]["calibration"]
    top = 8192 - 16 - 64
    assert cal["ladder"] == ["1024 tokens", "2048 tokens", "4096 tokens", f"{top} tokens"]
    pilot = {p["label"]: p["score"] for p in cal["pilot"]}
    assert pilot == {"1024 tokens": 1.0, "2048 tokens": 1.0, "4096 tokens": 0.6,
                     f"{top} tokens": 0.0}
    assert cal["chosen"] == ["4096 tokens"] and cal["all_in_band"]
    lengths = {h["context_length"] for h in entry["details"]["heatmap"]["baseline"]}
    assert lengths == {4096} and entry["n"] == 10


def test_a_resumed_run_reuses_its_stored_pilot(tmp_path: Path) -> None:
    """The runner's resume contract (``done`` + ``stored``): the pilot's samples of a first
    attempt are not sent again, and the choice is the same."""
    import asyncio

    from evalsvc.domain import Sample
    from evalsvc.runner import execute
    from evalsvc.suites import load_suite

    suite_file = tmp_path / "calib.yaml"
    suite_file.write_text(SUITE)
    kept: list[Sample] = []

    async def sink(sample: Sample) -> None:
        kept.append(sample)

    def run(done: set[tuple[str, str, str, int]], stored: list[Sample]) -> Any:
        async def previous() -> list[Sample]:
            return list(stored)

        ref = EndpointRef(url=srv.url)
        return asyncio.run(execute(
            run_id="r", baseline=ref, candidates=[ref], suites=[load_suite(str(suite_file), allow_paths=True)],
            options=RunOptions(concurrency=4), sink=sink, done=done, stored=previous,
        ))

    with level_server(GRADED, [SEED, pilot_seed(SEED)], per_level=50) as srv:
        first = run(set(), [])
        sent = len(srv.seen)
        assert sent == 100 + 80  # pilot (baseline only) + 40 gated items on each side
        stored = list(kept)
        kept.clear()
        again = run({s.key for s in stored}, stored)
        assert len(srv.seen) == sent  # nothing resent: neither the pilot nor the gated items
    assert kept == []
    cal1 = first.candidates[0].suites[0].details["calibration"]
    cal2 = again.candidates[0].suites[0].details["calibration"]
    assert cal1 == cal2 and cal1["chosen"] == ["arithmetic L3", "arithmetic L4", "lists L3",
                                                "lists L4"]
    assert again.candidates[0].suites[0].outcome.n == 40
