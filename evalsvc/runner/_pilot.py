"""The calibration pilot: send a calibratable suite's pilot to the baseline, pick its difficulty.

Contract: :func:`calibrate` walks the kind's difficulty ladder (``Suite.difficulty_ladder``)
with ``policy.pilot_n`` seeded items per rung (``Suite.pilot_suite``), on the **baseline
only**, in rounds: every round pilots the next rung of each group still walking
(``evalsvc.suites.next_rungs``), concurrently. It then returns the suite at the chosen rungs
(``evalsvc.suites.choose`` → ``Suite.at_difficulty``) and the record for the report
(``details.calibration``). Pilot samples go through the run's ``emit`` (stored like any other)
under the suite name ``<suite>:pilot`` with ids ``<rung>/<item>`` and ``data.pilot_rung``; the
gate reads samples by the suite's own name, so they never enter it. A resumed run finds its
pilot samples stored and does not resend them, and reaches the same choice.

A rung whose pilot errored beyond the run's error budget (``max_error_rate``) raises
``SuiteFailed`` (an ``InfrastructureError`` carrying the errored samples' errors and the rung):
the choice of levels, like a verdict, never rests on silently errored items, and the runner
ends that suite alone as ``error`` with its cause and fix (``_isolation``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from evalsvc.domain import Provenance, RunOptions, Sample
from evalsvc.endpoints import EndpointClient, EndpointError
from evalsvc.runner._common import InfrastructureError, suite_concurrency
from evalsvc.runner._isolation import SuiteFailed, gather_or_cancel
from evalsvc.suites import (
    CalibrationPolicy,
    Rung,
    RungScore,
    Suite,
    calibration_record,
    choose,
    next_rungs,
    pilot_name,
    pilot_seed,
)


async def calibrate(
    suite: Suite,
    policy: CalibrationPolicy,
    client: EndpointClient,
    provenance: Provenance,
    *,
    emit: Callable[[Sample], Awaitable[None]],
    done: set[tuple[str, int]],
    stored: Callable[[], Awaitable[list[Sample]]] | None,
    collected: list[Sample],
    options: RunOptions,
    progress: Any,
) -> tuple[Suite, dict[str, Any]]:
    """Pilot ``suite`` on the baseline (``client``) and return it at the chosen difficulty with
    the calibration record (module docstring)."""
    ladder = suite.difficulty_ladder(provenance)
    if not ladder:
        return suite, {"skipped": "the kind's ladder is empty for this baseline"}
    name = pilot_name(suite.name)
    previous = [
        s for s in (await stored() if stored else []) if s.suite == name and s.endpoint == "baseline"
    ]
    results: dict[str, RungScore] = {}

    async def pilot(rung: Rung) -> None:
        run = suite.pilot_suite(rung, policy.pilot_n)
        try:
            planned = await run.plan(client, provenance)
        except EndpointError as exc:
            raise InfrastructureError(
                f"calibration pilot of {suite.name} ({rung.label}) on the baseline failed: {exc}"
            ) from exc
        # Rung-qualified ids: two rungs' items never share a key under the pilot's name.
        items = [it.model_copy(update={"id": f"{rung.key}/{it.id}"}) for it in planned]

        async def tagged(sample: Sample) -> None:
            sample.data = {**sample.data, "pilot_rung": rung.key, "pilot_label": rung.label}
            await emit(sample)

        await run.run(
            items,
            client,
            role="baseline",
            emit=tagged,
            done=done,
            concurrency=suite_concurrency(run, options),
        )
        ids = {it.id for it in items}
        # Later samples win on a key (a resumed attempt retried an errored item), as in analysis.
        mine: dict[str, Sample] = {}
        for s in (*previous, *collected):
            if s.suite == name and s.endpoint == "baseline" and s.item_id in ids:
                mine[s.item_id] = s
        scores = [s.score for s in mine.values() if s.score is not None and s.error is None]
        errors = len(items) - len(scores)
        if items and errors / len(items) > options.max_error_rate:
            raise SuiteFailed(
                f"calibration pilot of {suite.name}: {errors} of {len(items)} baseline items at "
                f"{rung.label} errored (budget {options.max_error_rate:.0%}); no choice of "
                "levels rests on them",
                errors=[s.error for s in mine.values() if s.error],
                failed=errors,
                n=len(items),
                where=rung.label,
            )
        result = RungScore(rung, len(scores), float(sum(scores)), errors)
        results[rung.key] = result
        progress.message(
            f"pilot {suite.name} {rung.label}: baseline {result.correct:g} of {result.n}"
        )

    while todo := next_rungs(ladder, results, policy.band):
        await gather_or_cancel(*(pilot(r) for r in todo))
    keep = policy.max_rungs or suite.calibration_keep()
    choices = choose(ladder, results, policy.band, max_rungs=keep)
    chosen = [r for c in choices for r in c.chosen]
    rec = calibration_record(
        policy,
        suite=suite.name,
        seed=pilot_seed(suite.spec.seed),
        ladder=ladder,
        results=results,
        choices=choices,
    )
    if not chosen:
        raise InfrastructureError(
            f"calibration pilot of {suite.name}: no rung was scored on the baseline"
        )
    try:
        calibrated = suite.at_difficulty(chosen)
    except ValueError as exc:
        raise InfrastructureError(f"calibrated {suite.name} is not runnable: {exc}") from exc
    for c in choices:
        if c.note:
            progress.message(f"calibration {suite.name}: {c.note}")
    return calibrated, rec
