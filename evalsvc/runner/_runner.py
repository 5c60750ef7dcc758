"""The runner: probe endpoints, plan items, send them, hand samples to a sink, gate the results.

Contract:
- ``execute(...)`` knows nothing of the database. It takes a ``SampleSink`` (the service layer
  gives it one that writes to the store as samples complete) and the set of sample keys already
  stored (so a resumed run skips finished items).
- It raises ``InfrastructureError`` (exit 4) when an endpoint is unreachable at the probe, and
  ``EndpointUrlError`` (a ``CapabilityError``, exit 2) naming the corrected URL when a server
  answers but not at the given base URL (``/v1`` missing). A suite that
  cannot run on these endpoints (a capability an endpoint lacks, or the suite's own
  ``preflight``: an lm-eval without a Python or a tokenizer, a length past the context) is
  **skipped** before any item is sent: the others run, and the result's ``skipped`` names it
  with its reason, as does a ``skipped`` reason of every candidate (a verdict never passes by a
  suite's absence without saying so). ``RunOptions.strict`` (``--strict``) refuses the run
  instead, and a run none of whose suites can run is refused either way: ``CapabilityError``
  (exit 2), naming each missing capability once with the endpoints that lack it, its fix and
  the suites that would run (:func:`runnable_suites`). Everything after that is recorded, never
  raised: errored requests are samples with ``error`` set, counted per suite, and one suite's
  infrastructure failure ends that suite alone (``_isolation``): its calibration pilot or its
  requests erroring past the error budget, planning it failing, an exception out of its run
  make it read ``error`` with its cause and fix (``SuiteResult.error``) while the other suites
  run on; only the sink's (the store's) failures and cancellation end the run.
- After the probe, before any item, the comparability guard (``_comparable.incomparable``)
  compares each candidate's provenance with the baseline's: a candidate that differs in more
  than the quantization (tokenizer, chat template, model family, generation defaults,
  reasoning handling, a context shorter than a suite needs), unless the run or its suites
  allow that difference, is sent nothing and reads ``non-comparable`` with one reason per
  difference; after the run, a suite whose sides refused unequal numbers of items (HTTP 4xx
  answers past the error budget on one side) makes its candidate ``non-comparable`` too.
- A suite whose calibration is on (``Suite.calibration``: its ``calibrate:`` or ``--calibrate``)
  is first piloted on the baseline alone (``evalsvc.runner._pilot.calibrate``) and replaced by
  the suite at the chosen difficulty; the pilot's samples go to the sink as ``<suite>:pilot``
  and never reach a gate, and its record is the suite's ``details["calibration"]``.
- How each suite is gated is ``Suite.gate``, resolved once per suite by the service layer
  (``evalsvc.services.runs.bind_gates``: ``evalsvc.gates.resolve`` within the server's limits,
  the one place that decides metric, direction, margin or threshold, α and whether it gates); a
  suite handed to ``execute`` unbound (library use) is bound there, once, without limits; the
  verdict per suite from ``evalsvc.gates.evaluate_gate`` / ``threshold_gate`` and the
  informative-baseline guard; each candidate's verdict (and its suites' final verdicts after the
  candidate-level Holm correction) from ``evalsvc.gates.decide``, the run's from
  ``evalsvc.gates.combine_candidates``, every one with its reasons (docs/statistics.md §1).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from evalsvc.domain import EndpointRef, Item, Provenance, RunOptions, Sample
from evalsvc.endpoints import (
    OPTIONAL_CAPABILITIES,
    BaseUrlError,
    EgressPolicy,
    EndpointClient,
    EndpointError,
    probe,
    redact_url,
)
from evalsvc.endpoints._probe import NO_TOKENIZER
from evalsvc.gates import (
    CandidateDecision,
    Difference,
    GateOutcome,
    Reason,
    ResolvedGate,
    SuiteGate,
    apply_bounds,
    apply_guard,
    baseline_guard,
    combine_candidates,
    decide,
    evaluate_gate,
    non_comparable,
    recovery_gate,
    recovery_summary,
    slice_gates,
    threshold_gate,
)
from evalsvc.runner._common import (
    CancelledRun,
    CapabilityError,
    EndpointUrlError,
    InfrastructureError,
    suite_concurrency,
)
from evalsvc.runner._comparable import Comparability, allowed_reasons, incomparable, refusals
from evalsvc.runner._isolation import (
    Stage,
    SuiteFailure,
    count_kinds,
    describe,
    error_kind,
    failure_of,
    gather_or_cancel,
    resume_hint,
)
from evalsvc.runner._pilot import calibrate
from evalsvc.settings import Settings
from evalsvc.suites import Analysis, PairedColumns, Suite, flips, pilot_name
from evalsvc.suites._base import _SERVER_RUN


class SampleSink(Protocol):
    async def __call__(self, sample: Sample) -> None: ...


#: The stored samples of one suite of the run, page by page (``evalsvc.services.runs``).
StoredPages = Callable[[str], AsyncIterator[Sequence[Sample]]]


class Progress(Protocol):
    def planned(
        self, suite: str, roles: Sequence[str], n_items: int, n_done: dict[str, int]
    ) -> None: ...
    def advance(self, suite: str, role: str, error: bool = False) -> None: ...
    def message(self, text: str) -> None: ...


class NullProgress:
    def planned(
        self, suite: str, roles: Sequence[str], n_items: int, n_done: dict[str, int]
    ) -> None:
        pass

    def advance(self, suite: str, role: str, error: bool = False) -> None:
        pass

    def message(self, text: str) -> None:
        pass


@dataclass
class SuiteResult:
    """One suite's outcome for one candidate: the gate, errors and kind-specific details."""

    suite: str
    kind: str
    version: str
    outcome: GateOutcome
    n_errors: int
    n_planned: int
    gated: bool
    details: dict[str, Any] = field(default_factory=dict)
    #: Why the suite reads what it reads (``evalsvc.gates.Reason``), after the Holm correction.
    reasons: list[Reason] = field(default_factory=list)
    #: Why the suite ended in error (``_isolation``): its pilot, planning or run failed, or its
    #: requests errored past the budget; None when it has a verdict.
    error: SuiteFailure | None = None

    @property
    def verdict(self) -> str:
        """The gate's verdict, or ``error`` when the suite ended in error (``error``: too many
        of its items errored, or it could not finish): any numbers stand, but no verdict rests
        on them (docs/statistics.md §1 says how the candidate's and the run's read it)."""
        if self.error is not None or any(
            r.code in ("error_budget", "suite_error") for r in self.reasons
        ):
            return "error"
        return self.outcome.verdict


@dataclass
class CandidateResult:
    role: str
    endpoint: EndpointRef
    provenance: Provenance
    suites: list[SuiteResult] = field(default_factory=list)
    verdict: str = "inconclusive"
    reasons: list[Reason] = field(default_factory=list)
    #: What the comparability guard found (``_comparable``): differences beyond quantization.
    comparability: Comparability = field(default_factory=Comparability)


@dataclass(frozen=True)
class SkippedSuite:
    """A suite of the run that was not sent at all, and why (one line per problem)."""

    suite: str
    kind: str
    reasons: tuple[str, ...]

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {"suite": self.suite, "kind": self.kind, "reason": self.reason}


@dataclass(frozen=True)
class HelperProbe:
    """A helper endpoint a suite named besides the endpoints under test (``Suite.helper_endpoints``:
    its ``judge``, its ``embeddings``) and what its probe found, recorded with the run as the
    endpoints under test are (the JSON report's per-suite ``helpers``)."""

    suite: str
    purpose: str
    endpoint: EndpointRef
    provenance: Provenance


@dataclass
class RunResult:
    run_id: str
    verdict: str
    baseline: EndpointRef
    baseline_provenance: Provenance
    candidates: list[CandidateResult]
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    options: RunOptions = field(default_factory=RunOptions)
    duration_s: float = 0.0
    reasons: list[Reason] = field(default_factory=list)
    #: Suites that could not run on these endpoints and were left out (not with ``strict``).
    skipped: list[SkippedSuite] = field(default_factory=list)
    #: The helper endpoints the suites named, probed before any item was sent.
    helpers: list[HelperProbe] = field(default_factory=list)


def role_of(index: int) -> str:
    return f"candidate:{index}"


async def probe_all(
    baseline: EndpointRef,
    candidates: Sequence[EndpointRef],
    options: RunOptions,
    *,
    concurrency: int | None = None,
    egress: EgressPolicy | None = None,
    optional: Collection[str] = (),
) -> tuple[list[EndpointClient], list[Provenance]]:
    """Open a client per endpoint and probe them all; unreachable endpoints raise InfrastructureError.

    ``concurrency`` sizes each client (default ``options.concurrency``); the runner passes the
    largest in-flight bound of its suites (see :func:`suite_concurrency`). ``egress`` is the
    policy every client connects under (None: local, unrestricted; workers pass the server's).
    """
    refs = [baseline, *candidates]
    limit = max(1, concurrency if concurrency is not None else options.concurrency)
    clients = [
        EndpointClient(ref, concurrency=limit, timeout_s=options.request_timeout_s, egress=egress)
        for ref in refs
    ]
    results = await asyncio.gather(
        *(probe(c, optional=optional) for c in clients), return_exceptions=True
    )
    failures = []
    wrong_urls = []
    provs: list[Provenance] = []
    for ref, client, res in zip(refs, clients, results, strict=True):
        if isinstance(res, BaseUrlError):  # the server answered: the URL is the mistake
            wrong_urls.append(f"endpoint {ref.name}: {res}" if ref.name else str(res))
        elif isinstance(res, BaseException):
            failures.append(f"endpoint {ref.name or redact_url(ref.url)} unreachable: {res}")
        else:
            provs.append(res)
            ref.model = client.model
    if wrong_urls or failures:
        await asyncio.gather(*(c.aclose() for c in clients))
    if wrong_urls:
        # Once per URL: a baseline and a candidate given the same wrong URL say it once.
        raise EndpointUrlError("; ".join(dict.fromkeys(wrong_urls + failures)))
    if failures:
        raise InfrastructureError("; ".join(failures))
    return clients, provs


#: Errors are one line; an endpoint-influenced one must not grow a row without bound.
_MAX_ERROR_CHARS = 1000


def _cap_output(sample: Sample, cap: int) -> None:
    """Bound what a sample stores (``evalsvc.runner._bounds``): its output truncated to ``cap``
    characters (``EVALSVC_MAX_OUTPUT_CHARS``) and said so in ``data`` (``output_truncated``,
    ``output_chars``: the score was computed on the whole answer), every string of its ``data``
    likewise (``data_truncated``), its texts valid Unicode, its error one bounded line."""
    from evalsvc.runner._bounds import bound_sample  # noqa: PLC0415 - the bounds live there

    bound_sample(sample, cap)
    if sample.error is not None and len(sample.error) > _MAX_ERROR_CHARS:
        sample.error = sample.error[:_MAX_ERROR_CHARS] + "…"


#: How to give an endpoint each capability a suite may need: what the refusal and the skipped
#: suite's reason name as the fix (docs/cli.md, "Suites an endpoint cannot run").
CAPABILITY_FIXES: dict[str, str] = {
    "tokenize": (
        "register the model's tokenizer with the endpoint (`evalsvc endpoints add NAME URL "
        "--tokenizer PATH`, a tokenizer.json or its directory) and pass NAME, or serve it with "
        "an engine that has a tokenize route (vLLM, SGLang, llama.cpp, TGI)"
    ),
    "echo": (
        "serve it with an engine whose /v1/completions returns the prompt's logprobs with "
        "`echo` (vLLM, SGLang)"
    ),
    "prompt_logprobs": (
        "serve it with vLLM (`prompt_logprobs`), or use a drift suite with `method: echo` "
        "(e.g. drift-gpu)"
    ),
    "logprobs": "serve it with token logprobs enabled (vLLM: `--max-logprobs` at least the suite's top_k)",
    "completions": "serve /v1/completions (vLLM and SGLang do; chat-only APIs do not)",
    "chat": "serve /v1/chat/completions with a chat template (vLLM: `--chat-template`)",
    "tools": (
        "serve it with tool calling on and a chat template that renders tools (vLLM: "
        "`--enable-auto-tool-choice --tool-call-parser NAME` for the model's template; "
        "llama.cpp: `--jinja` and a template whose /props `chat_template_caps` say "
        "supports_tools); the probe needs `tool_choice: required` answered with a parsed call"
    ),
    "json_schema": (
        "serve it with structured outputs (`response_format` with a JSON schema: vLLM and "
        "llama.cpp do by default; SGLang with a grammar backend)"
    ),
}


def _label(ref: EndpointRef, prov: Provenance) -> str:
    """The reports' name for an endpoint (``endpoint_label``): its registered name, else
    host:port, with the served model."""
    from urllib.parse import urlsplit

    where = ref.name or urlsplit(redact_url(ref.url)).netloc.rpartition("@")[2] or ref.url
    model = ref.model or prov.model
    return f"{where} ({model})" if model and model != where else where


def capability_gaps(
    suites: Sequence[Suite], refs: Sequence[EndpointRef], provs: Sequence[Provenance]
) -> dict[str, dict[str, list[str]]]:
    """``{suite: {capability: [endpoint labels that lack it]}}`` for every suite that needs a
    capability (``Suite.requires``) some endpoint's probe did not find."""
    gaps: dict[str, dict[str, list[str]]] = {}
    for suite in suites:
        for ref, prov in zip(refs, provs, strict=True):
            for cap in sorted(c for c in suite.requires if not prov.capabilities.get(c, False)):
                who = gaps.setdefault(suite.name, {}).setdefault(cap, [])
                label = _label(ref, prov)
                if label not in who:
                    who.append(label)
    return gaps


def _fix(cap: str, provs: Sequence[Provenance] = ()) -> str:
    """How to give an endpoint ``cap`` (``CAPABILITY_FIXES``); for ``tokenize``, also why the
    probe's last resort, the served model's tokenizer from the hub, gave none (the first
    endpoint's reason: ``tokenizer_source`` ``none: ...``)."""
    fix = CAPABILITY_FIXES.get(cap, "use an endpoint that has it")
    if cap == "tokenize":
        for prov in provs:
            source = prov.tokenizer_source or ""
            if source.startswith(NO_TOKENIZER + "; "):
                why = source[len(NO_TOKENIZER) + 2 :]
                fix += (f" (the served model's tokenizer from the Hugging Face hub was tried: "
                        f"{why}; HF_ENDPOINT names a mirror, HF_TOKEN a gated model's access)")
                break
    return fix


def _capability_lines(
    gaps: dict[str, dict[str, list[str]]], provs: Sequence[Provenance] = ()
) -> list[str]:
    """One line per missing capability (never one per endpoint): the endpoints that lack it,
    the suites that need it and the fix."""
    by_cap: dict[str, tuple[list[str], list[str]]] = {}
    for suite, caps in gaps.items():
        for cap, who in caps.items():
            endpoints, needing = by_cap.setdefault(cap, ([], []))
            endpoints.extend(w for w in who if w not in endpoints)
            needing.append(suite)
    lines = []
    for cap, (endpoints, needing) in by_cap.items():
        verb = "lacks" if len(endpoints) == 1 else "lack"
        fix = _fix(cap, provs)
        lines.append(
            f"needs {cap}, which {', '.join(endpoints)} {verb} (suites {', '.join(needing)}); "
            f"fix: {fix}"
        )
    return lines


def _suite_gap_reason(
    caps: dict[str, list[str]], provs: Sequence[Provenance] = ()
) -> list[str]:
    return [
        f"needs {cap}, which {', '.join(who)} {'lacks' if len(who) == 1 else 'lack'}; fix: "
        f"{_fix(cap, provs)}"
        for cap, who in caps.items()
    ]


def _refusal(
    lines: list[str], runnable: Sequence[str], *, strict: bool
) -> CapabilityError:
    if runnable:
        tail = (
            f" Suites that would run: {', '.join(runnable)} (without --strict the run skips "
            "the others and says why)."
            if strict
            else ""
        )
    else:
        tail = " No suite of the run can run on these endpoints."
    return CapabilityError(
        "refused before sending any item (scoring them would give meaningless zeros): "
        + "; ".join(lines)
        + "."
        + tail
    )


def check_capabilities(
    suites: Sequence[Suite], refs: Sequence[EndpointRef], provs: Sequence[Provenance]
) -> None:
    """``CapabilityError`` (exit 2) when any suite needs a capability an endpoint lacks: each
    capability named once, with the endpoints that lack it, its fix and the suites that would
    run (the strict check; :func:`runnable_suites` skips such suites instead)."""
    gaps = capability_gaps(suites, refs, provs)
    if gaps:
        raise _refusal(
            _capability_lines(gaps, provs), [s.name for s in suites if s.name not in gaps],
            strict=True,
        )


async def preflight_problems(
    suites: Sequence[Suite], baseline: Provenance, calibrate: bool | None = None
) -> dict[str, list[str]]:
    """Every suite's own pre-run problems (``Suite.preflight``: an lm-eval task that does not
    exist, its data, tokenizer or Python missing, a length past the context...), by suite. A
    suite that will calibrate (``calibrate``: the run's ``--calibrate``) is left to its pilot,
    whose ladder is sized to the baseline."""
    problems: dict[str, list[str]] = {}
    for suite in suites:
        if suite.calibration(calibrate) is not None:
            continue
        found = await suite.preflight(baseline)
        if found:
            problems[suite.name] = list(found)
    return problems


async def check_preflight(
    suites: Sequence[Suite], baseline: Provenance, calibrate: bool | None = None
) -> None:
    """:func:`preflight_problems` as a refusal: ``CapabilityError`` (exit 2) with every reason."""
    problems = await preflight_problems(suites, baseline, calibrate)
    if problems:
        raise CapabilityError(
            "; ".join(f"suite {name}: {p}" for name, ps in problems.items() for p in ps)
            + " (refused before sending any item)"
        )


async def runnable_suites(
    suites: Sequence[Suite],
    refs: Sequence[EndpointRef],
    provs: Sequence[Provenance],
    options: RunOptions,
) -> tuple[list[Suite], list[SkippedSuite]]:
    """The suites that can run on these endpoints, and the ones skipped with their reasons.

    A suite is skipped when an endpoint lacks a capability it needs (``Suite.requires``) or its
    own preflight finds a problem. With ``options.strict`` any such suite refuses the whole run
    instead (``CapabilityError``, exit 2: pipelines that must run every suite they name), and a
    run left with no suite is refused either way, with every reason."""
    gaps = capability_gaps(suites, refs, provs)
    if gaps and options.strict:
        raise _refusal(
            _capability_lines(gaps, provs), [s.name for s in suites if s.name not in gaps],
            strict=True,
        )
    rest = [s for s in suites if s.name not in gaps]
    problems = await preflight_problems(rest, provs[0], options.calibrate)
    runnable = [s for s in rest if s.name not in problems]
    lines = _capability_lines(gaps, provs) + [
        f"suite {name}: {p}" for name, ps in problems.items() for p in ps
    ]
    if problems and options.strict:
        raise _refusal(lines, [s.name for s in runnable], strict=True)
    if not runnable:
        raise _refusal(lines, [], strict=options.strict)
    skipped = [
        SkippedSuite(
            s.name,
            s.kind,
            tuple(
                _suite_gap_reason(gaps[s.name], provs) if s.name in gaps else problems[s.name]
            ),
        )
        for s in suites
        if s.name in gaps or s.name in problems
    ]
    return runnable, skipped


async def execute(
    *,
    run_id: str,
    baseline: EndpointRef,
    candidates: Sequence[EndpointRef],
    suites: Sequence[Suite],
    options: RunOptions,
    sink: SampleSink,
    done: set[tuple[str, str, str, int]] | None = None,
    stored: Callable[[], Awaitable[list[Sample]]] | None = None,
    stored_pages: StoredPages | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    on_probed: Callable[[str, EndpointRef, Provenance], None] | None = None,
    egress: EgressPolicy | None = None,
    max_output_chars: int | None = None,
    helpers: dict[str, dict[str, EndpointRef]] | None = None,
    resink: SampleSink | None = None,
) -> RunResult:
    """Run ``suites`` on the baseline and every candidate and gate each candidate.

    ``stored`` returns the samples already persisted for this run (from earlier attempts); they
    are merged with this attempt's samples before analysis, so a resumed run's verdict equals an
    uninterrupted one's. ``stored_pages(suite)``, when given, reads them instead one suite at a
    time in pages (the service layer's; ``stored`` then serves only a calibration pilot's
    samples): with it, memory does not grow with the run's size. ``helpers`` are the endpoints
    the suites named besides the endpoints under test (``Suite.helper_endpoints``: a judge, an
    embedding model), ``{suite: {purpose: ref}}``, resolved by the service layer; each is probed
    and handed to the suite's ``after_pairs``, whose rescored samples go to ``resink`` (default
    ``sink``): the store's writer must let them replace the samples they rescore. ``egress`` is the
    connection/credential policy of every client (None: local); samples reach ``sink`` with
    their output cut at ``max_output_chars`` (default ``EVALSVC_MAX_OUTPUT_CHARS``,
    ``data.output_truncated`` set) after they were scored.

    The steps: probe every endpoint (and the helpers), drop the suites they cannot run, guard
    comparability, run each suite (``_Attempt.run_suites``: pilot, plan, send, with failure
    isolation), then gate what was collected with what earlier attempts stored.

    Memory: the samples of a streaming kind (``Suite.streams_samples``) are kept only as
    ``PairedColumns`` (scores and the few fields its analysis reads), the others as samples; a
    lazy plan (``LazyItems``) is read item by item as it is sent.
    """
    started = time.perf_counter()
    # Server mode, for the suites (evalsvc.suites.server_run): a kind prepares nothing from a
    # package index on a worker unless its operator allowed it. The run is its own asyncio task
    # (asyncio.run), so this holds for its suites and threads and never leaks to the caller.
    _SERVER_RUN.set(egress is not None)
    for suite in suites:
        if not suite.gate_bound:
            suite.bind_gate(options)
    limit = max([options.concurrency, *(suite_concurrency(s, options) for s in suites)])
    # Capabilities that cost a generation to probe (tools, json_schema): only those asked for.
    optional = {c for s in suites for c in s.requires} & set(OPTIONAL_CAPABILITIES)
    clients, provs = await probe_all(
        baseline, candidates, options, concurrency=limit, egress=egress, optional=optional
    )
    helper_clients: dict[str, dict[str, EndpointClient]] = {}
    try:
        helper_clients, probed_helpers = await _open_helpers(helpers or {}, options, limit, egress)
        refs = [baseline, *candidates]
        roles = ["baseline", *(role_of(i) for i in range(len(candidates)))]
        for role, ref, prov in zip(roles, refs, provs, strict=True):
            if on_probed:
                on_probed(role, ref, prov)
        attempt = _Attempt(
            run_id=run_id, options=options, sink=sink, resink=resink or sink,
            progress=progress or NullProgress(), cancel=cancel,
            # ``is None``, not ``or``: the caller's set, even empty, is the one it may add to
            # after the probe (a blessed baseline's reused samples, services.baselines).
            done=set() if done is None else done,
            stored=stored, stored_pages=stored_pages,
            output_cap=Settings().max_output_chars if max_output_chars is None
            else max_output_chars,
            clients=clients, provs=provs, helper_clients=helper_clients,
            labels={r: _label(x, p) for r, x, p in zip(roles, refs, provs, strict=True)},
        )
        runnable, skipped = await runnable_suites(suites, refs, provs, options)
        for gone in skipped:
            attempt.progress.message(f"skipping {gone.suite}: {gone.reason}")
        guard, warnings = await attempt.guard(runnable, refs, roles)
        await attempt.run_suites(runnable)
        result = await attempt.gate(baseline, candidates, skipped, guard)
        result.warnings = warnings
        result.helpers = probed_helpers
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
        await asyncio.gather(*(c.aclose() for m in helper_clients.values() for c in m.values()))
    result.duration_s = time.perf_counter() - started
    return result


@dataclass(eq=False)
class _Attempt:
    """One attempt of a run once its endpoints are probed: what ``execute`` sends, collects and
    gates, and the state its steps share (the samples collected, each suite's columns, plans
    and designs, the suites that ended in error)."""

    run_id: str
    options: RunOptions
    sink: SampleSink
    resink: SampleSink
    progress: Progress
    cancel: threading.Event | None
    done: set[tuple[str, str, str, int]]
    stored: Callable[[], Awaitable[list[Sample]]] | None
    stored_pages: StoredPages | None
    output_cap: int
    clients: list[EndpointClient]
    provs: list[Provenance]
    helper_clients: dict[str, dict[str, EndpointClient]]
    labels: dict[str, str]
    """``{role: label}`` of every endpoint, for messages."""
    roles: list[str] = field(default_factory=list)
    """The roles sent anything: the baseline and the comparable candidates."""
    live: list[EndpointClient] = field(default_factory=list)
    suites: list[Suite] = field(default_factory=list)
    """The suites as they ran (a calibrated one replaced by its chosen difficulty)."""
    collected: list[Sample] = field(default_factory=list)
    """Samples of suites that do not stream, and calibration pilots'; a streaming suite's go
    to its columns (and to the sink) only."""
    columns: dict[str, PairedColumns] = field(default_factory=dict)
    plans: dict[str, Sequence[Item]] = field(default_factory=dict)
    sequential: dict[str, dict[str, Any]] = field(default_factory=dict)
    staged: dict[str, dict[str, Any]] = field(default_factory=dict)
    calibrations: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: dict[str, SuiteFailure] = field(default_factory=dict)
    """Suites ended by an infrastructure failure of their own (_isolation): the others run."""
    error_kinds: dict[tuple[str, str], dict[tuple[Any, ...], str]] = field(default_factory=dict)
    """This attempt's errored samples' kinds by (role, suite) and key (later wins), for the
    cause of a suite that errors past the budget (a streaming suite keeps no errors)."""
    sink_failed: list[BaseException] = field(default_factory=list)
    """A failure of the sink (the store) is the run's, never one suite's (_isolation)."""
    stage: Stage = "planning"
    failing_role: list[str] = field(default_factory=list)

    # ---------------------------------------------------------------- comparability

    async def guard(
        self, suites: list[Suite], refs: Sequence[EndpointRef], roles: list[str]
    ) -> tuple[dict[str, Comparability], list[str]]:
        """The comparability guard: a candidate that differs in more than the quantization is
        sent nothing (its verdict is non-comparable whatever it would answer). Sets the roles
        and clients that are sent anything; returns the guard by role and the run's warnings."""
        provs = self.provs
        guard = dict(zip(roles[1:], await incomparable(suites, provs, self.options), strict=True))
        for ref, prov, found in zip(refs[1:], provs[1:], guard.values(), strict=True):
            for d in found.differences:
                self.progress.message(
                    f"candidate {_label(ref, prov)} is not comparable with the baseline, so it "
                    f"is sent nothing: {d.message}"
                )
        sent = [r == "baseline" or guard[r].comparable for r in roles]
        self.live = [c for c, keep in zip(self.clients, sent, strict=True) if keep]
        self.roles = [r for r, keep in zip(roles, sent, strict=True) if keep]
        # A non-comparable candidate's reasons say it already (and it is sent nothing).
        warnings = _tokenizer_warnings(
            [x for x, keep in zip(refs, sent, strict=True) if keep],
            [p for p, keep in zip(provs, sent, strict=True) if keep],
        )
        warnings += [w for suite in suites for w in suite.load_warnings()]
        warnings += [
            f"candidate {_label(ref, prov)} differs from the baseline, as the run or its "
            f"suites allow: {d.message}"
            for ref, prov, found in zip(refs[1:], provs[1:], guard.values(), strict=True)
            for d in found.allowed
        ]
        return guard, warnings

    # ---------------------------------------------------------------- samples

    def _cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def _keep(self, sample: Sample) -> None:
        _cap_output(sample, self.output_cap)  # stored output is bounded (docs/security.md)
        cols = self.columns.get(sample.suite)
        if cols is not None:
            cols.add(sample)
        else:
            self.collected.append(sample)

    async def emit(self, sample: Sample) -> None:
        """A sample as a suite answered it: kept, counted by error kind, stored, shown."""
        if self._cancelled():
            raise CancelledRun("run cancelled")
        self._keep(sample)
        kinds = self.error_kinds.setdefault((sample.endpoint, sample.suite), {})
        if sample.error:
            kinds[tuple(sample.key)] = error_kind(sample.error)
        else:
            kinds.pop(tuple(sample.key), None)
        try:
            await self.sink(sample)
        except BaseException as exc:
            self.sink_failed.append(exc)
            raise
        self.progress.advance(sample.suite, sample.endpoint, error=sample.error is not None)

    async def emit_again(self, sample: Sample) -> None:
        """A sample scored again after both sides answered (``Suite.after_pairs``): it replaces
        the earlier one (same key, later wins) and advances no progress bar."""
        if self._cancelled():
            raise CancelledRun("run cancelled")
        self._keep(sample)
        await self.resink(sample)

    async def stored_of(self, name: str) -> list[Sample]:
        """The samples of suite ``name`` stored by earlier attempts (all pages)."""
        if self.stored_pages is not None:
            return [s async for page in self.stored_pages(name) for s in page]
        return [s for s in (await self.stored() if self.stored else []) if s.suite == name]

    async def after_pairs(self, s: Suite, its: Sequence[Item]) -> None:
        mine = [x for x in self.collected if x.suite == s.name]
        if any(k[1] == s.name for k in self.done):  # resumed: earlier attempts' samples too
            mine = [*await self.stored_of(s.name), *mine]
        await s.after_pairs(
            its,
            list({x.key: x for x in mine}.values()),
            self.helper_clients.get(s.name, {}),
            emit=self.emit_again,
            concurrency=suite_concurrency(s, self.options),
        )

    # ---------------------------------------------------------------- suites

    async def run_suites(self, suites: list[Suite]) -> None:
        """Each suite in turn; one that fails for infrastructure reasons ends as error with its
        cause and fix (``failures``) and the next one runs. A failure of the store, a
        cancellation or a capability error still ends the run."""
        self.suites = list(suites)
        for index, suite in enumerate(self.suites if len(self.roles) > 1 else []):
            try:
                await self._one_suite(index, suite)
            except (CancelledRun, CapabilityError):
                raise
            except Exception as exc:
                if self.sink_failed or self._cancelled():
                    raise  # the store failed, or the run was cancelled: not this suite's
                who = self.failing_role[-1] if self.failing_role else "baseline"
                self.failures[suite.name] = failure_of(
                    exc, suite.name, self.stage, self.options,
                    endpoint=f"{who.partition(':')[0]} {self.labels[who]}", run_id=self.run_id,
                )
                self.failing_role.clear()
                self.plans.setdefault(self.suites[index].name, [])
                self.progress.message(
                    f"{suite.name} ended in error: {self.failures[suite.name].message}")
            if self._cancelled():
                raise CancelledRun("run cancelled")

    async def _one_suite(self, index: int, suite: Suite) -> None:
        suite = await self._calibrated(index, suite)
        items = await self._plan(suite)
        await self._load_columns(suite)
        done_by_role = {
            role: {(k[2], k[3]) for k in self.done if k[0] == role and k[1] == suite.name}
            for role in self.roles
        }
        self.progress.planned(
            suite.name, self.roles, _expected(suite, items),
            {r: len(v) for r, v in done_by_role.items()},
        )
        await self._send(suite, items, done_by_role)

    async def _calibrated(self, index: int, suite: Suite) -> Suite:
        """The suite at the difficulty its pilot on the baseline alone picks (itself when it
        does not calibrate); the pilot's record is kept for the suite's details."""
        policy = suite.calibration(self.options.calibrate)
        if policy is None:
            return suite
        self.stage = "pilot"
        self.progress.message(f"calibrating {suite.name} on the baseline")
        pilot = pilot_name(suite.name)
        suite, self.calibrations[suite.name] = await calibrate(
            suite,
            policy,
            self.clients[0],
            self.provs[0],
            emit=self.emit,
            done={(k[2], k[3]) for k in self.done if k[0] == "baseline" and k[1] == pilot},
            stored=_only(self.stored_of, pilot) if self.stored_pages else self.stored,
            collected=self.collected,
            options=self.options,
            progress=self.progress,
        )
        self.suites[index] = suite
        return suite

    async def _plan(self, suite: Suite) -> Sequence[Item]:
        self.stage = "planning"
        self.progress.message(f"planning {suite.name}")
        try:
            items = await suite.plan(self.clients[0], self.provs[0])
        except EndpointError as exc:
            raise InfrastructureError(f"planning {suite.name} on the baseline failed: {exc}") from exc
        self.plans[suite.name] = items
        self.stage = "requests"
        return items

    async def _load_columns(self, suite: Suite) -> None:
        """A streaming suite's columns, with earlier attempts' samples first (this attempt's
        replace them: later wins)."""
        if not suite.streams_samples:
            return
        cols = self.columns[suite.name] = suite.sample_columns(self.roles)
        if self.stored_pages is not None:
            async for page in self.stored_pages(suite.name):
                for s in page:
                    cols.add(s)
        else:
            for s in await self.stored_of(suite.name):
                cols.add(s)

    async def _send(
        self, suite: Suite, items: Sequence[Item], done_by_role: dict[str, set[tuple[str, int]]]
    ) -> None:
        """The items to every live endpoint, in the suite's design: staged, sequential, or all
        at once."""

        async def run_on(role: str, client: EndpointClient, its: Sequence[Item]) -> None:
            try:
                await suite.run(
                    its, client, role=role, emit=self.emit, done=done_by_role[role],
                    concurrency=suite_concurrency(suite, self.options),
                )
            except EndpointError:
                self.failing_role.append(role)  # the fix names this endpoint
                raise

        async def run_batch(its: Sequence[Item]) -> None:
            if suite.exclusive:
                for role, client in zip(self.roles, self.live, strict=True):
                    await run_on(role, client, its)
            else:
                await gather_or_cancel(
                    *(run_on(r, c, its) for r, c in zip(self.roles, self.live, strict=True))
                )
            if suite.wants_after_pairs():  # scoring that needs both sides' answers
                await self.after_pairs(suite, its)

        async def suite_stored() -> list[Sample]:
            # What _run_sequential/_run_staged read: the stored samples of this suite.
            return await self.stored_of(suite.name)

        reader = suite_stored if self.stored or self.stored_pages else None
        stages = suite.stage_sizes()
        resumed = _resumed(items, done_by_role) if stages or self.options.sequential else 0
        if stages:  # the kind's own staged design (also under --sequential)
            self.staged[suite.name] = await _run_staged(
                suite, items, stages, run_batch, self.collected, self.roles, self.options,
                reader, self.columns.get(suite.name), resumed,
            )
            self.plans[suite.name] = items[: self.staged[suite.name]["items_used"]]
        elif self.options.sequential and suite.sequential_ok:
            self.sequential[suite.name] = await _run_sequential(
                suite, items, run_batch, self.collected, self.roles, self.options,
                reader, self.columns.get(suite.name), resumed,
            )
            # Items never sent are not missing: the design stopped. Gate on what was sent.
            self.plans[suite.name] = items[: self.sequential[suite.name]["items_used"]]
        else:
            await run_batch(items)

    # ---------------------------------------------------------------- gating

    async def gate(
        self,
        baseline: EndpointRef,
        candidates: Sequence[EndpointRef],
        skipped: list[SkippedSuite],
        guard: dict[str, Comparability],
    ) -> RunResult:
        """Every candidate gated on this attempt's samples merged with earlier attempts'
        (later wins on a key: a resumed attempt retried an errored item), with each suite's
        design and calibration in its details."""
        listed = [s.name for s in self.suites if s.name not in self.columns]
        previous: list[Sample] = []
        if listed and self.stored_pages is not None:
            for name in listed:
                previous += await self.stored_of(name)
        elif listed and self.stored is not None:
            previous = [s for s in await self.stored() if s.suite not in self.columns]
        by_key = {s.key: s for s in previous + self.collected}
        samples = list(by_key.values())
        del previous, by_key
        result = _gate_all(
            self.run_id, baseline, candidates, self.provs, self.suites, self.plans, samples,
            self.options, columns=self.columns, skipped=skipped, guard=guard,
            failures=self.failures,
            error_kinds={k: count_kinds_of(v) for k, v in self.error_kinds.items()},
        )
        for cand in result.candidates:
            for sres in cand.suites:
                if sres.suite in self.sequential:
                    sres.details["sequential"] = self.sequential[sres.suite]
                if sres.suite in self.staged:
                    sres.details["stages"] = self.staged[sres.suite]
                if sres.suite in self.calibrations:
                    sres.details["calibration"] = self.calibrations[sres.suite]
        return result


async def _open_helpers(
    helpers: dict[str, dict[str, EndpointRef]],
    options: RunOptions,
    concurrency: int,
    egress: EgressPolicy | None,
) -> tuple[dict[str, dict[str, EndpointClient]], list[HelperProbe]]:
    """A probed client per helper endpoint (``execute``'s ``helpers``), under the same egress
    policy as the endpoints under test, and what each probe found; one that cannot be reached
    is an infrastructure error (exit 4) before any item is sent."""
    opened: dict[str, dict[str, EndpointClient]] = {}
    pending: list[tuple[str, str, EndpointClient]] = []
    for suite, refs in helpers.items():
        for purpose, ref in refs.items():
            client = EndpointClient(
                ref, concurrency=max(1, concurrency), timeout_s=options.request_timeout_s,
                egress=egress,
            )
            opened.setdefault(suite, {})[purpose] = client
            pending.append((suite, purpose, client))
    results = await asyncio.gather(*(probe(c) for _, _, c in pending), return_exceptions=True)
    failures = [
        f"{purpose} endpoint {client.endpoint.name or redact_url(client.endpoint.url)} of suite "
        f"{suite} unreachable: {res}"
        for (suite, purpose, client), res in zip(pending, results, strict=True)
        if isinstance(res, BaseException)
    ]
    if failures:
        await asyncio.gather(*(c.aclose() for _, _, c in pending))
        raise InfrastructureError("; ".join(failures))
    probed = [
        # The served model the probe chose, as the endpoints under test record theirs.
        HelperProbe(suite, purpose, client.endpoint.model_copy(update={"model": client.model}),
                    res)
        for (suite, purpose, client), res in zip(pending, results, strict=True)
        if isinstance(res, Provenance)
    ]
    return opened, probed


async def _run_sequential(
    suite: Suite,
    items: Sequence[Item],
    run_batch: Callable[[Sequence[Item]], Awaitable[None]],
    collected: list[Sample],
    roles: list[str],
    options: RunOptions,
    stored: Callable[[], Awaitable[list[Sample]]] | None,
    columns: PairedColumns | None = None,
    resumed: int = 0,
) -> dict[str, Any]:
    """Send items in batches; stop once every candidate's always-valid decision is reached.

    The decision uses ``evalsvc.stats.sequential_decision`` (a confidence sequence), which stays
    valid under this continuous peeking, so stopping early does not inflate α.
    """
    from evalsvc.stats import sequential_decision

    gate = suite.gate
    if gate.margin is None or gate.recovery_min is not None:
        # A threshold gate has no paired boundary to stop at; a recovery floor's boundary moves
        # with the baseline's mean, which the confidence sequence does not model.
        await run_batch(items)
        return {
            "items_used": len(items),
            "items_planned": len(items),
            "batch": len(items),
            "stopped_early": False,
            "decisions": {},
            "note": "threshold or recovery-floor gate: not sequential",
        }
    margin, alpha = gate.margin, gate.alpha
    batch = max(10, len(items) // 10)
    sign = 1.0 if gate.higher_is_better else -1.0

    def decide(analysis: Analysis) -> str | None:
        diffs = [sign * (c - b) for b, c in zip(analysis.baseline, analysis.candidate, strict=True)]
        return sequential_decision(diffs, margin, alpha)[0]

    sizes = [*range(batch, len(items), batch), len(items)] if len(items) else []
    used, history, _ = await _run_looks(
        suite, items, sizes, decide, run_batch, collected, roles, stored, columns, resumed
    )
    return {
        "items_used": used,
        "items_planned": len(items),
        "batch": batch,
        "stopped_early": used < len(items),
        "decisions": history[-1]["verdicts"] if history else {},
    }


async def _run_staged(
    suite: Suite,
    items: Sequence[Item],
    stages: list[int],
    run_batch: Callable[[Sequence[Item]], Awaitable[None]],
    collected: list[Sample],
    roles: list[str],
    options: RunOptions,
    stored: Callable[[], Awaitable[list[Sample]]] | None,
    columns: PairedColumns | None = None,
    resumed: int = 0,
) -> dict[str, Any]:
    """Send a kind's planned stages (``Suite.stage_sizes``) until every candidate's gate decides.

    After each stage the suite's own gate (:func:`gate_outcome`, the test the verdict uses) is
    evaluated on everything sent so far; the run stops at the first stage where every candidate
    passes or fails, else at the cap. The kind keeps this valid by testing each look at
    α/len(stages) (determinism: ``evalsvc.stats.retention_test``), so the final verdict is the
    last look's, not a fresh test after peeking.
    """
    gate = suite.gate
    if gate.margin is None:  # a threshold gate tests once, at the first stage's size
        stages = stages[:1]

    def decide(analysis: Analysis) -> str | None:
        verdict = gate_outcome(gate, analysis, seed=suite.spec.seed).verdict
        return verdict if verdict in ("pass", "fail") else None

    used, history, decided = await _run_looks(
        suite, items, [min(s, len(items)) for s in stages], decide, run_batch, collected, roles,
        stored, columns, resumed,
    )
    for look in history:  # the staged record names every verdict, undecided ones included
        look["verdicts"] = {r: v or "inconclusive" for r, v in look["verdicts"].items()}
    cap = min(stages[-1], len(items))
    undecided = [r for r, v in history[-1]["verdicts"].items() if v not in ("pass", "fail")]
    why = (
        f"stopped after {used} of at most {cap} items: every candidate's gate decided"
        if decided
        else f"stopped at the cap of {cap} items with {', '.join(undecided)} still undecided"
    )
    return {
        "stages": [min(s, len(items)) for s in stages],
        "items_used": used,
        "cap": cap,
        "looks": len(stages),
        "alpha_per_look": gate.alpha / len(stages),
        "stopped": "decided" if decided else "cap",
        "reason": why,
        "history": history,
    }


async def _run_looks(
    suite: Suite,
    items: Sequence[Item],
    sizes: Sequence[int],
    decide: Callable[[Analysis], str | None],
    run_batch: Callable[[Sequence[Item]], Awaitable[None]],
    collected: list[Sample],
    roles: list[str],
    stored: Callable[[], Awaitable[list[Sample]]] | None,
    columns: PairedColumns | None,
    resumed: int,
) -> tuple[int, list[dict[str, Any]], bool]:
    """The one loop of a design that looks as it goes (``--sequential``'s batches, a kind's
    stages): send ``items`` up to each of ``sizes`` in turn, then ask ``decide`` of each
    candidate's analysis of everything sent so far; stop at the first look where every
    candidate decided (a non-``None`` verdict), else after the last size.

    ``resumed``: the leading items a previous attempt stored on every endpoint. The looks
    before it are not taken again (they would see that attempt's samples past their own
    size; each was undecided then, or that attempt would have stopped there), so a resumed
    run stops at the look an uninterrupted one stops at.

    Returns (items sent, one ``{"items", "verdicts"}`` per look taken, whether all decided).
    """
    look = await _looks(suite, collected, stored, columns)
    used = 0
    history: list[dict[str, Any]] = []
    for size in sizes:
        if size > used:
            await run_batch(items[used:size])
            used = size
        if used < min(resumed, sizes[-1]):
            continue
        analyses = look(roles[1:])
        verdicts = {role: decide(analyses[role]) for role in roles[1:]}
        history.append({"items": used, "verdicts": verdicts})
        if all(v is not None for v in verdicts.values()):
            return used, history, True
        if used >= len(items):
            break
    return used, history, False


def _resumed(items: Sequence[Item], done_by_role: dict[str, set[tuple[str, int]]]) -> int:
    """How many leading items of the plan a previous attempt stored on every endpoint (their
    first sample; a fresh run: 0, found at the first item)."""
    if not all(done_by_role.values()):
        return 0
    n = 0
    for item in items:
        if not all((item.id, 0) in done for done in done_by_role.values()):
            break
        n += 1
    return n


def _expected(suite: Suite, items: Sequence[Item]) -> int:
    return suite.expected_samples(items)


def _only(
    stored_of: Callable[[str], Awaitable[list[Sample]]], name: str
) -> Callable[[], Awaitable[list[Sample]]]:
    async def read() -> list[Sample]:
        return await stored_of(name)

    return read


async def _looks(
    suite: Suite,
    collected: list[Sample],
    stored: Callable[[], Awaitable[list[Sample]]] | None,
    columns: PairedColumns | None,
) -> Callable[[Sequence[str]], dict[str, Analysis]]:
    """The analysis of each candidate role on everything sent so far, for a staged or
    sequential look: from the suite's columns (streaming kinds) or from the samples stored
    before this attempt (read once, now) plus this attempt's."""
    if columns is not None:
        cols = columns
        return lambda roles: {r: suite.units(suite.analyze_columns(cols, r)) for r in roles}
    previous = await stored() if stored else []

    def look(roles: Sequence[str]) -> dict[str, Analysis]:
        mine = [s for s in previous + collected if s.suite == suite.name]
        base = [s for s in mine if s.endpoint == "baseline"]
        return {
            r: suite.units(suite.analyze(base, [s for s in mine if s.endpoint == r]))
            for r in roles
        }

    return look


def _tokenizer_warnings(refs: Sequence[EndpointRef], provs: Sequence[Provenance]) -> list[str]:
    base = provs[0].tokenizer_fingerprint
    out = []
    for ref, prov in zip(refs[1:], provs[1:], strict=True):
        if base and prov.tokenizer_fingerprint and prov.tokenizer_fingerprint != base:
            out.append(
                f"candidate {ref.name or redact_url(ref.url)} ({prov.model}) tokenizes differently from the "
                f"baseline: items are paired by text, but token-level metrics are not comparable"
            )
    return out


def _gate_all(
    run_id: str,
    baseline: EndpointRef,
    candidates: Sequence[EndpointRef],
    provs: Sequence[Provenance],
    suites: Sequence[Suite],
    plans: dict[str, Sequence[Item]],
    samples: list[Sample],
    options: RunOptions,
    *,
    columns: dict[str, PairedColumns] | None = None,
    skipped: Sequence[SkippedSuite] = (),
    guard: dict[str, Comparability] | None = None,
    failures: dict[str, SuiteFailure] | None = None,
    error_kinds: dict[tuple[str, str], dict[str, int]] | None = None,
    sent: bool = True,
) -> RunResult:
    """Gate every candidate's suites and combine the verdicts (``evalsvc.gates``).

    ``failures``: suites ended by an infrastructure failure in ``execute`` (every candidate's
    reads ``error`` with its cause and fix). A suite whose requests errored past the budget
    ends so too, its cause counted by kind from the samples' errors (``error_kinds``, by
    ``(role, suite)``, for a streaming suite that keeps none). ``sent=False``: the samples
    are logs gated as they are (``gate_samples``), not requests this run sent."""
    columns = columns or {}
    guard = guard or {}
    failures = failures or {}
    error_kinds = error_kinds or {}
    labels = {"baseline": _label(baseline, provs[0])}
    labels.update({role_of(i): _label(c, provs[i + 1]) for i, c in enumerate(candidates)})
    # A skipped suite is in no gate, so it can neither pass nor fail: every candidate's reasons
    # say it was not run and why, so a pass is never read as covering it.
    skip_reasons = [
        Reason("skipped", f"not run, so this verdict does not cover it: {gone.reason}", gone.suite)
        for gone in skipped
    ]
    by: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        by.setdefault((s.endpoint, s.suite), []).append(s)
    results: list[CandidateResult] = []
    infra_errors: list[str] = []
    decisions = []
    for i, cand in enumerate(candidates):
        role = role_of(i)
        cres = CandidateResult(role=role, endpoint=cand, provenance=provs[i + 1])
        cres.comparability = guard.get(role) or Comparability()
        if not cres.comparability.comparable:
            # Sent nothing (``execute``): no gate, only why it cannot be compared.
            decision = non_comparable(
                CandidateDecision("inconclusive", tuple(skip_reasons)),
                cres.comparability.differences,
            )
            decision = replace(
                decision, reasons=(*decision.reasons, *allowed_reasons(cres.comparability))
            )
            cres.verdict, cres.reasons = decision.verdict, list(decision.reasons)
            decisions.append((role, decision))
            results.append(cres)
            continue
        refused: list[Difference] = []
        errored: dict[str, SuiteFailure] = {}
        for suite in suites:
            if suite.name in failures:
                # Ended before a gate could stand (its pilot, planning or run failed).
                errored[suite.name] = failures[suite.name]
                cres.suites.append(_failed_result(suite, failures[suite.name], plans))
                continue
            base_s = by.get(("baseline", suite.name), [])
            cand_s = by.get((role, suite.name), [])
            cols = columns.get(suite.name)
            if cols is not None:
                analysis = suite.analyze_columns(cols, role, provenance=(provs[0], provs[i + 1]))
                errors = cols.error_examples(role)
            else:
                analysis = suite.analyze(base_s, cand_s, provenance=(provs[0], provs[i + 1]))
                errors = sorted({s.error for s in cand_s + base_s if s.error})[:5]
            # A sampled suite's unit is the item (its mean over k samples): Suite.units.
            analysis = suite.units(analysis)
            thinking = suite.thinking_summary(base_s, cand_s, columns=cols, role=role)
            if thinking is not None:  # kinds that score answers (evalsvc.suites._thinking)
                analysis.details["thinking"] = thinking
            planned = suite.gated_pairs(plans[suite.name])
            res = _gate_one(suite, analysis, options, planned, base_s, cand_s, errors)
            cres.suites.append(res)
            error_rate = res.n_errors / planned if planned else 0.0
            counts = (cols.errored("baseline"), cols.errored(role)) if cols is not None else None
            unequal = refusals(suite, planned, base_s, cand_s, options, counts=counts,
                               examples=errors if cols is not None else (),
                               allowed=cres.comparability.allowed)
            if unequal is not None:
                # One side refused what the other answered: not the same items on both sides,
                # so not a comparison (and not an outage to retry either).
                refused.append(unequal)
            elif error_rate > options.max_error_rate:
                # Say which side failed: a dead baseline errors every pair of every candidate,
                # and the message must not blame the candidate for it.
                if cols is not None:
                    n_base, n_cand = cols.errored("baseline"), cols.errored(role)
                else:
                    n_base = sum(1 for s in base_s if s.error)
                    n_cand = sum(1 for s in cand_s if s.error)
                sides = f"samples errored: baseline {n_base}, candidate {n_cand}"
                text = (
                    f"{res.n_errors} of {planned} items errored ({sides}; error budget "
                    f"{options.max_error_rate:.0%}), so no verdict rests on them"
                )
                errored[suite.name] = _budget_failure(
                    suite.name, role, options, run_id if sent else None, labels, text,
                    {side: _kinds_of(side, suite.name, by, cols, error_kinds)
                     for side in ("baseline", role)},
                    {"baseline": n_base, role: n_cand}, planned,
                )
        # The one combination rule (evalsvc.gates._combine): suites' final verdicts after the
        # candidate-level Holm correction, the candidate's verdict, and the reasons for each.
        _answers_per_second(suites, cres.suites)
        decision = decide(
            [SuiteGate(r.suite, r.outcome, r.gated) for r in cres.suites],
            errored={
                name: Reason("error_budget" if f.stage == "requests" else "suite_error",
                             f.message, name)
                for name, f in errored.items()
            },
        )
        for sres, sdec in zip(cres.suites, decision.suites, strict=True):
            if sres.suite in errored:
                # Its numbers stand as measured; its verdict is error (SuiteResult.verdict).
                sres.error = errored[sres.suite]
            else:
                sres.outcome = sdec.outcome
            sres.reasons = list(sdec.reasons)
        if skip_reasons:
            decision = replace(decision, reasons=(*decision.reasons, *skip_reasons))
        if refused:
            decision = non_comparable(decision, refused)
            cres.comparability.differences.extend(refused)
        # Allowed differences decide nothing but are said with the verdict (the report's basis).
        decision = replace(
            decision, reasons=(*decision.reasons, *allowed_reasons(cres.comparability))
        )
        cres.verdict = decision.verdict
        cres.reasons = list(decision.reasons)
        decisions.append((role, decision))
        results.append(cres)
        infra_errors += [f"{name} on {labels[role]}: {f.cause}" for name, f in errored.items()]
    combined, run_reasons = combine_candidates(decisions)
    verdict: str = combined
    reasons = list(run_reasons)
    # The run finished; ``error`` names the suites that did not and why (every list of runs
    # shows it); each suite's reason and ``error`` add the fix.
    error = "suites ended in error: " + "; ".join(infra_errors) if infra_errors else None
    return RunResult(
        run_id=run_id,
        verdict=verdict,
        baseline=baseline,
        baseline_provenance=provs[0],
        candidates=results,
        error=error,
        options=options,
        reasons=reasons,
        skipped=list(skipped),
    )


def count_kinds_of(kinds: dict[tuple[Any, ...], str]) -> dict[str, int]:
    """``{kind: count}`` of one (role, suite)'s errored samples (``execute``'s record)."""
    out: dict[str, int] = {}
    for kind in kinds.values():
        out[kind] = out.get(kind, 0) + 1
    return out


def _kinds_of(
    role: str,
    suite: str,
    by: dict[tuple[str, str], list[Sample]],
    cols: PairedColumns | None,
    error_kinds: dict[tuple[str, str], dict[str, int]],
) -> dict[str, int]:
    """Errored samples of ``role`` in ``suite`` by kind: from its samples, else (a streaming
    suite keeps none) from what ``execute`` counted."""
    if cols is None:
        return count_kinds(s.error for s in by.get((role, suite), []) if s.error)
    return dict(error_kinds.get((role, suite), {}))


def _budget_failure(
    suite: str,
    role: str,
    options: RunOptions,
    run_id: str | None,
    labels: dict[str, str],
    budget_text: str,
    kinds: dict[str, dict[str, int]],
    n_errors: dict[str, int],
    planned: int,
) -> SuiteFailure:
    """A suite whose requests errored past the budget for candidate ``role``: the side(s) that
    errored, their errors by kind, and the fix naming that endpoint. ``run_id`` None: the
    samples are logs (``gate_samples``), nothing this run sent or could send again."""
    sides = [side for side in ("baseline", role) if n_errors[side]] or [role]
    counts: dict[str, int] = {}
    for side in sides:
        for kind, k in kinds[side].items():
            counts[kind] = counts.get(kind, 0) + k
    if run_id is None:
        return SuiteFailure(
            suite, "requests", budget_text,
            "the logs hold errored or unpaired documents: evaluate them again and gate the new "
            "logs, or raise the error budget (`--max-error-rate`)", counts,
            side="baseline" if sides == ["baseline"] else role,
        )
    endpoint = " and ".join(f"{side.partition(':')[0]} {labels[side]}" for side in sides)
    total = max(sum(n_errors[side] for side in sides), sum(counts.values()))
    cause, fix = describe(counts, total, planned * len(sides), options, endpoint=endpoint)
    return SuiteFailure(
        suite, "requests", f"{cause}; {budget_text}", f"{fix}; {resume_hint(run_id)}", counts,
        side="baseline" if sides == ["baseline"] else role,
    )


def _failed_result(
    suite: Suite, failure: SuiteFailure, plans: dict[str, Sequence[Item]]
) -> SuiteResult:
    """The result of a suite that ended before its gate (``failure``): no numbers, verdict
    ``error``."""
    gate = suite.gate
    nan = float("nan")
    outcome = GateOutcome(
        verdict="inconclusive", metric=gate.metric, baseline=nan, candidate=nan, delta=nan,
        ci=(nan, nan), p_value=None, margin=gate.margin if gate.margin is not None else nan,
        alpha=gate.alpha, n=0, mde=None, test="none",
        details={"reason": f"ended in error: {failure.message}"},
    )
    planned = suite.gated_pairs(plans.get(suite.name, []))
    return SuiteResult(
        suite=suite.name, kind=suite.kind, version=suite.version, outcome=outcome,
        n_errors=planned, n_planned=planned, gated=gate.gated,
        details={"gate": gate.to_dict()}, error=failure,
    )


def _answers_per_second(suites: Sequence[Suite], results: Sequence[SuiteResult]) -> None:
    """Where a suite that measures speed (``Suite.throughput``) ran beside suites that report
    thinking, each of those gets ``details["answers_per_second"]``: tokens/s ÷ tokens per
    answer on each side (``evalsvc.suites._thinking.per_answer_speed``)."""
    from evalsvc.suites._thinking import per_answer_speed

    speeds = []
    for suite, res in zip(suites, results, strict=True):
        thr = suite.throughput(res.details)
        if thr is not None:
            speeds.append({**thr, "suite": suite.name})
    if not speeds:
        return
    for res in results:
        thinking = res.details.get("thinking")
        if isinstance(thinking, dict):
            per_answer = per_answer_speed(thinking, speeds[0])
            if per_answer is not None:
                res.details["answers_per_second"] = per_answer


def _gate_one(
    suite: Suite,
    analysis: Analysis,
    options: RunOptions,
    planned: int,
    base_s: list[Sample],
    cand_s: list[Sample],
    error_examples: list[str] | None = None,
) -> SuiteResult:
    gate = suite.gate
    outcome = gate_outcome(gate, analysis, seed=suite.spec.seed)
    outcome = with_recovery(outcome, gate, analysis, suite, seed=suite.spec.seed)
    margin_gate = gate.recovery_min is None
    if (
        margin_gate
        and gate.margin is not None
        and analysis.paired
        and analysis.slices
        and analysis.baseline
    ):
        # Every slice with enough items gets the suite's own test; Holm across the suite and
        # its slices (evalsvc.gates.slice_gates).
        outcome = slice_gates(
            outcome,
            analysis.baseline,
            analysis.candidate,
            analysis.slices,
            kind=gate.kind,
            margin=gate.margin,
            alpha=gate.alpha,
            higher_is_better=gate.higher_is_better,
            min_items=gate.slice_min_items,
            clusters=analysis.clusters,
            keys=analysis.keys,
            first_tokens=analysis.first_tokens,
            seed=suite.spec.seed,
            value_range=analysis.value_range if gate.kind == "continuous" else None,
        )
    # The suite's bounds beside its margin (thinking length, truncation): only add fail calls.
    outcome = apply_bounds(outcome, (analysis.details.get("thinking") or {}).get("bounds"))
    gated = gate.gated
    details = dict(analysis.details)
    details["gate"] = gate.to_dict()
    if gate.kind == "binary" and analysis.paired and analysis.baseline:
        # "correct" is the good outcome: 1 for higher-is-better metrics, 0 for lower-is-better
        # ones (determinism's confident divergence).
        good_b, good_c = analysis.baseline, analysis.candidate
        if not gate.higher_is_better:
            good_b, good_c = [1.0 - x for x in good_b], [1.0 - x for x in good_c]
        details.setdefault("flips", flips(good_b, good_c))
    heatmap = getattr(suite, "heatmap", None)
    if callable(heatmap) and not suite.streams_samples:
        details["heatmap"] = {"baseline": heatmap(base_s), "candidate": heatmap(cand_s)}
    if error_examples is None:
        error_examples = sorted({s.error for s in cand_s + base_s if s.error})[:5]
    if error_examples:
        details["error_examples"] = error_examples
    # Pairs with no sample on either side (never sent, lost) count as errors: a verdict never
    # rests on silently missing items, and the error budget sees them.
    missing = max(0, planned - outcome.n - analysis.n_errors)
    if missing:
        details["missing_pairs"] = missing
    return SuiteResult(
        suite=suite.name,
        kind=suite.kind,
        version=suite.version,
        outcome=outcome,
        n_errors=analysis.n_errors + missing,
        n_planned=planned,
        gated=gated,
        details=details,
    )


def with_recovery(
    outcome: GateOutcome, gate: ResolvedGate, analysis: Analysis, suite: Suite, *, seed: int
) -> GateOutcome:
    """Recovery (candidate ÷ baseline) with its interval beside Δ, in ``details["recovery"]``,
    for suites that report it (``Suite.reports_recovery``: lm-eval tasks, gated logs) on a
    paired higher-is-better score; a recovery-floor gate has it already."""
    if "recovery" in outcome.details or not getattr(suite, "reports_recovery", False):
        return outcome
    if not (analysis.paired and gate.higher_is_better and gate.threshold is None):
        return outcome
    if gate.kind == "ratio" or not analysis.baseline:
        return outcome
    summary = recovery_summary(analysis.baseline, analysis.candidate, alpha=gate.alpha, seed=seed)
    return replace(outcome, details={**outcome.details, "recovery": summary})


def gate_outcome(gate: ResolvedGate, analysis: Analysis, *, seed: int) -> GateOutcome:
    """The suite's gate on ``analysis`` as ``gate`` resolved it, with the baseline guard."""
    if gate.recovery_min is not None and gate.threshold is None:
        outcome = recovery_gate(
            analysis.baseline,
            analysis.candidate,
            metric=gate.metric,
            recovery_min=gate.recovery_min,
            alpha=gate.alpha,
            seed=seed,
        )
        if gate.kind == "binary" and analysis.baseline:
            guard = baseline_guard(
                analysis.baseline,
                n_candidate=len(analysis.candidate),
                margin=min(max(outcome.margin, 1e-9), 0.999),
                alpha=gate.alpha,
                higher_is_better=True,
                paired=True,
                clusters=analysis.clusters,
                floor=gate.baseline_floor,
                seed=seed,
            )
            outcome = apply_guard(outcome, guard)
        return outcome
    if gate.threshold is not None:
        return threshold_gate(
            analysis.candidate,
            metric=gate.metric,
            threshold=gate.threshold,
            higher_is_better=gate.higher_is_better,
            alpha=gate.alpha,
            seed=seed,
        )
    assert gate.margin is not None  # resolve() gives every non-inferiority gate a margin
    if analysis.gate_test is not None:
        # The kind's own test (determinism: stable-answer retention over a staged design).
        outcome = analysis.gate_test(gate, seed)
        return _underpowered(outcome, gate.margin)
    outcome = evaluate_gate(
        analysis.baseline,
        analysis.candidate,
        metric=gate.metric,
        kind=gate.kind,
        margin=gate.margin,
        alpha=gate.alpha,
        higher_is_better=gate.higher_is_better,
        clusters=analysis.clusters,
        paired=analysis.paired,
        seed=seed,
        value_range=analysis.value_range if gate.kind == "continuous" else None,
    )
    sampled = gate.kind == "continuous" and "sampling" in analysis.details
    if gate.kind == "binary" or sampled:
        # An uninformative baseline (0%, or too few solved items to show a drop of the
        # margin) cannot pass: see evalsvc.gates._guard. A sampled suite's per-item pass
        # rates get the same rule through the continuous gate it is decided by.
        guard = baseline_guard(
            analysis.baseline,
            n_candidate=len(analysis.candidate),
            margin=gate.margin,
            alpha=gate.alpha,
            higher_is_better=gate.higher_is_better,
            paired=analysis.paired,
            clusters=analysis.clusters,
            floor=gate.baseline_floor,
            seed=seed,
            kind="continuous" if sampled else "binary",
        )
        outcome = apply_guard(outcome, guard)
    return _underpowered(outcome, gate.margin)


def _underpowered(outcome: GateOutcome, margin: float) -> GateOutcome:
    if outcome.mde is not None and outcome.mde > margin and outcome.verdict != "fail":
        # At this n even a candidate identical to the baseline would rarely pass: say so.
        note = (
            f"underpowered: the MDE at n = {outcome.n} is {outcome.mde:.2f}, larger than the "
            f"margin {margin:g}, so this size can rarely pass; size it with `evalsvc plan`"
        )
        if outcome.verdict == "pass":
            # It passed all the same: say what "underpowered" means under a pass (issue 49).
            note = (
                f"underpowered for a candidate only as good as the baseline, not for this pass: "
                f"the MDE at n = {outcome.n} is {outcome.mde:.2f}, larger than the margin "
                f"{margin:g}, so an equally good candidate would rarely pass at this size; this "
                f"one passed because it measured better than the baseline (Δ "
                f"{outcome.delta:+.3f}), and that is the evidence the pass rests on"
            )
        outcome = replace(outcome, details={**outcome.details, "underpowered": note})
    return outcome


def gate_samples(
    run_id: str,
    baseline: EndpointRef,
    candidates: Sequence[EndpointRef],
    provs: Sequence[Provenance],
    suites: Sequence[Suite],
    plans: dict[str, Sequence[Item]],
    samples: list[Sample],
    options: RunOptions,
) -> RunResult:
    """Gate samples that exist already (``evalsvc gate-logs``): the same per-suite gates,
    slices, error budget and verdict combination as :func:`execute`, without sending anything."""
    return _gate_all(
        run_id, baseline, candidates, provs, suites, plans, samples, options, sent=False
    )
