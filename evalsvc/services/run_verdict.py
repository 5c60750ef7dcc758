"""The run page's decision: its banner (verdict, blocking gates, reasons, next step) and its
gates table on one shared, oriented scale.

Contract: reads a stored run and its JSON report and returns plain dicts for the dashboard's
templates (no HTML here). Every verdict and reason shown is the report's own (the runner's
``evalsvc.gates.decide``); this module only arranges them and suggests the next step, whose
sample size comes from the planning service (``evalsvc plan``) when it can size the suite.

The shared scale: each gate's interval is drawn in units of its own margin (or threshold),
oriented so that **right is better**, with 0 at "as good as the baseline" and −1 at the
margin boundary. A non-inferiority gate at Δ and margin δ sits at ±Δ/δ (sign flipped for
lower-is-better metrics); a threshold gate at −1 + (threshold − value)/|threshold| for a
lower-is-better metric (so KLD 0 is 0 and KLD = threshold is −1), mirrored for higher-is-better.
One scale lets a reader compare every row at a glance: left of the dashed line fails.
"""

from __future__ import annotations

import math
import re
from typing import Any

from evalsvc.db import Store
from evalsvc.domain import RunInfo
from evalsvc.reports import endpoint_label
from evalsvc.reports._gatecols import gate_view, is_informational, is_threshold

__all__ = ["banner", "gate_table"]

#: The scale's range, in margins: intervals beyond it are clipped (with an arrow).
_SCALE_MIN, _SCALE_MAX = -6.0, 3.0


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def _higher_is_better(s: dict[str, Any]) -> bool:
    d = s.get("details") or {}
    hib = d.get("higher_is_better", (d.get("gate") or {}).get("higher_is_better", True))
    return bool(hib)


def _scaled(s: dict[str, Any]) -> dict[str, Any] | None:
    """The gate on the shared scale: ``lo``, ``hi``, ``at`` (the estimate) in margins,
    oriented (right is better), and the unit used; None when there is nothing to draw."""
    hib = _higher_is_better(s)
    if is_threshold(s):
        d = s.get("details") or {}
        thr = _num(d.get("threshold", (d.get("gate") or {}).get("threshold")))
        ci = d.get("ci_metric") or [None, None]
        value = _num(s.get("candidate"))
        if thr is None or value is None:
            return None
        unit = abs(thr) or 1.0

        def pos(v: float) -> float:
            return -1.0 + ((v - thr) if hib else (thr - v)) / unit

        ends = [_num(c) for c in ci]
        lo_v = ends[0] if ends[0] is not None else value
        hi_v = ends[1] if ends[1] is not None else value
        a, b = pos(lo_v), pos(hi_v)
        return {"lo": min(a, b), "hi": max(a, b), "at": pos(value), "unit": unit,
                "boundary": -1.0}
    delta = _num(s.get("delta"))
    ci = [_num(c) for c in (s.get("ci") or [None, None])]
    margin = _num(s.get("margin"))
    if delta is None or ci[0] is None or ci[1] is None:
        return None
    sign = 1.0 if hib else -1.0
    if margin:
        unit = margin
        boundary = -1.0
    else:
        # Margin 0 (a superiority test): scale by the interval itself; the boundary is 0.
        unit = max(abs(ci[0]), abs(ci[1]), 1e-9)
        boundary = 0.0
    a, b = sign * ci[0] / unit, sign * ci[1] / unit
    return {"lo": min(a, b), "hi": max(a, b), "at": sign * delta / unit, "unit": unit,
            "boundary": boundary}


def _x(v: float, lo: float, hi: float) -> float:
    """Percent of the drawing's width for scale value ``v`` (clipped)."""
    v = min(max(v, lo), hi)
    return round(100.0 * (v - lo) / (hi - lo), 2)


def _tick_label(t: int) -> str:
    if t == 0:
        return "0"
    if t == -1:
        return "−δ"
    return f"{t:+d}δ".replace("-", "−")


def gate_table(report: dict[str, Any] | None) -> dict[str, Any]:
    """Rows of the run page's gates table and the shared axis they are drawn on."""
    rows: list[dict[str, Any]] = []
    scaled_all: list[dict[str, Any]] = []
    for cand in (report or {}).get("candidates") or []:
        for s in cand.get("suites") or []:
            view = gate_view(s)
            sc = _scaled(s)
            informational = is_informational(s)
            mde, margin = _num(s.get("mde")), _num(s.get("margin"))
            d = s.get("details") or {}
            # Underpowered matters only for a gate that did not fail (docs/statistics.md §1).
            # Not under a pass either: it passed (on a better measurement), whatever the MDE.
            mde_flag = s.get("verdict") not in ("fail", "pass") and (
                bool(d.get("underpowered"))
                or (not is_threshold(s) and mde is not None and margin is not None and mde > margin)
            )
            row = {
                "candidate": endpoint_label(cand),
                "role": cand.get("role"),
                "suite": s.get("suite"),
                "kind": s.get("kind"),
                "verdict": s.get("verdict"),
                "gated": s.get("gated", True),
                "informational": informational,
                "metric": s.get("metric"),
                "type": view["type"],
                "view": view,
                "p_value": s.get("p_value"),
                "n": s.get("n"),
                "n_planned": s.get("n_planned"),
                "n_errors": s.get("n_errors"),
                "mde": mde,
                "mde_flag": mde_flag,
                "before_holm": d.get("verdict_before_holm"),
                # The baseline's calibrated noise floor, shown beside the gate.
                "noise_floor": (d.get("gate") or {}).get("noise_floor"),
                "reasons": s.get("reasons") or [],
                "scaled": sc,
            }
            rows.append(row)
            if sc is not None:
                scaled_all.append(sc)
    lo = min([-2.0, *(sc["lo"] for sc in scaled_all)])
    hi = max([1.0, *(sc["hi"] for sc in scaled_all)])
    lo, hi = max(math.floor(lo - 0.25), _SCALE_MIN), min(math.ceil(hi + 0.25), _SCALE_MAX)
    for row in rows:
        sc = row["scaled"]
        if sc is None:
            row["bar"] = None
            continue
        row["bar"] = {
            "lo": _x(sc["lo"], lo, hi),
            "hi": _x(sc["hi"], lo, hi),
            "at": _x(sc["at"], lo, hi),
            "margin": _x(sc["boundary"], lo, hi),
            "zero": _x(0.0, lo, hi),
            "clipped_left": sc["lo"] < lo,
            "clipped_right": sc["hi"] > hi,
        }
    ticks = [{"x": _x(float(t), lo, hi), "label": _tick_label(t), "value": t}
             for t in range(int(lo), int(hi) + 1)]
    return {
        "rows": rows,
        "axis": {"lo": lo, "hi": hi, "ticks": ticks, "margin": _x(-1.0, lo, hi),
                 "zero": _x(0.0, lo, hi)},
    }


# ---------------------------------------------------------------------------------- banner


def _plan_n(store: Store, run: RunInfo, suite: str) -> dict[str, Any] | None:
    """What ``evalsvc plan --suite SUITE --pilot-run RUN`` says, when it can size the suite."""
    from evalsvc.services.planning import plan
    from evalsvc.services.runs import UsageError

    opts = run.spec.options
    try:
        (row,) = plan(suites=[suite], margin=opts.margin, alpha=opts.alpha, pilot_run=run.id,
                      store=store)
    except UsageError:  # a suite file that is not in the catalog, or no pilot report
        return None
    except Exception:  # a hint must never break the page that shows the verdict
        return None
    if row.get("required_items") is None:
        return None
    return {"items": int(row["required_items"]), "planned": row.get("planned_items")}


def _scaled_n(s: dict[str, Any]) -> int | None:
    """Items at which the MDE would shrink to the margin (MDE ∝ 1/√n, the planning formulas'
    normal approximation: docs/statistics.md §4 "Power and planning")."""
    mde, margin, n = _num(s.get("mde")), _num(s.get("margin")), s.get("n")
    if not mde or not margin or not isinstance(n, int) or n <= 0:
        return None
    return int(math.ceil(n * (mde / margin) ** 2))


def _from_logs(run: RunInfo) -> bool:
    """A gate-logs run: its items are the logs' (no ``--samples`` can change them)."""
    return run.spec.labels.get("source") == "gate-logs"


def _rows_all_ran(store: Store, run: RunInfo, s: dict[str, Any] | None) -> int | None:
    """The rows a ``dataset`` suite ran when they were all its data holds (its ``n`` was unset,
    or asked for more than there were: ``evalsvc.suites.kinds.dataset``), else None: no
    ``--samples`` can add an item to such a run, only more rows can."""
    if not s or s.get("kind") != "dataset" or not isinstance(s.get("n"), int):
        return None
    ran = int(s["n"]) + int(s.get("n_errors") or 0)
    held = _items_available(s)
    if held is not None and ran >= held:
        return ran  # every row of the data ran, whatever n asked for
    try:
        snaps = {x["name"]: x for x in store.get_suite_snapshots(run.id)}
    except Exception:  # a hint must never break the page that shows the verdict
        return None
    params = ((snaps.get(s.get("suite")) or {}).get("spec") or {}).get("params") or {}
    asked = params.get("n")
    return ran if asked is None or (isinstance(asked, int) and asked > ran) else None


def _items_available(s: dict[str, Any] | None) -> int | None:
    """How many items the suite's data holds (``details.items_available``, a ``dataset``
    suite's rows), or None where the suite does not say: no advice asks for more."""
    held = ((s or {}).get("details") or {}).get("items_available")
    return held if isinstance(held, int) and not isinstance(held, bool) and held > 0 else None


def _worse_within_reach(s: dict[str, Any]) -> bool:
    """The candidate is shown worse than the baseline (the oriented interval is wholly below
    0) but not shown beyond the margin (the interval still reaches past −δ): inconclusive for
    non-inferiority, and no item count planned for "no difference" applies to it."""
    sc = _scaled(s) if not is_threshold(s) else None
    return sc is not None and sc["boundary"] == -1.0 and sc["hi"] < 0 and sc["lo"] < -1.0


def _next_step(
    code: str, s: dict[str, Any] | None, run: RunInfo, store: Store, role: str | None
) -> dict[str, Any] | None:
    """The next step for one blocking reason: a sentence and, where useful, a command. Only
    what can be done: a gate-logs run is never told ``--samples`` (its items are the logs'),
    nor a ``dataset`` run that ran every row of its data (only more rows add items), and no run
    is told to use fewer items than it ran."""
    suite = (s or {}).get("suite")
    short = run.id[:12]
    logs = _from_logs(run)
    ran = (s or {}).get("n")
    ran_n = ran if isinstance(ran, int) else 0
    rows = None if logs else _rows_all_ran(store, run, s)
    if rows is not None and code in ("underpowered", "ci_includes_margin", "insufficient_data"):
        return _more_rows(code, s or {}, rows, store, run)
    if code in ("underpowered", "ci_includes_margin") and suite:
        what = code.replace("_", " ")
        if _worse_within_reach(s or {}):
            margin = _num((s or {}).get("margin"))
            more = ("gate more logged items of the same evaluation" if logs
                    else f"re-run it with more items than n = {ran_n} (`--samples`)")
            return {"text": f"{suite}: worse than baseline, not shown beyond δ = {margin:g} "
                            f"at n = {ran_n}; to tell whether the drop exceeds δ, {more}",
                    "command": None}
        planned = None if logs else _plan_n(store, run, suite)
        held = _items_available(s)
        most = max([x for x in ((planned or {}).get("items"), _scaled_n(s or {}))
                    if isinstance(x, int)], default=None)
        if not logs and held is not None and most is not None and most > held:
            # Never ask for more items than the suite has: only more data adds them.
            return {"text": f"{what}: {suite} needs about n = {most} items and its data holds "
                            f"{held} rows (this run: n = {ran_n}): add rows (at least {most} "
                            "in all) and re-run", "command": None, "n": most}
        cmd = f"evalsvc plan --suite {suite} --pilot-run {short}"
        if planned is not None and planned["items"] > ran_n:
            return {"text": f"{what}: `{cmd}` says n = {planned['items']} items "
                            f"(this run: n = {ran_n})", "command": cmd,
                    "n": planned["items"]}
        approx = _scaled_n(s or {})
        if approx is not None and approx > ran_n:
            mde = _num((s or {}).get("mde"))
            if logs:
                return {"text": f"{what}: about n = {approx} items would bring the MDE "
                                f"({mde:.3g}) down to the margin; this run gated the n = "
                                f"{ran_n} items its logs hold: evaluate and log at least "
                                f"{approx} items, then gate the logs again", "command": None,
                        "n": approx}
            return {"text": f"{what}: about n = {approx} items would bring the MDE "
                            f"({mde:.3g}) down to the margin; re-run with `--samples {approx}`",
                    "command": f"--samples {approx}", "n": approx}
        if planned is not None or approx is not None:
            # The plan (or the MDE) asks for no more than this run had: the estimate sits near
            # the margin, so only more items than n narrow the interval past it.
            more = ("more logged items" if logs
                    else f"more items than n = {ran_n} (`--samples`)")
            return {"text": f"{what}: at n = {ran_n}, more than the plan's size, the interval "
                            f"still reaches the margin: the difference sits near δ; {more} "
                            "narrow it", "command": None}
        if logs:
            return {"text": f"{what}: gate more logged items of {suite}", "command": None}
        return {"text": f"{what}: run more items of {suite} (`--samples N`, "
                        f"sized with `evalsvc plan --suite {suite}`)", "command": None}
    if code == "insufficient_data" and suite:
        msg = " ".join(r.get("message", "") for r in (s or {}).get("reasons") or [])
        m = re.search(r"minimum of (\d+)", msg)
        held = _items_available(s)
        if not logs and m and held is not None and int(m.group(1)) > held:
            return {"text": f"{suite} cannot decide at this size: it needs at least "
                            f"{m.group(1)} items and its data holds {held} rows: add rows",
                    "command": None}
        need = f"at least {m.group(1)} items" if m else "more items"
        how = "log and gate" if logs else "re-run it with"
        return {"text": f"{suite} cannot decide at this size: {how} {need}"
                        + ("" if logs else " (`--samples`)"), "command": None}
    if code == "uninformative_judge" and suite:
        return {"text": f"{suite}: judge with a stronger model: register it (`evalsvc endpoints "
                        "add NAME URL --model MODEL`) and set the suite's `judge.endpoint` (and "
                        "`judge.model`) to it; more items cannot make this judge informative",
                "command": None}
    if code == "judge_addressed" and suite:
        return {"text": f"{suite}: read the answers that address the judge (flagged on the flips "
                        "page): the judge may have obeyed them, so the gate cannot pass on them",
                "command": None,
                "href": f"/runs/{run.id}/flips?suite={suite}&candidate={role or 'candidate:0'}"}
    if code == "meaning_unchecked" and suite:
        return {"text": f"{suite}: answers changed and nothing here checks what they mean: add "
                        "a judge (`judge: {endpoint: NAME}`, a registered model stronger than the "
                        "ones under test; `evalsvc suites from-requests --judge NAME`) or a "
                        "reference column, and re-run", "command": None}
    if code == "uninformative_baseline" and suite:
        return {"text": f"the baseline solves too few items of {suite} to show a drop of the "
                        "margin: use more items, or a suite (level) the baseline solves",
                "command": None}
    if code in ("failed_gate", "failed_slice", "failed_bound") and suite:
        return {"text": f"do not ship this candidate: open {suite}'s details and flips to see "
                        "where it breaks", "command": None,
                "href": f"/runs/{run.id}/suites/{suite}?candidate={role or 'candidate:0'}"}
    if code == "holm_adjusted" and suite:
        return {"text": f"{suite} failed on its own but not after the correction across suites: "
                        "re-run it alone, or with more items, to confirm", "command": None}
    if code in ("error_budget", "suite_error"):
        # The runner's own cause and fix (evalsvc.runner._isolation), then the resume that
        # re-sends only what errored.
        failure = (s or {}).get("error") or {}
        if failure.get("fix"):
            return {"text": f"{suite}: {failure['fix']}",
                    "command": f"evalsvc runs resume {short}"}
        return {"text": "too many requests errored: fix the endpoint (see the suite's error "
                        "examples) and re-run", "command": None}
    if code == "no_gated_suites":
        return {"text": "add a gated suite: nothing here can pass", "command": None}
    return None


def _more_rows(
    code: str, s: dict[str, Any], rows: int, store: Store, run: RunInfo
) -> dict[str, Any]:
    """The next step for a ``dataset`` suite that ran every row of its data and could not
    decide: how many rows it would need (the plan's size, else the MDE's), never ``--samples``."""
    suite = s.get("suite")
    held = f"its data held {rows} rows and all of them ran"
    if _worse_within_reach(s):
        margin = _num(s.get("margin"))
        return {"text": f"{suite}: worse than baseline, not shown beyond δ = {margin:g} at "
                        f"n = {rows}; {held}: to tell whether the drop exceeds δ, add rows",
                "command": None}
    what = code.replace("_", " ")
    if code == "insufficient_data":
        m = re.search(r"minimum of (\d+)", " ".join(r.get("message", "")
                                                   for r in s.get("reasons") or []))
        need = int(m.group(1)) if m else None
    else:
        planned = _plan_n(store, run, suite) if suite else None
        need = planned["items"] if planned is not None else _scaled_n(s)
    if need is not None and need > rows:
        return {"text": f"{what}: {suite} needs about n = {need} items; {held}: add rows "
                        f"(at least {need} in all) and re-run", "command": None, "n": need}
    return {"text": f"{what}: at n = {rows} the interval still reaches the margin; {held}: "
                    "only more rows narrow it", "command": None}


def banner(store: Store, run: RunInfo, report: dict[str, Any] | None) -> dict[str, Any]:
    """The decision at the top of the run page.

    ``verdict`` and ``status``; ``headline`` (ship / do not ship / cannot tell yet);
    ``blocking``: one entry per suite that keeps the run from passing (candidate, suite,
    verdict, its reasons, its next step); ``info``: reasons that do not block (passes, not gated
    suites); ``allowed``: the ``allowed_difference`` reasons (shown, never folded away);
    ``next``: the distinct next steps, most important first.
    """
    verdict = (report or {}).get("verdict") or run.verdict
    status = run.status.value
    out: dict[str, Any] = {"verdict": verdict, "status": status, "blocking": [], "info": [],
                           "allowed": [], "next": [], "error": run.error}
    if report is None:
        out["headline"] = (
            "no verdict yet: the run is " + status if status in ("queued", "running")
            else f"no verdict: the run ended {status}" + (f" ({run.error})" if run.error else "")
        )
        if status in ("error", "cancelled"):
            out["next"].append({"text": "fix what stopped it (above) and re-run; the samples "
                                        "stored so far are kept", "command": None})
        return out
    out["headline"] = {
        "pass": "Ship: every gated suite of every candidate passes.",
        "fail": "Do not ship: a gate fails.",
        "inconclusive": "Cannot tell yet: no gate fails, but not every gate passes.",
        "error": "No verdict: the evidence is incomplete.",
        "non-comparable": "Not a quantization comparison: a candidate differs from the baseline "
                          "in more than the quantization.",
    }.get(str(verdict), str(verdict))
    by_key = {(c.get("role"), s.get("suite")): s
              for c in report.get("candidates") or [] for s in c.get("suites") or []}
    labels = {c.get("role"): endpoint_label(c) for c in report.get("candidates") or []}
    seen_next: set[str] = set()
    for cand in report.get("candidates") or []:
        role = cand.get("role")
        for s in cand.get("suites") or []:
            if not s.get("gated", True) or s.get("verdict") == "pass":
                continue
            steps = []
            for r in s.get("reasons") or []:
                step = _next_step(str(r.get("code")), s, run, store, role)
                if step is not None and step["text"] not in seen_next:
                    seen_next.add(step["text"])
                    steps.append(step)
            out["blocking"].append({
                "candidate": labels.get(role, role), "role": role, "suite": s.get("suite"),
                "verdict": s.get("verdict"), "reasons": s.get("reasons") or [], "next": steps,
            })
            out["next"].extend(steps)
    # Fails first, then inconclusive gates.
    out["blocking"].sort(key=lambda b: 0 if b["verdict"] == "fail" else 1)
    out["next"].sort(key=lambda n: 0 if n.get("href") else 1)
    for r in report.get("reasons") or []:
        code = r.get("code")
        if code == "non_comparable":
            # The guard's reasons come first: no gate of that candidate decides anything.
            message = str(r.get("message") or "")
            fix = message.partition("; fix: ")[2]
            step = {"text": fix, "command": None} if fix else None
            out["blocking"].insert(0, {"candidate": labels.get(r.get("candidate")),
                                       "role": r.get("candidate"), "suite": r.get("suite"),
                                       "verdict": "non-comparable", "reasons": [r],
                                       "next": [step] if step else []})
            if step and step["text"] not in seen_next:
                seen_next.add(step["text"])
                out["next"].insert(0, step)
            continue
        if code == "allowed_difference":
            # Never folded away: the verdict rests on a difference beyond quantization.
            out["allowed"].append({**r, "candidate_label": labels.get(r.get("candidate"))})
        elif code in ("passed", "not_gated", "skipped"):
            out["info"].append({**r, "candidate_label": labels.get(r.get("candidate"))})
        elif code in ("error_budget", "suite_error", "no_gated_suites", "infrastructure_error"):
            if any(b["role"] == r.get("candidate") and b["suite"] == r.get("suite")
                   and b["suite"] is not None for b in out["blocking"]):
                continue  # that suite is listed already, with this reason among its own
            s = by_key.get((r.get("candidate"), r.get("suite")))
            step = _next_step(str(code), s, run, store, r.get("candidate"))
            out["blocking"].insert(0, {"candidate": labels.get(r.get("candidate")),
                                       "role": r.get("candidate"), "suite": r.get("suite"),
                                       "verdict": "error" if code != "no_gated_suites"
                                       else "inconclusive",
                                       "reasons": [r], "next": [step] if step else []})
            if step and step["text"] not in seen_next:
                seen_next.add(step["text"])
                out["next"].insert(0, step)
    if verdict == "pass":
        out["next"] = [{"text": "ship it: every gated suite passes (the findings below say by "
                                "how much)", "command": None}]
    return out
