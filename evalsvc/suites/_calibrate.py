"""Adaptive difficulty: the contract between a suite kind's difficulty ladder and the pilot.

A *calibratable* kind (``Suite.difficulty_ladder`` returns rungs) declares its ladder as
``Rung`` objects: independent *groups* (a reasoning family; needle's one "length" axis), each
ordered from easy to hard by ``level``. Before the suite runs, the runner
(``evalsvc.runner``) sends a short seeded **pilot** to the baseline alone: ``pilot_n`` items per
rung (``Suite.pilot_suite``), walking each group from its easiest rung up, and the pure functions
here decide which rung to try next (:func:`next_rungs`) and which rungs the suite then runs at
(:func:`choose`, then ``Suite.at_difficulty``).

The rule (docs/suites.md, "Adaptive difficulty"): a rung is *in band* when the baseline's pilot
score lies in ``[lo, hi]`` (default 40–90%). A baseline near 0% cannot show a drop and one near
100% leaves a candidate nothing to lose that 100 items can resolve; in between, the paired
test's discordance, and with it its power, is highest (the variance of a Bernoulli score,
p(1 − p), is largest at p = 0.5 and falls to 0.09 at 0.9). The 40–90% default leans high because
a quantized candidate loses accuracy, it rarely gains it, so a baseline at 90% still has room to
show the loss; the design card's own catalog tuning used 30–80% for a 135M model
(docs/suites.md, "Tuning the catalog").

- Per group, every in-band rung is kept (at most ``max_rungs``, the ones closest to the band's
  centre; a tie goes to the harder rung).
- A group with no rung in band runs at its **closest** rung (smallest distance to the band; a
  tie goes to the harder rung) and the record says so (``in_band: false`` and a note).
- The walk up a group stops at the first rung scoring below ``lo``: difficulty is assumed
  monotone within a group (a harder level does not score higher), so rungs beyond it would only
  score lower still. The pilot therefore costs one rung per group for a model that finds the
  easiest level already hard, and the whole ladder for one that solves everything.

Pilot samples are stored under the suite name ``<suite>:pilot`` (``pilot_name``; a colon is
never in a suite name), so they are kept and visible but never enter the suite's gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PILOT_SUFFIX = ":pilot"


def pilot_name(suite: str) -> str:
    """The suite name a suite's pilot samples are stored under."""
    return f"{suite}{PILOT_SUFFIX}"


def pilot_seed(seed: int) -> int:
    """The pilot's seed: derived from the suite's, so the pilot's items are other draws than the
    gated items (the levels are not chosen on the very items then gated), reproducibly."""
    return (seed * 1_000_003 + 0x5EED) % (2**31 - 1)


class CalibrationPolicy(BaseModel):
    """A suite's ``calibrate:`` block (or ``calibrate: auto``)."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "off"] = "auto"
    band: tuple[float, float] = (0.4, 0.9)
    """The discriminative band of the baseline's pilot score, ``[lo, hi]``."""
    pilot_n: int = Field(default=10, ge=2, le=200)
    """Pilot items per rung tried (on the baseline only)."""
    max_rungs: int | None = Field(default=None, ge=1, le=32)
    """Most in-band rungs kept per group (default: the kind's, ``Suite.calibration_keep``)."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if value is True or value == "auto":
            return {"mode": "auto"}
        if value is False or value == "off":
            return {"mode": "off"}
        return value

    @model_validator(mode="after")
    def _band(self) -> CalibrationPolicy:
        lo, hi = self.band
        if not 0.0 <= lo < hi <= 1.0:
            raise ValueError(f"calibrate.band must be [lo, hi] with 0 ≤ lo < hi ≤ 1, got {list(self.band)}")
        return self

    @property
    def enabled(self) -> bool:
        return self.mode == "auto"


@dataclass(frozen=True)
class Rung:
    """One step of a kind's difficulty ladder."""

    group: str
    """Rungs of one group are alternatives on one axis (a reasoning family, needle length)."""
    level: int
    """Order within the group: higher is harder."""
    label: str
    value: Any = None
    """What the kind needs to build the rung (a level, a length in tokens)."""

    @property
    def key(self) -> str:
        return f"{self.group}@{self.level}"

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "level": self.level, "label": self.label, "value": self.value}


@dataclass(frozen=True)
class RungScore:
    """The baseline's pilot result on one rung: ``correct`` of ``n`` scored items."""

    rung: Rung
    n: int
    correct: float
    errors: int = 0

    @property
    def score(self) -> float | None:
        return self.correct / self.n if self.n else None


def _distance(score: float, band: tuple[float, float]) -> float:
    lo, hi = band
    return max(lo - score, 0.0, score - hi)


def _groups(ladder: Sequence[Rung]) -> dict[str, list[Rung]]:
    out: dict[str, list[Rung]] = {}
    for rung in ladder:
        out.setdefault(rung.group, []).append(rung)
    return {g: sorted(rs, key=lambda r: r.level) for g, rs in out.items()}


def next_rungs(
    ladder: Sequence[Rung], results: dict[str, RungScore], band: tuple[float, float]
) -> list[Rung]:
    """The rungs to pilot next, at most one per group: the easiest untried rung of every group
    whose walk has not stopped (a tried rung scored below ``lo``, or the ladder is exhausted)."""
    lo = band[0]
    out = []
    for rungs in _groups(ladder).values():
        tried = [results[r.key] for r in rungs if r.key in results]
        if any(t.score is not None and t.score < lo for t in tried):
            continue
        untried = [r for r in rungs if r.key not in results]
        if untried:
            out.append(untried[0])
    return out


@dataclass
class GroupChoice:
    group: str
    chosen: list[Rung]
    in_band: bool
    note: str | None = None


def choose(
    ladder: Sequence[Rung],
    results: dict[str, RungScore],
    band: tuple[float, float],
    *,
    max_rungs: int | None = None,
) -> list[GroupChoice]:
    """Per group, the rungs the suite runs at (the module docstring's rule). A group none of
    whose rungs has a score (every pilot item errored) keeps no rung and says so."""
    lo, hi = band
    centre = (lo + hi) / 2
    out = []
    for group, rungs in _groups(ladder).items():
        scored = [
            (r, results[r.key].score) for r in rungs if r.key in results and results[r.key].n
        ]
        if not scored:
            out.append(GroupChoice(group, [], False, f"{group}: no pilot item was scored"))
            continue
        inside = [(r, s) for r, s in scored if s is not None and lo <= s <= hi]
        if inside:
            ranked = sorted(inside, key=lambda rs: (abs(rs[1] - centre), -rs[0].level))
            keep = ranked[: max_rungs or len(ranked)]
            chosen = sorted((r for r, _ in keep), key=lambda r: r.level)
            out.append(GroupChoice(group, chosen, True))
            continue
        best, score = min(
            ((r, s) for r, s in scored if s is not None),
            key=lambda rs: (_distance(rs[1], band), -rs[0].level),
        )
        out.append(
            GroupChoice(
                group,
                [best],
                False,
                f"{group}: no level scored within {lo:.0%}–{hi:.0%} on the baseline; running at "
                f"the closest, {best.label} ({score:.0%})",
            )
        )
    return out


def record(
    policy: CalibrationPolicy,
    *,
    suite: str,
    seed: int,
    ladder: Sequence[Rung],
    results: dict[str, RungScore],
    choices: Sequence[GroupChoice],
) -> dict[str, Any]:
    """The report's ``details.calibration``: the band, the pilot (every rung tried, with its n,
    errors and score) and the choice per group, JSON-able."""
    lo, hi = policy.band
    order = {r.key: i for i, r in enumerate(ladder)}
    tried = sorted(results.values(), key=lambda t: order.get(t.rung.key, 0))
    return {
        "band": [lo, hi],
        "pilot_n": policy.pilot_n,
        "pilot_suite": pilot_name(suite),
        "pilot_seed": seed,
        "baseline_requests": sum(t.n + t.errors for t in tried),
        "ladder": [r.label for r in ladder],
        "pilot": [
            {
                **t.rung.to_dict(),
                "n": t.n,
                "errors": t.errors,
                "score": t.score,
                "in_band": t.score is not None and lo <= t.score <= hi,
            }
            for t in tried
        ],
        "chosen": [r.label for c in choices for r in c.chosen],
        "groups": [
            {"group": c.group, "chosen": [r.label for r in c.chosen], "in_band": c.in_band,
             **({"note": c.note} if c.note else {})}
            for c in choices
        ],
        "all_in_band": all(c.in_band for c in choices),
    }
