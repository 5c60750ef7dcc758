"""Findings of one suite entry of the report: the gate's own (who set the margin, an
uninformative baseline, failed slices, power, missing logprobs) around the kind's.

Contract: pure; reads one suite entry of the JSON report (``details`` as the suite kinds and
gates write them) and returns ``Finding`` objects (``suite_findings``), Markdown lines
(``findings``) or a one-line headline. What a kind says comes from the kind itself
(``Suite.findings`` / ``Suite.headline``, looked up by the entry's ``kind`` in the registry);
this module knows no kind by name. Unknown kinds and missing keys give fewer findings, never an
error: a report of a partly failed run must still render.
"""

from __future__ import annotations

from typing import Any

from evalsvc.suites import (
    Finding,
    Suite,
    sampling_finding,
    sampling_headline,
    suite_kinds,
    thinking_finding,
    thinking_headline,
)

from ._text import md_text  # egress: a reason may quote an endpoint


def _pct(x: Any) -> str:
    return "—" if not isinstance(x, (int, float)) else f"{100 * x:.0f}%"


def _num(x: Any, digits: int = 3) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "—"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def kind_class(kind: Any) -> type[Suite]:
    """The registered class of ``kind``; the base class (generic findings) when it is unknown,
    e.g. a report of a plugin kind that is no longer installed."""
    return suite_kinds().get(str(kind), Suite)


def _slices(d: dict[str, Any]) -> list[str]:
    """Slices that failed their own gate (Holm across slices), with the flipped tokens."""
    sl = d.get("slices")
    if not isinstance(sl, dict):
        return []
    failed = [s for s in sl.get("slices") or [] if s.get("verdict") == "fail"]
    lines: list[str] = []
    for s in failed:
        lines.append(f"**Slice failed: {s.get('finding')}**")
        lines.append("")
        for ex in s.get("flipped_tokens") or []:
            lines.append(
                f"- `{ex.get('item')}`: first divergent token baseline {ex.get('baseline')!r}, "
                f"candidate {ex.get('candidate')!r}"
            )
        if s.get("flipped_tokens"):
            lines.append("")
    if sl.get("tested") is not None:
        lines.append(
            f"Slices: {sl.get('tested')} gated (≥ {sl.get('min_items')} items each), "
            f"{len(failed)} failed after Holm's correction across slices."
        )
        lines.append("")
    return lines


def _gate_line(d: dict[str, Any]) -> list[str]:
    """Who set the margin and α this gate used (``evalsvc.gates.ResolvedGate``)."""
    gate = d.get("gate")
    if not isinstance(gate, dict):
        return []
    origin = gate.get("origin") or {}
    policy = gate.get("policy") or {}
    if gate.get("recovery_min") is not None:
        r = f"recovery floor {_num(gate['recovery_min'], 3)} ({origin.get('recovery_min', '—')}"
        if gate.get("recovery_min") != policy.get("recovery_min"):
            r += f"; policy {_num(policy.get('recovery_min'), 3)}"
        parts = [r + ")"]
    elif gate.get("threshold") is not None:
        side = "above" if gate.get("higher_is_better") else "below"
        parts = [f"{gate.get('metric')} {side} {_num(gate['threshold'], 4)} ({origin.get('threshold', '—')})"]
    else:
        m = f"margin {_num(gate.get('margin'), 3)} ({origin.get('margin', '—')}"
        if gate.get("margin") != policy.get("margin") and policy.get("margin") is not None:
            m += f"; policy {_num(policy.get('margin'), 3)}"
        parts = [m + ")"]
    a = f"α {_num(gate.get('alpha'), 3)} ({origin.get('alpha', '—')}"
    if gate.get("alpha") != policy.get("alpha") and policy.get("alpha") is not None:
        a += f"; policy {_num(policy.get('alpha'), 3)}"
    parts.append(a + ")")
    return ["Gate: " + ", ".join(parts) + ".", ""]


def recovery_text(d: dict[str, Any]) -> str | None:
    """``recovery 0.992 [0.972, 1.011] (90% CI)`` from ``details["recovery"]``; ``None`` if absent."""
    r = d.get("recovery")
    if not isinstance(r, dict) or r.get("estimate") is None:
        return None
    lo, hi = (r.get("ci") or [None, None])[:2]
    level = r.get("ci_level")
    interval = (
        f"[{_num(lo, 3)}, {_num(hi, 3)}]" if lo is not None and hi is not None else "[unbounded]"
    )
    text = f"recovery {_num(r['estimate'], 3)} {interval}"
    if isinstance(level, (int, float)):
        text += f" ({level:.0%} CI)"
    floor = d.get("recovery_min")
    if floor is not None:
        text += f", floor {_num(floor, 3)}"
    return text


def _recovery(d: dict[str, Any]) -> list[str]:
    text = recovery_text(d)
    if text is None:
        return []
    r = d["recovery"]
    how = (
        f"{r.get('method', '')}; Fieller {_interval((r.get('fieller') or {}).get('ci'))}, "
        f"bootstrap {_interval((r.get('bootstrap') or {}).get('ci'))}"
    )
    return [f"Recovery (candidate ÷ baseline): {text[len('recovery '):]} — {how}.", ""]


def _interval(ci: Any) -> str:
    if not isinstance(ci, list) or len(ci) != 2 or None in ci:
        return "[unbounded]"
    return f"[{_num(ci[0], 3)}, {_num(ci[1], 3)}]"


def _calibration(d: dict[str, Any]) -> list[str]:
    """The difficulty a calibration pilot chose (``details.calibration``, evalsvc.runner._pilot)."""
    c = d.get("calibration")
    if not isinstance(c, dict) or "pilot" not in c:
        return []
    band = c.get("band") or [None, None]
    tried = ", ".join(
        f"{p.get('label')} {_pct(p.get('score'))} (n {p.get('n')})" for p in c.get("pilot") or []
    )
    lines = [
        f"Calibrated difficulty: ran at {', '.join(str(x) for x in c.get('chosen') or []) or '—'}, "
        f"chosen by a pilot of {c.get('baseline_requests')} baseline requests for a baseline "
        f"score within {_pct(band[0])}–{_pct(band[1])} (pilot samples are stored as "
        f"`{c.get('pilot_suite')}` and never gated). Pilot: {tried}.",
        "",
    ]
    for g in c.get("groups") or []:
        if g.get("note"):
            lines += [f"**Not in band.** {g['note']}.", ""]
    return lines


def _guard(d: dict[str, Any]) -> list[str]:
    g = d.get("baseline_guard")
    if not isinstance(g, dict) or g.get("informative", True):
        return []
    return [f"**Uninformative baseline.** {g.get('reason')}.", ""]


def _kind_findings(suite: dict[str, Any]) -> list[Finding]:
    try:
        return list(kind_class(suite.get("kind")).findings(suite))
    except Exception as exc:  # noqa: BLE001 - a plugin's bug must not lose the report
        return [Finding(title="findings unavailable", severity="warn",
                        markdown=[f"Note: the kind's findings failed ({type(exc).__name__}).", ""])]


def suite_findings(suite: dict[str, Any]) -> list[Finding]:
    """Every finding of one suite entry, in reading order: how it was gated, an uninformative
    baseline, failed slices, then the kind's own, then notes on power, logprobs and reasons."""
    d = suite.get("details") or {}
    out: list[Finding] = []
    gate = _gate_line(d)
    if gate:
        out.append(Finding(title="gate", markdown=gate, data=dict(d.get("gate") or {})))
    calibration = _calibration(d)
    if calibration:
        out.append(Finding(title="calibration", markdown=calibration,
                           severity="info" if d["calibration"].get("all_in_band") else "warn",
                           data=dict(d["calibration"])))
    recovery = _recovery(d)
    if recovery:
        out.append(Finding(title="recovery", markdown=recovery,
                           data=dict(d.get("recovery") or {})))
    guard = _guard(d)
    if guard:
        out.append(Finding(title="uninformative baseline", markdown=guard, severity="warn",
                           data=dict(d.get("baseline_guard") or {})))
    slice_lines = _slices(d)
    if slice_lines:
        failed = any(line.startswith("**Slice failed") for line in slice_lines)
        out.append(Finding(title="slices", markdown=slice_lines,
                           severity="fail" if failed else "info",
                           data=dict(d.get("slices") or {})))
    out += _kind_findings(suite)
    sampled = sampling_finding(d)  # any kind that scores answers (details["sampling"])
    if sampled is not None:
        out.append(sampled)
    thinking = thinking_finding(d)  # any kind that scores answers (details["thinking"])
    if thinking is not None:
        out.append(thinking)
    if d.get("underpowered"):
        out.append(Finding(title="underpowered", markdown=[f"Note: {d['underpowered']}.", ""],
                           severity="warn"))
    missing = d.get("missing_logprobs")
    if isinstance(missing, dict):
        out.append(Finding(
            title="responses without the requested logprobs",
            markdown=[
                f"**Finding: responses without the requested logprobs** (baseline "
                f"{missing.get('baseline', 0)}, candidate {missing.get('candidate', 0)}): "
                f"{missing.get('note', '')}.",
                "",
            ],
            severity="warn",
            data=dict(missing),
        ))
    said = bool(guard) or any(line.startswith("**Slice failed") for line in slice_lines)
    if d.get("reason") and not said:
        out.append(Finding(title="reason", markdown=[f"Note: {md_text(d['reason'])}.", ""],
                           severity="warn"))
    return out


def findings(suite: dict[str, Any]) -> list[str]:
    """Markdown lines for one suite entry of the report (empty when there is nothing to add)."""
    return [line for f in suite_findings(suite) for line in f.markdown]


def headline(suite: dict[str, Any]) -> str | None:
    """One line per suite for the terminal, beside the verdict table (None: nothing to add)."""
    d = suite.get("details") or {}
    try:
        line = kind_class(suite.get("kind")).headline(suite)
    except Exception:  # noqa: BLE001 - a plugin's bug must not lose the verdict table
        line = None
    for extra in (recovery_text(d), sampling_headline(d), thinking_headline(d)):
        if extra is not None:
            line = f"{line}; {extra}" if line else extra
    return line
