"""How every view shows one gate and the reasons of a verdict (CLI table, Markdown, JUnit, the
dashboard's gates table), so they agree.

Contract: pure; reads one suite entry of the JSON report. A **threshold gate** (drift's mean
KLD) has no baseline value and no Δ: it shows the metric, the threshold and the CI of the
metric itself (``details.ci_metric``), never "baseline = threshold" and "Δ = value − threshold"
(GateOutcome's internal convention). A non-inferiority gate shows baseline, candidate, Δ and the
CI of Δ against the margin. Reports written before ``reasons`` existed give no reasons.
"""

from __future__ import annotations

from typing import Any

__all__ = ["gate_view", "is_informational", "is_threshold", "reason_lines", "reasons_of"]


def is_threshold(suite: dict[str, Any]) -> bool:
    """A threshold gate (the metric against a fixed value, not against the baseline)."""
    d = suite.get("details") or {}
    return (d.get("gate") or {}).get("gate") == "threshold" or "threshold" in d


def is_informational(suite: dict[str, Any]) -> bool:
    """Reported but not gated (speed with its gate off): it never changes a verdict."""
    return not suite.get("gated", True)


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or isinstance(x, bool):
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def interval(ci: Any) -> str:
    """An interval as text: ``[lo, hi]``; a one-sided one (a bound is None: a sampled gate's
    exact one-sided bound) as ``(-∞, hi]`` or ``[lo, +∞)``, never ``[—, 0.015]``; ``—`` when
    there is none."""
    lo, hi = (list(ci) + [None, None])[:2] if isinstance(ci, (list, tuple)) else (None, None)
    if lo is None and hi is None:
        return "—"
    if lo is None:
        return f"(-∞, {_fmt(hi)}]"
    if hi is None:
        return f"[{_fmt(lo)}, +∞)"
    return f"[{_fmt(lo)}, {_fmt(hi)}]"


def gate_view(suite: dict[str, Any]) -> dict[str, Any]:
    """The numbers a table shows for one gate, as strings and raw values.

    Keys: ``type`` (``threshold`` or ``non-inferiority``), ``baseline``, ``candidate``,
    ``delta`` (``—`` for a threshold gate), ``ci`` (of Δ, or of the metric for a threshold
    gate), ``ci_of`` (``"Δ"`` or the metric), ``limit`` (``margin 0.05`` or ``threshold < 0.05``),
    ``p`` (the non-inferiority p-value), ``raw`` (floats: ``ci``, ``value``, ``limit``).
    """
    d = suite.get("details") or {}
    hib = d.get("higher_is_better", (d.get("gate") or {}).get("higher_is_better", True))
    if is_threshold(suite):
        thr = d.get("threshold", (d.get("gate") or {}).get("threshold"))
        ci = d.get("ci_metric") or [None, None]
        sign = ">" if hib else "<"
        return {
            "type": "threshold",
            "baseline": "—",
            "candidate": _fmt(suite.get("candidate")),
            "delta": "—",
            "ci": interval(ci),
            "ci_of": suite.get("metric") or "value",
            "limit": "—" if thr is None else f"threshold {sign} {thr:g}",
            "p": _fmt(suite.get("p_value"), 4),
            "raw": {"ci": list(ci), "value": suite.get("candidate"), "limit": thr},
        }
    ci = suite.get("ci") or [None, None]
    margin = suite.get("margin")
    return {
        "type": "non-inferiority",
        "baseline": _fmt(suite.get("baseline")),
        "candidate": _fmt(suite.get("candidate")),
        "delta": _fmt(suite.get("delta")),
        "ci": interval(ci),
        "ci_of": "Δ",
        "limit": "—" if margin is None else f"margin {margin:g}",
        "p": _fmt(suite.get("p_value"), 4),
        "raw": {"ci": list(ci), "value": suite.get("delta"), "limit": margin},
    }


def reasons_of(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``reasons`` of a report entry (run, candidate or suite); [] for older reports."""
    out = entry.get("reasons")
    return [r for r in out if isinstance(r, dict)] if isinstance(out, list) else []


def reason_lines(entry: dict[str, Any], *, with_suite: bool = True) -> list[str]:
    """One plain line per reason: ``suite · code: message``."""
    lines = []
    for r in reasons_of(entry):
        where = f"{r.get('suite')} · " if with_suite and r.get("suite") else ""
        lines.append(f"{where}{r.get('code')}: {r.get('message')}")
    return lines
