"""The runner never gates on silently missing items: pairs that no side produced count as errors.

The endpoints are the loopback fault server's well-formed "ok" mode (a real HTTP server); the
suite is a test kind whose ``run`` loses half of its items, as a crashed or buggy kind would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import BaseModel

from evalsvc.domain import EndpointRef, Item, Provenance, RunOptions, Sample
from evalsvc.endpoints import EndpointClient
from evalsvc.runner import RunResult, execute
from evalsvc.suites import Suite, SuiteSpec
from evalsvc.suites._base import Emit
from tests.fixtures.faults import base_url, fault_server


class LossyParams(BaseModel):
    n: int = 20
    keep: int = 10


class LossySuite(Suite):
    kind = "lossy-test"
    Params = LossyParams
    requires = frozenset({"chat"})
    params: LossyParams

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        return [Item(id=f"i{k}", prompt="Say OK.") for k in range(self.params.n)]

    async def run(
        self,
        items: Sequence[Item],
        client: EndpointClient,
        *,
        role: str,
        emit: Emit,
        done: set[tuple[str, int]],
        concurrency: int,
    ) -> None:
        for item in items[: self.params.keep]:
            await emit(Sample(suite=self.name, item_id=item.id, endpoint=role, score=1.0))


def _run_against_ok_server(suite: Suite) -> RunResult:
    """Run ``suite`` with the fault server's well-formed "ok" mode on both sides."""
    with fault_server() as srv:
        url = base_url(srv, "ok")

        async def sink(sample: Sample) -> None:
            pass

        return asyncio.run(
            execute(
                run_id="t",
                baseline=EndpointRef(url=url),
                candidates=[EndpointRef(url=url)],
                suites=[suite],
                options=RunOptions(),
                sink=sink,
            )
        )


def test_missing_pairs_are_errors_and_break_the_budget() -> None:
    suite = LossySuite(SuiteSpec(name="lossy", kind="lossy-test", params={"n": 20, "keep": 10}))
    result = _run_against_ok_server(suite)
    res = result.candidates[0].suites[0]
    assert res.outcome.n == 10 and res.n_planned == 20
    assert res.n_errors == 10 and res.details["missing_pairs"] == 10
    assert result.verdict == "error" and result.error and "lossy" in result.error
    assert res.verdict == "error" and res.error is not None and "10 of 20" in res.error.cause


class BaselineErrorsSuite(LossySuite):
    """Every baseline answer errors (as a dead baseline server would); the candidate answers."""

    kind = "baseline-errors-test"

    async def run(
        self,
        items: Sequence[Item],
        client: EndpointClient,
        *,
        role: str,
        emit: Emit,
        done: set[tuple[str, int]],
        concurrency: int,
    ) -> None:
        for item in items:
            error = "connection refused" if role == "baseline" else None
            score = None if error else 1.0
            await emit(
                Sample(suite=self.name, item_id=item.id, endpoint=role, score=score, error=error)
            )


def test_the_error_budget_names_the_side_that_errored() -> None:
    """A dead baseline errors every pair; the message says so instead of blaming the candidate."""
    suite = BaselineErrorsSuite(
        SuiteSpec(name="dead-baseline", kind="baseline-errors-test", params={"n": 8})
    )
    result = _run_against_ok_server(suite)
    assert result.verdict == "error" and result.error
    failure = result.candidates[0].suites[0].error
    assert failure is not None and failure.side == "baseline"
    assert "8 of 8 items errored (samples errored: baseline 8, candidate 0;" in failure.cause
    # Counted by kind and blamed on the endpoint that failed: the baseline's.
    assert failure.counts == {"connection": 8}
    assert failure.cause.startswith("8 of 8 requests lost their connection to baseline ")
    assert "check that baseline " in failure.fix
