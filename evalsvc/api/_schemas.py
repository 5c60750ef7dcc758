"""Request and response shapes of the REST API (pydantic; they are the OpenAPI schema).

Contract: input shapes forbid extra fields; create, update and read shapes are separate classes.
Read shapes are built from domain objects (``evalsvc.domain``) or the store's plain dicts, never
from ORM rows. The run spec inside them is the domain ``RunSpec`` itself, so the API and the
queue cannot drift apart.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Path
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from evalsvc import limits
from evalsvc.domain import EndpointRef, RunOptions, RunSpec, RunStatus, RunVerdict
from evalsvc.endpoints import check_endpoint_url
from evalsvc.limits import (
    CronText,
    EnvNameText,
    LabelKey,
    LabelNameText,
    LabelValue,
    ModelText,
    PathText,
    SuiteNameText,
    UrlText,
)

# A registered name must not look like a URL (``compare`` tells them apart by "://").
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
#: What the schema says of a URL; ``_check_url`` is the rule itself (it also strips spaces and
#: trailing slashes).
# The authority (up to the first "/", "?" or "#") has no "@": credentials in URLs are refused.
URL_PATTERN = (
    r"^[ \t\n\r\f\x0b]*[Hh][Tt][Tt][Pp][Ss]?://"
    r"[^ \t\n\r\f\x0b/?#@\x00][^/?#@\x00]*([/?#][^\x00]*)?$"
)
Name = Annotated[str, Field(pattern=_NAME_PATTERN)]
Url = Annotated[UrlText, Field(json_schema_extra={"pattern": URL_PATTERN})]

#: Path parameters (a name or an id): bounded and NUL-free, so that a lookup can never reach the
#: database with a value PostgreSQL refuses.
PathKey = Annotated[str, Path(max_length=limits.MAX_NAME, pattern=r"^[^\x00/]+$")]


_ASCII_SPACE = " \t\n\r\f\v"


def _check_url(value: str) -> str:
    value = value.strip(_ASCII_SPACE)
    scheme, sep, rest = value.partition("://")
    if (
        not sep
        or scheme.lower() not in ("http", "https")
        or not rest
        or rest[0] in "/" + _ASCII_SPACE
    ):
        raise ValueError("url must be an http(s) base URL, e.g. http://127.0.0.1:8000/v1")
    # egress: one URL rule for every view (scheme, host, no userinfo): evalsvc.endpoints._urls
    return check_endpoint_url(value.rstrip("/"))


class FieldError(BaseModel):
    """One invalid field of a request (422)."""

    loc: list[str | int]
    """Where: ``["body", "options", "samples"]``, ``["path", "name"]``..."""
    msg: str
    type: str


class Problem(BaseModel):
    """Every error response: 4xx and 5xx, whether a route, the validation or the server raised it."""

    detail: str
    """What went wrong, in one human-readable sentence."""
    errors: list[FieldError] | None = None
    """For 422 on an invalid request: every invalid field."""


# ---------------------------------------------------------------------------- endpoints


class EndpointCreate(BaseModel):
    """Register an endpoint under a name usable in runs and schedules."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    """Unique name (letters, digits, ``.``, ``_``, ``-``; at most 128)."""
    url: Url
    """Base URL including ``/v1``."""
    model: ModelText | None = None
    """Served model name; discovered from ``/v1/models`` when omitted."""
    api_key_env: EnvNameText | None = None
    """Name of the environment variable (on the workers) that holds the API key."""
    tokenizer: PathText | None = None
    """The model's tokenizer (``tokenizer.json`` or a checkpoint directory) on the workers, for
    an engine without a tokenize route; refused unless ``EVALSVC_TOKENIZER_ROOT`` is set on the
    server and the path lies under it (docs/security.md)."""

    _url = field_validator("url")(_check_url)


class EndpointUpdate(BaseModel):
    """Replace a registered endpoint's fields (PUT: omitted optional fields become null)."""

    model_config = ConfigDict(extra="forbid")

    url: Url
    """Base URL including ``/v1``."""
    model: ModelText | None = None
    """Served model name; discovered from ``/v1/models`` when omitted."""
    api_key_env: EnvNameText | None = None
    """Name of the environment variable (on the workers) that holds the API key."""
    tokenizer: PathText | None = None
    """The model's tokenizer (``tokenizer.json`` or a checkpoint directory) on the workers, for
    an engine without a tokenize route; refused unless ``EVALSVC_TOKENIZER_ROOT`` is set on the
    server and the path lies under it (docs/security.md)."""

    _url = field_validator("url")(_check_url)


class EndpointRead(BaseModel):
    """A registered endpoint."""

    name: str
    url: str
    model: str | None = None
    api_key_env: str | None = None
    tokenizer: str | None = None

    @classmethod
    def of(cls, ref: EndpointRef) -> EndpointRead:
        return cls(
            name=ref.name or "",
            url=ref.url,
            model=ref.model,
            api_key_env=ref.api_key_env,
            tokenizer=ref.tokenizer,
        )


# ---------------------------------------------------------------------------- runs


def _null_only(schema: dict[str, Any]) -> None:
    # The field exists only so that a request carrying it gets a reason, not "extra field".
    description = schema.get("description")
    schema.clear()
    schema["type"] = "null"
    if description:
        schema["description"] = description


def _url_or_name_schema(schema: dict[str, Any]) -> None:
    # The rule of ``_url_or_name`` below, in the schema: a url (name, model and api_key_env
    # optional), or a registered name alone.
    schema["anyOf"] = [
        {"required": ["url"], "properties": {"url": {"type": "string"}}},
        {
            "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1}, "url": {"type": "null"}},
            "not": {
                "anyOf": [
                    {"required": ["model"], "properties": {"model": {"type": "string"}}},
                    {
                        "required": ["api_key_env"],
                        "properties": {"api_key_env": {"type": "string"}},
                    },
                ]
            },
        },
    ]


class RunEndpoint(BaseModel):
    """The baseline or a candidate of a run: a ``url``, or the ``name`` of a registered endpoint
    alone (it carries its own model and key)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_url_or_name_schema)

    url: Url | None = None
    """Base URL including ``/v1``."""
    name: LabelNameText | None = None
    """A registered endpoint name (used alone), or a label for ``url``."""
    model: ModelText | None = None
    """Served model name (with ``url``); discovered when omitted."""
    api_key_env: EnvNameText | None = Field(default=None, json_schema_extra=_null_only)
    """Refused: a submitted endpoint carries no credentials (register it, as an admin, with
    ``api_key_env`` and use its ``name``). Kept in the shape so the refusal can say why; the
    schema says it must be null."""

    @model_validator(mode="after")
    def _url_or_name(self) -> RunEndpoint:
        if self.url is None and not self.name:
            raise ValueError("give the endpoint's url or a registered endpoint name")
        if self.url is not None and self.api_key_env is not None:
            # egress: a submit token must not choose which of the worker's variables is sent
            raise ValueError(
                "api_key_env is refused on a submitted endpoint: credentials are only sent to "
                "endpoints an admin registered (POST /endpoints); use the registered name"
            )
        if self.url is not None:
            self.url = _check_url(self.url)
        elif self.model is not None or self.api_key_env is not None:
            raise ValueError("model and api_key_env go with url; a registered name carries its own")
        return self


class RunCreate(BaseModel):
    """Queue a run (what ``evalsvc compare --server`` sends)."""

    model_config = ConfigDict(extra="forbid")

    baseline: RunEndpoint
    candidates: list[RunEndpoint] = Field(min_length=1, max_length=limits.MAX_CANDIDATES)
    suites: list[SuiteNameText] = Field(min_length=1, max_length=limits.MAX_SUITES)
    """Suite or set names from ``GET /suites`` (at most 64)."""
    options: RunOptions = Field(default_factory=RunOptions)

    @field_validator("suites")
    @classmethod
    def _catalog_names_only(cls, names: list[str]) -> list[str]:
        # A YAML path would be read from the *server's* disk: refuse it instead of letting a
        # client probe the server's files (the CLI resolves paths only in-process).
        for name in names:
            if "/" in name or "\\" in name or name.endswith((".yaml", ".yml")):
                raise ValueError(
                    f"{name!r}: the API takes catalog suite or set names (GET /suites), not "
                    "file paths: put the file in the directory named by EVALSVC_SUITES_DIR on "
                    "the API server and its workers and give its name, or run it in-process "
                    "with `evalsvc compare` (no --server)"
                )
        return names

    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=limits.MAX_LABELS, json_schema_extra=limits.labels_schema
    )
    """Free-form key/value labels stored with the run (at most 32; keys 64, values 256 characters)."""
    priority: int = Field(default=0, ge=limits.INT4_MIN, le=limits.INT4_MAX)
    """Higher runs are claimed first (a 32-bit integer)."""


class RunSubmitted(BaseModel):
    """The answer to ``POST /runs``: the run is queued for workers."""

    id: str
    status: RunStatus


class RunRead(BaseModel):
    """A run's status and progress."""

    id: str
    status: RunStatus
    verdict: RunVerdict | None = None
    """Set when the run completed (or ended in error)."""
    error: str | None = None
    progress: dict[str, Any] = Field(default_factory=dict)
    """Written by the worker: ``{"items": {suite: n}, "done": {suite: {role: n}}}``, with
    ``labels`` ``{role: label}`` (each role's endpoint as every view names it: its name, else
    host:port, with the model)."""
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: int = 0
    """How many times a worker claimed it."""
    schedule_id: str | None = None
    submitted_by: str | None = None
    """The name of the API token that queued the run (None: a schedule or the CLI)."""
    workers_alive: int | None = None
    """Queued runs (``GET /runs/{id}``): queue workers alive, all busy when above 0; 0 when the
    run has waited 15 s and no worker took it; null otherwise."""
    queue_note: str | None = None
    """Queued runs (``GET /runs/{id}``): why it has not started and what to do (``no worker is
    alive: start one with `evalsvc worker` ...``)."""
    spec: RunSpec


class ReasonRead(BaseModel):
    """One reason of a verdict, as in the JSON report (docs/report.md, Reasons)."""

    code: str
    suite: str | None = None
    candidate: str | None = None
    """Which candidate (``candidate:N``) the reason is about."""
    candidate_label: str | None = None
    """That candidate as every view names it: its name, else host:port, with the model."""
    message: str


class GateRead(BaseModel):
    """The overall verdict of a finished run and the matching ``evalsvc compare`` exit code."""

    run_id: str
    status: RunStatus
    verdict: RunVerdict
    """``error`` also for a cancelled run: it gives no evidence to promote anything."""
    exit_code: int
    """0 pass, 1 fail, 3 inconclusive, 4 error, 5 non-comparable (docs/cli.md)."""
    reasons: list[ReasonRead] = []
    """Why the run reads its verdict: the report's run-level reasons (docs/report.md)."""
    basis: dict[str, Any] | None = None
    """What the verdict rests on (docs/report.md, Basis): per suite and side where the samples
    came from, the noise floor, the helpers, and every allowed difference (each is also an
    ``allowed_difference`` reason). None for a run without a report."""
    refused_by_policy: list[str] = []
    """Why the policy parameters (``max_reuse_age``, ``allowed_differences=false``) refuse what
    the verdict rests on; a refused pass reads ``exit_code`` 1. Empty when none was asked."""


# ---------------------------------------------------------------------------- suites


class SuiteRead(BaseModel):
    """A catalog entry: a suite, or a set of suites (``kind="set"``)."""

    name: str
    kind: str
    version: str | None = None
    items: int | None = None
    """Items the suite plans, when known before talking to an endpoint."""
    description: str | None = None
    suites: list[str] | None = None
    """Members, for a set."""
    margin: float | None = None
    """The gate's margin (or threshold); None when not gated (and for a set)."""
    gate: str | None = None
    """The gate in words (``accuracy, margin 0.05``; ``kld_mean < 0.05 (threshold)``)."""
    needs: list[str] = []
    """Capabilities every endpoint must have (a set: its suites' union)."""
    calibrates: bool | None = None
    """Whether a pilot on the baseline picks the difficulty first (suites only)."""
    cost: dict[str, Any] | None = None
    """Before any request: ``items`` and ``pilot_requests`` as ``[fewest, most]``, ``answers``
    per endpoint, and ``text`` (``evalsvc suites list``'s cost column)."""


# ---------------------------------------------------------------------------- schedules


class ScheduleCreate(BaseModel):
    """A cron schedule that queues a run from ``template`` at every fire time (UTC)."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    cron: CronText
    """Cron expression, evaluated in UTC (e.g. ``0 3 * * *``)."""
    template: RunCreate
    """The run to queue; endpoint names are resolved now, when the schedule is created."""
    start_at: Annotated[
        datetime | None,
        AfterValidator(limits.check_date),
        Field(json_schema_extra={"pattern": limits.DATE_PATTERN}),
    ] = None
    """First fire time is the first cron time after this (default: now); a year from 2000 to
    2099 as written (naive times are UTC)."""


class ScheduleRead(BaseModel):
    """A stored schedule."""

    id: str
    name: str
    cron: str
    kind: str = "run"
    """``run``: it queues ``template``; ``sweep`` (created with ``evalsvc schedules add
    --sweep``): it queues ``sweep``."""
    template: RunSpec | None = None
    sweep: dict[str, Any] | None = None
    """The sweep spec a sweep schedule queues (docs/api.md, Sweeps)."""
    enabled: bool
    start_at: datetime | None = None
    last_fire_time: datetime | None = None
    next_fire_time: datetime | None = None
    created_at: datetime
    last_error: str | None = None
    """Why the last fire time could not queue a run (cleared by the next one that does)."""
    last_error_at: datetime | None = None


# ---------------------------------------------------------------------------- sweeps


class SweepSubmitted(BaseModel):
    """The answer to ``POST /sweeps``: the sweep is queued for workers."""

    id: str
    status: RunStatus


class SweepRunLink(BaseModel):
    """A quality run one configuration of the sweep made (``GET /runs/{run_id}``)."""

    run_id: str
    config: str


class SweepConfigRead(BaseModel):
    """One configuration's outcome."""

    name: str
    kind: str
    status: str
    """``measured``, ``failed-to-start`` or ``error``."""
    error: str | None = None
    verdict: str | None = None
    """The quality verdict over every suite (None: no suite, or the configuration failed)."""
    quality_delta: float | None = None
    """The worst suite's Δ, oriented so that higher is better."""
    quality_ci: list[float | None] | None = None
    quality_suite: str | None = None
    capacity_ratio: float | None = None
    """Capacity at SLO, candidate ÷ baseline (median over the ABBA repetitions)."""
    capacity_ci: list[float | None] | None = None
    answers_capacity_ratio: float | None = None
    """Capacity per answer: ``capacity_ratio`` ÷ the quality suites' tokens-per-answer ratio,
    when they report thinking (the recommendation then ranks by it; docs/suites.md)."""
    kv_capacity_ratio: float | None = None
    run_id: str | None = None
    frontier: bool = False


class SweepSummaryRead(BaseModel):
    """A stored sweep in a list."""

    id: str
    status: RunStatus
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    recommendation: str | None = None
    """The recommended configuration's name, once finished (None: none passes every gate)."""
    error: str | None = None
    submitted_by: str | None = None
    schedule_id: str | None = None
    configs: int
    """How many configurations the spec has."""


class SweepRead(SweepSummaryRead):
    """A stored sweep: status, per-configuration outcomes, frontier, recommendation."""

    attempts: int = 0
    spec: dict[str, Any]
    """The sweep spec as submitted (docs/api.md, Sweeps)."""
    progress: dict[str, Any] = Field(default_factory=dict)
    """While it runs: ``{"configs": n, "done": [{name, status, verdict}]}``."""
    runs: list[SweepRunLink] = []
    results: list[SweepConfigRead] = []
    """Per configuration, once finished."""
    frontier: list[str] = []
    """Configurations on the Pareto frontier of (quality Δ, capacity ratio)."""
    reason: str | None = None
    """The recommendation in words, or why no configuration is recommended."""
    slo: str | None = None
    report: dict[str, Any] | None = None
    """The full sweep report (schema ``evalsvc.sweep/1``, as ``evalsvc sweep --json``)."""


# ---------------------------------------------------------------------------- health


class Health(BaseModel):
    """``GET /healthz``: whether the database is reachable and at the migration head."""

    status: str
    """``ok`` or ``unavailable``."""
    database: str
    """The database URL without its password."""
    detail: str | None = None
