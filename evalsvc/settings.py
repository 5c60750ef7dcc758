"""Process-wide settings, read from the environment (prefix ``EVALSVC_``).

Contract: every environment variable that configures an evalsvc process is a field of
``Settings`` and is read nowhere else (the exceptions are not process configuration: an
endpoint's own ``api_key_env`` secret, resolved when a request is sent, and ``COLUMNS`` of the
terminal). Empty variables count as unset. There is one state directory, ``home``
(``EVALSVC_HOME``, default ``platformdirs.user_cache_dir("evalsvc")``): the embedded SQLite
database and the local endpoints' environments live under it. Reading settings never touches
the disk or the network; directories are created by the code that uses them (the SQLite engine
creates its parent directory on first connect).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import platformdirs
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from evalsvc import limits


def _default_home() -> Path:
    # One default for everything under home. The cache dir (~/.cache/evalsvc on Linux) because
    # the bulk of it is rebuildable (venvs, models, compile caches); production sets
    # EVALSVC_DATABASE_URL to PostgreSQL, and the container image sets EVALSVC_HOME to a volume.
    return Path(platformdirs.user_cache_dir("evalsvc"))


class Settings(BaseSettings):
    """Settings of one evalsvc process (CLI, worker, API server)."""

    model_config = SettingsConfigDict(env_prefix="EVALSVC_", extra="ignore", env_ignore_empty=True)

    home: Path = Field(default_factory=_default_home)
    """Where evalsvc keeps its state (embedded database, local endpoint environments)."""
    # --- deployment: paths, API server, clients (EVALSVC_SUITES_DIR, EVALSVC_API_AUTH, ...) ---
    suites_dir: Path | None = None
    """A suite catalog directory added to the one shipped in the package (same layout: ``*.yaml``
    at its top, ``sets/`` below; a file named like a packaged suite replaces it). With a
    ``data/`` directory of its own, the kinds read their data files there instead."""
    api_auth: str = "on"
    """``off``/``0``/``false``/``no``/``disabled`` turns the REST API's bearer-token check off."""
    token: SecretStr | None = None
    """Bearer token that ``evalsvc compare --server`` sends."""
    lmeval_python: str = ""
    """A Python that can ``import lm_eval`` (else evalsvc's own when lm-eval is installed beside
    it, else the managed venv ``<home>/venvs/lmeval``)."""
    lmeval_auto_install: bool | None = None
    """Whether the lmeval kind prepares its managed venv (``<home>/venvs/lmeval``, lm-eval from
    the package index) on first use when no Python with lm-eval is found; off, such a suite is
    skipped with the ways to get one. Unset: on for an in-process run (``evalsvc compare``,
    ``sweep``), off for a run a worker executes (server mode: a worker installs nothing from a
    package index unless its operator sets this to 1)."""
    local_eager: str = ""
    """Local endpoints: ``1``/``0`` forces vLLM's eager mode on/off (empty: the catalog default)."""
    local_bind: str = "spread"
    """Local endpoints: ``spread`` pins baseline and candidates to different cores, ``auto``
    leaves it to vLLM."""
    local_skip_host_check: bool = False
    """Local endpoints: serve every candidate whatever this CPU's flags say (tests, odd hosts)."""
    local_shm_nap_us: float = Field(default=100.0, ge=0, le=10_000)
    """Local vLLM endpoints: microseconds each turn of the busy loop of vLLM's shared-memory queue
    sleeps instead of yielding (``evalsvc/local/_launcher.py``); 0 keeps vLLM's own spin."""
    # --- end deployment block ---
    database_url: str = ""
    """SQLAlchemy URL. Empty means ``sqlite:///<home>/evalsvc.db`` (the embedded database)."""
    endpoint_max_runs: int = 1
    """How many runs may be running at once against one endpoint URL, across all workers.
    A claim skips runs whose baseline or candidate is at this budget; 0 or less means no limit.
    The default of 1 keeps runs from competing for the same server, which would distort both
    latency measurements and (for non-batch-invariant kernels) outputs."""
    sweep_allow_launch: bool = False
    """Server mode: whether a sweep queued through the REST API (by an ``admin`` token) or a
    schedule may *launch* servers (``local`` and ``command`` configurations, a ``local``
    baseline) on the worker. Off by default: such a sweep runs commands on the worker's host;
    REST clients may sweep existing endpoints only (docs/security.md)."""
    lease_seconds: float = 60.0
    """How long a worker's claim on a run lasts without a heartbeat."""
    max_attempts: int = 3
    """A run whose lease expired this many times is marked ``error`` instead of re-queued."""
    baseline_max_age: timedelta = Field(default=timedelta(days=7), gt=timedelta(0))
    """Oldest blessed baseline a run reuses (ISO 8601 such as ``P3D``/``PT12H``, or seconds);
    an older one re-runs the baseline with a warning to refresh it (``evalsvc baselines bless``)."""

    @field_validator("baseline_max_age", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        # An environment variable is text: pydantic reads "3600" as no duration, so seconds here.
        if isinstance(value, str) and value.strip().replace(".", "", 1).isdigit():
            return float(value)
        return value

    attest_key: Path | None = None
    """Ed25519 private key (PEM, from ``evalsvc attest keygen``) the service signs verdicts with:
    ``GET /api/v1/runs/{id}/attestation`` and the worker's ``<home>/attestations/RUN.intoto.json``
    (``evalsvc.services.attest``). Unset: no attestation is made (the route answers 404)."""

    gate_max_margin: float = Field(default=0.25, ge=0, lt=1)
    """Largest gate margin any suite's policy may declare (``evalsvc.gates.GateLimits``)."""
    gate_max_alpha: float = Field(default=0.10, gt=0, lt=0.5)
    """Largest one-sided α any suite's policy may declare (``evalsvc.gates.GateLimits``)."""
    allowed_differences: str = ""
    """Server mode: comma-separated comparability differences (``tokenizer``,
    ``chat_template``, ...: ``evalsvc.domain.ComparabilityField``) that a ``submit`` token may
    allow in ``options.comparability.allow`` (REST runs, calibrations; the sweeps and schedules
    paths the same). Empty (the default): none; an allowed difference turns ``non-comparable``
    into a verdict, so it is the operator's policy. Admin tokens, catalog suites' own
    ``comparability: {allow}`` and the local CLI (``compare --allow-difference``) are not bound
    by it."""
    max_items: int = Field(default=limits.SERVER_MAX_ITEMS, ge=1, le=limits.MAX_ITEMS)
    """Items per suite a client of the server may submit (``POST /runs``, schedules; checked
    again by the worker). An in-process ``evalsvc compare`` is bounded by
    ``evalsvc.limits.MAX_ITEMS`` only."""

    # ---- alerts (docs/deploy.md, "Alerts") -------------------------------------------------
    alert_webhooks: SecretStr | None = None
    """Comma-separated webhooks that every new alert is POSTed to: ``slack:URL`` sends Slack's
    ``{"text": ...}``, ``json:URL`` or a bare URL the generic JSON alert. A secret (Slack's
    URLs carry their token): never shown. Their hosts follow ``EVALSVC_ALLOWED_ENDPOINTS``."""
    alert_webhook_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """Seconds one webhook request may take (connect to last byte) before it is retried."""
    alert_webhook_attempts: int = Field(default=3, ge=1, le=10)
    """Tries per webhook and alert (exponential back-off between them)."""
    alert_error_streak: int = Field(default=3, ge=1, le=100)
    """Consecutive finished runs of one endpoint ending in ``error`` that raise an alert."""
    alert_trend_runs: int = Field(default=3, ge=2, le=50)
    """Runs of one (baseline, candidate, suite) a margin-crossing trend spans."""
    progress_every_s: float = Field(default=30.0, ge=0.2, le=3600)
    """Where stderr is not a terminal (a CI log), ``compare`` and ``calibrate`` write a
    progress line at least this often (``evalsvc.cli._progress``)."""

    @field_validator("home", "suites_dir", mode="after")
    @classmethod
    def _expand_user(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    # ---- egress and credentials (docs/security.md) ---------------------------------------
    allowed_endpoints: str = ""
    """Server mode (API server, workers): comma-separated hosts, ``*.domain`` patterns and
    CIDRs that endpoint URLs may reach. Empty: any public address, nothing internal. Once set,
    it is exhaustive (``*`` in it admits every public address). Link-local and cloud metadata
    addresses are refused whatever it says."""
    endpoint_key_prefix: str = "EVALSVC_ENDPOINT_KEY_"
    """Server mode: ``api_key_env`` of a registered endpoint must name a variable under this
    prefix; workers resolve nothing else, so a run cannot send the database URL or cloud keys."""
    tokenizer_root: str | None = None
    """Server mode: the directory under which an endpoint's registered ``tokenizer`` path must
    lie (symbolic links resolved). Unset: the REST API refuses tokenizer paths and workers
    refuse runs carrying one, since a path given over HTTP is read on the server."""
    max_response_bytes: int = 8 * 1024 * 1024
    """Largest (decoded) response body an endpoint may send; bigger is an error, not a read."""
    max_stream_bytes: int = 8 * 1024 * 1024
    """Largest (decoded) server-sent-events stream of one streamed request."""
    max_output_chars: int = 65536
    """Model output longer than this is stored truncated, with ``data.output_truncated``."""
    # ---- API server connections (docs/security.md, "Connections") --------------------------
    api_request_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    """``api serve``: a connection whose request (head and body) is not fully received this
    many seconds after it started is closed (slowloris)."""
    api_keepalive_timeout_s: float = Field(default=5.0, gt=0, le=3600)
    """``api serve``: an idle keep-alive connection is closed after this many seconds."""
    api_max_connections: int = Field(default=0, ge=0)
    """``api serve``: most client connections held at once; 0 derives it from the file
    descriptor limit (the soft limit, raised to the hard one at start, minus a reserve)."""

    @model_validator(mode="after")
    def _fill_database_url(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{self.home / 'evalsvc.db'}"
        return self
