"""Report views: the JSON report (the contract of docs/report.md), JUnit XML and Markdown.

Contract: ``build_report`` turns a ``RunResult`` into the JSON-able dict that the CLI writes with
``--json`` and that ``GET /api/v1/runs/{id}/report`` returns. JUnit and Markdown are rendered
from that dict only, so every view shows the same numbers.

Endpoint-provided text (model ids, error texts, warnings, names, URLs) is hostile input:
``redact_report`` removes URL userinfo from any report (also ones stored before the rule);
Markdown escapes it (``md_text``: HTML entities, Markdown punctuation, one line), and JUnit
drops the characters XML 1.0 cannot carry (ElementTree escapes ``<&"`` but writes control
characters raw, which makes the file unparsable).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Any

from evalsvc import __version__
from evalsvc.domain import EndpointRef, Provenance, provenance_fingerprint
from evalsvc.endpoints import redact_text, redact_url
from evalsvc.runner import HelperProbe, RunResult

from ._basis import basis, basis_lines
from ._findings import findings, headline, suite_findings
from ._gatecols import gate_view, reason_lines, reasons_of
from ._reuse import reuse_lines
from ._text import md_text, xml_text

SCHEMA_VERSION = 1


def _endpoint(ref: EndpointRef, prov: Provenance) -> dict[str, Any]:
    entry = {
        "url": redact_url(ref.url),
        "model": ref.model or prov.model,
        "name": ref.name,
    }
    # The one name every view shows for this endpoint (endpoint_label).
    return {**entry, "label": endpoint_label(entry),
            "provenance": prov.model_dump(mode="json", exclude_none=True)}


def _helper(helper: HelperProbe) -> dict[str, Any]:
    """A helper endpoint of a suite (its judge, its embedding model) as the report records it:
    the endpoint entry of the endpoints under test, with its purpose, engine and provenance
    fingerprint (``evalsvc.domain.provenance_fingerprint``: equal fingerprints, same judge)."""
    prov = helper.provenance
    return {
        "purpose": helper.purpose,
        **_endpoint(helper.endpoint, prov),
        "engine": prov.engine,
        "fingerprint": provenance_fingerprint(prov),
    }


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: map them to None so every consumer can parse the report."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def build_report(result: RunResult) -> dict[str, Any]:
    helpers: dict[str, list[dict[str, Any]]] = {}
    for h in result.helpers:
        helpers.setdefault(h.suite, []).append(_helper(h))
    candidates = []
    for cand in result.candidates:
        suites = []
        for s in cand.suites:
            o = s.outcome.to_dict()
            suites.append(
                {
                    "suite": s.suite,
                    "kind": s.kind,
                    "suite_version": s.version,
                    "verdict": s.verdict,
                    "gated": s.gated,
                    "metric": o["metric"],
                    "baseline": o["baseline"],
                    "candidate": o["candidate"],
                    "delta": o["delta"],
                    "ci": o["ci"],
                    # candidate ÷ baseline with its interval (lm-eval tasks, gated logs, recovery
                    # floors); None for suites that do not report it.
                    "recovery": (o.get("details") or {}).get("recovery"),
                    "p_value": o["p_value"],
                    "margin": o["margin"],
                    "alpha": o["alpha"],
                    "n": o["n"],
                    "n_planned": s.n_planned,
                    "n_errors": s.n_errors,
                    "mde": o.get("mde"),
                    "test": o["test"],
                    # Which method decided (asymptotic or its exact fallback); None if one.
                    "method": o.get("method"),
                    "reasons": [r.to_dict() for r in s.reasons],
                    # Why the suite ended in error (its cause, fix and errors by kind); None
                    # when it has a verdict.
                    "error": s.error.to_dict() if s.error is not None else None,
                    "details": {**o.get("details", {}), **s.details},
                    # The suite's helper endpoints as probed in this run (absent: none).
                    **({"helpers": helpers[s.suite]} if s.suite in helpers else {}),
                }
            )
        for suite_entry in suites:
            _add_findings(suite_entry)
        entry = _endpoint(cand.endpoint, cand.provenance)
        entry.update(
            {
                "role": cand.role,
                "verdict": cand.verdict,
                "reasons": [r.to_dict() for r in cand.reasons],
                # The comparability guard: differences beyond quantization, and allowed ones.
                "comparability": cand.comparability.to_dict(),
                "suites": suites,
            }
        )
        candidates.append(entry)
    report = {
        "schema_version": SCHEMA_VERSION,
        "evalsvc_version": __version__,
        "run_id": result.run_id,
        "verdict": result.verdict,
        "reasons": [r.to_dict() for r in result.reasons],
        "error": result.error,
        "warnings": result.warnings,
        "duration_s": round(result.duration_s, 3),
        "options": result.options.model_dump(mode="json"),
        "baseline": _endpoint(result.baseline, result.baseline_provenance),
        "candidates": candidates,
        # Suites of the run that could not run on these endpoints, with why (never gated).
        "skipped": [s.to_dict() for s in result.skipped],
    }
    redacted: dict[str, Any] = redact_report(_clean(report))
    return redacted


def _add_findings(entry: dict[str, Any]) -> None:
    """The kind's headline and every finding (structured) beside the suite's numbers."""
    clean = _clean(entry)
    entry["headline"] = headline(clean)
    entry["findings"] = [_clean(f.to_dict()) for f in suite_findings(clean)]


def redact_report(value: Any) -> Any:
    """A copy of a report (or any JSON value) with URL userinfo redacted in every string."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_report(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_report(v) for v in value]
    return value


def endpoint_label(entry: dict[str, Any]) -> str:
    """How tables name an endpoint: its registered name, else host:port, with the served model
    (two endpoints serving the same model must not look identical)."""
    from urllib.parse import urlsplit

    where = entry.get("name")
    if not where:
        parts = urlsplit(entry.get("url") or "")
        where = parts.netloc.rpartition("@")[2] or entry.get("url") or "?"
    model = entry.get("model")
    return f"{where} ({model})" if model and model != where else str(where)


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def summary_rows(report: dict[str, Any]) -> list[dict[str, str]]:
    """One row per (candidate, suite), formatted for tables (rich, Markdown). A threshold gate
    shows no baseline and no Δ: its ``ci`` is the metric's own and ``margin`` the threshold
    (``gate_view``)."""
    rows = []
    for cand in report["candidates"]:
        for s in cand["suites"]:
            g = gate_view(s)
            rows.append(
                {
                    "candidate": endpoint_label(cand),
                    "suite": s["suite"],
                    "metric": s["metric"],
                    "gate_type": g["type"],
                    "baseline": g["baseline"],
                    "candidate_value": g["candidate"],
                    "delta": g["delta"],
                    "ci": g["ci"],
                    "margin": g["limit"],
                    "p": g["p"],
                    "n": f"{s['n']}" + (f" ({s['n_errors']} err)" if s["n_errors"] else ""),
                    "mde": _fmt(s.get("mde")),
                    "verdict": s["verdict"] + ("" if s.get("gated", True) else " (not gated)"),
                }
            )
    return rows


def to_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown. Strings an endpoint or a submitter chose (model ids, names, URLs,
    errors, warnings) go through ``md_text``; suite names, verdicts and numbers are evalsvc's."""
    report = redact_report(report)
    m = md_text
    base = report["baseline"]
    lines = [
        f"# evalsvc report — verdict: **{report['verdict']}**",
        "",
        (f"Run `{report['run_id']}`" if report.get("run_id") else "No run was recorded")
        + f" · baseline {m(endpoint_label(base))} at {m(base['url'])}",
        "",
    ]
    if report.get("error"):
        lines += [f"> Error: {m(report['error'])}", ""]
    for w in report.get("warnings", []):
        lines += [f"> Warning: {m(w)}", ""]
    # Blessed baselines (evalsvc baselines bless): which suites' baseline was not sent again.
    lines += [f"> Baseline: {m(line)}\n" for line in reuse_lines(report)]
    # What the verdict rests on: where each side's samples came from, the noise floor, the
    # judge, and every allowed difference (docs/report.md, Basis).
    rests = basis_lines(basis(report))
    if rests:
        lines += ["What the verdict rests on:", "", *(f"- {m(line)}" for line in rests), ""]
    labels = _role_labels(report)
    said: set[tuple[Any, ...]] = set()  # each reason once: here, or under its suite
    # The error line above says it once: a reason that only repeats it is not listed again.
    why = [r for r in reasons_of(report) if r.get("message") != report.get("error")]
    if why:
        lines += ["Why:", ""]
        lines += [f"- {_md_reason(r, labels=labels)}" for r in why]
        lines.append("")
        said = {_reason_key(r) for r in reasons_of(report)}
    rows = summary_rows(report)
    if rows:  # no empty table under a run that gated nothing (an error before any gate)
        lines += [
            "| Candidate | Suite | Metric | Baseline | Candidate | Δ | CI | Margin / threshold "
            "| p (non-inferiority) | n | MDE | Verdict |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    for r in rows:
        lines.append(
            f"| {m(r['candidate'])} | {r['suite']} | {r['metric']} | {r['baseline']} | "
            f"{r['candidate_value']} | {r['delta']} | {r['ci']} | {r['margin']} | {r['p']} | "
            f"{r['n']} | {r['mde']} | {r['verdict']} |"
        )
    if rows:
        lines.append("")
    lines += _md_skipped(report)
    if any(r["gate_type"] == "threshold" for r in summary_rows(report)):
        lines += [
            "Threshold gates (drift) compare the metric itself with a fixed threshold: their CI "
            "is the metric's own, and they have no baseline value or Δ.",
            "",
        ]
    for cand in report["candidates"]:
        name = endpoint_label(cand)
        lines += [f"## {m(name)} — {cand['verdict']}", ""]
        for s in cand["suites"]:
            verdict = s["verdict"] + ("" if s.get("gated", True) else " (not gated)")
            lines += [f"### {s['suite']} ({s['kind']}) — {verdict}", "", f"Test: {s['test']}.", ""]
            why = [r for r in reasons_of(s)
                   if _reason_key({**r, "candidate": cand.get("role")}) not in said]
            if why:
                lines += [f"- {_md_reason(r, with_suite=False)}" for r in why]
                lines.append("")
            lines += _unsaid(findings(s), reasons_of(s))
    return "\n".join(lines) + "\n"


def _role_labels(report: dict[str, Any]) -> dict[Any, str]:
    """Each candidate's role (``candidate:0``, the report's key) → the label views show."""
    return {c.get("role"): endpoint_label(c) for c in report.get("candidates") or []}


def _reason_key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r.get("candidate"), r.get("suite"), r.get("code"), r.get("message"))


def _unsaid(lines: list[str], reasons: list[dict[str, Any]]) -> list[str]:
    """Finding lines without those that only repeat a reason's message (an uninformative
    baseline, an underpowered gate), which the reader has just been given."""
    raw = [str(r.get("message")) for r in reasons if r.get("message")]
    messages = raw + [md_text(m) for m in raw]  # some findings escape the text they quote
    out: list[str] = []
    dropped = False
    for line in lines:
        if any(m in line for m in messages):
            dropped = True
            continue
        if dropped and not line:
            dropped = False
            continue  # the blank line that closed the dropped finding
        dropped = False
        out.append(line)
    return out


def skipped_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's ``skipped`` suites (``suite``, ``kind``, ``reason``); [] for older reports."""
    out = report.get("skipped")
    return [s for s in out if isinstance(s, dict)] if isinstance(out, list) else []


def _md_skipped(report: dict[str, Any]) -> list[str]:
    gone = skipped_of(report)
    if not gone:
        return []
    lines = ["Skipped (not run on these endpoints, so no verdict covers them):", ""]
    lines += [f"- **{md_text(s.get('suite'))}** ({md_text(s.get('kind'))}): "
              f"{md_text(s.get('reason'))}" for s in gone]
    return [*lines, ""]


def _md_reason(
    r: dict[str, Any], *, with_suite: bool = True, labels: dict[Any, str] | None = None
) -> str:
    """One reason as Markdown; its message may quote endpoint text (a model id), so escaped.
    The candidate is named by its label (``labels``: role → label), not its role."""
    where = f"**{md_text(r.get('suite'))}** · " if with_suite and r.get("suite") else ""
    cand = r.get("candidate")
    who = f"{md_text((labels or {}).get(cand, cand))} · " if with_suite and cand else ""
    return f"{who}{where}`{r.get('code')}`: {md_text(r.get('message'))}"


def to_junit(report: dict[str, Any]) -> str:
    """One testsuite per candidate, one testcase per suite gate: fail and inconclusive are
    failures (with ``type`` saying which), an errored suite or run an error, an ungated suite
    skipped, a pass passes; a non-comparable candidate has a ``comparability`` testcase failing
    with ``type="non-comparable"`` and each difference with its fix."""
    report = redact_report(report)
    x = xml_text
    root = ET.Element("testsuites", name="evalsvc", tests="0", failures="0", errors="0")
    total = failures = errors = 0
    for cand in report["candidates"]:
        name = x(endpoint_label(cand))
        ts = ET.SubElement(root, "testsuite", name=f"evalsvc.{name}")
        # The candidate's verdict and why, for CI tools that show testsuite properties.
        props = ET.SubElement(ts, "properties")
        ET.SubElement(props, "property", name="verdict", value=x(cand.get("verdict")))
        # Reasons of a suite are said once, on its testcase; the candidate's others here.
        for line in reason_lines({"reasons": [r for r in reasons_of(cand) if not r.get("suite")]}):
            ET.SubElement(props, "property", name="reason", value=x(line))
        # What the verdict rests on (docs/report.md, Basis), for CI tools that show properties.
        for line in basis_lines(basis(report)):
            ET.SubElement(props, "property", name="basis", value=x(line))
        t = f = e = sk = 0
        for s in cand["suites"]:
            t += 1
            tc = ET.SubElement(ts, "testcase", classname=f"evalsvc.{name}", name=x(s["suite"]))
            g = gate_view(s)
            numbers = (
                f"{s['metric']}: baseline {g['baseline']}, candidate {g['candidate']}, "
                f"delta {g['delta']}, CI of {g['ci_of']} {g['ci']}, {g['limit']}, "
                f"non-inferiority p {g['p']}, n {s['n']}, errors {s['n_errors']}; {s['test']}"
            )
            why = reason_lines(s, with_suite=False)
            msg = x("; ".join(why) if why else numbers)
            # Each reason once per testcase: in the failure's (or error's) message; its text
            # and system-out carry the numbers and the findings that add to it.
            told = bool(why) and (
                s["verdict"] in ("fail", "inconclusive", "error") or not s.get("gated", True)
            )
            full = x(numbers) if told else x("\n".join([*why, numbers]))
            # Only a pass is green: an inconclusive gate blocks a rollout just as a failed one
            # does (a JUnit <skipped> shows green on most CI dashboards), so it is a failure
            # whose type says which; a suite that errored is a JUnit error.
            if s["verdict"] in ("fail", "inconclusive"):
                f += 1
                what = "gate failed" if s["verdict"] == "fail" else "inconclusive"
                ET.SubElement(
                    tc, "failure", message=f"{what}: {msg}", type=s["verdict"]
                ).text = full
            elif s["verdict"] == "error":
                e += 1
                ET.SubElement(tc, "error", message=f"error: {msg}", type="error").text = full
            elif not s.get("gated", True):
                sk += 1
                ET.SubElement(tc, "skipped", message=f"not gated: {msg}")
            # The findings (Markdown text) follow the reasons and numbers: CI logs show where
            # and how much.
            notes = [str(s.get("headline") or headline(s) or "")] + [
                line for line in _unsaid(findings(s), reasons_of(s)) if line.strip()
            ]
            ET.SubElement(tc, "system-out").text = "\n".join(
                [*([] if told else [full]), *(x(n) for n in notes if n)]
            )
        for gone in skipped_of(report):
            # A suite the endpoints could not run: a skipped testcase, with why.
            t += 1
            sk += 1
            tc = ET.SubElement(ts, "testcase", classname=f"evalsvc.{name}",
                               name=x(gone.get("suite")))
            ET.SubElement(tc, "skipped", message=x(f"not run: {gone.get('reason')}"))
        differences = (cand.get("comparability") or {}).get("differences") or []
        if cand.get("verdict") == "non-comparable" or differences:
            # Not a quantization comparison: a failure of its own type, whose message names
            # each difference and its fix (a candidate sent nothing has no other testcase).
            t += 1
            f += 1
            tc = ET.SubElement(ts, "testcase", classname=f"evalsvc.{name}", name="comparability")
            said = "; ".join(
                f"{d.get('field')}: {d.get('message')}; fix: {d.get('fix')}" for d in differences
            ) or "; ".join(reason_lines({"reasons": [
                r for r in reasons_of(cand) if r.get("code") == "non_comparable"]}))
            ET.SubElement(
                tc, "failure", message=x(f"non-comparable: {said}"), type="non-comparable"
            ).text = x(said)
        if report.get("error"):
            e += 1
            tc = ET.SubElement(ts, "testcase", classname=f"evalsvc.{name}", name="infrastructure")
            ET.SubElement(tc, "error", message=x(report["error"]), type="infrastructure")
            t += 1
        ts.set("tests", str(t))
        ts.set("failures", str(f))
        ts.set("errors", str(e))
        ts.set("skipped", str(sk))
        total, failures, errors = total + t, failures + f, errors + e
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
