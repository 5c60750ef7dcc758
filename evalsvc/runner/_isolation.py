"""Failure isolation: an infrastructure failure inside one suite ends that suite, not the run.

Contract:
- A suite ends as ``error`` (:class:`SuiteFailure`) when its calibration pilot errors past the
  run's error budget (``SuiteFailed``, raised by ``_pilot``), when planning it on the baseline
  fails, when its requests error past the budget (the runner's gate step), or when any other
  exception leaves its run (a sink or store failure and a cancellation are not the suite's and
  still end the run). A failure on the baseline side, in the pilot or in planning ends the
  suite for every candidate; one on a candidate's side ends it for that candidate.
- Every failure says what went wrong and how to fix it, from the samples' ``error`` strings
  counted by kind (:func:`error_kind`: the endpoint client's one-line errors) with the run's
  own timeout and concurrency, and names the endpoint that failed: "12 of 20 requests timed
  out after 300 s at 3984 tokens: raise `--timeout` (now 300 s) or lower `--concurrency` (now
  8)". Its ``to_dict`` is the JSON report's per-suite ``error`` (docs/report.md).
- How an errored suite weighs in a candidate's and the run's verdict is
  ``evalsvc.gates._combine`` (docs/statistics.md §1): it keeps both from ``pass``; a certain
  fail elsewhere still reads ``fail``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from evalsvc.domain import RunOptions
from evalsvc.endpoints import EndpointError
from evalsvc.runner._common import InfrastructureError
from evalsvc.suites import SuiteDoesNotFit

Stage = Literal["pilot", "planning", "requests", "exception"]

#: The kinds of request failure, in the order a reader should see them (the likely cause of a
#: slow or overloaded endpoint first).
ERROR_KINDS: tuple[str, ...] = (
    "timeout",
    "server_error",
    "rate_limited",
    "connection",
    "malformed",
    "refused",
    "other",
)


def error_kind(error: str) -> str:
    """The kind of one sample's ``error`` (``evalsvc.endpoints.EndpointError``'s one line):
    ``timeout`` (the request deadline, or the connect bound), ``server_error`` (HTTP 5xx after
    retries), ``rate_limited`` (HTTP 429), ``connection`` (refused, reset or closed
    connections), ``malformed`` (a body or stream that is not the API's JSON, or not HTTP),
    ``refused`` (another HTTP 4xx), else ``other``."""
    text = error.lower()
    if text.startswith("timeout") or "timeouterror" in text or "timed out" in text:
        return "timeout"
    if text.startswith("http 429"):
        return "rate_limited"
    if text.startswith("http 5"):
        return "server_error"
    if text.startswith("http 4"):
        return "refused"
    if (
        "malformed" in text
        or "not valid http" in text
        or "stream sent an error" in text
        or "without choices" in text
        or "not json" in text
    ):
        return "malformed"
    if any(
        word in text
        for word in ("reset", "disconnect", "refused", "connection", "clientoserror",
                     "broken pipe", "closed")
    ):
        return "connection"
    return "other"


def count_kinds(errors: Iterable[str]) -> dict[str, int]:
    """``{kind: count}`` of ``errors`` (:func:`error_kind`), in ``ERROR_KINDS`` order."""
    counts = Counter(error_kind(e) for e in errors)
    return {k: counts[k] for k in ERROR_KINDS if counts[k]}


@dataclass(frozen=True)
class SuiteFailure:
    """Why one suite ended as ``error`` (for one candidate, or every one: ``side``)."""

    suite: str
    stage: Stage
    cause: str
    fix: str
    #: Errored requests by kind (``ERROR_KINDS``); empty for a failure that was no request's.
    counts: dict[str, int] = field(default_factory=dict)
    #: ``baseline`` (every candidate's suite ends), or the candidate's role.
    side: str = "baseline"

    @property
    def message(self) -> str:
        return f"{self.cause}: {self.fix}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "cause": self.cause,
            "fix": self.fix,
            "counts": dict(self.counts),
            "side": self.side,
        }


class SuiteFailed(InfrastructureError):
    """A suite cannot go on (its pilot errored past the budget): ends that suite only.
    ``errors`` are the errored samples' ``error`` strings, ``n`` the requests they are of,
    ``where`` what they were sent at (a pilot rung's label)."""

    def __init__(
        self,
        message: str,
        *,
        errors: Sequence[str],
        failed: int,
        n: int,
        where: str | None = None,
    ) -> None:
        super().__init__(message)
        self.errors, self.failed, self.n, self.where = list(errors), failed, n, where


def _kind_phrase(kind: str, k: int, options: RunOptions, endpoint: str) -> str:
    return {
        "timeout": f"timed out after {options.request_timeout_s:g} s",
        "server_error": f"got HTTP 5xx from {endpoint}",
        "rate_limited": f"got HTTP 429 (rate limited) from {endpoint}",
        "connection": f"lost their connection to {endpoint} (refused, reset or closed)",
        "malformed": f"got an answer from {endpoint} that could not be parsed",
        "refused": f"were refused by {endpoint} (HTTP 4xx)",
        "other": "failed otherwise (see the suite's error examples)",
    }[kind] if k else ""


def fix_for(kind: str, options: RunOptions, endpoint: str) -> str:
    """How to fix failures of ``kind`` (:func:`error_kind`) at ``endpoint`` (its label)."""
    return {
        "timeout": (
            f"raise `--timeout` (now {options.request_timeout_s:g} s) or lower `--concurrency` "
            f"(now {options.concurrency})"
        ),
        "server_error": (
            f"check {endpoint}'s server log (overloaded, out of memory, crashed?) or lower "
            "`--concurrency`"
        ),
        "rate_limited": f"lower `--concurrency` or raise {endpoint}'s rate limit",
        "connection": (
            f"check that {endpoint} stays up (a restart, an OOM kill, a proxy's idle timeout) "
            "or lower `--concurrency`"
        ),
        "malformed": (
            f"check what {endpoint} (or a proxy in front of it) answers: not an "
            "OpenAI-compatible body or stream"
        ),
        "refused": (
            f"check {endpoint}'s limits (context length, max tokens) against the suite's "
            "requests"
        ),
        "other": "see the suite's error examples (`evalsvc export RUN`)",
    }.get(kind, "see the suite's error examples (`evalsvc export RUN`)")


def describe(
    counts: dict[str, int],
    total: int,
    n: int,
    options: RunOptions,
    *,
    endpoint: str,
    what: str = "requests",
    where: str | None = None,
) -> tuple[str, str]:
    """``(cause, fix)`` for ``total`` errored of ``n`` ``what`` sent to ``endpoint`` (its
    label), ``counts`` of them by kind, ``where`` (e.g. a pilot rung, "3984 tokens"): "12 of 20
    requests timed out after 300 s at 3984 tokens", "raise `--timeout` (now 300 s) or ..."."""
    at = f" at {where}" if where else ""
    counts = {k: v for k, v in counts.items() if v}
    known = sum(counts.values())
    if len(counts) == 1 and known == total:
        ((kind, k),) = counts.items()
        cause = f"{k} of {n} {what} {_kind_phrase(kind, k, options, endpoint)}{at}"
    else:
        parts = [f"{k} {_kind_phrase(kind, k, options, endpoint)}" for kind, k in counts.items()]
        if total > known:
            parts.append(f"{total - known} never answered")
        cause = f"{total} of {n} {what} errored{at} ({', '.join(parts)})"
    fixes = list(dict.fromkeys(fix_for(k, options, endpoint) for k in counts)) or [
        fix_for("other", options, endpoint)
    ]
    return cause, "; or ".join(fixes)


def resume_hint(run_id: str) -> str:
    """What re-runs only the errored suites once the cause is fixed."""
    return f"then `evalsvc runs resume {run_id[:12]}` re-sends only what errored"


#: A failure's cause is one line of a report: an exception's text is cut here.
_MAX_CAUSE = 500


def failure_of(
    exc: BaseException,
    suite: str,
    stage: Stage,
    options: RunOptions,
    *,
    endpoint: str,
    run_id: str,
) -> SuiteFailure:
    """The :class:`SuiteFailure` for ``exc``, which ended ``suite`` at ``stage`` on the
    baseline side (``endpoint``: the baseline's label)."""
    hint = resume_hint(run_id)
    if isinstance(exc, SuiteFailed):
        counts = count_kinds(exc.errors)
        cause, fix = describe(
            counts, exc.failed, exc.n, options, endpoint=endpoint, what="baseline requests",
            where=exc.where,
        )
        return SuiteFailure(suite, "pilot", f"calibration pilot: {cause}", f"{fix}; {hint}",
                            counts)
    text = " ".join(str(exc).split())[:_MAX_CAUSE]
    # An endpoint's failure (planning's /tokenize, a request a kind let escape) says its kind.
    inner = exc.__cause__ if exc.__cause__ is not None else exc
    if isinstance(inner, EndpointError):
        kind = error_kind(str(inner))
        return SuiteFailure(suite, stage, text, f"{fix_for(kind, options, endpoint)}; {hint}",
                            {kind: 1})
    if isinstance(exc, SuiteDoesNotFit):  # the suite's parameters, not evalsvc or the endpoint
        return SuiteFailure(suite, stage, f"{suite} does not fit this endpoint: {text}",
                            f"change the suite ({text}); {hint}")
    if isinstance(exc, InfrastructureError):  # the pilot's own: no rung scored, no level runs
        return SuiteFailure(suite, stage, text, f"see the suite's calibration record; {hint}")
    return SuiteFailure(
        suite,
        "exception",
        f"{suite} stopped with {type(exc).__name__}: {text}",
        "an error of evalsvc or of the suite's kind, not of the endpoint: report it with the "
        f"run id (the other suites ran); {hint}",
    )


async def gather_or_cancel(*aws: Awaitable[Any]) -> list[Any]:
    """``asyncio.gather`` that cancels the others when one raises: a suite that ends in error
    leaves none of its requests running under the next suite."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
