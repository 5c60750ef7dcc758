"""Gate resolution: the one place that decides how a suite is gated.

``resolve(kind_default, suite_gate, options)`` combines three layers into a :class:`ResolvedGate`:

1. the suite kind's declared default (:class:`GateDefaults`, ``Suite.gate_default``);
2. the suite YAML's ``gate:`` block — **the policy**: metric, margin or threshold, α, floor,
   whether the suite gates. The catalog is admin-owned (suite file paths are refused over HTTP);
3. the submitter's run options (``--margin``/``--alpha``, REST ``options``), which may only
   **tighten** the policy: a smaller margin, a smaller α. A looser value is refused
   (:class:`GatePolicyError`, exit 2 / HTTP 422) before any request is sent.

Server-wide :class:`GateLimits` (settings ``EVALSVC_GATE_MAX_MARGIN``,
``EVALSVC_GATE_MAX_ALPHA``) bound the policy itself, so a suite file cannot declare a margin that
makes every gate pass. Every value is chosen with ``is None`` checks, never truthiness: a margin
of 0 (speed's "significantly faster") is a margin. ``ResolvedGate.origin`` records who set what
("kind default", "suite policy", "submitter"); the report and the run's suite snapshot carry it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from evalsvc.gates._defaults import GateDefaults

__all__ = ["GateLimits", "GatePolicyError", "NoiseFloor", "ResolvedGate", "resolve"]

KIND_DEFAULT = "kind default"
SUITE_POLICY = "suite policy"
SUBMITTER = "submitter"


class GatePolicyError(ValueError):
    """A gate setting is invalid or would loosen the policy (a usage error: exit 2, HTTP 422)."""


@dataclass(frozen=True)
class GateLimits:
    """Server-wide bounds on every suite's policy (admin settings).

    Defaults: a margin above 0.25 (25 accuracy points, or 25% relative) no longer says "no
    worse", and α above 0.10 (an 80% two-sided interval) makes a pass weak evidence; both are
    evalsvc policy choices, not published figures.
    """

    max_margin: float = 0.25
    max_alpha: float = 0.10


class _SuiteGate(Protocol):
    metric: str | None
    margin: float | None
    alpha: float | None
    threshold: float | None
    enabled: bool | None


@dataclass(frozen=True)
class NoiseFloor:
    """An endpoint's noise floor for one suite, measured by an A/A calibration run (the endpoint
    against itself, ``evalsvc calibrate``; docs/statistics.md, "Noise floor on file") and
    attached to a run's gate when its baseline's provenance fingerprint matches. ``discordance``:
    share of gated pairs whose score differed between the two passes; ``instability`` (kinds
    that measure it: determinism) the share of answers under load that differ from their
    prompt's modal answer, and ``varying_clusters`` the share of prompts with at least one."""

    calibration: str
    """The calibration's run id."""
    measured_at: str
    """When the calibration run finished (ISO 8601)."""
    fingerprint: str
    discordance: float | None
    pairs: int
    instability: float | None = None
    varying_clusters: float | None = None
    clusters: int | None = None
    endpoint: str | None = None
    """The identity of the endpoint it was measured on (a registered name or a normalized base
    URL, ``evalsvc.services.identity``): a floor is attached only to that endpoint's runs."""
    adopted_by: str | None = None
    """Who adopted it for gates and ``plan`` (an admin token's name, or the local operator);
    None for a calibration shown but not adopted."""
    submitted_by: str | None = None
    """The token that submitted the calibration (None: run in-process by the local operator)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "calibration": self.calibration,
            "measured_at": self.measured_at,
            "fingerprint": self.fingerprint,
            "discordance": self.discordance,
            "pairs": self.pairs,
            "instability": self.instability,
            "varying_clusters": self.varying_clusters,
            "clusters": self.clusters,
            "endpoint": self.endpoint,
            "adopted_by": self.adopted_by,
            "submitted_by": self.submitted_by,
        }


@dataclass(frozen=True)
class ResolvedGate:
    """How one suite is gated in one run. ``margin`` is ``None`` for threshold gates and
    ``threshold`` is ``None`` for non-inferiority gates; ``policy_margin``/``policy_alpha`` are
    the suite's policy before the submitter tightened it."""

    suite_kind: str
    metric: str
    gate: Literal["noninferiority", "threshold"]
    kind: Literal["binary", "continuous", "ratio"]
    margin: float | None
    threshold: float | None
    alpha: float
    higher_is_better: bool
    gated: bool
    baseline_floor: float | None
    slice_min_items: int
    policy_margin: float | None
    policy_alpha: float
    origin: dict[str, str] = field(default_factory=dict)
    recovery_min: float | None = None
    """A recovery floor (candidate mean ÷ baseline mean ≥ this) that decides the gate instead of
    the margin (``gate: {recovery_min: 0.99}``); ``None``: the margin decides."""
    policy_recovery_min: float | None = None
    noise_floor: NoiseFloor | None = None
    """The baseline's calibrated noise floor for this suite (attached once the baseline is
    probed, when a calibration of its fingerprint exists); ``None``: none on file."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite_kind": self.suite_kind,
            "metric": self.metric,
            "gate": self.gate,
            "kind": self.kind,
            "margin": self.margin,
            "threshold": self.threshold,
            "alpha": self.alpha,
            "higher_is_better": self.higher_is_better,
            "gated": self.gated,
            "baseline_floor": self.baseline_floor,
            "slice_min_items": self.slice_min_items,
            "recovery_min": self.recovery_min,
            "policy": {
                "margin": self.policy_margin,
                "alpha": self.policy_alpha,
                "recovery_min": self.policy_recovery_min,
            },
            "origin": dict(self.origin),
            "noise_floor": None if self.noise_floor is None else self.noise_floor.to_dict(),
        }


def _finite(value: Any, what: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise GatePolicyError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise GatePolicyError(f"{what} must be finite, got {value!r}")
    return v


def _check_alpha(value: Any, what: str) -> float:
    a = _finite(value, what)
    if not 0.0 < a < 0.5:
        raise GatePolicyError(f"{what} must be in (0, 0.5), got {value!r}")
    return a


def _check_margin(value: Any, what: str, kind: str, higher: bool) -> float:
    m = _finite(value, what)
    if m < 0:
        raise GatePolicyError(f"{what} must be ≥ 0, got {value!r}")
    if kind == "binary" and m >= 1:
        raise GatePolicyError(f"{what} must be < 1 for a proportion, got {value!r}")
    if kind == "ratio" and higher and m >= 1:
        raise GatePolicyError(f"{what} must be < 1 for a relative margin, got {value!r}")
    return m


def _check_recovery(value: Any, what: str) -> float:
    r = _finite(value, what)
    if not 0.0 < r <= 1.0:
        raise GatePolicyError(f"{what} must be in (0, 1], got {value!r}")
    return r


def check_run_options(options: Any) -> None:
    """Run-level gate options that are not per suite: the error budget must be in [0, 1]."""
    budget = getattr(options, "max_error_rate", None)
    if budget is not None:
        b = _finite(budget, "max_error_rate")
        if not 0.0 <= b <= 1.0:
            raise GatePolicyError(f"max_error_rate must be in [0, 1], got {budget!r}")


def resolve(
    kind_default: GateDefaults,
    suite_gate: _SuiteGate | None,
    options: Any = None,
    *,
    limits: GateLimits | None = None,
    suite: str = "",
) -> ResolvedGate:
    """The gate of one suite: kind default ← suite policy (YAML) ← submitter (tighten only).

    ``options`` is anything with ``margin`` and ``alpha`` attributes (``RunOptions``; ``None``
    values mean "not set"). ``limits`` bounds the policy (``None``: no server bounds, as when the
    runner re-resolves a run the service layer already checked). Raises :class:`GatePolicyError`
    for invalid values, a submitter value that loosens the policy, or a policy beyond ``limits``.
    """
    d = kind_default
    name = f"suite {suite}" if suite else f"a {d.suite_kind} suite"
    origin: dict[str, str] = {}

    def pick(attr: str, default: Any) -> Any:
        value = getattr(suite_gate, attr, None) if suite_gate is not None else None
        if value is not None:
            origin[attr] = SUITE_POLICY
            return value
        origin[attr] = KIND_DEFAULT
        return default

    metric = str(pick("metric", d.metric))
    yaml_threshold = getattr(suite_gate, "threshold", None) if suite_gate is not None else None
    gate: Literal["noninferiority", "threshold"] = (
        "threshold" if yaml_threshold is not None or d.gate == "threshold" else "noninferiority"
    )
    gated = bool(pick("enabled", d.required))
    floor = pick("baseline_floor", d.baseline_floor)
    slice_min = int(pick("slice_min_items", d.slice_min_items))
    policy_alpha = _check_alpha(pick("alpha", d.alpha), f"{name}: gate.alpha")

    threshold: float | None = None
    policy_margin: float | None = None
    if gate == "threshold":
        threshold = _finite(pick("threshold", d.threshold), f"{name}: gate.threshold")
        origin.pop("margin", None)
    else:
        origin.pop("threshold", None)
        raw_margin = pick("margin", d.margin)
        if raw_margin is None:
            raise GatePolicyError(f"{name}: a non-inferiority gate needs a margin")
        policy_margin = _check_margin(raw_margin, f"{name}: gate.margin", d.kind, d.higher_is_better)

    policy_recovery: float | None = None
    raw_recovery = getattr(suite_gate, "recovery_min", None) if suite_gate is not None else None
    if raw_recovery is not None:
        if gate == "threshold":
            raise GatePolicyError(f"{name}: gate.recovery_min and gate.threshold are exclusive")
        if d.kind == "ratio" or not d.higher_is_better:
            raise GatePolicyError(
                f"{name}: gate.recovery_min needs a higher-is-better paired score (accuracy-like), "
                f"not {d.metric} ({d.kind}, {'higher' if d.higher_is_better else 'lower'} is better)"
            )
        policy_recovery = _check_recovery(raw_recovery, f"{name}: gate.recovery_min")
        origin["recovery_min"] = SUITE_POLICY
        origin["margin"] = "not applicable (the recovery floor decides this gate)"

    if limits is not None:
        # A recovery floor r is a relative margin 1 − r of the baseline's score: the same bound.
        if policy_recovery is not None and 1.0 - policy_recovery > limits.max_margin:
            raise GatePolicyError(
                f"{name}: its recovery floor {policy_recovery:g} is below the server's minimum "
                f"{1.0 - limits.max_margin:g} (1 − EVALSVC_GATE_MAX_MARGIN)"
            )
        if policy_margin is not None and policy_margin > limits.max_margin:
            raise GatePolicyError(
                f"{name}: its gate margin {policy_margin:g} exceeds the server's maximum "
                f"{limits.max_margin:g} (EVALSVC_GATE_MAX_MARGIN)"
            )
        if policy_alpha > limits.max_alpha:
            raise GatePolicyError(
                f"{name}: its gate alpha {policy_alpha:g} exceeds the server's maximum "
                f"{limits.max_alpha:g} (EVALSVC_GATE_MAX_ALPHA)"
            )

    margin = policy_margin
    alpha = policy_alpha
    sub_margin = getattr(options, "margin", None) if options is not None else None
    sub_alpha = getattr(options, "alpha", None) if options is not None else None
    if sub_margin is not None:
        m = _finite(sub_margin, "margin (--margin / options.margin)")
        if m < 0:
            raise GatePolicyError(f"margin (--margin / options.margin) must be ≥ 0, got {m:g}")
        if gate == "threshold":
            origin["margin"] = "not applicable (threshold gate); the submitter's margin is unused"
        elif policy_margin is not None and m > policy_margin:
            if gated:
                raise GatePolicyError(
                    f"margin {m:g} would loosen {name}'s gate (policy margin {policy_margin:g}); "
                    "a submitter may only tighten a gate (a smaller margin)"
                )
            origin["margin"] = (
                f"{SUITE_POLICY} (the submitter's looser {m:g} is ignored: informational gate)"
            )
        else:
            margin = _check_margin(m, "margin (--margin / options.margin)", d.kind, d.higher_is_better)
            origin["margin"] = SUBMITTER
    if sub_alpha is not None:
        a = _check_alpha(sub_alpha, "alpha (--alpha / options.alpha)")
        if a > policy_alpha:
            if gated:
                raise GatePolicyError(
                    f"alpha {a:g} would loosen {name}'s gate (policy alpha {policy_alpha:g}); "
                    "a submitter may only tighten a gate (a smaller alpha)"
                )
            origin["alpha"] = (
                f"{SUITE_POLICY} (the submitter's looser {a:g} is ignored: informational gate)"
            )
        else:
            alpha = a
            origin["alpha"] = SUBMITTER
    recovery = policy_recovery
    sub_recovery = getattr(options, "recovery_min", None) if options is not None else None
    if sub_recovery is not None:
        r = _check_recovery(sub_recovery, "recovery_min (--recovery-min / options.recovery_min)")
        if policy_recovery is None:
            # The submitter cannot change a gate's form (a margin gate into a recovery floor
            # could loosen it); the floor applies to suites whose policy is a recovery floor.
            origin["recovery_min"] = (
                f"not applicable (this suite is gated by a margin); the submitter's {r:g} is unused"
            )
        elif r < policy_recovery:
            if gated:
                raise GatePolicyError(
                    f"recovery_min {r:g} would loosen {name}'s gate (policy recovery floor "
                    f"{policy_recovery:g}); a submitter may only tighten a gate (a higher floor)"
                )
            origin["recovery_min"] = (
                f"{SUITE_POLICY} (the submitter's looser {r:g} is ignored: informational gate)"
            )
        else:
            recovery = r
            origin["recovery_min"] = SUBMITTER
    check_run_options(options)
    return ResolvedGate(
        suite_kind=d.suite_kind,
        metric=metric,
        gate=gate,
        kind=d.kind,
        margin=margin,
        threshold=threshold,
        alpha=alpha,
        higher_is_better=d.higher_is_better,
        gated=gated,
        baseline_floor=None if floor is None else float(floor),
        slice_min_items=slice_min,
        policy_margin=policy_margin,
        policy_alpha=policy_alpha,
        origin=origin,
        recovery_min=recovery,
        policy_recovery_min=policy_recovery,
    )
