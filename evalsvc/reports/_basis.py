"""What a verdict rests on: the report's ``basis`` block, its lines for people, and the
pipeline policy that may refuse it.

Contract:
- ``basis_of(report, now=…)`` derives the block from what the report records already: per
  suite and side where the samples came from (``measured`` in this run, ``blessing``: reused
  from a blessed baseline, ``logs``: an evaluation log that was gated), the noise floor attached
  to the suite's gate (``details.gate.noise_floor``), the suite's helper endpoints (judge,
  embedder), and every difference the comparability guard allowed (``candidates[].
  comparability.allowed``). Fields the report's producers may or may not write yet (a
  blessing's ``endpoint`` and ``measured_at``, a floor's ``endpoint`` and ``adopted_by``) are
  read with ``.get`` and are ``null`` when absent. Pure: no clock but ``now``, no I/O.
- ``basis(report)`` is the stored block, or one derived on reading for reports written before it
  existed (their ages are then as of the reading).
- ``basis_lines(basis)`` are plain lines (callers escape them for their medium).
- ``parse_age("3d")`` reads the policy's ages (seconds; ``ValueError`` naming the forms).
- ``policy_refusals(basis, max_reuse_age_s=…, allowed_differences=…)`` lists why a pipeline's
  policy refuses the evidence (blessed samples older than the limit, any allowed difference);
  [] when it accepts it. The CLI's ``--max-reuse-age`` and ``--no-allowed-differences``,
  ``evalsvc attest verify`` and ``GET /runs/{id}/gate``'s query call it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from ._reuse import human_age

__all__ = ["basis", "basis_lines", "basis_of", "parse_age", "policy_refusals"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_age(text: str) -> float:
    """Seconds in an age such as ``30s``, ``15m``, ``12h``, ``3d``, ``2w`` or plain seconds;
    ``ValueError`` naming the accepted forms otherwise (the policy's ``--max-reuse-age``)."""
    m = _AGE.match(text)
    if not m:
        raise ValueError(
            f"{text!r} is not an age: give a number with a unit, e.g. 30s, 15m, 12h, 3d or 2w"
        )
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def _label(entry: dict[str, Any]) -> str:
    # The same label every view shows (``_render.endpoint_label``), without importing the
    # renderer (it sits above this module).
    from urllib.parse import urlsplit

    where = entry.get("name")
    if not where:
        parts = urlsplit(entry.get("url") or "")
        where = parts.netloc.rpartition("@")[2] or entry.get("url") or "?"
    model = entry.get("model")
    return f"{where} ({model})" if model and model != where else str(where)


def _age_s(iso: Any, now: datetime) -> float | None:
    if not isinstance(iso, str):
        return None
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return round(max(0.0, (now - when).total_seconds()), 1)


def _reused(entry: dict[str, Any] | None) -> bool:
    """A ``baseline_reuse`` entry whose blessed samples this run gated."""
    return (entry is not None and entry.get("status") == "reused"
            and entry.get("applied") is not False)


def _baseline_side(
    entry: dict[str, Any] | None, logs: bool, endpoint: str, now: datetime
) -> dict[str, Any]:
    blessing = (entry or {}).get("blessing_id") or (entry or {}).get("blessing")
    if _reused(entry):
        assert entry is not None
        measured = entry.get("measured_at")
        # The samples' age: since the blessed run measured them where that is recorded, else
        # the blessing's own age (reports written before ``measured_at``).
        age = _age_s(measured, now) if measured else entry.get("age_s")
        return {
            "source": "blessing",
            "blessing": blessing,
            "blessed_run": entry.get("blessed_run"),
            # Where the blessed samples were measured (a registered name or a normalized URL);
            # null in reports whose blessings did not record it.
            "endpoint": entry.get("endpoint"),
            "measured_at": measured or entry.get("blessed_at"),
            "age_s": age,
            "items": entry.get("items_reused"),
        }
    side: dict[str, Any] = {"source": "logs" if logs else "measured", "endpoint": endpoint}
    if entry and blessing:
        # A blessing of this suite exists but was not used: say which and why.
        why = entry.get("reason") or (
            "stale" if entry.get("status") == "stale" else f"{entry.get('changed')} changed"
        )
        side["blessing_not_used"] = {"blessing": blessing, "reason": why}
    return side


def _floor(gate: dict[str, Any], now: datetime) -> dict[str, Any] | None:
    nf = gate.get("noise_floor")
    if not isinstance(nf, dict):
        return None
    return {
        "calibration": nf.get("calibration"),
        "endpoint": nf.get("endpoint"),
        "fingerprint": nf.get("fingerprint"),
        "measured_at": nf.get("measured_at"),
        "age_s": _age_s(nf.get("measured_at"), now),
        "discordance": nf.get("discordance"),
        "adopted_by": nf.get("adopted_by"),
        "submitted_by": nf.get("submitted_by"),
    }


def _helper(h: dict[str, Any]) -> dict[str, Any]:
    return {"purpose": h.get("purpose"), "endpoint": _label(h), "model": h.get("model"),
            "engine": h.get("engine"), "fingerprint": h.get("fingerprint")}


def basis_of(report: dict[str, Any], *, now: datetime | None = None) -> dict[str, Any]:
    """The ``basis`` block of ``report`` (module contract)."""
    now = now or datetime.now(UTC)
    reuse = {e["suite"]: e for e in report.get("baseline_reuse") or []
             if isinstance(e, dict) and e.get("suite")}
    base_label = _label(report.get("baseline") or {})
    per_suite: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for cand in report.get("candidates") or []:
        for s in cand.get("suites") or []:
            per_suite.setdefault(str(s.get("suite")), []).append((cand, s))
    suites: list[dict[str, Any]] = []
    reused_ages: list[float] = []
    for name, pairs in per_suite.items():
        logs = any("log_pairs" in (s.get("details") or {}) for _, s in pairs)
        base_side = _baseline_side(reuse.get(name), logs, base_label, now)
        if base_side["source"] == "blessing" and isinstance(base_side.get("age_s"), (int, float)):
            reused_ages.append(float(base_side["age_s"]))
        sides: dict[str, Any] = {"baseline": base_side}
        for cand, _ in pairs:
            sides[str(cand.get("role"))] = {"source": "logs" if logs else "measured",
                                            "endpoint": _label(cand)}
        floor = next((f for _, s in pairs if (f := _floor(
            ((s.get("details") or {}).get("gate") or {}), now)) is not None), None)
        helpers = next((h for _, s in pairs if (h := s.get("helpers"))), None) or []
        suites.append({"suite": name, "sides": sides, "noise_floor": floor,
                       "helpers": [_helper(h) for h in helpers if isinstance(h, dict)]})
    run_allow = set(((report.get("options") or {}).get("comparability") or {}).get("allow") or [])
    allowed = []
    for cand in report.get("candidates") or []:
        for d in (cand.get("comparability") or {}).get("allowed") or []:
            field = d.get("field")
            allowed.append({
                "candidate": cand.get("role"), "candidate_label": _label(cand),
                "field": field, "suite": d.get("suite"), "message": d.get("message"),
                # Who allowed it: the run's options (--allow-difference, a REST submission's
                # comparability) or the suites' own declarations.
                "allowed_by": d.get("allowed_by") or ("run" if field in run_allow else "suites"),
            })
    return {
        "at": now.isoformat(),
        "suites": suites,
        "allowed_differences": allowed,
        "oldest_reuse_s": max(reused_ages) if reused_ages else None,
    }


def basis(report: dict[str, Any]) -> dict[str, Any]:
    """The report's stored ``basis``, or one derived now for a report written before it."""
    stored = report.get("basis")
    return stored if isinstance(stored, dict) else basis_of(report)


def _side_text(side: dict[str, Any]) -> str:
    src = side.get("source")
    if src == "blessing":
        where = f" measured on {side['endpoint']}" if side.get("endpoint") else ""
        age = side.get("age_s")
        when = (f", {human_age(float(age))} before this run" if isinstance(age, (int, float))
                else "")
        items = f", {side['items']} items" if side.get("items") is not None else ""
        return (f"reused from blessing {side.get('blessing')} (run {side.get('blessed_run')})"
                f"{where}{when}{items}")
    text = "from the gated logs" if src == "logs" else "measured in this run"
    gone = side.get("blessing_not_used")
    if gone:
        text += f" (blessing {gone.get('blessing')} not used: {gone.get('reason')})"
    return text


def _plain(s: dict[str, Any]) -> bool:
    """A suite whose every side was measured in this run, with no floor and no helper."""
    sides = (s.get("sides") or {}).values()
    return (all(v.get("source") == "measured" and not v.get("blessing_not_used") for v in sides)
            and not s.get("noise_floor") and not s.get("helpers"))


def basis_lines(b: dict[str, Any]) -> list[str]:
    """One line per suite (its sides, noise floor and helpers) and one per allowed difference;
    the suites measured wholly in this run, with nothing else to say, share one line."""
    out = []
    plain = [str(s.get("suite")) for s in b.get("suites") or [] if _plain(s)]
    if plain:
        out.append(f"{', '.join(plain)}: every sample measured in this run, on both sides")
    for s in b.get("suites") or []:
        if _plain(s):
            continue
        sides = s.get("sides") or {}
        base = _side_text(sides.get("baseline") or {})
        cands = {_side_text(v) for k, v in sides.items() if k != "baseline"}
        parts = [f"baseline {base}"]
        if cands:
            parts.append("candidate " + " / ".join(sorted(cands)))
        nf = s.get("noise_floor")
        if nf:
            where = f" on {nf['endpoint']}" if nf.get("endpoint") else ""
            age = nf.get("age_s")
            old = f", {human_age(float(age))} old" if isinstance(age, (int, float)) else ""
            who = f", adopted by {nf['adopted_by']}" if nf.get("adopted_by") else ""
            parts.append(f"noise floor from calibration {nf.get('calibration')}{where}{old}{who}")
        for h in s.get("helpers") or []:
            parts.append(f"{h.get('purpose')} {h.get('model') or '?'} at {h.get('endpoint')} "
                         f"(fingerprint {h.get('fingerprint')})")
        out.append(f"{s.get('suite')}: " + "; ".join(parts))
    for d in b.get("allowed_differences") or []:
        where = f" in {d['suite']}" if d.get("suite") else ""
        by = "the run's options" if d.get("allowed_by") == "run" else "the suites"
        out.append(f"allowed difference{where}: {d.get('candidate_label')}: {d.get('field')} "
                   f"({d.get('message')}), allowed by {by}")
    return out


def policy_refusals(
    b: dict[str, Any],
    *,
    max_reuse_age_s: float | None = None,
    allowed_differences: bool = True,
) -> list[str]:
    """Why the pipeline's policy refuses this evidence; [] when it accepts it."""
    out = []
    if max_reuse_age_s is not None:
        for s in b.get("suites") or []:
            side = (s.get("sides") or {}).get("baseline") or {}
            if side.get("source") != "blessing":
                continue
            age = side.get("age_s")
            if not isinstance(age, (int, float)) or age > max_reuse_age_s:
                old = human_age(float(age)) if isinstance(age, (int, float)) else "of unknown age"
                out.append(
                    f"{s.get('suite')}: the baseline's samples were reused from blessing "
                    f"{side.get('blessing')}, {old}, older than --max-reuse-age "
                    f"{human_age(max_reuse_age_s)}; refresh the blessing (evalsvc baselines bless "
                    "a new run) or run with --no-blessed-baseline"
                )
    if not allowed_differences:
        for d in b.get("allowed_differences") or []:
            out.append(
                f"{d.get('candidate_label')}: the verdict rests on an allowed difference "
                f"({d.get('field')}: {d.get('message')}), which --no-allowed-differences "
                "refuses; compare endpoints that differ only in their quantization"
            )
    return out
