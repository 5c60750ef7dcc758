"""The public operations behind ``evalsvc.local``: ensure_up, status, down, prepare.

Contract: see the package docstring. ``ensure_up`` and ``down`` hold the state lock for their
whole duration; ``status`` and ``server_info`` only read the state file and probe ``/health``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from . import _llamacpp as llamacpp
from ._catalog import (
    BASELINE,
    CANDIDATES,
    DEFAULT_CANDIDATES,
    build_spec,
    server_kind,
    validate_candidates,
)
from ._errors import LocalError, UnknownCandidateError
from ._host import unsupported_reason
from ._paths import Layout
from ._prepare import Preparer
from ._serve import ServerSpec, ensure_running, is_alive, is_healthy, stop_all
from ._state import load_state, state_lock
from ._ui import info

DEFAULT_TIMEOUT = 600.0
ENGINES: tuple[str, ...] = ("vllm", llamacpp.ENGINE)
"""The local engines: vLLM-CPU (``bf16`` + ``CANDIDATES``) and llama.cpp (``f16`` +
``llamacpp.CANDIDATES``)."""


def _check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise UnknownCandidateError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    return engine


def engine_of(name: str) -> str:
    """The engine a recorded server name belongs to."""
    return llamacpp.ENGINE if name in llamacpp.NAMES else "vllm"


def baseline_of(engine: str) -> str:
    return llamacpp.BASELINE if _check_engine(engine) == llamacpp.ENGINE else BASELINE


def candidates_of(engine: str) -> tuple[str, ...]:
    return llamacpp.CANDIDATES if _check_engine(engine) == llamacpp.ENGINE else CANDIDATES


class LocalEndpoints(BaseModel):
    """OpenAI base URLs of the running local servers."""

    baseline: str
    candidates: dict[str, str] = Field(default_factory=dict)

    def to_json(self) -> str:
        """``{"baseline": "http://127.0.0.1:P/v1", "candidates": {"fp8-kv": "...", ...}}``."""
        return json.dumps({"baseline": self.baseline, "candidates": dict(self.candidates)})


class ServerInfo(BaseModel):
    """One recorded server and what a probe finds now."""

    name: str
    engine: str
    role: Literal["baseline", "candidate"]
    pid: int
    port: int
    url: str
    served_model_name: str
    model_dir: str
    started_at: datetime
    log: str
    alive: bool
    healthy: bool


def _names(candidates: Iterable[str] | str) -> tuple[str, ...]:
    # A bare string would otherwise be iterated character by character.
    items = candidates.split(",") if isinstance(candidates, str) else candidates
    return validate_candidates(items)


def prepare(candidates: Iterable[str] | str = DEFAULT_CANDIDATES) -> dict[str, float]:
    """Prepare (without serving) what the baseline and these candidates need.

    Returns the seconds taken by each step that actually ran (empty when all was ready).
    """
    names = _names(candidates)
    layout = Layout.current()
    with state_lock(layout.lock_file):
        preparer = Preparer(layout)
        preparer.models(server_kind(n).model for n in (BASELINE, *names))
    return preparer.timings


def default_candidates(engine: str = "vllm") -> tuple[str, ...]:
    """vLLM: ``fp8-kv`` where this CPU can serve it; otherwise ``w8a8`` (vLLM-CPU's FP8 KV cache
    needs AVX-512 or AMX, and an AVX2-only host would fail the default demo).
    llama.cpp: ``q8_0-kv``."""
    if _check_engine(engine) == llamacpp.ENGINE:
        return llamacpp.DEFAULT_CANDIDATES
    return DEFAULT_CANDIDATES if unsupported_reason("fp8-kv") is None else ("w8a8",)


def ensure_up(
    candidates: Iterable[str] | str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    engine: str = "vllm",
) -> LocalEndpoints:
    """Prepare, start and wait for the baseline and the requested candidates (idempotent).

    Servers that already run healthy with the same configuration are reused at once; only missing
    ones are prepared and started. Raises ``UnknownCandidateError`` (exit 2) for unknown names and
    ``LocalError`` (exit 4) at once for a candidate this CPU cannot serve (see
    ``supported_candidates``), or when a step fails or a server does not become healthy in
    ``timeout`` seconds (after printing its log tail to stderr and stopping what this call
    started). ``engine="llamacpp"`` serves the GGUF baseline ``f16`` and ``llamacpp.CANDIDATES``
    with llama.cpp instead (no AVX-512 needed; refused at once on an x86 CPU without AVX2).
    """
    if _check_engine(engine) == llamacpp.ENGINE:
        return _ensure_up_llamacpp(candidates, timeout)
    names = _names(default_candidates() if candidates is None else candidates)
    for name in names:
        reason = unsupported_reason(name)
        if reason is not None:
            raise LocalError(f"candidate {name} cannot be served on this host: {reason}")
    layout = Layout.current()
    layout.home.mkdir(parents=True, exist_ok=True)
    specs = [build_spec(layout, n) for n in (BASELINE, *names)]

    def _prepare(todo: Iterable[ServerSpec]) -> None:
        Preparer(layout).models(server_kind(s.name).model for s in todo)

    with state_lock(layout.lock_file):
        records = ensure_running(layout, specs, timeout=timeout, prepare=_prepare)
    return LocalEndpoints(
        baseline=records[BASELINE].url, candidates={n: records[n].url for n in names}
    )


def _ensure_up_llamacpp(candidates: Iterable[str] | str | None, timeout: float) -> LocalEndpoints:
    if candidates is None:
        candidates = llamacpp.DEFAULT_CANDIDATES
    items = candidates.split(",") if isinstance(candidates, str) else candidates
    names = llamacpp.validate_candidates(items)
    reason = unsupported_reason(llamacpp.BASELINE)
    if reason is not None:
        raise LocalError(f"llama.cpp cannot serve on this host: {reason}")
    layout = Layout.current()
    layout.home.mkdir(parents=True, exist_ok=True)
    specs = [llamacpp.build_spec(layout, n) for n in (llamacpp.BASELINE, *names)]

    def _prepare(todo: Iterable[ServerSpec]) -> None:
        Preparer(layout).gguf_models(llamacpp.SERVERS[s.name].weights for s in todo)

    with state_lock(layout.lock_file):
        records = ensure_running(layout, specs, timeout=timeout, prepare=_prepare)
    return LocalEndpoints(
        baseline=records[llamacpp.BASELINE].url, candidates={n: records[n].url for n in names}
    )


def prepare_llamacpp(
    candidates: Iterable[str] | str = llamacpp.DEFAULT_CANDIDATES,
) -> dict[str, float]:
    """Prepare (without serving) the llama.cpp venv and the GGUFs of ``f16`` and these
    candidates; returns the seconds taken by each step that actually ran."""
    items = candidates.split(",") if isinstance(candidates, str) else candidates
    names = llamacpp.validate_candidates(items)
    layout = Layout.current()
    with state_lock(layout.lock_file):
        preparer = Preparer(layout)
        preparer.gguf_models(llamacpp.SERVERS[n].weights for n in (llamacpp.BASELINE, *names))
    return preparer.timings


def supported_candidates() -> tuple[str, ...]:
    """The candidates that this host's CPU can serve (all of ``CANDIDATES`` on AVX-512/AMX)."""
    return tuple(n for n in CANDIDATES if unsupported_reason(n) is None)


def server_info() -> list[ServerInfo]:
    """Every recorded server with its current liveness and health, baseline first."""
    layout = Layout.current()
    state = load_state(layout.state_file)
    order = {name: i for i, name in enumerate((BASELINE, *CANDIDATES, *llamacpp.NAMES))}
    out: list[ServerInfo] = []
    for rec in sorted(state.servers.values(), key=lambda r: order.get(r.name, len(order))):
        alive = is_alive(rec)
        out.append(
            ServerInfo(
                **rec.model_dump(
                    include=set(ServerInfo.model_fields) - {"alive", "healthy", "engine"}
                ),
                engine=engine_of(rec.name),
                alive=alive,
                healthy=alive and is_healthy(rec.port),
            )
        )
    return out


def status(engine: str = "vllm") -> LocalEndpoints | None:
    """The engine's healthy local servers, or None when its baseline is not running and healthy."""
    infos = {i.name: i for i in server_info()}
    base = infos.get(baseline_of(engine))
    if base is None or not base.healthy:
        return None
    cands = {n: infos[n].url for n in candidates_of(engine) if n in infos and infos[n].healthy}
    return LocalEndpoints(baseline=base.url, candidates=cands)


def down(engine: str | None = None) -> None:
    """Stop every recorded server, or only ``engine``'s (SIGTERM to its process group, SIGKILL
    after a grace period)."""
    names = None if engine is None else (baseline_of(engine), *candidates_of(engine))
    layout = Layout.current()
    with state_lock(layout.lock_file):
        stopped = stop_all(layout, names)
    for rec in stopped:
        info(f"stopped {rec.name} (pid {rec.pid}, port {rec.port})")
    if not stopped:
        info("no local servers were running")


# ---------------------------------------------------------------------------- launched commands


def start_command(
    name: str,
    argv: Iterable[str],
    *,
    health_path: str = "/health",
    timeout: float = DEFAULT_TIMEOUT,
    env: dict[str, str] | None = None,
    port_base: int | None = None,
) -> ServerInfo:
    """Start a server from a user's command (``{port}`` is replaced by a free port) and wait for
    ``health_path``; recorded in the state file like the built-in servers, so ``down()`` (and
    ``evalsvc local down``) stops it even if the caller is killed. Raises ``LocalError`` (after
    printing the log tail and stopping it) when it exits or is not healthy in ``timeout`` s.
    ``port_base``: where the search for a free port starts (default: the local servers' 8100)."""
    layout = Layout.current()
    layout.home.mkdir(parents=True, exist_ok=True)
    spec = ServerSpec(
        name=name, role="candidate", argv=tuple(argv), env=dict(env or {}), health_path=health_path
    )
    with state_lock(layout.lock_file):
        records = ensure_running(layout, [spec], timeout=timeout, port_base=port_base)
    rec = records[name]
    return ServerInfo(
        **rec.model_dump(include=set(ServerInfo.model_fields) - {"alive", "healthy", "engine"}),
        engine=engine_of(rec.name),
        alive=True,
        healthy=True,
    )


def stop_servers(names: Iterable[str]) -> list[str]:
    """Stop these recorded servers (process group, SIGKILL after a grace) and forget them;
    returns the names that were running."""
    layout = Layout.current()
    with state_lock(layout.lock_file):
        return [rec.name for rec in stop_all(layout, names)]


def recorded_names() -> list[str]:
    """Names of every server in the state file, running or not."""
    return sorted(load_state(Layout.current().state_file).servers)
