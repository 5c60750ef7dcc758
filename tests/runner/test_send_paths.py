"""The runner's send paths on real loopback servers with known behaviour
(``tests/runner/level_server.py``): the plain path, ``--sequential`` (batches until every
candidate's confidence sequence decides) and a kind's staged design (``Suite.stage_sizes``).

Written before the send loops were moved into one, and kept as their contract:

- every item sent to the baseline is sent to every candidate, once (the pairs are complete), and
  nothing past the stop is sent;
- a planted candidate (a server that solves nothing) fails and stops the design early; an
  endpoint against itself is never failed;
- a resumed run (``done`` + ``stored``) sends nothing it already has and reaches the same gate.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.runner import execute
from evalsvc.runner._runner import RunResult
from evalsvc.suites import Suite, SuiteSpec, suite_kinds
from tests.runner.level_server import level_server

SEED = 5
GOOD = dict.fromkeys(range(1, 6), 0.8)
NONE = dict.fromkeys(range(1, 6), 0.0)
TASKS = [{"family": "arithmetic", "level": 1}, {"family": "lists", "level": 1}]


def _reasoning(n: int, **gate: Any) -> Suite:
    spec = SuiteSpec(name="r", kind="reasoning", seed=SEED, gate=gate,
                     params={"n": n, "tasks": TASKS, "max_tokens": 16})
    return suite_kinds()["reasoning"](spec)


class StagedReasoning(suite_kinds()["reasoning"]):  # type: ignore[misc,valid-type]
    """The reasoning kind with a staged design, to reach the runner's staged path on a server
    whose answers are known (the one staged kind, determinism, measures traffic and needs a
    real engine's logprobs)."""

    def stage_sizes(self) -> list[int] | None:
        return [20, 40, 80]


def _run(
    base: str, cand: str, suite: Suite, options: RunOptions,
    done: set[tuple[str, str, str, int]] | None = None, stored: Sequence[Sample] = (),
) -> tuple[RunResult, list[Sample]]:
    kept: list[Sample] = []

    async def sink(sample: Sample) -> None:
        kept.append(sample)

    async def previous() -> list[Sample]:
        return list(stored)

    result = asyncio.run(execute(
        run_id="t", baseline=EndpointRef(url=base), candidates=[EndpointRef(url=cand)],
        suites=[suite], options=options, sink=sink, done=done or set(),
        stored=previous if stored else None,
    ))
    return result, kept


def _sent(samples: list[Sample]) -> dict[str, set[tuple[str, int]]]:
    by: dict[str, set[tuple[str, int]]] = {}
    for s in samples:
        by.setdefault(s.endpoint, set()).add((s.item_id, s.repeat))
    # Each (item, repeat) once per endpoint.
    assert all(n == 1 for n in Counter((s.endpoint, s.item_id, s.repeat) for s in samples).values())
    return by


def test_plain_path_sends_every_item_once_to_each_side() -> None:
    with level_server(GOOD, [SEED], per_level=100) as srv:
        result, kept = _run(srv.url, srv.url, _reasoning(40), RunOptions(concurrency=4))
        assert len(srv.seen) == 80
    sent = _sent(kept)
    assert sent["baseline"] == sent["candidate:0"] and len(sent["baseline"]) == 40
    assert result.candidates[0].suites[0].outcome.n == 40
    assert result.candidates[0].verdict != "fail"


def test_sequential_stops_early_on_a_planted_loss_with_complete_pairs() -> None:
    with level_server(GOOD, [SEED], per_level=100) as good, \
            level_server(NONE, [SEED], per_level=100) as bad:
        result, kept = _run(good.url, bad.url, _reasoning(200),
                            RunOptions(concurrency=4, sequential=True))
        res = result.candidates[0].suites[0]
        seq = res.details["sequential"]
        assert seq["batch"] == 20 and seq["items_planned"] == 200
        assert seq["stopped_early"] and seq["items_used"] < 200
        assert seq["decisions"] == {"candidate:0": "fail"}
        assert res.verdict == "fail"
        sent = _sent(kept)
        # Both sides got exactly the items of the batches sent, nothing past the stop.
        assert sent["baseline"] == sent["candidate:0"]
        assert len(sent["baseline"]) == seq["items_used"]
        assert len(good.seen) == len(bad.seen) == seq["items_used"]
        assert res.outcome.n == seq["items_used"]


def test_sequential_endpoint_against_itself_never_fails_and_resumes() -> None:
    with level_server(GOOD, [SEED], per_level=100) as srv:
        options = RunOptions(concurrency=4, sequential=True)
        first, kept = _run(srv.url, srv.url, _reasoning(100, margin=0.2), options)
        res = first.candidates[0].suites[0]
        seq = res.details["sequential"]
        assert res.verdict != "fail" and seq["decisions"]["candidate:0"] != "fail"
        sent = len(srv.seen)
        assert sent == 2 * seq["items_used"]
        again, more = _run(srv.url, srv.url, _reasoning(100, margin=0.2), options,
                           done={(s.endpoint, s.suite, s.item_id, s.repeat) for s in kept},
                           stored=kept)
        # Everything the first attempt's batches sent is reused; the same design stops at the
        # same look with the same gate (the looks before the stored prefix's end are not
        # taken again: they would see samples past their batch).
        assert len(srv.seen) == sent and more == []
    res2 = again.candidates[0].suites[0]
    assert res2.details["sequential"] == seq
    assert res2.outcome.verdict == res.outcome.verdict and res2.outcome.n == res.outcome.n


def test_staged_design_stops_at_the_first_deciding_stage() -> None:
    spec = SuiteSpec(name="r", kind="reasoning", seed=SEED,
                     params={"n": 80, "tasks": TASKS, "max_tokens": 16})
    with level_server(GOOD, [SEED], per_level=100) as good, \
            level_server(NONE, [SEED], per_level=100) as bad:
        result, kept = _run(good.url, bad.url, StagedReasoning(spec), RunOptions(concurrency=4))
        res = result.candidates[0].suites[0]
        stages: dict[str, Any] = res.details["stages"]
        assert stages["stages"] == [20, 40, 80] and stages["cap"] == 80
        assert stages["stopped"] == "decided" and stages["items_used"] == 20
        assert stages["history"] == [{"items": 20, "verdicts": {"candidate:0": "fail"}}]
        assert res.verdict == "fail" and res.outcome.n == 20
        sent = _sent(kept)
        assert sent["baseline"] == sent["candidate:0"] and len(sent["baseline"]) == 20
        assert len(good.seen) == len(bad.seen) == 20


def test_staged_design_runs_to_the_cap_when_undecided() -> None:
    spec = SuiteSpec(name="r", kind="reasoning", seed=SEED,
                     params={"n": 80, "tasks": TASKS, "max_tokens": 16})
    with level_server(GOOD, [SEED], per_level=100) as srv:
        # At a 2-point margin 80 flip-free items cannot pass (plan's minimum is 169), so no
        # stage decides: the design goes to its cap and says who is undecided.
        result, kept = _run(srv.url, srv.url, StagedReasoning(spec),
                            RunOptions(concurrency=4, margin=0.02))
        res = result.candidates[0].suites[0]
        stages = res.details["stages"]
        assert stages["stopped"] == "cap" and stages["items_used"] == 80
        assert [h["items"] for h in stages["history"]] == [20, 40, 80]
        assert "candidate:0 still undecided" in stages["reason"]
        assert len(srv.seen) == 160 and res.verdict == "inconclusive"
    sent = _sent(kept)
    assert sent["baseline"] == sent["candidate:0"] and len(sent["baseline"]) == 80
