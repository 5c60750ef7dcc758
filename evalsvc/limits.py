"""Bounds on everything a client can send: one table shared by the REST schemas, the domain
models behind them (so the CLI and the workers apply the same rules) and the suite kinds.

Contract: constants and small pydantic-compatible validators only; imports nothing of evalsvc.
Each bound says why it has the value it has. Strings are capped at their database column
(``evalsvc/db/_orm.py``); integers that are stored in an ``INTEGER`` column fit PostgreSQL's
int4. NUL characters are refused in every client string: PostgreSQL cannot store them in text
(SQLite can), and a value must mean the same on both backends.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, Field

#: PostgreSQL ``integer`` (int4), the type of ``runs.priority`` (an ORM ``Mapped[int]``).
INT4_MIN, INT4_MAX = -(2**31), 2**31 - 1

#: Items a suite may plan anywhere (``options.samples``, a kind's ``params.n``), an in-process
#: ``evalsvc compare`` included. Rationale: MMLU has 14,042 test items and a production replay
#: can have 100k; 100,000 is the largest size measured within the memory target (a streaming
#: kind's run of 100k items × 2 endpoints against a zero-latency stub, docs/benchmarks.md,
#: "Memory"). Kinds that plan lists of long prompts (needle: a 3k-token prompt is ~12 kB) hold
#: their whole plan, so size those to the machine. 999,999,999,999 grew a worker to 2.6 GB
#: before this bound. What a *client of the server* may submit is smaller and a setting:
#: ``EVALSVC_MAX_ITEMS`` (``Settings.max_items``, default ``SERVER_MAX_ITEMS``), checked by
#: ``evalsvc.services.runs.check_server_limits`` at submission (runs, schedules, sweeps) and by
#: the worker.
MAX_ITEMS = 100_000
#: Default of ``EVALSVC_MAX_ITEMS``: items per suite a REST client (or a schedule) may ask a
#: server's workers for. The finest margin worth gating on a binary metric, δ = 0.01 at 10%
#: discordance, α = 0.05, power 0.8, needs ((1.645 + 0.842)² · 0.1) / 0.01² ≈ 6,200 paired
#: items (Connor 1987, McNemar sample size); 10,000 leaves room above that while one client
#: cannot occupy a worker for hours.
SERVER_MAX_ITEMS = 10_000
#: Repeats of one item (determinism's repeats): each multiplies the samples of a suite.
MAX_REPEATS = 100
#: Samples per item of a sampled suite (``sampling.k``): publishers use 3-10 (8 for AIME25,
#: 10 for DeepSeek-R1's card); 64 leaves room for pass@k curves. Each multiplies a suite's
#: requests, which the server bounds with its items (``check_server_limits``).
MAX_SAMPLES_PER_ITEM = 64
#: Requests in flight per endpoint (``options.concurrency``, speed/determinism levels): more
#: than any serving engine here batches (vLLM's default max_num_seqs is 256).
MAX_CONCURRENCY = 256
#: Generated tokens per request a suite may ask for.
MAX_TOKENS = 32_768
#: Characters of a prompt a suite builds from parameters (speed's prompt_chars, prefixes).
MAX_PROMPT_CHARS = 1_000_000
#: Context length in tokens a suite may target (needle lengths): 1 Mi tokens is the longest
#: context any current model serves.
MAX_CONTEXT_TOKENS = 1_048_576
#: Entries of a list parameter (lengths, depths, levels, tasks): the product of such lists is
#: what a suite plans, so each stays small.
MAX_PARAM_LIST = 64

#: Candidates of one run: each is a full evaluation against the baseline.
MAX_CANDIDATES = 16
#: Suite or set names in one request. The catalog holds about twenty; 100,000 names used to
#: cost minutes of API CPU because each one was resolved before anything was refused.
MAX_SUITES = 64
#: Labels of a run, and their key and value lengths (stored in the run's JSON spec).
MAX_LABELS = 32
MAX_LABEL_KEY = 64
MAX_LABEL_VALUE = 256

#: Column widths (``evalsvc/db/_orm.py``).
MAX_NAME = 128  # endpoint/schedule names also match a pattern of 128 characters (column: 200)
MAX_URL = 2000  # endpoints.url, runs.baseline_url, run_candidates.url
MAX_MODEL = 500  # endpoints.model, run_candidates.model
MAX_ENV_NAME = 200  # endpoints.api_key_env
MAX_PATH = 1000  # endpoints.tokenizer (a path on the machine that runs the suites)
MAX_LABEL_NAME = 200  # run_candidates.name (a label for an inline URL)
MAX_SUITE_NAME = 1000  # a catalog name, or a file path on the CLI (a YAML's own name: 200)
MAX_CRON = 200  # schedules.cron
MAX_ID = 64  # path ids (runs are 32 hex digits; names are at most 128)
MAX_DESCRIPTION = 10_000  # a suite or set file's description

#: Seeds: any non-negative integer a JSON number holds exactly everywhere (``random.Random``
#: takes any int, but a seed is stored in JSON and sent by clients that parse numbers as
#: doubles): I-JSON's interoperable range, ±(2⁵³ − 1) (RFC 7493, section 2.2). The earlier
#: 2⁶³ − 1 became 2⁶³ in such a client and was refused as over the bound it was sent at.
MAX_SEED = 2**53 - 1
#: Per-request timeout a run may ask for: one hour covers the longest context prefill on CPU.
MAX_REQUEST_TIMEOUT_S = 3600.0

#: Seconds a sweep waits for a configuration's server to answer its health check: loading and
#: compiling the largest model a worker hosts takes minutes to an hour; four hours is far above
#: that and still bounds how long one sweep can hold a worker waiting for nothing.
MAX_HEALTH_TIMEOUT_S = 4 * 3600.0
#: Latency SLOs of a speed sweep (time to first token, time per output token), in ms: no request
#: may wait longer than ``MAX_REQUEST_TIMEOUT_S``, so no SLO above it can be met or missed.
MAX_SLO_MS = MAX_REQUEST_TIMEOUT_S * 1000.0
#: Request rates (requests per second) a speed sweep may offer: a measurement point sends at
#: most 10,000 requests, so a higher rate would issue them all within a second (a burst, not a
#: rate); no single serving replica here sustains anywhere near it.
MAX_RATE_RPS = 10_000.0
#: Growth factor of the rate ladder (``start_rps · growth^k``): 4 quadruples the rate per point,
#: coarser than any useful capacity search (the refinement halves the gap afterwards).
MAX_RATE_GROWTH = 4.0
#: Shape of the gamma arrivals (``burstiness``): below 0.01 the inter-arrival times are almost
#: all zero with a rare gap of hours (the scale is 1 / (rate · shape)); above 100 the arrivals
#: are a metronome. Both ends model no real traffic.
MIN_BURSTINESS, MAX_BURSTINESS = 0.01, 100.0

#: Requests one configuration's capacity measurement may send in a sweep submitted to the
#: server (``(warmup + requests × (points + refine)) × 4 × blocks``: each ABBA block measures
#: both endpoints twice). The default measurement sends 3,552; a careful one (200 requests at
#: each of 20 points, 4 refinements, 10 blocks) 192,160. The schema's extremes allow 56
#: million, days of a worker at the tens of requests per second a CPU replica sustains.
MAX_SWEEP_SPEED_REQUESTS = 250_000

#: HTTP methods ``/metrics`` and the access log name as sent (RFC 9110's methods and PATCH);
#: h11 accepts any token as a method, so any other is counted and logged as ``other``: 3,000
#: invented 8,000-character methods once made 6,000 series (a 48.5 MB scrape) and 24 MB of log.
HTTP_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)
#: Characters of a request path (with its query) the access log writes; the rest is cut and
#: counted (a request line may be up to uvicorn's 16 KiB head limit).
MAX_LOGGED_PATH = 512
#: Label sets of the gate families on ``/metrics`` (the latest gate per baseline, candidate and
#: suite; 11 series each): 16 candidates × 16 suites, newest first; the rest are counted in
#: ``evalsvc_metrics_omitted{family="gate"}``. Every distinct URL or log upload adds one.
MAX_GATE_SERIES = 256
#: Endpoints of the endpoint families on ``/metrics`` (9 series each), by samples in the last
#: 24 h; the others are summed under ``endpoint="other"``.
MAX_ENDPOINT_SERIES = 64

#: Dates a client may give (``start_at``): cron arithmetic and the UTC conversion of an offset
#: overflow ``datetime`` at year 9999, and no schedule needs to start before 2000.
MIN_YEAR, MAX_YEAR = 2000, 2099
#: The same rule for the JSON schema (a ``date-time`` string starting with its year).
DATE_PATTERN = r"^20[0-9][0-9]-"

#: Bytes of a request body the API reads (a run spec is a few kB).
MAX_BODY_BYTES = 1_048_576
#: Bytes of a ``POST /gate-logs`` upload (both sides' logs together): lm-eval's samples file
#: for a few thousand documents with ``--log_samples`` is tens of MB (every document, its
#: arguments and responses); more is refused (413) before it is read.
MAX_UPLOAD_BYTES = 64 * 1_048_576
#: Files per side of a ``POST /gate-logs`` upload (an lm-eval output directory's files).
MAX_UPLOAD_FILES = 64
#: Bytes of a suite or set YAML file.
MAX_YAML_BYTES = 1_048_576


def no_nul(value: str) -> str:
    """Refuse NUL characters (PostgreSQL text cannot hold them)."""
    if "\x00" in value:
        raise ValueError("must not contain NUL (\\x00) characters")
    return value


def check_date(value: datetime | None) -> datetime | None:
    """A date whose year, as written, is ``MIN_YEAR`` to ``MAX_YEAR`` (naive means UTC); then
    its conversion to UTC and the cron arithmetic after it cannot overflow."""
    if value is None:
        return None
    if not MIN_YEAR <= value.year <= MAX_YEAR:
        raise ValueError(f"the year must be {MIN_YEAR} to {MAX_YEAR}, got {value.isoformat()}")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


#: A NUL-free string pattern, shown in the JSON schema (contract tests then generate only
#: The same for a whole-file JSON log (an Inspect ``.json`` log, a promptfoo results file), which
#: holds every sample in one document: an Inspect sample with its events is a few hundred
#: containers, so 4M is 10,000+ samples (worst case ~0.5 GB of Python objects while it is
#: parsed; larger Inspect logs read in their ``.eval`` form, one member per sample).
MAX_JSON_FILE_CONTAINERS = 4_000_000
#: valid values); the check itself is ``no_nul``, whose message is clearer than a regex's.
NO_NUL_PATTERN = r"^[^\x00]*$"


def _text(max_length: int) -> Any:
    return Field(max_length=max_length, json_schema_extra={"pattern": NO_NUL_PATTERN})


_NUL = AfterValidator(no_nul)
#: Client strings, by the column (or bound) they end up in.
UrlText = Annotated[str, _text(MAX_URL), _NUL]
ModelText = Annotated[str, _text(MAX_MODEL), _NUL]
EnvNameText = Annotated[str, _text(MAX_ENV_NAME), _NUL]
PathText = Annotated[str, _text(MAX_PATH), _NUL]
#: Budgets of reading one evaluation log (``evalsvc.suites._logread``, ``evalsvc.suites.logs``):
#: every reader of a log, in-process (``evalsvc gate-logs``) or in a worker (uploads), stops at
#: them with a data error naming the file. Bytes of one log file read from disk (a samples file
#: of 100k documents with long generations is tens of MB).
MAX_LOG_BYTES = 512 * 1_048_576
#: Bytes one zip member of an Inspect ``.eval`` log may inflate to, and the whole file: a sample
#: with a long transcript is a few MB; the header holds the eval's spec and results. Zstandard
#: reaches ratios of 10,000:1 on repetitive JSON (a 9,800-byte member of 100 MiB), so the
#: inflated size, not the upload's, is what is bounded.
MAX_LOG_MEMBER_BYTES = 64 * 1_048_576
MAX_LOG_INFLATED_BYTES = 512 * 1_048_576
#: Zip members of one ``.eval`` log (samples × epochs; MMLU's 14,042 questions fit 3 epochs).
MAX_LOG_MEMBERS = 50_000
#: Nesting depth of one JSON document of a log. Inspect samples nest about 10 levels
#: (sample, messages, content parts, tool calls); Python's ``json`` recurses and its default
#: recursion limit is 1,000 frames, so depth is checked on the raw bytes before parsing.
MAX_JSON_DEPTH = 100
#: JSON objects and arrays in one document (a samples line, a ``.json`` log, a zip member). A
#: container costs 56-230 bytes as a Python object for as little as 2 bytes of text, so this, not
#: the byte count, bounds a parse's memory (1M empty dicts: ~70 MB; an Inspect sample with its
#: events is a few thousand).
MAX_JSON_CONTAINERS = 1_000_000
#: Characters of one JSON number literal (a float's shortest repr is at most 24; Python refuses
#: to parse integers of more than 4,300 digits on its own, with an error of its own).
MAX_JSON_NUMBER_CHARS = 100
#: Bytes of one line of an lm-eval samples file (one document with its prompts and responses;
#: a 128k-token long-context prompt is ~0.5 MB, several per line for multiple-choice tasks).
MAX_LOG_LINE_BYTES = 32 * 1_048_576
#: Records of one lm-eval samples file (one per document and filter): MAX_ITEMS documents
#: under ten filters.
MAX_LOG_RECORDS = 1_000_000
#: Largest absolute value of a per-document score: far above any metric's range (perplexities
#: included), and small enough that sums of squares over MAX_ITEMS documents stay finite in
#: float64 (1e12² × 1e5 = 1e29 << 1.8e308); ±1e308 overflowed the statistics to inf/NaN.
MAX_LOG_SCORE = 1e12
#: Characters of an identifier read from a log (task, metric, filter, model, document id).
MAX_LOG_NAME = 200
#: Seconds a worker may spend gating one upload (reading, pairing, the bootstrap), checked
#: between its stages: the budgets above bound the work, this bounds the time a slow host spends
#: on it; past it the run ends ``error`` rather than holding the worker.
MAX_GATE_LOGS_SECONDS = 900.0
#: ``POST /gate-logs`` uploads waiting for a worker (queued or running) per API token: each holds
#: up to ``MAX_UPLOAD_BYTES`` in the database until a worker gates it; past this, 429.
MAX_PENDING_UPLOADS = 16
LabelNameText = Annotated[str, _text(MAX_LABEL_NAME), _NUL]
SuiteNameText = Annotated[str, _text(MAX_SUITE_NAME), _NUL]
CronText = Annotated[str, _text(MAX_CRON), _NUL]
IdText = Annotated[str, _text(MAX_ID), _NUL]
LabelKey = Annotated[
    str,
    Field(min_length=1, max_length=MAX_LABEL_KEY, json_schema_extra={"pattern": NO_NUL_PATTERN}),
    _NUL,
]
LabelValue = Annotated[str, _text(MAX_LABEL_VALUE), _NUL]


def labels_schema(schema: dict[str, Any]) -> None:
    """The JSON schema of a labels mapping with the key rule in ``propertyNames`` (pydantic
    would put the key's NUL pattern in ``patternProperties``, which leaves other keys free)."""
    values = next(iter(schema.pop("patternProperties", {}).values()), None)
    if values is not None:
        schema["additionalProperties"] = values
    schema["propertyNames"] = {
        "minLength": 1,
        "maxLength": MAX_LABEL_KEY,
        "pattern": NO_NUL_PATTERN,
    }
