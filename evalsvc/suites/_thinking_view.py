"""How thinking traces read in every view: one finding and one headline phrase from a suite
entry's ``details["thinking"]`` (``evalsvc.suites._thinking.paired_summary``).

Contract: pure; missing keys give less text, never an error. Declared here, beside the suite
contract, for every kind that scores answers (``Suite.scores_answers``); the reports and the
dashboard render it for any entry that carries ``details["thinking"]`` and know no kind.
"""

from __future__ import annotations

from typing import Any

from evalsvc.suites._present import Finding, Severity


def _pct(x: Any) -> str:
    return "—" if not isinstance(x, int | float) else f"{100 * x:.0f}%"


def _ci(ci: Any, digits: int = 2) -> str:
    if not isinstance(ci, list | tuple) or len(ci) != 2:
        return "[—]"
    return "[" + ", ".join("—" if x is None else f"{x:.{digits}f}" for x in ci) + "]"


def _has_signal(t: dict[str, Any]) -> bool:
    """Whether there is anything to say: thinking on either side, a cut, a loop, a leak, a
    bound. A plain model that answers within budget gets no finding."""
    length = t.get("length") or {}
    thinks = (length.get("baseline_thinking_items") or 0) + (length.get("candidate_thinking_items") or 0)
    events = sum(
        (t.get(k) or {}).get(side + "_count") or 0
        for k in ("truncation", "loops") for side in ("baseline", "candidate")
    )
    leaks = (t.get("leaks") or {}).get("baseline", 0) + (t.get("leaks") or {}).get("candidate", 0)
    return bool(thinks or events or leaks or t.get("bounds"))


def thinking_headline(details: dict[str, Any]) -> str | None:
    """E.g. ``thinking ×2.01 [1.93, 2.09]; cut at budget 0% → 30%; leaked markup 20``."""
    t = details.get("thinking")
    if not isinstance(t, dict) or not _has_signal(t):
        return None
    parts: list[str] = []
    length = t.get("length") or {}
    if isinstance(length.get("ratio"), int | float):
        parts.append(f"thinking ×{length['ratio']:.2f} {_ci(length.get('ci'))}")
    tr = t.get("truncation") or {}
    if tr.get("baseline_count") or tr.get("candidate_count"):
        parts.append(f"cut at budget {_pct(tr.get('baseline'))} → {_pct(tr.get('candidate'))}")
    lp = t.get("loops") or {}
    if lp.get("baseline_count") or lp.get("candidate_count"):
        parts.append(f"loops {_pct(lp.get('baseline'))} → {_pct(lp.get('candidate'))}")
    leaks = (t.get("leaks") or {}).get("candidate")
    if leaks:
        parts.append(f"leaked markup in {leaks} answers")
    aps = details.get("answers_per_second")
    if isinstance(aps, dict) and isinstance(aps.get("ratio"), int | float):
        per_token = (aps.get("tokens_per_s") or {}).get("ratio")
        parts.append(
            f"answers/s ×{aps['ratio']:.2f}"
            + (f" (tokens/s ×{per_token:.2f})" if isinstance(per_token, int | float) else "")
        )
    return "; ".join(parts) or None


def thinking_finding(details: dict[str, Any]) -> Finding | None:
    """The "thinking traces" finding: length ratio with its interval, truncation and loop rates
    with their paired Δ, leaked markup, the bounds; ``fail`` when a bound failed, ``warn`` when
    the candidate leaks markup or loops or is cut more often than the baseline."""
    t = details.get("thinking")
    if not isinstance(t, dict) or not _has_signal(t):
        return None
    length = t.get("length") or {}
    thought = thinks(details)
    # A model that never thinks: its answers' own cuts and loops, not "thinking traces".
    lines = [f"**Thinking traces** ({t.get('n', 0)} pairs scored on the answer alone):"
             if thought else f"**Answers cut, looping or leaking** ({t.get('n', 0)} pairs):", ""]
    if thought and isinstance(length.get("ratio"), int | float):
        src = ", ".join(length.get("tokens_source") or []) or "—"
        lines.append(
            f"- thinking tokens per answer {length.get('baseline_mean', 0):.0f} → "
            f"{length.get('candidate_mean', 0):.0f}: inflation ×{length['ratio']:.2f} "
            f"{_ci(length.get('ci'))} (candidate ÷ baseline, paired by item; "
            f"{length.get('method', '')}; tokens: {src})"
        )
    elif thought and length.get("note"):
        lines.append(f"- thinking length: no ratio ({length['note']})")
    for key, what in (("truncation", "cut at the token budget"), ("loops", "looping (seq-rep-4 ≥ 0.5 in the tail)")):
        row = t.get(key) or {}
        if "delta" in row:
            lines.append(
                f"- {what}: {_pct(row.get('baseline'))} → {_pct(row.get('candidate'))} "
                f"(Δ {row['delta']:+.2f} {_ci(row.get('ci'))})"
            )
    leaks = t.get("leaks") or {}
    if leaks.get("baseline") or leaks.get("candidate"):
        ex = ", ".join(f"`{x}`" for x in leaks.get("examples") or [])
        lines.append(
            f"- leaked channel markup in the answer: baseline {leaks.get('baseline', 0)}, "
            f"candidate {leaks.get('candidate', 0)}" + (f" ({ex})" if ex else "")
        )
    aps = details.get("answers_per_second")
    if isinstance(aps, dict) and isinstance(aps.get("ratio"), int | float):
        tps, tpa = aps.get("tokens_per_s") or {}, aps.get("tokens_per_answer") or {}
        lines.append(
            f"- answers per second {aps.get('baseline', 0):.3g} → {aps.get('candidate', 0):.3g} "
            f"(×{aps['ratio']:.2f}): {aps.get('what') or 'tokens/s'} of {aps.get('speed_suite')} "
            f"×{tps.get('ratio', 0):.2f} ÷ tokens per answer {tpa.get('baseline', 0):.0f} → "
            f"{tpa.get('candidate', 0):.0f} (×{tpa.get('ratio', 0):.2f})"
        )
    bounds = t.get("bounds") or []
    for b in bounds:
        if b.get("verdict") == "fail":
            lines.append(f"- **bound {b.get('bound')} exceeded**: {b.get('finding')}")
        else:
            p = b.get("p_adjusted")
            lines.append(
                f"- bound {b.get('bound')} {b.get('value')}: {b.get('verdict')}"
                + (f" (adjusted p = {p:.2g})" if isinstance(p, int | float) else "")
            )
    lines.append("")
    tr, lp = t.get("truncation") or {}, t.get("loops") or {}
    worse = (
        bool(leaks.get("candidate"))
        or (tr.get("candidate_count") or 0) > (tr.get("baseline_count") or 0)
        or (lp.get("candidate_count") or 0) > (lp.get("baseline_count") or 0)
    )
    severity: Severity = (
        "fail" if any(b.get("verdict") == "fail" for b in bounds) else "warn" if worse else "info"
    )
    return Finding(title="thinking traces" if thought else "answers cut or looping",
                   markdown=lines, severity=severity, data=dict(t))


def thinks(details: dict[str, Any]) -> bool:
    """Whether either side of a suite entry gave thinking traces (the dashboard's section is
    "Thinking traces" then, else only the answers' own problems)."""
    t = details.get("thinking")
    length = (t.get("length") or {}) if isinstance(t, dict) else {}
    return bool((length.get("baseline_thinking_items") or 0)
                + (length.get("candidate_thinking_items") or 0))


def thinking_charts(details: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's charts of a suite entry's thinking (``Chart.to_dict()``): tokens per
    answer (thinking and in all) and the rates of answers cut at the budget, looping and
    leaking markup, baseline beside candidate; none when there is nothing to say. A model that
    never thinks gets the rates only (no thinking-token bars of zeros: that panel, larger than
    the findings, read as if the model had thought)."""
    from evalsvc.suites._present import Chart

    t = details.get("thinking")
    if not isinstance(t, dict) or not _has_signal(t):
        return []
    length, tpa = t.get("length") or {}, t.get("tokens_per_answer") or {}
    n = t.get("n") or 0

    def side(name: str) -> list[float | None]:
        leaks = (t.get("leaks") or {}).get(name)
        return [
            None if (t.get(k) or {}).get(name) is None else round(100 * float(t[k][name]), 1)
            for k in ("truncation", "loops")
        ] + [None if not n or leaks is None else round(100 * leaks / n, 1)]

    tokens = [
        {"name": s, "color": s, "data": [length.get(f"{s}_mean"), tpa.get(s)]}
        for s in ("baseline", "candidate")
    ]
    rates = Chart("thinking-rates", "bar", "Answers cut at the budget, looping, leaking markup (%)",
                  ["cut at budget", "looping", "leaked markup"],
                  [{"name": s, "color": s, "data": side(s)} for s in ("baseline", "candidate")],
                  y_name="%").to_dict()
    if not thinks(details):
        return [rates]
    return [
        Chart("thinking-tokens", "bar", "Tokens per answer (mean)", ["thinking", "thinking + answer"],
              tokens, y_name="tokens").to_dict(),
        rates,
    ]
