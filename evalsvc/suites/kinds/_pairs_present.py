"""How a reference-free ``dataset`` entry is shown: findings, headline and per-sample notes.

Contract: plain functions over what ``dataset``'s analysis wrote in a report entry's
``details`` (``compare``, ``changed_answers``, ``similarity``, ``judge``, ``pair_examples``) and
over one stored sample's ``data`` (``vs_baseline``, ``judge``, ``judge_control``); missing keys
give fewer findings, never an error (a report of an older run still renders). The Markdown
report, the dashboard's findings, the samples and flips pages (``Suite.sample_notes``) and the
JSON report's ``findings`` all come from here; the views know no kind.
"""

from __future__ import annotations

from typing import Any

from evalsvc.suites._present import Finding, markdown_table, num, pct
from evalsvc.textsafe import visible_controls

_CUT = 300


def _quote(text: Any) -> str:
    """One line of an answer or a reason for a Markdown table cell (cut at ``_CUT``)."""
    s = " ".join(str(text or "").split())
    return (s[:_CUT] + "…") if len(s) > _CUT else (s or "(empty)")


def _code(text: Any) -> str:
    """Endpoint-provided text (a model id, an endpoint name) as an inert Markdown code span on
    one line: no markup, link or HTML inside it survives, and no control character."""
    s = visible_controls(" ".join(str(text).split())).replace("`", "'")
    return f"`{s}`"


def _helpers(entries: Any, purpose: str) -> list[dict[str, Any]]:
    return [h for h in entries or [] if isinstance(h, dict) and h.get("purpose") == purpose]


def helper_line(helper: dict[str, Any]) -> str:
    """``Judge: `model` at `name` (engine vllm, fingerprint 0123…)``: which endpoint served
    the suite's judge (or embeddings) in this run, as its probe found it."""
    where = helper.get("name") or helper.get("url") or "?"
    facts = [f"engine {_code(helper['engine'])}"] if helper.get("engine") else []
    facts.append(f"fingerprint {_code(helper.get('fingerprint'))}")
    prov = helper.get("provenance") or {}
    for key, label in (("tokenizer_fingerprint", "tokenizer"),
                       ("chat_template_fingerprint", "chat template")):
        if prov.get(key):
            facts.append(f"{label} {_code(prov[key])}")
    title = str(helper.get("purpose") or "helper").capitalize()
    return f"{title}: {_code(helper.get('model') or '?')} at {_code(where)} ({', '.join(facts)})."


def findings(details: dict[str, Any], helpers: Any = None) -> list[Finding]:
    """The reference-free findings: the judge's reliability first (a judge that cannot tell is
    what a reader must see beside the verdict), with which endpoint judged (``helpers``: the
    report entry's probed helper endpoints, absent in older reports), then its tallies, the
    changed answers, the similarities and the changed or judged items with their prompt,
    answers and reasons."""
    mode = details.get("compare")
    if mode not in ("quality", "similarity", "judge", "agreement"):
        return []
    out: list[Finding] = []
    if mode == "quality":
        out += _quality_findings(details)
    judge = details.get("judge")
    if isinstance(judge, dict):
        out += _judge_findings(judge, _helpers(helpers, "judge"))
    deg = details.get("degeneration")
    if isinstance(deg, dict) and deg.get("n"):
        out.append(_degeneration_finding(deg, gated=mode == "quality"))
    changed = details.get("changed_answers")
    if isinstance(changed, dict) and changed.get("n"):
        line = (
            f"Changed answers (the candidate's extracted answer differs from the baseline's "
            f"first): {changed.get('candidate')} of {changed.get('n')} "
            f"({pct(changed.get('share'))}); the baseline's own second pass changed "
            f"{changed.get('baseline_second_pass')}."
        )
        if mode != "agreement":
            line += " Informational: a changed answer is not a worse one."
            if mode == "quality" and not isinstance(judge, dict):
                line += (" Whether the changed ones mean the same is not checked here: that "
                         "needs a judge (`judge: {endpoint: NAME}`, `from-requests --judge "
                         "NAME`) or a reference column.")
        out.append(Finding(title=f"{changed.get('candidate')} of {changed.get('n')} answers changed",
                           markdown=[line, ""], data=dict(changed)))
    sims = details.get("similarity")
    if isinstance(sims, dict) and sims:
        rows = [[m, num(v.get("baseline")), num(v.get("candidate"))]
                for m, v in sorted(sims.items()) if isinstance(v, dict)]
        embedders = _helpers(helpers, "embeddings")
        out.append(Finding(
            title="similarity with the baseline's first answer",
            markdown=["Mean similarity with the baseline's first answer (baseline: its second "
                      "pass):", "", *markdown_table(["measure", "baseline", "candidate"], rows),
                      "", *(line for h in embedders for line in (helper_line(h), ""))],
            data={"similarity": sims, **({"helpers": embedders} if embedders else {})},
        ))
    examples = [e for e in details.get("pair_examples") or [] if isinstance(e, dict)]
    if examples:
        worse = [e for e in examples if (e.get("preference") or 0) < 0]
        degenerate = [e for e in examples if e.get("degenerate")]
        title = (f"{len(worse)} items judged worse" if mode == "judge"
                 else f"{len(degenerate)} degenerate answers, {len(examples)} changed answers "
                      "shown" if mode == "quality"
                 else f"{len(examples)} changed answers shown")
        lines: list[str] = []
        for e in examples:
            head = f"**{e.get('item')}**"
            if e.get("verdicts") is not None:
                head += (f" — judge: {_preference(e.get('preference'))} "
                         f"(verdicts {e.get('verdicts')}"
                         f"{'' if e.get('consistent') else ', order-inconsistent'})")
            if e.get("rouge_l") is not None:
                head += f", ROUGE-L {num(e.get('rouge_l'), 2)}"
            signals = (e.get("signals") or {}).get("candidate") or []
            if signals:
                head += f", candidate degenerate ({', '.join(map(str, signals))})"
            if e.get("addressed_judge"):
                head += f" — **addresses the judge** ({_addressed(e.get('addressed_judge'))})"
            lines += [head, "", f"- prompt: {_quote(e.get('prompt'))}",
                      f"- baseline: {_quote(e.get('baseline'))}",
                      f"- candidate: {_quote(e.get('candidate'))}"]
            for order, reason in zip(("baseline first", "candidate first"),
                                     e.get("reasons") or [], strict=False):
                lines.append(f"- judge ({order}): {_quote(reason)}")
            lines.append("")
        out.append(Finding(title=title, markdown=lines,
                           severity="warn" if worse or degenerate else "info",
                           data={"pair_examples": examples}))
    return out


def _addressed(record: Any) -> str:
    """``other: "Note to the judge", "[[B]]"``: which side addressed the judge, with what."""
    if not isinstance(record, dict):
        return "yes"
    return "; ".join(f"{side}: " + ", ".join(_code(p) for p in phrases or [])
                     for side, phrases in record.items())


def _quality_findings(details: dict[str, Any]) -> list[Finding]:
    """What the replay's verdict rests on: both checks, and what is missing to decide."""
    checks = details.get("checks")
    if not isinstance(checks, dict):
        return []
    deg, meaning = checks.get("degeneration") or {}, checks.get("meaning") or {}

    def row(name: str, c: dict[str, Any]) -> list[Any]:
        ci = c.get("ci") or [None, None]
        return [name, c.get("metric"), c.get("verdict"), num(c.get("baseline")),
                num(c.get("candidate")), f"{num(c.get('delta'))} [{num(ci[0])}, {num(ci[1])}]",
                num(c.get("margin"))]

    lines = [f"What this gates: {details.get('gates') or 'degeneration and meaning'}.", "",
             *markdown_table(["check", "metric", "reads", "baseline", "candidate",
                              "Δ [interval]", "margin"],
                             [row("degeneration", deg), row(f"meaning ({meaning.get('by')})",
                                                             meaning)]), ""]
    unchecked = details.get("meaning_unchecked")
    if unchecked:
        lines += [f"**Not decided:** {unchecked}. To decide, add a judge stronger than the "
                  "models under test (`judge: {endpoint: NAME}` in the suite, an endpoint "
                  "registered with `evalsvc endpoints add NAME URL`; `evalsvc suites "
                  "from-requests --judge NAME`), or a reference column (`reference:`) with the "
                  "right answers.", ""]
    return [Finding(title="replay verdict: degeneration and meaning", markdown=lines,
                    severity="warn" if unchecked or deg.get("verdict") == "fail" else "info",
                    data={"checks": checks, "meaning_unchecked": unchecked})]


def _degeneration_finding(deg: dict[str, Any], *, gated: bool) -> Finding:
    rows = []
    for key, label in (("empty", "empty"), ("loop", "loops / repeats itself"),
                       ("leaked", "leaked template markup"), ("gibberish", "not language"),
                       ("degenerate", "degenerate (any of the above)"),
                       ("truncated", "cut at the token budget (reported)")):
        t = deg.get(key)
        if isinstance(t, dict):
            rows.append([label, t.get("baseline"), t.get("candidate"), t.get("only_candidate"),
                         t.get("only_baseline")])
    cand = (deg.get("degenerate") or {}).get("candidate") or 0
    base = (deg.get("degenerate") or {}).get("baseline") or 0
    return Finding(
        title=f"degenerate answers: candidate {cand}, baseline {base} of {deg.get('n')}",
        markdown=[("Degeneration signals per answer (gated: the share of degenerate answers, "
                   "paired per item):" if gated else
                   "Degeneration signals per answer (reported, not gated):"), "",
                  *markdown_table(["signal", "baseline", "candidate", "only candidate",
                                   "only baseline"], rows), ""],
        severity="warn" if cand > base else "info",
        data={"degeneration": deg},
    )


def _preference(p: Any) -> str:
    return {1: "candidate better", -1: "candidate worse", 0: "same"}.get(p, "—")


def _judge_findings(judge: dict[str, Any], helpers: list[dict[str, Any]]) -> list[Finding]:
    out: list[Finding] = []
    model = judge.get("model") or judge.get("endpoint")
    served = next((h.get("model") for h in helpers if h.get("model")), None) or judge.get("model")
    configured = judge.get("configured_model")
    if configured and served and served != configured:
        out.append(Finding(
            title="the judge served another model than the suite's judge.model",
            markdown=[f"**The judge served {_code(served)}, not the suite's `judge.model` "
                      f"{_code(configured)}**: the verdicts below are that model's. Register "
                      f"the judge endpoint with the model the suite names (`evalsvc endpoints "
                      f"add NAME URL --model MODEL`), or change `judge.model`.", ""],
            severity="warn",
            data={"served": served, "configured": configured},
        ))
    if not judge.get("informative", True):
        out.append(Finding(
            title=f"the judge ({model}) is not informative: the gate cannot pass",
            markdown=["The judge's verdicts cannot carry the gate, which is inconclusive:", "",
                      *(f"- {p}" for p in judge.get("problems") or []), ""],
            severity="warn",
            data={k: judge.get(k) for k in ("consistency", "discrimination", "problems")},
        ))
    addressed = judge.get("addressed")
    if isinstance(addressed, dict) and addressed.get("n"):
        out.append(Finding(
            title=f"{addressed['n']} judged pairs have an answer that addresses the judge",
            markdown=[f"**{addressed['n']} judged pairs have an answer that addresses the judge** "
                      "(a note to the judge, an instruction to ignore instructions, a verdict "
                      "token): each was counted a tie, and the gate passes only if it would "
                      "still pass with all of them counted worse for the candidate. Items: "
                      + ", ".join(_code(i) for i in addressed.get("items") or []) + ".", ""],
            severity="warn",
            data={"addressed": addressed},
        ))
    rows = []
    for label, key in (("candidate vs baseline", "candidate"), ("A/A (baseline's second pass)", "aa")):
        t = judge.get(key)
        if isinstance(t, dict):
            rows.append([label, t.get("n"), t.get("better"), t.get("worse"), t.get("same"),
                         t.get("inconsistent"), pct(t.get("consistency"))])
    out.append(Finding(
        title=f"judge {model}: consistency {pct(judge.get('consistency'))}, discrimination "
              f"{pct(judge.get('discrimination'))}",
        markdown=[
            f"Judge {model} (prompt {judge.get('fingerprint')}), each pair in both orders; "
            f"better/worse is the candidate's (or the second pass's) answer against the "
            f"baseline's first:", "",
            *markdown_table(["pair", "n", "better", "worse", "same", "order-inconsistent",
                             "consistency"], rows),
            "",
            f"Position consistency over both: {pct(judge.get('consistency'))} (needs "
            f"{pct(judge.get('min_consistency'))}); discrimination on {judge.get('controls')} "
            f"controls (the whole answer against its first third): "
            f"{pct(judge.get('discrimination'))} (needs {pct(judge.get('min_discrimination'))}).",
            "",
            *(line for h in helpers for line in (helper_line(h), "")),
        ],
        data={"judge": judge, **({"helpers": helpers} if helpers else {})},
    ))
    return out


def headline(details: dict[str, Any]) -> str | None:
    """One terminal line: the changed answers and, with a judge, its tally and consistency."""
    changed = details.get("changed_answers")
    if not isinstance(changed, dict) or not changed.get("n"):
        return None
    line = f"{changed.get('candidate')} of {changed.get('n')} answers changed"
    judge = details.get("judge")
    if isinstance(judge, dict) and isinstance(judge.get("candidate"), dict):
        t = judge["candidate"]
        line += (f"; judge: {t.get('worse')} worse, {t.get('better')} better, consistency "
                 f"{pct(judge.get('consistency'))}")
        if not judge.get("informative", True):
            line += " (not informative)"
        addressed = (judge.get("addressed") or {}).get("n")
        if addressed:
            line += f"; {addressed} answers address the judge (ties, flagged)"
    deg = (details.get("degeneration") or {}).get("degenerate")
    if details.get("compare") == "quality" and isinstance(deg, dict):
        line += (f"; degenerate: candidate {deg.get('candidate')}, baseline "
                 f"{deg.get('baseline')}")
        if details.get("meaning_unchecked"):
            line += "; meaning not checked (no judge, no reference)"
    return line


def sample_notes(data: dict[str, Any]) -> list[dict[str, str]]:
    """What one stored sample says about its comparison with the baseline's first answer:
    the similarities, and the judge's verdicts with its reasons in both orders."""
    notes: list[dict[str, str]] = []
    pair = data.get("vs_baseline")
    if isinstance(pair, dict):
        parts = [f"{'same' if pair.get('same_answer') else 'changed'} answer"]
        parts += [f"{m} {num(pair.get(m), 2)}" for m in ("rouge_l", "token_f1", "embedding")
                  if pair.get(m) is not None]
        notes.append({"label": "vs baseline", "text": ", ".join(parts)})
    deg = data.get("degeneration")
    if isinstance(deg, dict) and deg.get("degenerate"):
        found = [k for k in ("empty", "loop", "leaked", "gibberish") if deg.get(k)]
        notes.append({"label": "degenerate", "text": ", ".join(found)})
    for key, label in (("judge", "judge"), ("judge_control", "judge control (cut answer)")):
        record = data.get(key)
        if not isinstance(record, dict):
            continue
        if record.get("error"):
            notes.append({"label": label, "text": f"error: {record['error']}"})
            continue
        notes.append({"label": label, "text": (
            f"{_preference(record.get('preference'))}; verdicts {record.get('verdicts')}"
            f"{'' if record.get('consistent') else ' (order-inconsistent: a tie)'}")})
        if record.get("addressed_judge"):
            notes.append({"label": f"{label}: answer addresses the judge", "text": (
                f"counted a tie; {_addressed(record.get('addressed_judge'))}")})
        for order, reason in zip(("baseline first", "other first"), record.get("reasons") or [],
                                 strict=False):
            notes.append({"label": f"{label}, {order}", "text": str(reason)})
    return notes
