"""Failure isolation in the runner (``evalsvc.runner._isolation``), on real loopback servers.

- Every kind of request failure the endpoint client reports (a deadline, HTTP 5xx after its
  retries, a reset connection, a body that is not JSON, a 4xx) is counted as its kind, from the
  very error strings the client produced against the fault server (``tests/fixtures/faults``).
- A suite whose planning fails, or out of whose run an exception escapes, ends as ``error``
  with its cause and fix; the suite after it runs and gets its verdict. A sink (store) failure
  still ends the run: it is not the suite's.
- The combination rule (docs/statistics.md §1): an errored suite cannot pass and never fails a
  candidate; a certain fail elsewhere still reads fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from evalsvc.domain import EndpointRef, Item, Provenance, RunOptions, Sample
from evalsvc.endpoints import EndpointClient, EndpointError
from evalsvc.gates import Reason, SuiteGate, combine_candidates, decide
from evalsvc.gates._outcome import GateOutcome
from evalsvc.runner import RunResult, execute
from evalsvc.runner._isolation import count_kinds, describe, error_kind
from evalsvc.suites import Suite, SuiteSpec
from evalsvc.suites._base import Emit
from tests.fixtures.faults import base_url, fault_server
from tests.runner.test_missing_pairs import LossyParams, LossySuite


async def _error_of(url: str, timeout_s: float = 1.0) -> str:
    """The one-line error a sample would carry (``Completion.error``) for a request to ``url``."""
    client = EndpointClient(EndpointRef(url=url), concurrency=1, timeout_s=timeout_s)
    try:
        answer = await client.chat([{"role": "user", "content": "hi"}], max_tokens=4)
    finally:
        await client.aclose()
    assert answer.error, f"{url} answered"
    return answer.error


@pytest.mark.parametrize(
    ("mode", "kind"),
    [("slow", "timeout"), ("500", "server_error"), ("reset", "connection"),
     ("garbage", "malformed"), ("nochoices", "malformed"), ("secret", "refused")],
)
def test_the_clients_own_errors_are_counted_by_kind(mode: str, kind: str) -> None:
    with fault_server(slow_s=3.0) as srv:
        error = asyncio.run(_error_of(base_url(srv, mode)))
    assert error_kind(error) == kind, error


def test_a_cause_names_counts_the_timeout_and_the_endpoint() -> None:
    options = RunOptions(request_timeout_s=300, concurrency=64)
    cause, fix = describe({"timeout": 12}, 12, 20, options, endpoint="candidate int4",
                          where="3984 tokens")
    assert cause == "12 of 20 requests timed out after 300 s at 3984 tokens"
    assert fix == "raise `--timeout` (now 300 s) or lower `--concurrency` (now 64)"
    counts = count_kinds(["HTTP 503 Service Unavailable from http://h/v1/chat/completions"] * 3
                         + ["ServerDisconnectedError: Server disconnected (http://h/v1)"])
    cause, fix = describe(counts, 5, 10, options, endpoint="baseline bf16")
    assert cause == ("5 of 10 requests errored (3 got HTTP 5xx from baseline bf16, 1 lost their "
                     "connection to baseline bf16 (refused, reset or closed), 1 never answered)")
    assert "check baseline bf16's server log" in fix and "check that baseline bf16 stays up" in fix


class PlanFails(LossySuite):
    kind = "plan-fails-test"

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        raise EndpointError("HTTP 502 Bad Gateway from http://127.0.0.1:1/tokenize")


class RunRaises(LossySuite):
    kind = "run-raises-test"

    async def run(
        self, items: Sequence[Item], client: EndpointClient, *, role: str, emit: Emit,
        done: set[tuple[str, int]], concurrency: int,
    ) -> None:
        await emit(Sample(suite=self.name, item_id=items[0].id, endpoint=role, score=1.0))
        raise KeyError("a bug in the kind")


def _run(suites: list[Suite], sink_fails: bool = False) -> RunResult:
    with fault_server() as srv:
        url = base_url(srv, "ok")

        async def sink(sample: Sample) -> None:
            if sink_fails:
                raise OSError("database is locked")

        return asyncio.run(
            execute(run_id="abcdef1234567890", baseline=EndpointRef(url=url),
                    candidates=[EndpointRef(url=url)], suites=suites, options=RunOptions(),
                    sink=sink)
        )


def _suite(cls: type[Suite], name: str) -> Suite:
    return cls(SuiteSpec(name=name, kind=cls.kind, params=LossyParams(n=40, keep=40).model_dump()))


def test_planning_and_run_failures_end_their_suite_and_the_next_one_runs() -> None:
    result = _run([_suite(PlanFails, "a"), _suite(RunRaises, "b"), _suite(LossySuite, "c")])
    by = {s.suite: s for s in result.candidates[0].suites}
    assert by["a"].verdict == by["b"].verdict == "error"
    planning, raised = by["a"].error, by["b"].error
    assert planning is not None and planning.stage == "planning"
    assert planning.cause == (
        "planning a on the baseline failed: HTTP 502 Bad Gateway from "
        "http://127.0.0.1:1/tokenize"
    )
    assert planning.counts == {"server_error": 1} and "server log" in planning.fix
    assert "evalsvc runs resume abcdef123456" in planning.fix
    assert raised is not None and raised.stage == "exception"
    assert raised.cause.startswith("b stopped with KeyError")
    assert "not of the endpoint" in raised.fix
    # The third suite ran and has its verdict; the candidate cannot pass, so it reads error.
    assert by["c"].error is None and by["c"].verdict in ("pass", "inconclusive")
    assert by["c"].outcome.n == 40
    assert result.verdict == result.candidates[0].verdict == "error"
    codes = [r.code for r in result.candidates[0].reasons]
    assert codes[:2] == ["suite_error", "suite_error"]
    assert result.error is not None and "a on " in result.error and "b on " in result.error


def test_a_sink_failure_still_ends_the_run() -> None:
    with pytest.raises(OSError, match="database is locked"):
        _run([_suite(LossySuite, "c")], sink_fails=True)


def _outcome(verdict: str, p_inf: float | None = None) -> GateOutcome:
    return GateOutcome(verdict=verdict, metric="accuracy", baseline=0.9, candidate=0.8,  # type: ignore[arg-type]
                       delta=-0.1, ci=(-0.2, 0.0), p_value=0.5, margin=0.05, alpha=0.05, n=100,
                       mde=0.05, test="t", details={"p_inferiority": p_inf})


def test_an_errored_suite_cannot_pass_and_never_fails_a_candidate() -> None:
    err = {"b": Reason("error_budget", "12 of 20 requests timed out after 300 s", "b")}
    passing = decide([SuiteGate("a", _outcome("pass")), SuiteGate("b", _outcome("pass"))],
                     errored=err)
    assert passing.verdict == "error" and passing.reasons[0] == err["b"]
    # Its partial numbers' fail call counts for nothing (p = 1 in the Holm family).
    failed_in_error = decide(
        [SuiteGate("a", _outcome("pass")), SuiteGate("b", _outcome("fail", 1e-9))], errored=err
    )
    assert failed_in_error.verdict == "error"
    # A certain fail of another suite stays a fail, with the errored suite said too.
    certain = decide(
        [SuiteGate("a", _outcome("fail", 1e-6)), SuiteGate("b", _outcome("pass"))], errored=err
    )
    assert certain.verdict == "fail" and err["b"] in certain.reasons
    # A not-gated suite in error changes nothing.
    info = decide([SuiteGate("a", _outcome("pass")), SuiteGate("b", _outcome("pass"), False)],
                  errored=err)
    assert info.verdict == "pass" and err["b"] in info.reasons
    # The run: fail above error above inconclusive.
    incon = decide([SuiteGate("a", _outcome("inconclusive"))])
    assert combine_candidates([("c0", passing), ("c1", incon)])[0] == "error"
    assert combine_candidates([("c0", passing), ("c1", certain)])[0] == "fail"
