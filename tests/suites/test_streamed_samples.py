"""The streamed sample path (issue 21, P6): ``LazyItems`` plans and ``PairedColumns``.

``PairedColumns.analysis`` must equal ``paired_scores`` on the same samples (the gate's input
may not change when the runner stops keeping samples), and a lazy plan must be the list plan
item for item. Real samples from the reasoning kind's own plan and scorer shapes; random
errors, missing pairs, repeats, clusters and differing outputs.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import asdict

import pytest

from evalsvc.domain import Item, Provenance, Sample
from evalsvc.suites import LazyItems, PairedColumns, SuiteSpec, paired_scores
from evalsvc.suites.kinds.reasoning import ReasoningSuite, _allocate, by_task

ROLES = ["baseline", "candidate:0", "candidate:1"]


def _suite(n: int = 60, seed: int = 7) -> ReasoningSuite:
    return ReasoningSuite(SuiteSpec(name="r", kind="reasoning", seed=seed, params={"n": n}))


def _samples(items: list[Item], seed: int) -> list[Sample]:
    """Each role's sample of every item, some errored, some missing, some with a repeat, in an
    interleaved arrival order; a few keys arrive twice (the later one wins)."""
    rng = random.Random(seed)
    out: list[Sample] = []
    for item in items:
        for role in ROLES:
            if rng.random() < 0.05:
                continue  # never arrived
            for repeat in (0, 1) if rng.random() < 0.1 else (0,):
                errored = rng.random() < 0.08
                data = {"family": item.metadata["family"], "level": item.metadata["level"]}
                if rng.random() < 0.3:
                    data["cluster"] = f"c{rng.randrange(5)}"
                out.append(
                    Sample(
                        suite="r",
                        item_id=item.id,
                        endpoint=role,
                        repeat=repeat,
                        output="" if errored else f"The answer is {rng.randrange(3)} .",
                        score=None if errored else float(rng.random() < 0.6),
                        error=f"HTTP {rng.choice([500, 503, 429])}" if errored else None,
                        data=data,
                    )
                )
    rng.shuffle(out)
    # A retried item: an errored sample first, its scored retry later (later wins).
    retried = [s for s in out if s.error][:3]
    for s in retried:
        out.append(s.model_copy(update={"error": None, "score": 1.0, "output": "The answer is 2 ."}))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_columns_equal_paired_scores_for_every_candidate(seed: int) -> None:
    suite = _suite()
    items = list(asyncio.run(suite.plan(None, Provenance())))  # type: ignore[arg-type]
    samples = _samples(items, seed)
    cols = suite.sample_columns(ROLES)
    for s in samples:
        cols.add(s)
    base = [s for s in samples if s.endpoint == "baseline"]
    for role in ROLES[1:]:
        mine = [s for s in samples if s.endpoint == role]
        want = suite.analyze(base, mine)
        got = suite.analyze_columns(cols, role)
        assert asdict(got) == asdict(want)
        assert got.n_errors > 0 and got.first_tokens and any(got.first_tokens)
        errors = sorted({s.error for s in base + mine if s.error})[:5]
        assert cols.error_examples(role) == errors


def test_columns_default_analysis_and_by_task_match_the_list_path() -> None:
    suite = _suite(n=40, seed=3)
    items = list(asyncio.run(suite.plan(None, Provenance())))  # type: ignore[arg-type]
    samples = _samples(items, 9)
    cols = PairedColumns(ROLES, slicer=suite.slice_of)
    for s in samples:
        cols.add(s)
    base = [s for s in samples if s.endpoint == "baseline"]
    cand = [s for s in samples if s.endpoint == "candidate:1"]
    assert asdict(cols.analysis("candidate:1")) == asdict(
        paired_scores(base, cand, slicer=suite.slice_of)
    )
    # by_task over the list path dedups candidates but not the baseline: compare on unique keys.
    last_b = list({(s.item_id, s.repeat): s for s in base}.values())
    rows = suite.analyze_columns(suite_cols(suite, samples), "candidate:1").details["by_task"]
    assert rows == by_task(last_b, cand)


def suite_cols(suite: ReasoningSuite, samples: list[Sample]) -> PairedColumns:
    cols = suite.sample_columns(ROLES)
    for s in samples:
        cols.add(s)
    return cols


def test_columns_keep_no_output_once_every_pair_is_complete() -> None:
    cols = PairedColumns(ROLES)
    for k in range(100):
        for role in ROLES:
            cols.add(Sample(suite="r", item_id=f"i{k}", endpoint=role, output="x" * 500, score=1.0))
    assert all(not waiting for waiting in cols._outputs.values())
    assert len(cols) == 100 and cols.samples == 300


def test_lazy_items_read_side_by_side_are_built_once_and_memory_stays_bounded() -> None:
    made: list[int] = []

    def make(i: int) -> Item:
        made.append(i)
        return Item(id=f"i{i}", prompt=str(i))

    n = 5 * LazyItems.RECENT
    plan = LazyItems(n, make)
    # Two endpoints reading the plan side by side (as the runner's workers do), a slice view
    # sharing the same items, and one reader far behind the other.
    for a, b in zip(plan, plan[0:n], strict=True):
        assert a is b
    assert len(made) == n
    assert len(plan._recent) <= LazyItems.RECENT
    assert plan[0] == Item(id="i0", prompt="0") and len(made) == n + 1  # evicted: built again
    assert [it.id for it in plan[n - 3 :]] == [f"i{n - 3}", f"i{n - 2}", f"i{n - 1}"]


def test_lazy_plan_is_the_list_plan() -> None:
    suite = _suite(n=57, seed=11)
    lazy = asyncio.run(suite.plan(None, Provenance()))  # type: ignore[arg-type]
    assert isinstance(lazy, LazyItems)
    items = list(lazy)
    assert len(lazy) == len(items) == 57
    assert lazy == items and lazy[5] == items[5] and lazy[-1] == items[-1]
    assert list(lazy[10:20]) == items[10:20] and len(lazy[50:100]) == 7
    assert list(lazy[10:20][2:4]) == items[12:14]
    # The order the list plan always had: the tasks' items interleaved, task by task.
    counts = _allocate(57, [t.weight for t in suite.params.tasks])
    order = [
        f"{t.family}-L{t.level}-{i}"
        for i in range(max(counts))
        for t, count in zip(suite.params.tasks, counts, strict=True)
        if i < count
    ]
    assert [i.id for i in items] == order
    with pytest.raises(IndexError):
        lazy[57]
