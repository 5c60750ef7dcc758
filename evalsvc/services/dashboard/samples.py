"""The all-samples browser: every item of a suite with both sides, paged and filtered by
candidate, slice and outcome.

See the package docstring for the contract every page keeps.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from evalsvc.db import Store
from evalsvc.domain import Sample
from evalsvc.suites import Suite

from ._common import (
    NotFound,
    _get,
    _labels_of,
    _log,
    expected_text,
    item_prompt,
    kind_class,
    notes_of,
)

#: The samples browser's outcomes of an item (one repeat) between baseline and a candidate.
OUTCOMES = ("regression", "improvement", "unchanged", "scored", "error", "unpaired")


#: Items per page of the samples browser (its largest page: the store reads outputs only for
#: the page shown).
SAMPLES_PAGE_MAX = 200


def _outcome(cls: type[Suite], binary: bool, b: Any, c: Any) -> str:
    """``b``/``c``: ``(score, errored, fields)`` of the baseline's and the candidate's sample;
    ``binary``: the kind scores items right/wrong (``Suite.shows_flips``)."""
    if b is None or c is None:
        return "unpaired"
    if b[1] or c[1] or b[0] is None or c[0] is None:
        return "error"
    if not binary:  # scores that are not right/wrong (KLD, determinism, speed)
        return "scored"
    return cls.flip(float(b[0]), float(c[0])) or "unchanged"


def _side(x: Sample | None, cls: type[Suite]) -> dict[str, Any] | None:
    if x is None:
        return None
    try:
        logprobs = cls.sample_logprobs(x.data)
    except Exception:  # a plugin's bug loses the logprobs, never the page
        _log.exception("kind %r: sample_logprobs of %r failed", cls.kind, x.item_id)
        logprobs = None
    return {"output": x.output, "score": x.score, "error": x.error, "latency_s": x.latency_s,
            "prompt_tokens": x.prompt_tokens, "completion_tokens": x.completion_tokens,
            "logprobs": logprobs, "notes": notes_of(cls, x), "thinking": _thinking(x.data)}


def _thinking(data: dict[str, Any]) -> dict[str, Any] | None:
    """The sample's thinking trace as the page shows it (``evalsvc.suites._thinking.trace``'s
    record): its text when kept, its token counts and what went wrong; ``None`` without one."""
    rec = data.get("thinking") if isinstance(data, dict) else None
    if not isinstance(rec, dict) or not (rec.get("tokens") or rec.get("text")
                                         or rec.get("leaked")):
        return None
    flags = [label for key, label in (("budget_exhausted", "cut at the token budget"),
                                       ("loop", "loops"), ("unclosed", "never closed"))
             if rec.get(key)]
    leaked = [str(m) for m in rec.get("leaked") or []]
    if leaked:
        flags.append("leaked markup " + " ".join(leaked[:5]))
    return {"text": rec.get("text"), "tokens": rec.get("tokens"),
            "answer_tokens": rec.get("answer_tokens"), "source": rec.get("tokens_source"),
            "finish_reason": rec.get("finish_reason"), "repetition": rec.get("repetition"),
            "flags": flags}


def samples_view(
    store: Store,
    run_id: str,
    suite: str,
    *,
    role: str | None = None,
    slice_: str | None = None,
    outcome: str | None = None,
    query: str | None = None,
    offset: int = 0,
    limit: int = 50,
) -> dict[str, Any]:
    """Every item of one suite, paged (``query``: only items whose id or either side's output
    contains the text, case-insensitive): its slice and outcome (``OUTCOMES``) between the
    baseline and ``role``, and for the page shown both sides' output, score, error and timing,
    the prompt, the expected answer and what the kind stored of the logprobs
    (``Suite.sample_logprobs``). The filters read one light index query (scores, error
    flags and the kind's slice fields: no text); outputs are read for the page's items only."""
    run = _get(store, run_id)
    snaps = {s["name"]: s for s in store.get_suite_snapshots(run_id)}
    if suite not in snaps:
        raise NotFound(f"run {run_id} has no suite {suite!r}")
    roles = [f"candidate:{i}" for i in range(len(run.spec.candidates))]
    role = role or (roles[0] if roles else None)
    if role not in roles:
        raise NotFound(f"run {run_id} has no candidate {role!r}")
    snap = snaps[suite]
    cls = kind_class(snap["kind"])
    outcome = outcome if outcome in OUTCOMES else None  # an unknown value filters nothing
    limit = max(1, min(int(limit), SAMPLES_PAGE_MAX))
    offset = max(0, int(offset))
    sides: dict[str, dict[tuple[str, int], tuple[Any, bool, dict[str, Any]]]] = {
        "baseline": {}, role: {}}
    order: dict[tuple[str, int], None] = {}
    for endpoint, item, rep, score, errored, fields in store.dashboard.sample_index(
        run_id, suite, cls.slice_fields
    ):
        if endpoint in sides:
            sides[endpoint][(item, rep)] = (score, errored, fields)
            order[(item, rep)] = None
    query = (query or "").strip()[:200] or None
    matching = (store.dashboard.items_matching(run_id, suite, query, ["baseline", role])
                if query else None)
    binary = cls.shows_flips()
    entries: list[tuple[str, int, str, str]] = []
    counts = Counter[str]()
    slices: set[str] = set()
    for key in order:
        b, c = sides["baseline"].get(key), sides[role].get(key)
        way = _outcome(cls, binary, b, c)
        sl = cls.slice_label((b or c or (None, False, {}))[2]) or "all"
        slices.add(sl)
        if slice_ and sl != slice_:
            continue
        if matching is not None and key[0] not in matching:
            continue
        counts[way] += 1  # within the chosen slice: the outcome menu says what it would show
        if outcome and way != outcome:
            continue
        entries.append((key[0], key[1], way, sl))
    shown = entries[offset:offset + limit]
    full: dict[tuple[str, str, int], Sample] = {}
    ids = list(dict.fromkeys(e[0] for e in shown))
    for x in store.dashboard.samples_of_items(run_id, suite, ids) if ids else []:
        full[(x.endpoint, x.item_id, x.repeat)] = x
    built: dict[str, Suite | None] = {}
    rows = []
    for item, rep, way, sl in shown:
        sb, sc = full.get(("baseline", item, rep)), full.get((role, item, rep))
        data = (sb or sc).data if (sb or sc) is not None else {}  # type: ignore[union-attr]
        # A kind may keep the prompt with the baseline's first answer only (dataset); the
        # page's samples include it (every sample of the shown items is read).
        first = full.get(("baseline", item, 0))
        prompt = item_prompt(snap, item, first.data if first is not None else data, built)
        rows.append({"item_id": item, "repeat": rep, "outcome": way, "slice": sl,
                     "prompt": prompt, "expected": expected_text(cls, data),
                     "baseline": _side(sb, cls), "candidate": _side(sc, cls)})
    labels = _labels_of(store, run)
    return {
        "run_id": run_id,
        "suite": suite,
        "kind": snap["kind"],
        "role": role,
        "roles": roles,
        "labels": labels,
        "slices": sorted(slices),
        "slice": slice_ or "",
        "outcomes": [o for o in OUTCOMES if counts.get(o)],
        "outcome": outcome or "",
        "query": query or "",
        "counts": dict(counts),
        "total": len(entries),
        "offset": offset,
        "limit": limit,
        "previous": max(0, offset - limit) if offset > 0 else None,
        "next": offset + limit if offset + limit < len(entries) else None,
        "rows": rows,
    }
