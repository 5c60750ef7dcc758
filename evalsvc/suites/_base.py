"""The suite plugin contract.

A *suite kind* is a ``Suite`` subclass registered with ``@register``. A *suite* is a YAML instance
of a kind (``SuiteSpec``): parameters, seed, gate policy. The runner:

1. calls ``plan()`` once with the baseline's client to get the seeded items (the same items go to
   every endpoint; that pairing is the point): a list, or a ``LazyItems`` that builds each item
   when it is read;
2. calls ``run()`` once per endpoint, which sends the items through the client and hands each
   ``Sample`` to ``emit`` as soon as it exists (the runner persists it);
3. calls ``analyze()`` with the baseline's and one candidate's samples to get the gate outcome
   and the details for the report; for a kind with ``streams_samples`` it keeps no samples but
   ``PairedColumns`` and calls ``analyze_columns()`` instead (memory flat in the items).

How a suite is gated is resolved once (``bind_gate``, by the service layer with the server's
limits) and read from ``Suite.gate`` everywhere after that.

A kind also owns its presentation (``evalsvc.suites._present``): its findings and headline from
its report entry, which items count as flips and how both sides are shown (the prompt
included), the slice label of an item, and its dashboard page (a view model and a Jinja
template shipped beside the kind's module). The reports and the dashboard render what a kind
returns and know no kind by name.

Suites never open sockets or touch the database: they only use the client they are given.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import sys
from abc import ABC, abstractmethod
from array import array
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from evalsvc.domain import ComparabilityOptions, Item, Provenance, Sample
from evalsvc.domain import prompt_text as prompt_text  # re-exported: the kinds' name for it
from evalsvc.gates import (
    GateDefaults,
    GateLimits,
    GateOutcome,
    GatePolicyError,
    NoiseFloor,
    ResolvedGate,
    generic_default,
    resolve,
)
from evalsvc.stats import mde_paired_binary, min_n_flip_free, required_n
from evalsvc.suites._calibrate import CalibrationPolicy, Rung, pilot_name
from evalsvc.suites._present import Finding, ViewInput, flip_counts_finding
from evalsvc.suites._sampling import Decoding, DecodingClient, SamplingPolicy, request_seed
from evalsvc.suites._thinking import ThinkingPolicy

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import EndpointClient

_LISTING: contextvars.ContextVar[bool] = contextvars.ContextVar("evalsvc_listing", default=False)


def listing_only() -> bool:
    """Whether the suite being built is only listed (``catalog(for_listing=True)``: ``suites
    list``, ``GET /suites`` show its name, gate and cost), not run. A kind whose load-time
    reading is expensive may then defer it, provided :meth:`Suite.item_count` stays exact and
    everything else it is asked still works (built on demand)."""
    return _LISTING.get()


_SERVER_RUN: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "evalsvc_server_run", default=False
)


def server_run() -> bool:
    """Whether the suite runs in server mode: a worker executing a queued run under the
    server's egress policy (set by the runner's ``execute``), not the user's own in-process
    ``compare``. A kind that would install something on first use asks before it does."""
    return _SERVER_RUN.get()


Emit = Callable[[Sample], Awaitable[None]]


class SuiteDoesNotFit(ValueError):
    """A suite whose parameters cannot be realized on this endpoint (a long-context length
    shorter than the task's own text in the endpoint's tokenizer, say): the suite must change,
    not the endpoint, and the message says how. Raised while planning; the runner ends that
    suite in error with the message as its fix (``evalsvc.runner._isolation``)."""


class GatePolicy(BaseModel):
    """How a suite's metric is gated: the suite's **policy**. Unset fields take the kind's declared
    default (``Suite.gate_default``); ``evalsvc.gates.resolve`` combines the two with the
    submitter's options, which may only tighten it (smaller margin, smaller α)."""

    model_config = ConfigDict(extra="forbid")

    metric: str | None = None
    """Which metric the gate tests (defaults to the kind's primary metric)."""
    margin: float | None = Field(default=None, ge=0)
    """δ: the largest acceptable drop of the candidate versus the baseline, in metric units."""
    alpha: float | None = Field(default=None, gt=0, lt=0.5)
    threshold: float | None = None
    """Optional absolute threshold instead of (or for kinds without) a paired comparison."""
    baseline_floor: float | None = Field(default=None, ge=0, lt=1)
    """The baseline's rate must be above this (a score at chance, e.g. 0.25 for four-way
    multiple choice) for the gate to pass; see ``evalsvc.gates.baseline_guard``."""
    slice_min_items: int | None = Field(default=None, ge=1)
    """Fewest paired items a slice (reasoning family × level, needle length × depth...) needs for
    its own gate (default: the kind's)."""
    recovery_min: float | None = Field(default=None, gt=0, le=1)
    """A recovery floor instead of a margin: the candidate's mean score must be at least this
    fraction of the baseline's (``0.99``: 99% recovery), shown by a one-sided interval (Fieller's
    and a paired bootstrap's, both; ``evalsvc.gates.recovery_gate``)."""
    enabled: bool | None = None
    """A disabled gate still reports its metrics but never decides the verdict (default: the
    kind's ``required`` flag)."""


class SuiteSpec(BaseModel):
    """One YAML file in ``suites/``: an instance of a suite kind."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    kind: str
    description: str = ""
    seed: int = 0
    params: dict[str, Any] = Field(default_factory=dict)
    gate: GatePolicy = Field(default_factory=GatePolicy)
    calibrate: CalibrationPolicy | None = None
    """``auto`` (or a block with ``band``, ``pilot_n``, ``max_rungs``): pick the difficulty from
    a pilot on the baseline first (``evalsvc.suites._calibrate``; calibratable kinds only)."""
    sampling: SamplingPolicy | None = None
    """How each item is decoded and how often (k samples at a temperature, top_p, budget):
    the paired unit becomes the item's mean over its samples (kinds that score answers only;
    ``evalsvc.suites._sampling``). Unset: greedy, one sample."""
    thinking: ThinkingPolicy | None = None
    """How thinking is split from the answer, counted and optionally gated (kinds that score
    answers only; ``evalsvc.suites._thinking``). Unset: ``<think>`` markers, no gates."""
    comparability: ComparabilityOptions | None = None
    """Differences between the baseline and a candidate that are the point of this suite
    (``allow: [chat_template, ...]``): they make no run of it ``non-comparable`` when every
    suite of the run allows them (docs/statistics.md, "Comparability"). Unset: none."""
    _base_dir: Path | None = PrivateAttr(default=None)

    @property
    def base_dir(self) -> Path | None:
        """The directory of the YAML file this spec was read from (None when built in code):
        kinds resolve relative data paths against it (the ``dataset`` kind's ``path``)."""
        return self._base_dir

    def located_at(self, base_dir: Path) -> SuiteSpec:
        """Record the directory of the file the spec was read from; returns ``self``."""
        self._base_dir = base_dir
        return self


@dataclass
class Analysis:
    """What ``analyze()`` returns for one candidate: the gate input arrays and report details."""

    baseline: list[float]
    candidate: list[float]
    clusters: list[str] | None = None
    paired: bool = True
    n_errors: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    slices: dict[str, list[str]] | None = None
    """Slice labels per dimension (``{"family × level": ["dates L1", ...]}``), one per gated
    pair, aligned with ``baseline``/``candidate``; the runner gates every slice with enough
    items (``evalsvc.gates.slice_gates``)."""
    keys: list[str] | None = None
    """The pairs' item ids (``item`` or ``item#repeat``), aligned with the arrays."""
    first_tokens: list[tuple[str | None, str | None] | None] | None = None
    """Per pair: the first word-level token where the two outputs differ (baseline's,
    candidate's), ``None`` when they agree; reported for flips in a failed slice."""
    gate_test: Callable[[ResolvedGate, int], GateOutcome] | None = None
    """The kind's own non-inferiority test on these arrays, given the resolved gate and the
    seed (determinism: stable-answer retention, ``evalsvc.stats.retention_test``); ``None``:
    the generic ``evalsvc.gates.evaluate_gate`` of ``gate.kind``. Threshold gates ignore it."""
    value_range: tuple[float, float] | None = None
    """The per-pair scores' possible ``(lo, hi)`` (``(0, 1)`` for partial credit), for a
    continuous gate: where every paired difference is the same (an endpoint against itself),
    the exact bound for a bounded mean decides instead of a zero-width interval, so enough
    identical pairs can pass (``evalsvc.gates.evaluate_gate``); ``None``: such a gate is
    inconclusive whatever its size (an unbounded metric, KLD say)."""


class LazyItems(Sequence[Item]):
    """A plan whose items are built when read: ``make(i)`` is item ``i`` of ``length``.

    ``plan()`` may return one instead of a list (the ``reasoning`` kind does): a plan of 100k
    items then holds no item until the runner sends it, and memory stays flat in the number of
    items. Indexing, slicing (a lazy view: the runner's staged and sequential batches),
    iteration and ``len`` work as on a list; ``make`` must be deterministic (every read of item
    ``i`` gives an equal item), because each endpoint reads the plan again.

    The last :data:`RECENT` items built are kept (items are frozen), shared by every view of the
    plan: the endpoints of a run read it side by side, so each item is usually built once rather
    than once per endpoint (building was 7% of the event loop's time against a zero-latency
    endpoint, docs/benchmarks.md); memory stays bounded by ``RECENT``, not by the plan's length.
    """

    #: Items kept for the other endpoints' reads: a few times the usual concurrency (64) per
    #: endpoint, so endpoints that drift apart by that much still share them.
    RECENT = 1024

    def __init__(
        self,
        length: int,
        make: Callable[[int], Item],
        _indices: range | None = None,
        _recent: dict[int, Item] | None = None,
    ) -> None:
        self._make = make
        self._indices = range(length) if _indices is None else _indices
        self._recent: dict[int, Item] = {} if _recent is None else _recent

    def _item(self, i: int) -> Item:
        recent = self._recent
        item = recent.get(i)
        if item is None:
            item = recent[i] = self._make(i)
            if len(recent) > self.RECENT:
                del recent[next(iter(recent))]  # the oldest built
        return item

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return LazyItems(0, self._make, self._indices[index], self._recent)
        return self._item(self._indices[index])

    def __iter__(self) -> Iterator[Item]:
        return map(self._item, self._indices)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-sequence semantics, like a list

    def __repr__(self) -> str:
        return f"LazyItems({len(self)} items)"


class Suite(ABC):
    """Base class of every suite kind."""

    kind: ClassVar[str]
    version: ClassVar[str] = "1"
    Params: ClassVar[type[BaseModel]]
    requires: ClassVar[frozenset[str]] = frozenset()
    """Capabilities (see ``evalsvc.endpoints.CAPABILITIES``) every endpoint must have."""
    gate_default: ClassVar[GateDefaults | None] = None
    """The kind's declared gate (metric, margin or threshold, α, direction, whether it gates,
    with its rationale and sources). Kinds that declare none get
    ``evalsvc.gates.generic_default``: paired accuracy, higher is better."""
    exclusive: ClassVar[bool] = False
    """Exclusive suites (speed) run one endpoint at a time, never beside other traffic."""
    reports_recovery: ClassVar[bool] = False
    """Report recovery (candidate ÷ baseline mean, with its interval) beside Δ, as publishers of
    quantized models do for benchmark tasks (lm-eval suites, gated logs)."""
    sequential_ok: ClassVar[bool] = True
    """Items are independent, so ``--sequential`` may send them in batches and stop early."""
    description: ClassVar[str] = ""
    slice_fields: ClassVar[tuple[tuple[str, str], ...]] = ()
    """The sample ``data`` fields (``(name, "int" | "float" | "str")``) that ``slice_label``
    reads: the dashboard fetches only these for the flips page."""
    view_template: ClassVar[str | None] = None
    """The kind's dashboard template, a file name resolved beside the kind's module (package
    data); ``None``: the page shows the generic parts only."""
    baseline_reusable: ClassVar[bool] = True
    """A later run may reuse a blessed baseline's samples of this kind instead of sending its
    items to the baseline again (``evalsvc.services.baselines``). ``False`` for kinds whose
    statistic needs both sides under the same traffic (determinism, speed): they always run
    both sides live."""
    scores_answers: ClassVar[bool] = False
    """The kind scores a generated answer: ``sample`` splits thinking from it first (the
    endpoint's reasoning field or the suite's markers) and records the trace in the sample's
    ``data["thinking"]``; the report gets ``details["thinking"]`` (``evalsvc.suites._thinking``)."""
    samples_in_run: ClassVar[bool] = False
    """The kind draws a ``sampling`` block's k samples in its own ``run`` without scoring
    answers through :meth:`sample` (lm-eval's generate tasks: one lm-eval run per sample
    index): it takes the block and a run's decoding options (:attr:`sampleable`)."""

    def __init__(self, spec: SuiteSpec) -> None:
        self.spec = spec
        self.params = self.Params.model_validate(spec.params)
        self._gate: ResolvedGate | None = None
        if spec.thinking is not None and not self.scores_answers:
            raise ValueError(
                f"thinking: kind {self.kind!r} scores no generated answer, so it has no thinking "
                "to split; remove the block (kinds that score answers: docs/suites.md, "
                "'Thinking traces')"
            )
        if spec.sampling is not None and not self.sampleable:
            raise ValueError(
                f"sampling: kind {self.kind!r} scores no generated answer (its statistic is the "
                "traffic or the logprobs), so it cannot be sampled; remove the block (kinds "
                "that score answers: docs/suites.md, 'Sampled evaluation')"
            )
        if spec.calibrate is not None and spec.calibrate.enabled and not self.calibratable():
            raise ValueError(
                f"calibrate: kind {self.kind!r} declares no difficulty ladder, so it cannot "
                "calibrate (calibratable kinds: docs/suites.md, 'Adaptive difficulty')"
            )

    def traffic_concurrency(self) -> int:
        """Requests this suite itself keeps in flight on one endpoint (0: none of its own).

        Kinds whose measurement *is* a traffic shape (speed's concurrency levels, determinism's
        background load) declare it, and the runner sizes the endpoint's client and the
        ``concurrency`` it passes to :meth:`run` to at least this, so a level of 32 means 32
        requests in flight whatever ``--concurrency`` (which bounds ordinary suites) says.
        """
        return 0

    @property
    def name(self) -> str:
        return self.spec.name

    def default_gate(self) -> GateDefaults:
        """This suite's kind default (kinds whose metric is a parameter override this)."""
        if self.gate_default is not None:
            return self.gate_default
        return generic_default(self.kind, metric="accuracy", kind="binary", higher_is_better=True)

    def bind_gate(self, options: Any = None, *, limits: GateLimits | None = None) -> ResolvedGate:
        """Resolve how this suite is gated in a run with ``options`` (``evalsvc.gates.resolve``,
        within the server's ``limits``) and keep it: done once per suite, by the service layer
        (``evalsvc.services.runs.bind_gates``); everything after reads ``gate``. Raises
        ``evalsvc.gates.GatePolicyError`` for options the policy or the limits refuse.

        The run's decoding overrides (``options.sampling``: ``compare --sampling-k`` and the
        rest) are applied here too, once, to a kind that scores answers: a suite sampled k > 1
        times per item gates per-item means, so its kind's binary gate becomes the continuous
        one on scores in (0, 1) (docs/statistics.md, "Sampled evaluation")."""
        over = getattr(options, "sampling", None)
        if over is not None and not over.is_empty() and self.sampleable:
            try:
                policy = self.sampling.with_options(options)
            except ValueError as exc:  # pydantic's ValidationError: the merged block is refused
                errors = getattr(exc, "errors", None)
                why = "; ".join(str(e.get("msg")) for e in errors()) if errors else str(exc)
                raise GatePolicyError(f"{self.name}: {why}") from exc
            self.spec = self.spec.model_copy(update={"sampling": policy})
            problem = self.sampling_problem()
            if problem is not None:
                raise GatePolicyError(f"{self.name}: {problem}")
        defaults = self.default_gate()
        if self.samples_per_item > 1 and defaults.kind == "binary":
            defaults = replace(
                defaults,
                kind="continuous",
                rationale=f"{defaults.rationale} Sampled: the paired unit is the item's mean "
                f"over its {self.samples_per_item} samples (continuous gate on [0, 1]).",
            )
        self._gate = resolve(defaults, self.spec.gate, options, limits=limits, suite=self.name)
        return self._gate

    @property
    def sampling(self) -> SamplingPolicy:
        """How this suite decodes (its ``sampling`` block; default: greedy, one sample)."""
        return self.spec.sampling or SamplingPolicy()

    @property
    def sampleable(self) -> bool:
        """Whether this suite takes a ``sampling`` block and a run's decoding options: a kind
        that ``scores_answers`` or ``samples_in_run`` (a kind may decide per suite: lm-eval by
        its task's output type). Otherwise the run's options pass it by."""
        return self.scores_answers or self.samples_in_run

    @property
    def samples_per_item(self) -> int:
        """Samples each endpoint answers per item (``sampling.k``; 1 when greedy)."""
        return self.sampling.k if self.sampleable else 1

    def sampling_problem(self) -> str | None:
        """Why this suite cannot be sampled as its ``sampling`` says (one line with the fix),
        or ``None``; checked when the suite is built and when a run's options change it.
        Default: none."""
        return None

    def repeats(self, role: str) -> Sequence[int]:
        """The sample indices (``Sample.repeat``) each item is sent for on ``role``: one per
        sample (``range(k)``). A kind whose baseline answers twice (dataset's agreement mode)
        overrides this; the send loop does the rest."""
        return range(self.samples_per_item)

    def decoding(self, item: Item, repeat: int) -> Decoding:
        """Sample ``repeat`` of ``item``'s request parameters, from the ``sampling`` block."""
        policy = self.sampling
        seed = None if policy.seed is None else request_seed(policy.seed, item.id, repeat)
        return Decoding(policy.temperature, policy.top_p, policy.max_tokens, seed)

    def units(self, analysis: Analysis) -> Analysis:
        """The analysis the gate tests: as ``analyze`` gave it (one pair per item and sample),
        or, for a suite with a ``sampling`` block, one pair per item, the item's mean over its
        samples, with ``details["sampling"]`` (``evalsvc.suites._sampling.item_means``)."""
        if self.spec.sampling is None or not self.sampleable:
            return analysis
        from evalsvc.suites._sampling import item_means

        alpha = self.gate.alpha if self.gate_bound else 0.05
        return cast("Analysis", item_means(analysis, self.sampling, alpha=alpha))

    @property
    def gate(self) -> ResolvedGate:
        """The gate ``bind_gate`` resolved (an unbound suite is a programming error)."""
        if self._gate is None:
            raise RuntimeError(f"suite {self.name!r}: gate not resolved (call bind_gate first)")
        return self._gate

    @property
    def gate_bound(self) -> bool:
        return self._gate is not None

    def attach_noise_floor(self, floor: NoiseFloor | None) -> None:
        """Keep the baseline's calibrated noise floor on the resolved gate (the service layer,
        once the baseline is probed: ``evalsvc.services.calibration``); the gate and the report
        read it from ``gate.noise_floor``."""
        self._gate = replace(self.gate, noise_floor=floor)

    def with_overrides(self, *, samples: int | None, seed: int | None) -> Suite:
        """A copy with the run's ``--samples``/``--seed`` applied (kinds map samples to a param)."""
        spec = self.spec.model_copy(deep=True)
        if seed is not None:
            spec.seed = seed
        if samples is not None:
            spec.params[self.samples_param()] = samples
        return type(self)(spec)

    def samples_param(self) -> str:
        """The parameter that ``--samples`` overrides."""
        return "n"

    def item_count(self) -> int | None:
        """Items this suite will plan, when known without an endpoint (for ``suites list``)."""
        value = getattr(self.params, self.samples_param(), None)
        return int(value) if isinstance(value, int) else None

    def load_warnings(self) -> list[str]:
        """What a user must know about how this suite was built from its parameters, one line
        each (a dataset with fewer rows than ``--samples`` asks for); the runner adds them to
        the run's ``warnings``."""
        return []

    # ------------------------------------------------------------------ after both answered
    # A kind that scores a pair of answers together (a judge sees both; a similarity needs the
    # baseline's answer) declares it here: the runner calls ``after_pairs`` once every endpoint
    # has answered a batch of items, with clients for the helper endpoints the suite named
    # (``helper_endpoints``: a judge, an embedding model), resolved by the service layer.

    def helper_endpoints(self) -> dict[str, str]:
        """Endpoints besides the baseline and the candidates that this suite uses, as
        ``{purpose: registered endpoint name (or URL, in a local compare)}``. Default: none."""
        return {}

    def helper_models(self) -> dict[str, str]:
        """The model this suite asks each helper endpoint to serve (``{purpose: model}``, a
        purpose of :meth:`helper_endpoints`); a purpose not here uses the endpoint's registered
        or first model. Default: none."""
        return {}

    def wants_after_pairs(self) -> bool:
        """Whether the runner calls :meth:`after_pairs` after each batch. Default: no."""
        return False

    async def after_pairs(
        self,
        items: Sequence[Item],
        samples: Sequence[Sample],
        helpers: dict[str, EndpointClient],
        *,
        emit: Emit,
        concurrency: int,
    ) -> None:
        """Score pairs that need both sides' answers: ``samples`` are this suite's samples so
        far (every role, earlier attempts' included); emit a changed copy of a sample to
        replace it (same key; the store keeps the last). ``helpers`` holds a client per
        ``helper_endpoints`` purpose. Default: nothing."""
        return None

    def snapshot_extra(self) -> dict[str, Any]:
        """What the run's suite snapshot records besides the spec (a judge's full prompt and
        fingerprint, so a verdict can be traced to what judged it). Default: nothing."""
        return {}

    @classmethod
    def reuse_spec(cls, spec: dict[str, Any]) -> dict[str, Any]:
        """A run snapshot's spec in the form that keys blessed baselines
        (``evalsvc.services.baselines.suite_key``): two specs that plan the same items must
        read the same here. Default: the spec as it is."""
        return spec

    @abstractmethod
    async def plan(self, client: EndpointClient, provenance: Provenance) -> Sequence[Item]:
        """Generate the items, deterministically from ``self.spec.seed``: a list, or a
        ``LazyItems`` that builds each item when it is read (flat memory for large plans)."""

    async def solve(self, item: Item, client: EndpointClient) -> Sample:
        """Send one item and score the response. Kinds with per-item work override this."""
        raise NotImplementedError

    @property
    def thinking_policy(self) -> ThinkingPolicy:
        """The suite's ``thinking`` block, or the default (``<think>`` markers, no gates)."""
        return self.spec.thinking or ThinkingPolicy()

    async def sample(self, item: Item, client: EndpointClient, repeat: int = 0) -> Sample:
        """``solve`` sample ``repeat`` of one item: every send loop calls this, never ``solve``
        directly. A kind that ``scores_answers`` solves through
        ``evalsvc.suites._sampling.DecodingClient`` (the sample's decoding: no kind writes a
        temperature) and ``evalsvc.suites._answers.AnswerClient``, so it scores the answer
        alone, and the trace goes into ``data["thinking"]``: the one place thinking is split
        from every answer-scoring kind's answers. The sample is ``repeat``; a sampled suite's
        sample records whether a per-request seed was sent (``data["seed_sent"]``)."""
        if not self.scores_answers:
            sample = await self.solve(item, client)
            sample.repeat = repeat
            return sample
        from evalsvc.suites._answers import AnswerClient

        decoding = self.decoding(item, repeat)
        decoded = cast("EndpointClient", DecodingClient(client, decoding))
        answers = AnswerClient(decoded, self.thinking_policy)
        sample = await self.solve(item, cast("EndpointClient", answers))
        sample.repeat = repeat
        if answers.record is not None and sample.error is None:
            sample.data["thinking"] = answers.record
        if self.spec.sampling is not None:
            sample.data["seed_sent"] = decoding.seed is not None
            if decoding.seed is not None:
                sample.data["seed"] = decoding.seed
        return sample

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
        """Send every (item, sample) not in ``done`` through ``client``; emit each sample as it
        completes: the one send loop of every kind whose statistic is not the traffic.

        Items × ``repeats(role)``, sample-major (every item's first sample, then every item's
        second...: a baseline's second pass comes after its first, as dataset's agreement mode
        needs), concurrently (bounded by ``concurrency``); kinds that need a particular
        traffic shape (determinism, speed, lm-eval's loglikelihood batches) override this.
        """
        # ``concurrency`` workers pull from one iterator: the tasks, and the items of a lazy
        # plan (``LazyItems``), exist only while in flight, so memory does not grow with the
        # number of items (one task per item was about 2 KB each, docs/benchmarks.md).
        pending = (
            (it, r) for r in self.repeats(role) for it in items if (it.id, r) not in done
        )

        async def worker() -> None:
            for item, repeat in pending:
                sample = await self.sample(item, client, repeat)
                sample.endpoint = role
                sample.suite = self.name
                await emit(sample)

        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))

    async def preflight(self, provenance: Provenance) -> list[str]:
        """Problems that make this suite unrunnable on an endpoint with ``provenance`` (the
        baseline's), found before any item is sent: each one line, with the reason. The runner
        refuses the run (exit 2) when any suite reports one. Default: none."""
        return []

    def slice_of(self, sample: Sample) -> dict[str, str]:
        """The slices a (baseline) sample belongs to, ``{dimension: label}``; kinds declare
        theirs (reasoning: family × level, needle: length, depth, length × depth). Default:
        none."""
        return {}

    def required_pairs(
        self, margin: float, discordance: float, alpha: float, power: float
    ) -> int:
        """Gated pairs to pass a candidate as good as the baseline with ``power`` (``evalsvc
        plan``); the default is the paired binary score test's (Nam 1997)."""
        return required_n(margin, discordance, alpha, power)

    def mde_pairs(self, n: int, discordance: float, alpha: float, power: float) -> float:
        """The gate's minimum detectable effect at ``n`` pairs (``evalsvc plan``)."""
        return mde_paired_binary(n, discordance, alpha, power)

    def min_items_to_pass(self, margin: float, alpha: float) -> int | None:
        """Fewest items at which a run with no loss at all can pass (``evalsvc plan``; fewer
        always read inconclusive). The default is the paired binary gate's: the first n at
        which a flip-free run passes Tango's test (``evalsvc.stats.min_n_flip_free``).
        ``None`` when no size can pass (margin 0)."""
        return min_n_flip_free(margin, alpha)

    def stage_sizes(self) -> list[int] | None:
        """Item counts after which the runner gates and stops once every candidate's gate has
        decided (the last is the cap ``plan()`` generates); ``None``: one stage, all items.
        The kind's gate must stay valid over these looks (determinism splits α over them)."""
        return None

    # ------------------------------------------------------------------ adaptive difficulty
    # A kind that can calibrate declares its ladder and how to build a pilot at one rung and the
    # suite at the chosen rungs; the runner does the pilot (evalsvc.suites._calibrate).

    @classmethod
    def calibratable(cls) -> bool:
        """Whether this kind declares a difficulty ladder (overrides ``difficulty_ladder``)."""
        return cls.difficulty_ladder is not Suite.difficulty_ladder

    def calibration(self, requested: bool | None = None) -> CalibrationPolicy | None:
        """The calibration this suite runs with: the spec's ``calibrate``, switched on
        (``--calibrate``: the default policy when the spec has none) or off by ``requested``;
        ``None`` for a kind without a ladder or when off."""
        if not self.calibratable() or requested is False:
            return None
        policy = self.spec.calibrate
        if requested and (policy is None or not policy.enabled):
            policy = CalibrationPolicy()
        return policy if policy is not None and policy.enabled else None

    def difficulty_ladder(self, provenance: Provenance) -> list[Rung]:
        """The rungs a pilot may try, given the baseline's ``provenance`` (needle: lengths up to
        its max context). Default: none (the kind cannot calibrate)."""
        return []

    def calibration_keep(self) -> int | None:
        """Most in-band rungs kept per group when the policy does not say (None: all)."""
        return None

    def pilot_suite(self, rung: Rung, n: int) -> Suite:
        """A suite of ``n`` items at ``rung`` alone, drawn from the pilot seed, whose samples are
        named ``<suite>:pilot``; never gated."""
        raise NotImplementedError(f"kind {self.kind} declares no pilot")

    def at_difficulty(self, rungs: Sequence[Rung]) -> Suite:
        """This suite at the chosen ``rungs`` (same name, size, seed and bound gate)."""
        raise NotImplementedError(f"kind {self.kind} declares no difficulty ladder")

    def _derived(self, params: dict[str, Any], *, pilot: bool = False, seed: int | None = None) -> Suite:
        """A copy with ``params`` replaced and calibration off: the pilot (named
        ``<suite>:pilot``; the name bypasses validation on purpose, a colon never being in a
        suite name) or the calibrated suite (keeping the bound gate)."""
        update: dict[str, Any] = {"params": params, "calibrate": None}
        if seed is not None:
            update["seed"] = seed
        if pilot:
            update["name"] = pilot_name(self.spec.name)
        spec = self.spec.model_copy(update=update, deep=True)
        if self.spec.base_dir is not None:
            spec.located_at(self.spec.base_dir)
        out = type(self)(spec)
        if not pilot:
            out._gate = self._gate
        return out

    # ------------------------------------------------------------------ presentation
    # Class methods: the views call them with a stored report entry or stored sample data, for
    # runs of any age, without rebuilding the suite.

    @classmethod
    def shows_flips(cls) -> bool:
        """Whether items are scored right or wrong, so that a *flip* (baseline right, candidate
        wrong or the reverse) means something: the flips page lists this kind's suites. Default:
        the kind's gate is binary."""
        return cls.gate_default is None or cls.gate_default.kind == "binary"

    flip_threshold: ClassVar[float] = 0.5
    """The default ``flip``'s rule: a score at or above it is correct. Kept as data so the flips
    page can find flipped pairs in the database (a kind that overrides ``flip`` is asked pair by
    pair instead)."""

    @classmethod
    def flip(cls, baseline: float, candidate: float) -> Literal["regression", "improvement"] | None:
        """How a pair of scores differs: ``regression`` (correct → incorrect), ``improvement``
        or ``None`` (same outcome). Default: a score ≥ ``flip_threshold`` is correct."""
        t = cls.flip_threshold
        if (baseline >= t) == (candidate >= t):
            return None
        return "regression" if baseline >= t else "improvement"

    @classmethod
    def flips_by_threshold(cls) -> bool:
        """Whether ``flip`` is the default threshold rule (so the database can apply it)."""
        return getattr(cls.flip, "__func__", None) is getattr(Suite.flip, "__func__", ())

    @classmethod
    def slice_label(cls, data: dict[str, Any]) -> str | None:
        """The finest slice an item belongs to, from its sample's ``data`` (the fields named in
        ``slice_fields``), for the flips page's filter. Default: none."""
        return None

    @classmethod
    def findings(cls, entry: dict[str, Any]) -> list[Finding]:
        """What this kind has to say about one suite entry of the JSON report (``details`` as
        ``analyze`` and the gate wrote them). Missing keys give fewer findings, never an error:
        a report of a partly failed run must still render. Default: the flip counts, for kinds
        that ``shows_flips``."""
        if not cls.shows_flips():
            return []
        return flip_counts_finding(dict(entry.get("details") or {}))

    @classmethod
    def headline(cls, entry: dict[str, Any]) -> str | None:
        """One line for the terminal beside the verdict table (``None``: nothing to add).
        Default: the flip counts."""
        counts = (entry.get("details") or {}).get("counts")
        if cls.shows_flips() and isinstance(counts, dict) and "regressions" in counts:
            return (
                f"{counts.get('regressions', 0)} correct → incorrect, "
                f"{counts.get('improvements', 0)} incorrect → correct"
            )
        return None

    @classmethod
    def view_model(cls, view: ViewInput) -> dict[str, Any]:
        """The JSON-able values this kind's dashboard template reads (as ``view.kind_view``);
        ``charts`` (a list of ``Chart.to_dict()``) are drawn by the dashboard. Default: none."""
        return {}

    @classmethod
    def template_source(cls) -> str | None:
        """The text of ``view_template``, read beside the kind's module (package data)."""
        if not cls.view_template:
            return None
        module = sys.modules[cls.__module__]
        package = module.__package__ or cls.__module__
        return resources.files(package).joinpath(cls.view_template).read_text("utf-8")

    @classmethod
    def sample_notes(cls, data: dict[str, Any]) -> list[dict[str, str]]:
        """Notes on one stored sample for the samples and flips pages, from its ``data``:
        ``[{"label", "text"}]`` (a judge's verdicts and reasons, a similarity with the
        baseline's answer). Default: none."""
        return []

    @classmethod
    def sample_logprobs(cls, data: dict[str, Any]) -> dict[str, Any] | None:
        """What one stored sample keeps of its logprobs, for the samples browser, from its
        ``data``: ``{"summary": [[label, value], ...], "tokens": [{"token", "logprob",
        "top": [[token, logprob], ...]}, ...], "positions": total}`` (either list may be
        empty; ``tokens`` at most ``LOGPROB_TOKENS_SHOWN``). Default: ``None`` (the kind keeps
        no logprobs)."""
        return None

    def prompt(self, item_id: str, data: dict[str, Any]) -> str | None:
        """An item's prompt as text for the flips page, from its stored sample ``data`` or
        rebuilt from the seed (never through an endpoint). Default: ``data["prompt"]`` (a
        string or chat messages) when the kind stores it."""
        return prompt_text(data.get("prompt"))

    @classmethod
    def stored_prompt(cls, data: dict[str, Any]) -> str | None:
        """An item's prompt as text when its sample ``data`` holds it (``data["prompt"]``, a
        string or chat messages), read without rebuilding the suite: the views ask ``prompt``
        of the suite rebuilt from its snapshot only when this is ``None`` (rebuilding a
        ``dataset`` suite reads its whole file)."""
        return prompt_text(data.get("prompt"))

    @classmethod
    def expected_answer(cls, data: dict[str, Any]) -> Any:
        """An item's expected answer (a value, or a list of acceptable ones) from its sample
        ``data``, for the samples and flips pages. Default: ``data["expected"]``."""
        return data.get("expected")

    def expected_samples(self, items: Sequence[Item]) -> int:
        """Samples one endpoint produces for ``items``: k per item (kinds with their own
        repeats override this)."""
        return len(items) * self.samples_per_item

    def pairs_per_item(self) -> int:
        """Gated pairs each planned item yields (1; determinism: conditions × repeats)."""
        return 1

    def gated_pairs(self, items: Sequence[Item]) -> int:
        """Paired observations the gate should see for ``items`` when nothing errs: the report's
        ``n_planned`` (``n + n_errors`` equals it). Kinds whose samples include unpaired
        references (determinism's batch-1 outputs) override this. A sampled suite's pairs are
        its items (the per-item means)."""
        return self.expected_samples(items) // self.samples_per_item

    def analyze(
        self,
        baseline: list[Sample],
        candidate: list[Sample],
        *,
        provenance: tuple[Provenance, Provenance] | None = None,
    ) -> Analysis:
        """Pair samples by (item, repeat); errored pairs are excluded and counted.

        ``provenance`` is (baseline's, candidate's), for kinds that report capacity (speed).
        """
        return paired_scores(baseline, candidate, slicer=self.slice_of)

    # ------------------------------------------------------------------ streamed samples
    # A kind whose analysis needs only what ``paired_scores`` reads (scores, the baseline's
    # cluster, slices and ``slice_fields``, the outputs' first divergent token) sets
    # ``streams_samples``: the runner then keeps its samples as ``PairedColumns`` while they
    # arrive and calls ``analyze_columns`` instead of ``analyze``, so a run of 100k items holds
    # no list of samples. Every other kind gets lists of samples, as before.

    streams_samples: ClassVar[bool] = False
    """The runner keeps this kind's samples as ``PairedColumns`` and calls ``analyze_columns``
    (which must equal ``analyze`` on the same samples); the kind has no ``heatmap``."""

    def sample_columns(self, roles: Sequence[str]) -> PairedColumns:
        """The columns the runner fills with this suite's samples on ``roles``."""
        return PairedColumns(
            roles, slicer=self.slice_of, fields=[name for name, _ in self.slice_fields]
        )

    def analyze_columns(
        self,
        columns: PairedColumns,
        role: str,
        *,
        provenance: tuple[Provenance, Provenance] | None = None,
    ) -> Analysis:
        """``analyze`` of the baseline against ``role`` from the columns (streaming kinds)."""
        return columns.analysis(role)

    @classmethod
    def throughput(cls, details: dict[str, Any]) -> dict[str, Any] | None:
        """Output tokens per second on each side (``{"baseline", "candidate", "what"}``) from
        one report entry's ``details``, for a kind that measures speed: the runner divides it
        by the tokens per answer of every suite that reports thinking in the same run (answers
        per second, ``evalsvc.suites._thinking.per_answer_speed``). Default: ``None``."""
        return None

    def thinking_summary(
        self,
        baseline: Sequence[Sample],
        candidate: Sequence[Sample],
        *,
        columns: PairedColumns | None = None,
        role: str = "",
    ) -> dict[str, Any] | None:
        """The report's ``details["thinking"]`` for a kind that ``scores_answers`` (the runner
        calls it for every candidate, from samples or, for a streaming kind, ``columns``):
        thinking length ratio, truncation, loops and leaks, paired by item, with the suite's
        bounds tested (``evalsvc.suites._thinking.paired_summary``). ``None`` for other kinds."""
        if not self.scores_answers:
            return None
        from evalsvc.suites._thinking import paired_summary

        keyed = (
            columns.thinking_pairs(role) if columns is not None
            else thinking_pairs(baseline, candidate)
        )
        policy = self.thinking_policy
        alpha = self.gate.alpha if self.gate_bound else 0.05
        return paired_summary(
            [(b, c) for _, b, c in keyed],
            items=[item for item, _, _ in keyed],
            alpha=alpha,
            max_length_ratio=policy.max_length_ratio,
            max_truncation_increase=policy.max_truncation_increase,
        )


LOGPROB_TOKENS_SHOWN = 64
"""Token logprobs a samples-browser row shows at most (``Suite.sample_logprobs``): a drift
passage keeps hundreds of positions."""


def lengths_over_context(
    lengths: Sequence[int], max_tokens: int, headroom: int, max_context: int | None
) -> list[str]:
    """The preflight problem of a kind whose items are sized to exact context lengths (needle,
    longctx): the lengths that cannot fit ``max_context`` with the answer and the chat
    template's ``headroom``, naming those that would; none when the context is unknown."""
    if max_context is None:
        return []
    room = max_context - max_tokens - headroom
    over = [x for x in lengths if x > room]
    if not over:
        return []
    return [
        f"lengths {over} do not fit the endpoint's max context of {max_context} tokens with the "
        f"answer ({max_tokens} tokens) and the chat template ({headroom}): lengths up to "
        f"{max(room, 0)} fit"
    ]


_TOKEN = re.compile(r"\w+|[^\w\s]")


def first_divergent_token(a: str, b: str) -> tuple[str | None, str | None] | None:
    """The first word-level token (``\\w+`` or one punctuation mark) where ``a`` and ``b``
    differ, as (token of a, token of b) with ``None`` past the end; ``None`` if they agree.
    Word-level because a sample's output text carries no token ids."""
    ta, tb = _TOKEN.findall(a or ""), _TOKEN.findall(b or "")
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x != y:
            return x, y
    return None


THINKING_FIELDS = ("tokens", "answer_tokens", "tokens_source", "budget_exhausted", "loop", "leaked")
"""The fields of a sample's ``data["thinking"]`` the paired summary reads."""


def _frozen(value: Any) -> Any:
    """A hashable form of a trace field (the leaked markup list becomes a tuple)."""
    return tuple(value) if isinstance(value, list) else value


def thinking_pairs(
    baseline: Sequence[Sample], candidate: Sequence[Sample]
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(item id, baseline's trace, candidate's trace)`` of the pairs both sides scored (by
    item and repeat, in key order)."""
    base = {(s.item_id, s.repeat): s for s in baseline}
    cand = {(s.item_id, s.repeat): s for s in candidate}
    out = []
    for key in sorted(base.keys() & cand.keys()):
        sb, sc = base[key], cand[key]
        tb, tc = sb.data.get("thinking"), sc.data.get("thinking")
        if sb.score is None or sc.score is None or not isinstance(tb, dict) or not isinstance(tc, dict):
            continue
        out.append((key[0], tb, tc))
    return out


def paired_scores(
    baseline: list[Sample],
    candidate: list[Sample],
    *,
    slicer: Callable[[Sample], dict[str, str]] | None = None,
) -> Analysis:
    """Pair two endpoints' samples by (item, repeat) and return aligned score arrays.

    A pair where either side errored (or is missing) is left out of the arrays and counted in
    ``n_errors``; the runner turns too many errors into an infrastructure error, so the verdict
    never silently rests on fewer items than planned.
    """
    base = {(s.item_id, s.repeat): s for s in baseline}
    cand = {(s.item_id, s.repeat): s for s in candidate}
    keys = sorted(set(base) | set(cand))
    b: list[float] = []
    c: list[float] = []
    clusters: list[str] = []
    ids: list[str] = []
    tokens: list[tuple[str | None, str | None] | None] = []
    slices: dict[str, list[str]] = {}
    errors = 0
    for key in keys:
        sb, sc = base.get(key), cand.get(key)
        if sb is None or sc is None or sb.score is None or sc.score is None:
            errors += 1
            continue
        b.append(float(sb.score))
        c.append(float(sc.score))
        clusters.append(str(sb.data.get("cluster", key[0])))
        ids.append(key[0] if key[1] == 0 else f"{key[0]}#{key[1]}")
        tokens.append(first_divergent_token(sb.output, sc.output))
        if slicer is not None:
            for dim, label in slicer(sb).items():
                slices.setdefault(dim, []).append(label)
    return _aligned(b, c, clusters, errors, slices, ids, tokens)


def _aligned(
    b: list[float],
    c: list[float],
    clusters: list[str],
    errors: int,
    slices: dict[str, list[str]],
    ids: list[str],
    tokens: list[Any],
) -> Analysis:
    """The ``Analysis`` of aligned pairs, from samples or from columns alike: clusters only
    when some item shares one, and only the slice dimensions every pair has."""
    has_clusters = len(set(clusters)) < len(clusters)
    complete = {d: v for d, v in slices.items() if len(v) == len(b)}
    return Analysis(
        b,
        c,
        clusters if has_clusters else None,
        n_errors=errors,
        slices=complete or None,
        keys=ids,
        first_tokens=tokens,
    )


#: ``PairedColumns``: no score yet, a score, an errored sample (score None).
_ABSENT, _SCORED, _ERRORED = 0, 1, 2


class PairedColumns:
    """One suite's samples on every endpoint as compact columns: what :func:`paired_scores`
    reads, kept as the samples arrive, so the runner holds no ``Sample`` of a streaming kind
    (``Suite.streams_samples``) and its memory per item is a few hundred bytes, whatever the
    outputs' length.

    Per (item, repeat): each role's score (``array('d')``) and state, the baseline's cluster,
    its slice labels (``slicer``) and its ``fields`` (the kind's ``slice_fields``, shared
    between equal values); per candidate, the first divergent token of each scored pair. An
    output is kept only until its pair is complete; error texts only as the five smallest
    distinct ones per role (all ``_gate_one`` reports). A later sample for the same key and
    role replaces the earlier one, as in :func:`paired_scores`; ``analysis(role)`` equals
    ``paired_scores(baseline samples, that role's samples, slicer=slicer)``.
    """

    def __init__(
        self,
        roles: Sequence[str],
        *,
        slicer: Callable[[Sample], dict[str, str]] | None = None,
        fields: Sequence[str] = (),
    ) -> None:
        self.roles = list(roles)
        self._candidates = [r for r in self.roles if r != "baseline"]
        self._slicer = slicer
        self._fields = tuple(fields)
        self._index: dict[tuple[str, int], int] = {}
        self._keys: list[tuple[str, int]] = []
        self._scores = {r: array("d") for r in self.roles}
        self._state = {r: bytearray() for r in self.roles}
        self._cluster: list[Any] = []
        self._slices: list[tuple[tuple[str, str], ...] | None] = []
        self._data: list[dict[str, Any] | None] = []
        self._tokens: dict[str, dict[int, tuple[str | None, str | None]]] = {
            r: {} for r in self._candidates
        }
        self._outputs: dict[str, dict[int, str]] = {r: {} for r in self.roles}
        self._errors: dict[str, list[str]] = {r: [] for r in self.roles}
        self._thinking: dict[str, dict[int, tuple[Any, ...]]] = {r: {} for r in self.roles}
        self._shared: dict[Any, Any] = {}
        self.samples = 0

    def _intern(self, value: Any) -> Any:
        # Equal labels share one object: a slice label per item costs a pointer, not a string.
        try:
            return self._shared.setdefault(value, value)
        except TypeError:  # unhashable: kept as is
            return value

    def _slot(self, key: tuple[str, int]) -> int:
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self._keys)
            self._keys.append(key)
            for r in self.roles:
                self._scores[r].append(0.0)
                self._state[r].append(_ABSENT)
            self._cluster.append(None)
            self._slices.append(None)
            self._data.append(None)
        return i

    def add(self, sample: Sample) -> None:
        """Take one sample of role ``sample.endpoint`` (other roles are ignored)."""
        role = sample.endpoint
        if role not in self._scores:
            return
        self.samples += 1
        i = self._slot((sample.item_id, sample.repeat))
        score = sample.score
        scored = score is not None
        self._state[role][i] = _SCORED if scored else _ERRORED
        self._scores[role][i] = float(score) if score is not None else 0.0
        if sample.error:
            self._keep_error(role, sample.error)
        trace = sample.data.get("thinking")
        if scored and isinstance(trace, dict):
            # What the thinking summary reads (a few numbers and flags), not the text.
            # Interned: equal traces (a model that never thinks) share one tuple.
            self._thinking[role][i] = self._intern(
                tuple(_frozen(trace.get(k)) for k in THINKING_FIELDS)
            )
        else:
            self._thinking[role].pop(i, None)
        if role == "baseline" and scored:
            # What paired_scores reads of a gated pair's baseline sample, and only then.
            data = sample.data
            self._cluster[i] = self._intern(data["cluster"]) if "cluster" in data else _NO_CLUSTER
            if self._slicer is not None:
                self._slices[i] = self._intern(tuple(self._slicer(sample).items()))
            if self._fields:
                self._data[i] = self._intern_fields(data)
        self._pair(role, i, sample.output)

    def errored(self, role: str) -> int:
        """How many of ``role``'s samples errored (the error budget names the side)."""
        return self._state[role].count(_ERRORED) if role in self._state else 0

    def _intern_fields(self, data: dict[str, Any]) -> dict[str, Any]:
        values = tuple((f, data[f]) for f in self._fields if f in data)
        try:
            shared: dict[str, Any] = self._shared.setdefault(("fields", values), dict(values))
        except TypeError:  # an unhashable value: kept as is
            return dict(values)
        return shared

    def _pair(self, role: str, i: int, output: str) -> None:
        """Compute the first divergent tokens the new sample completes; keep an output only
        while a pair still waits for it."""
        base_ok = self._state["baseline"][i] == _SCORED
        if role == "baseline":
            waiting = False
            for r in self._candidates:
                if self._state[r][i] == _SCORED and base_ok:
                    self._token(r, i, output, self._outputs[r].pop(i, ""))
                else:
                    waiting = True
            if waiting:
                self._outputs["baseline"][i] = output
            else:
                self._outputs["baseline"].pop(i, None)
            return
        if base_ok and self._state[role][i] == _SCORED:
            self._outputs[role].pop(i, None)
            self._token(role, i, self._outputs["baseline"].get(i, ""), output)
            if all(self._state[r][i] == _SCORED for r in self._candidates):
                self._outputs["baseline"].pop(i, None)
        else:
            self._outputs[role][i] = output

    def _token(self, role: str, i: int, base: str, cand: str) -> None:
        token = first_divergent_token(base, cand)
        if token is None:
            self._tokens[role].pop(i, None)
        else:
            self._tokens[role][i] = token

    def _keep_error(self, role: str, error: str) -> None:
        kept = self._errors[role]
        if error in kept or (len(kept) >= 5 and error >= kept[-1]):
            return
        kept.append(error)
        kept.sort()
        del kept[5:]

    def error_examples(self, role: str) -> list[str]:
        """``sorted(set(errors of role and baseline))[:5]``, as ``_gate_one`` reports them."""
        return sorted(set(self._errors[role]) | set(self._errors["baseline"]))[:5]

    def __len__(self) -> int:
        return len(self._keys)

    def pairs(self, role: str) -> list[int]:
        """Slots of the pairs ``analysis(role)`` gates, in its order (keys sorted)."""
        sb, sc = self._state["baseline"], self._state[role]
        return [
            i
            for _, i in sorted((k, i) for k, i in self._index.items())
            if sb[i] == _SCORED and sc[i] == _SCORED
        ]

    def fields(self, slots: Sequence[int]) -> list[dict[str, Any]]:
        """The baseline's ``fields`` of each slot (empty when the baseline sample had none)."""
        return [self._data[i] or {} for i in slots]

    def thinking_pairs(self, role: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """``thinking_pairs`` of the baseline's and ``role``'s samples, from the columns."""
        base, mine = self._thinking["baseline"], self._thinking.get(role, {})
        return [
            (self._keys[i][0], dict(zip(THINKING_FIELDS, base[i], strict=True)),
             dict(zip(THINKING_FIELDS, mine[i], strict=True)))
            for i in self.pairs(role) if i in base and i in mine
        ]

    def analysis(self, role: str) -> Analysis:
        """The same ``Analysis`` as :func:`paired_scores` on the baseline's and ``role``'s
        samples: pairs sorted by key; a pair missing or errored on either side is counted in
        ``n_errors`` and left out."""
        sb, sc = self._state["baseline"], self._state[role]
        present = sorted(k for k, i in self._index.items() if sb[i] != _ABSENT or sc[i] != _ABSENT)
        b: list[float] = []
        c: list[float] = []
        clusters: list[str] = []
        ids: list[str] = []
        tokens: list[tuple[str | None, str | None] | None] = []
        slices: dict[str, list[str]] = {}
        errors = 0
        scores_b, scores_c = self._scores["baseline"], self._scores[role]
        mine = self._tokens.get(role, {})
        for key in present:
            i = self._index[key]
            if sb[i] != _SCORED or sc[i] != _SCORED:
                errors += 1
                continue
            b.append(scores_b[i])
            c.append(scores_c[i])
            cluster = self._cluster[i]
            clusters.append(str(key[0] if cluster is _NO_CLUSTER else cluster))
            ids.append(key[0] if key[1] == 0 else f"{key[0]}#{key[1]}")
            tokens.append(mine.get(i))
            for dim, label in self._slices[i] or ():
                slices.setdefault(dim, []).append(label)
        return _aligned(b, c, clusters, errors, slices, ids, tokens)


class _NoCluster:
    """The baseline sample's ``data`` had no ``cluster`` (the item id stands for it)."""

    def __repr__(self) -> str:
        return "<no cluster>"


_NO_CLUSTER = _NoCluster()


def flips(baseline: Sequence[float], candidate: Sequence[float]) -> dict[str, int]:
    """Correct→incorrect and incorrect→correct counts ("Accuracy is Not All You Need", arXiv 2407.09141)."""
    lost = sum(1 for b, c in zip(baseline, candidate, strict=True) if b >= 0.5 > c)
    gained = sum(1 for b, c in zip(baseline, candidate, strict=True) if c >= 0.5 > b)
    return {"correct_to_incorrect": lost, "incorrect_to_correct": gained}
