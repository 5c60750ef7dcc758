"""Domain objects shared by every layer (suites, runner, store, views).

Contract: plain pydantic models with no behaviour that touches I/O. The store (``evalsvc.db``)
converts its ORM rows to and from these; nothing above ``evalsvc/db/`` ever sees an ORM row.
The words follow docs/architecture.md: endpoint, baseline, candidate, suite, item, sample, gate, verdict, run.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalsvc import limits
from evalsvc.limits import (
    EnvNameText,
    LabelKey,
    LabelNameText,
    LabelValue,
    ModelText,
    PathText,
    SuiteNameText,
    UrlText,
)

Verdict = Literal["pass", "fail", "inconclusive"]
RunVerdict = Literal["pass", "fail", "inconclusive", "error", "non-comparable"]
"""A run's or a candidate's verdict: ``non-comparable`` when the two sides differ in more than
the quantization (``evalsvc.gates`` comparability guard, docs/statistics.md)."""

#: Exit codes of ``evalsvc compare`` (docs/cli.md). The REST gate endpoint returns them too.
EXIT_CODES: dict[str, int] = {
    "pass": 0, "fail": 1, "usage": 2, "inconclusive": 3, "error": 4, "non-comparable": 5,
}

#: What the comparability guard compares between a baseline and a candidate; each may be
#: allowed to differ (``comparability: {allow: [...]}`` on a suite or a run,
#: ``--allow-difference NAME``). Quantization facts (dtype, KV-cache dtype, quantization method,
#: KV capacity) are never among them: they are the point of a comparison.
ComparabilityField = Literal[
    "tokenizer",  # the tokenizer fingerprint (token ids of a fixed sentence)
    "chat_template",  # the chat template (a fixed conversation as the engine renders it)
    "model_family",  # the model's shape where the engine reports it (parameters, width, vocabulary)
    "generation_defaults",  # the engine's default sampling parameters where it reports them
    "reasoning",  # whether the engine splits reasoning out of the answer
    "max_context",  # a candidate context shorter than a suite of the run needs
    "sample_counts",  # one side answered fewer items than the other (refusals past the budget)
]


class ComparabilityOptions(BaseModel):
    """Which differences between the sides a run (or a suite) declares the point of the
    comparison, so they do not make it ``non-comparable``."""

    model_config = ConfigDict(extra="forbid")

    allow: list[ComparabilityField] = Field(default_factory=list, max_length=16)


class RunStatus(StrEnum):
    """Life cycle of a run: queued → running → (completed | error | cancelled)."""

    queued = "queued"
    running = "running"
    completed = "completed"
    error = "error"
    cancelled = "cancelled"


class Provenance(BaseModel):
    """What the capability probe learned about an endpoint (all fields optional: engines differ)."""

    model_config = ConfigDict(extra="allow")

    engine: str | None = None
    """Serving engine guessed from headers, ``/version`` and metric names (``vllm``, ``llama.cpp``...)."""
    version: str | None = None
    model: str | None = None
    """Served model name from ``/v1/models``."""
    root: str | None = None
    """The checkpoint path/name the engine reports as the model's root."""
    max_context: int | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    kv_capacity_tokens: int | None = None
    """KV cache capacity in tokens = blocks x block size (vLLM ``cache_config_info``)."""
    kv_cache_memory_bytes: int | None = None
    prefix_caching: bool | None = None
    capabilities: dict[str, bool] = Field(default_factory=dict)
    """Which API features answered correctly: chat, completions, logprobs, prompt_logprobs, echo, tokenize."""
    tokenizer_fingerprint: str | None = None
    """Token ids of a fixed probe sentence, hashed: equal fingerprints mean equal tokenizers."""
    tokenizer_source: str | None = None
    """Where token counts come from: the engine's own route (``endpoint /tokenize (llama.cpp)``)."""
    chat_template_fingerprint: str | None = None
    """A fixed conversation rendered by the engine's chat template, hashed: equal fingerprints
    mean equal templates (vLLM/SGLang ``/tokenize`` with ``messages``, llama.cpp
    ``/apply-template``)."""
    chat_template_source: str | None = None
    """Which route rendered it."""
    generation_defaults: dict[str, Any] | None = None
    """The engine's default sampling parameters where it reports them (llama.cpp ``/props``):
    what a request that sets none of them gets."""
    reasoning: str | None = None
    """How the probe's chat answer came back: ``parsed`` (a separate ``reasoning_content`` /
    ``reasoning`` field), ``inline`` (``<think>`` inside the answer), ``None`` (no trace seen)."""
    model_family: dict[str, Any] | None = None
    """The model's shape where the engine reports it (llama.cpp ``/v1/models`` ``meta``:
    parameters, width, vocabulary, training context), which quantization does not change."""
    dtype: str | None = None
    """The weights' dtype where the engine reports it (TGI ``model_dtype``)."""
    probed_at: datetime | None = None


#: What determines an endpoint's outputs, as the probe reports it (DESIGN: the provenance
#: fingerprint): the served model and checkpoint, engine and version, numerics, context,
#: tokenizer, chat template, sampling defaults, reasoning handling and model shape. Left out:
#: what the probe measures about the server's state (KV blocks, capacity, capabilities, time).
FINGERPRINT_FIELDS = (
    "engine", "version", "model", "root", "dtype", "kv_cache_dtype", "quantization",
    "max_context", "tokenizer_fingerprint", "chat_template_fingerprint", "generation_defaults",
    "reasoning", "model_family",
)


def provenance_fingerprint(prov: Provenance | dict[str, Any]) -> str:
    """A 16-hex-digit hash of an endpoint's ``FINGERPRINT_FIELDS`` (a stored snapshot's dict or
    a ``Provenance``): equal fingerprints mean the probe saw the same configuration. It keys
    noise-floor calibrations (``evalsvc.services.calibration``)."""
    import hashlib
    import json

    data = prov.model_dump(mode="json") if isinstance(prov, Provenance) else dict(prov)
    key = {name: data.get(name) for name in FINGERPRINT_FIELDS}
    text = json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class EndpointRef(BaseModel):
    """One endpoint as a run sees it: where it is and which model it serves."""

    model_config = ConfigDict(extra="forbid")

    url: UrlText
    """Base URL including ``/v1``."""
    model: ModelText | None = None
    name: LabelNameText | None = None
    """Registered name, when the endpoint came from the registry."""
    api_key_env: EnvNameText | None = None
    """Name of an environment variable holding the API key (the key itself is never stored)."""
    tokenizer: PathText | None = None
    """The model's own tokenizer (a ``tokenizer.json``, or a checkpoint directory holding one)
    on the machine that runs the suites, registered for an engine without a tokenize route:
    the probe loads it only when the endpoint has none (docs/security.md for server mode)."""


class Item(BaseModel):
    """One unit of a suite, generated deterministically from the suite's seed."""

    model_config = ConfigDict(frozen=True)

    id: str
    prompt: str | list[dict[str, str]] = ""
    """Either raw text (completions) or chat messages."""
    expected: Any = None
    cluster: str | None = None
    """Items sharing a context share a cluster id (clustered standard errors)."""
    metadata: dict[str, Any] = Field(default_factory=dict)


class Sample(BaseModel):
    """One endpoint's response to one item, as stored. ``score`` is None when ``error`` is set."""

    suite: str
    item_id: str
    endpoint: str
    """Role label: ``baseline`` or ``candidate:<index>`` (stable within a run)."""
    repeat: int = 0
    output: str = ""
    score: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    ttft_s: float | None = None
    error: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    """Kind-specific extras: logprob summaries, context length, depth, divergence index..."""

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.endpoint, self.suite, self.item_id, self.repeat)


class SuiteRef(BaseModel):
    """A suite as requested for a run: a catalog name or a YAML path, plus overrides."""

    model_config = ConfigDict(extra="forbid")

    name: str
    samples: int | None = None
    seed: int | None = None


class SamplingOptions(BaseModel):
    """A run's overrides of its sampled suites' decoding (``compare --sampling-k``,
    ``--temperature``, ``--top-p``, ``--max-tokens``, ``--sampling-seed``; REST
    ``options.sampling``): fields left unset keep each suite's own ``sampling`` block
    (``evalsvc.suites._sampling``). Applied to kinds that score answers only."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    k: int | None = Field(default=None, ge=1, le=limits.MAX_SAMPLES_PER_ITEM)
    """Samples per item."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1, le=limits.MAX_TOKENS)
    """The answer's token budget, replacing each suite's own."""
    seed: int | None = Field(default=None, ge=0, le=limits.MAX_SEED)
    """Send per-request seeds derived from this (never needed for pairing)."""

    def is_empty(self) -> bool:
        return not self.model_dump(exclude_none=True)


class RunOptions(BaseModel):
    """Knobs of one run that are not part of a suite spec (CLI flags, REST body)."""

    # No NaN or infinity anywhere: they are not JSON, and PostgreSQL refuses to store them.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    samples: int | None = Field(default=None, ge=1, le=limits.MAX_ITEMS)
    """Items per suite (bounded by ``evalsvc.limits.MAX_ITEMS``)."""
    seed: int | None = Field(default=None, ge=0, le=limits.MAX_SEED)
    concurrency: int = Field(default=8, ge=1, le=limits.MAX_CONCURRENCY)
    margin: float | None = None
    alpha: float | None = None
    recovery_min: float | None = None
    """Raise the recovery floor of suites gated by one (tighten only; docs/statistics.md)."""
    sequential: bool = False
    calibrate: bool | None = None
    """Adaptive difficulty: ``True`` calibrates every suite whose kind can (``--calibrate``; a
    short pilot on the baseline picks the levels, docs/suites.md), ``False`` turns the suites'
    own ``calibrate:`` off, ``None`` follows each suite's YAML."""
    max_error_rate: float = Field(default=0.05, ge=0.0, le=1.0)
    """Above this share of errored samples on any endpoint/suite the run is an infrastructure error."""
    request_timeout_s: float = Field(default=300.0, gt=0.0, le=limits.MAX_REQUEST_TIMEOUT_S)
    strict: bool = False
    """Refuse the run (exit 2) when a suite cannot run on an endpoint (a capability it lacks, a
    suite's preflight problem), instead of running the others and reporting it skipped."""
    sampling: SamplingOptions | None = None
    """Decoding overrides for every suite that scores answers (docs/suites.md, "Sampled
    evaluation"); unset: each suite's own (greedy when it has no ``sampling`` block)."""
    comparability: ComparabilityOptions | None = None
    """Differences between the sides that are the point of this run (``--allow-difference``;
    docs/statistics.md, "Comparability"); unset: only quantization may differ."""
    blessed_baseline: bool = True
    """Reuse a blessed baseline's samples where one matches (``evalsvc baselines bless``;
    ``--no-blessed-baseline``: send every item to the baseline again)."""


class RunSpec(BaseModel):
    """Everything needed to execute a run; stored with the run so a worker can pick it up."""

    model_config = ConfigDict(extra="forbid")

    baseline: EndpointRef
    candidates: list[EndpointRef] = Field(min_length=1, max_length=limits.MAX_CANDIDATES)
    suites: list[SuiteNameText] = Field(min_length=1, max_length=limits.MAX_SUITES)
    """Catalog names or YAML paths."""
    options: RunOptions = Field(default_factory=RunOptions)
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=limits.MAX_LABELS, json_schema_extra=limits.labels_schema
    )
    priority: int = Field(default=0, ge=limits.INT4_MIN, le=limits.INT4_MAX)
    """Higher runs are claimed first (a PostgreSQL ``integer``)."""


def stored_spec(data: dict[str, Any]) -> RunSpec:
    """A stored run spec: validated, or, when it predates a bound it breaks (an older evalsvc
    stored ``samples: 50000``), built as stored so that listing and reading it still work.
    Executing such a run fails with the bound's message; nothing else does."""
    try:
        return RunSpec.model_validate(data)
    except ValidationError:
        ref = EndpointRef.model_construct
        return RunSpec.model_construct(
            **{
                **data,
                "baseline": ref(**dict(data.get("baseline") or {})),
                "candidates": [ref(**dict(c)) for c in data.get("candidates") or []],
                "options": RunOptions.model_construct(**dict(data.get("options") or {})),
                "labels": dict(data.get("labels") or {}),
            }
        )


class TokenInfo(BaseModel):
    """An API token as the store reports it: never the token itself (only its hash is stored)."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    scopes: list[str]
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None


class RunInfo(BaseModel):
    """A run as the store reports it."""

    id: str
    status: RunStatus
    spec: RunSpec
    verdict: RunVerdict | None = None
    error: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: int = 0
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    progress: dict[str, Any] = Field(default_factory=dict)
    schedule_id: str | None = None
    submitted_by: str | None = None
    """The name of the API token that queued it (REST ``POST /runs``), else None."""


def prompt_text(prompt: Any) -> str | None:
    """A prompt (a string or chat messages) as one text: ``[role] content`` per message (the
    views, the export and the kinds show a stored prompt the same way)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        return "\n\n".join(
            f"[{m.get('role', '?')}] {m.get('content', '')}" if isinstance(m, dict) else str(m)
            for m in prompt
        )
    return None
