"""Process-wide settings, read from the environment (prefix ``EVALSVC_``).

Contract: reading settings never touches the disk or the network; directories are created by
the code that uses them (the SQLite engine creates its parent directory on first connect).
"""

from __future__ import annotations

from pathlib import Path

import platformdirs
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_home() -> Path:
    return Path(platformdirs.user_data_dir("evalsvc"))


class Settings(BaseSettings):
    """Settings of one evalsvc process (CLI, worker, API server)."""

    model_config = SettingsConfigDict(env_prefix="EVALSVC_", extra="ignore")

    home: Path = Field(default_factory=_default_home)
    """Where evalsvc keeps its state (embedded database, local endpoint environments)."""
    database_url: str = ""
    """SQLAlchemy URL. Empty means ``sqlite:///<home>/evalsvc.db`` (the embedded database)."""
    endpoint_max_runs: int = 1
    """How many runs may be running at once against one endpoint URL, across all workers.
    A claim skips runs whose baseline or candidate is at this budget; 0 or less means no limit.
    The default of 1 keeps runs from competing for the same server, which would distort both
    latency measurements and (for non-batch-invariant kernels) outputs."""
    lease_seconds: float = 60.0
    """How long a worker's claim on a run lasts without a heartbeat."""
    max_attempts: int = 3
    """A run whose lease expired this many times is marked ``error`` instead of re-queued."""

    # ---- egress and credentials (docs/security.md) ---------------------------------------
    allowed_endpoints: str = ""
    """Server mode (API server, workers): comma-separated hosts, ``*.domain`` patterns and
    CIDRs that endpoint URLs may reach. Empty: any public address, nothing internal. Once set,
    it is exhaustive (``*`` in it admits every public address). Link-local and cloud metadata
    addresses are refused whatever it says."""
    endpoint_key_prefix: str = "EVALSVC_ENDPOINT_KEY_"
    """Server mode: ``api_key_env`` of a registered endpoint must name a variable under this
    prefix; workers resolve nothing else, so a run cannot send the database URL or cloud keys."""
    max_response_bytes: int = 8 * 1024 * 1024
    """Largest (decoded) response body an endpoint may send; bigger is an error, not a read."""
    max_stream_bytes: int = 8 * 1024 * 1024
    """Largest (decoded) server-sent-events stream of one streamed request."""
    max_output_chars: int = 65536
    """Model output longer than this is stored truncated, with ``data.output_truncated``."""

    @model_validator(mode="after")
    def _fill_database_url(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{self.home / 'evalsvc.db'}"
        return self
