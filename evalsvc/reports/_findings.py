"""Per-kind findings for the Markdown report: where the candidate differs, and by how much.

Contract: pure; reads one suite entry of the JSON report (``details`` as the suite kinds and
gates write them) and returns Markdown lines. Unknown kinds and missing keys give fewer lines,
never an error: a report of a partly failed run must still render.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _pct(x: Any) -> str:
    return "—" if not isinstance(x, (int, float)) else f"{100 * x:.0f}%"


def _num(x: Any, digits: int = 3) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "—"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _flips(d: dict[str, Any]) -> list[str]:
    """From the paired gate's counts (regression = baseline correct, candidate wrong)."""
    counts = d.get("counts")
    if not isinstance(counts, dict) or "regressions" not in counts:
        return []
    worse, better = counts.get("regressions") or 0, counts.get("improvements") or 0
    agree = (counts.get("both_correct") or 0) + (counts.get("both_wrong") or 0)
    total = agree + worse + better
    line = f"Flips: {worse} correct → incorrect, {better} incorrect → correct"
    if total:
        line += f"; outcomes agree on {agree} of {total} items ({_pct(agree / total)})"
    return [line + ".", ""]


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


def _needle(d: dict[str, Any]) -> list[str]:
    heat = d.get("heatmap") or {}
    base, cand = heat.get("baseline") or [], heat.get("candidate") or []
    if not base:
        return []
    cells_c = {(c["context_length"], c["depth"]): c for c in cand}
    depths = sorted({c["depth"] for c in base})
    lengths = sorted({c["context_length"] for c in base})
    cells_b = {(c["context_length"], c["depth"]): c for c in base}
    lines = [
        "Accuracy by context length × needle depth (baseline / candidate):",
        "",
        "| tokens | " + " | ".join(f"depth {x:g}" for x in depths) + " |",
        "|---|" + "---|" * len(depths),
    ]
    for n in lengths:
        row = []
        for x in depths:
            b, c = cells_b.get((n, x)), cells_c.get((n, x))
            row.append(
                f"{_pct(b['accuracy']) if b else '—'} / {_pct(c['accuracy']) if c else '—'}"
            )
        lines.append(f"| {n} | " + " | ".join(row) + " |")
    return [*lines, ""]


def _reasoning(d: dict[str, Any]) -> list[str]:
    rows = d.get("by_task") or []
    if not rows:
        return []
    lines = [
        "| family | level | n | baseline | candidate | correct → incorrect | incorrect → correct |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.get('family')} | {r.get('level')} | {r.get('n')} | {_pct(r.get('baseline'))} | "
            f"{_pct(r.get('candidate'))} | {r.get('correct_to_incorrect', 0)} | "
            f"{r.get('incorrect_to_correct', 0)} |"
        )
    return [*lines, ""]


def _drift(d: dict[str, Any]) -> list[str]:
    kld = d.get("kld") or {}
    if not kld:
        return []
    dp = d.get("delta_p") or {}
    ppl = d.get("perplexity") or {}
    return [
        f"KLD(baseline ‖ candidate) over {d.get('positions')} positions of {d.get('passages')} "
        f"passages (top-{d.get('top_k')}, a lower bound; lumped mass "
        f"{_num(d.get('other_mass_mean'))}): mean {_num(kld.get('mean'), 4)}, median "
        f"{_num(kld.get('median'), 4)}, p99 {_num(kld.get('p99'), 4)}, p99.9 "
        f"{_num(kld.get('p99.9'), 4)}, max {_num(kld.get('max'), 4)} nats. Same top token: "
        f"{_pct(d.get('same_top_p'))}. Δp mean {_num(dp.get('mean'), 4)}, RMS "
        f"{_num(dp.get('rms'), 4)}. Perplexity {_num(ppl.get('baseline'), 2)} → "
        f"{_num(ppl.get('candidate'), 2)} (×{_num(ppl.get('ratio'), 3)}).",
        "",
    ]


def _determinism(d: dict[str, Any]) -> list[str]:
    sides: dict[str, dict[str, Any]] = {
        s: d[s] for s in ("baseline", "candidate") if isinstance(d.get(s), dict)
    }
    if not sides:
        return []
    conds: list[str] = []
    for side in sides.values():
        for c in side.get("conditions") or {}:
            if c not in conds:
                conds.append(c)
    # Concurrency levels in numeric order (c2, c8, c32), then the other conditions.
    conds.sort(key=lambda c: (0, int(c[1:]), c) if c[1:].isdigit() else (1, 0, c))
    lines = [
        "Against each prompt's batch-1 output, under the same traffic (baseline / candidate); "
        "the gate tests the unstable answers (differing from the prompt's modal answer):",
        "",
        "| condition | identical | unstable | distinct outputs / prompt | "
        "first divergent token (median) | max Δ logprob | tie / confident flips |",
        "|---|---|---|---|---|---|---|",
    ]

    def pair(cond: str | None, key: str, fmt: Callable[[Any], str]) -> str:
        vals = []
        for side in ("baseline", "candidate"):
            s = sides.get(side) or {}
            m = (s.get("conditions") or {}).get(cond) if cond else s.get("overall")
            vals.append(fmt((m or {}).get(key)))
        return " / ".join(vals)

    def flips(cond: str | None) -> str:
        out = []
        for side in ("baseline", "candidate"):
            s = sides.get(side) or {}
            m = ((s.get("conditions") or {}).get(cond) if cond else s.get("overall")) or {}
            out.append(f"{m.get('tie_flips', '—')}·{m.get('confident_flips', '—')}")
        return " / ".join(out)

    for cond in [*conds, None]:
        label = cond or "**overall**"
        lines.append(
            f"| {label} | {pair(cond, 'identical_rate', _pct)} | "
            f"{pair(cond, 'unstable_rate', _pct)} | "
            f"{pair(cond, 'distinct_outputs_per_prompt', lambda x: _num(x, 2))} | "
            f"{pair(cond, 'first_divergence_median', lambda x: _num(x, 0))} | "
            f"{pair(cond, 'max_logprob_delta', _num)} | {flips(cond)} |"
        )
    lines.append("")
    ret = d.get("retention")
    if ret is not None:
        stable = d.get("stable_rate") or {}
        lo, hi = (d.get("retention_ci") or [None, None])[:2]
        lines += [
            f"Stable answers kept: {_pct(stable.get('candidate'))} of the candidate's against "
            f"{_pct(stable.get('baseline'))} of the baseline's, a retention of {_num(ret)} "
            f"[{_num(lo)}, {_num(hi)}] (the gate needs more than 1 − margin).",
            "",
        ]
    stages = d.get("stages")
    if isinstance(stages, dict):
        lines += [
            f"Staged: looks after {', '.join(str(x) for x in stages.get('stages') or [])} probes "
            f"(cap {stages.get('cap')}, each at α/{stages.get('looks')}); "
            f"{stages.get('reason')}.",
            "",
        ]
    return lines


def _speed(d: dict[str, Any]) -> list[str]:
    levels = d.get("levels") or []
    lines = [f"**{d['summary']}**", ""] if d.get("summary") else []
    if levels:
        lines += [
            "| c | TTFT p50 ms | TPOT p50 ms | latency p90 s | output tok/s (baseline / candidate) |",
            "|---|---|---|---|---|",
        ]
        for lv in levels:
            b, c = lv.get("baseline") or {}, lv.get("candidate") or {}

            def both(key: str, sub: str | None, digits: int, b: Any = b, c: Any = c) -> str:
                vb = (b.get(key) or {}).get(sub) if sub else b.get(key)
                vc = (c.get(key) or {}).get(sub) if sub else c.get(key)
                return f"{_num(vb, digits)} / {_num(vc, digits)}"

            lines.append(
                f"| {lv.get('concurrency')} | {both('ttft_ms', 'p50', 0)} | "
                f"{both('tpot_ms', 'p50', 1)} | {both('latency_s', 'p90', 2)} | "
                f"{both('output_tok_s', None, 1)} |"
            )
        lines.append("")
    return lines


_KINDS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "needle": _needle,
    "reasoning": _reasoning,
    "drift": _drift,
    "determinism": _determinism,
    "speed": _speed,
}


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


def _guard(d: dict[str, Any]) -> list[str]:
    g = d.get("baseline_guard")
    if not isinstance(g, dict) or g.get("informative", True):
        return []
    return [f"**Uninformative baseline.** {g.get('reason')}.", ""]


def findings(suite: dict[str, Any]) -> list[str]:
    """Markdown lines for one suite entry of the report (empty when there is nothing to add)."""
    d = suite.get("details") or {}
    render = _KINDS.get(str(suite.get("kind")))
    body: list[str] = render(d) if render else []
    if suite.get("kind") != "determinism":  # there, "flips" are identical → different
        body = _flips(d) + body
    if d.get("underpowered"):
        body.append(f"Note: {d['underpowered']}.")
        body.append("")
    missing = d.get("missing_logprobs")
    if isinstance(missing, dict):
        body.append(
            f"**Finding: responses without the requested logprobs** (baseline "
            f"{missing.get('baseline', 0)}, candidate {missing.get('candidate', 0)}): "
            f"{missing.get('note', '')}."
        )
        body.append("")
    slice_lines = _slices(d)
    body = _gate_line(d) + _recovery(d) + _guard(d) + slice_lines + body
    said = bool(_guard(d)) or any(line.startswith("**Slice failed") for line in slice_lines)
    if d.get("reason") and not said:
        from evalsvc.reports._render import md_text  # egress: a reason may quote an endpoint

        body.append(f"Note: {md_text(d['reason'])}.")
        body.append("")
    return body


def headline(suite: dict[str, Any]) -> str | None:
    """One line per suite for the terminal, beside the verdict table (None: nothing to add)."""
    d = suite.get("details") or {}
    line = _headline(suite, d)
    recovery = recovery_text(d)
    if recovery is not None:
        return f"{line}; {recovery}" if line else recovery
    return line


def _headline(suite: dict[str, Any], d: dict[str, Any]) -> str | None:
    kind = suite.get("kind")
    if kind == "speed" and d.get("summary"):
        return str(d["summary"])
    if kind == "drift" and isinstance(d.get("kld"), dict):
        return (
            f"mean KLD {_num(d['kld'].get('mean'), 4)} nats, p99 {_num(d['kld'].get('p99'), 3)}, "
            f"same top token {_pct(d.get('same_top_p'))}"
        )
    if kind == "determinism":
        overall = [((d.get(side) or {}).get("overall") or {}) for side in ("baseline", "candidate")]
        rates = [_pct(o.get("identical_rate")) for o in overall]
        unstable = [_pct(o.get("unstable_rate")) for o in overall]
        return (
            f"unstable under load: baseline {unstable[0]}, candidate {unstable[1]} "
            f"(identical to batch-1 output: {rates[0]} / {rates[1]})"
        )
    counts = d.get("counts")
    if isinstance(counts, dict) and "regressions" in counts:
        return (
            f"{counts.get('regressions', 0)} correct → incorrect, "
            f"{counts.get('improvements', 0)} incorrect → correct"
        )
    return None
