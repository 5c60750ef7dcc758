"""The flips page: the items whose score differs between baseline and candidate, with both
sides' prompts and outputs and where the two texts first diverge.

See the package docstring for the contract every page keeps.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from evalsvc.db import Store
from evalsvc.domain import Sample
from evalsvc.suites import Scored, Suite

from ._common import _get, _labels_of, expected_text, item_prompt, kind_class, notes_of

_TOKEN = re.compile(r"\w+|[^\w\s]|\s+", re.UNICODE)


def first_divergence(a: str, b: str) -> dict[str, Any]:
    """Split two outputs at their first differing token (words, punctuation and runs of
    whitespace; the endpoints' own token ids are not stored), for highlighting."""
    ta, tb = _TOKEN.findall(a), _TOKEN.findall(b)
    i = 0
    while i < min(len(ta), len(tb)) and ta[i] == tb[i]:
        i += 1

    def parts(tokens: list[str]) -> dict[str, str]:
        return {"same": "".join(tokens[:i]), "first": tokens[i] if i < len(tokens) else "",
                "rest": "".join(tokens[i + 1:])}

    return {"index": i, "baseline": parts(ta), "candidate": parts(tb)}


def _flipped_pairs(
    store: Store, run_id: str, suite: str, cls: type[Suite], role: str
) -> list[tuple[Scored, Scored]]:
    """The scored ``(baseline, candidate)`` pairs of ``role`` that may have flipped, by item and
    repeat: found by the database when the kind flips by a threshold (only flipped pairs are
    read), else every scored pair for the kind's own ``flip``."""
    if cls.flips_by_threshold():
        return [
            (("baseline", item, rep, sb, data), (role, item, rep, sc, data))
            for item, rep, sb, sc, data in store.dashboard.flipped_pairs(
                run_id, suite, role, cls.flip_threshold, cls.slice_fields
            )
        ]
    rows = store.dashboard.sample_scores(run_id, suite, cls.slice_fields)
    base = {(r[1], r[2]): r for r in rows if r[0] == "baseline"}
    cand = {(r[1], r[2]): r for r in rows if r[0] == role}
    return [(base[k], cand[k]) for k in sorted(base.keys() & cand.keys())
            if base[k][3] is not None and cand[k][3] is not None]


_WAYS = ("regression", "improvement")


def _count_flips(store: Store, run_id: str, snaps: list[dict[str, Any]], role: str) -> int:
    """Flipped pairs of ``role`` over the suites ``snaps`` (each kind's own ``flip``)."""
    n = 0
    for snap in snaps:
        cls = kind_class(snap["kind"])
        for rb, rc in _flipped_pairs(store, run_id, snap["name"], cls, role):
            n += cls.flip(float(rb[3]), float(rc[3])) is not None  # type: ignore[arg-type]
    return n


def flips_view(
    store: Store,
    run_id: str,
    *,
    suite: str | None = None,
    role: str | None = None,
    slice_: str | None = None,
    direction: str | None = None,
    query: str | None = None,
    limit: int = 200,
) -> dict[str, Any]:
    """Items whose outcome flipped between baseline and candidate (``Suite.flip``), with both
    outputs and the prompt (``Suite.prompt``): regressions (correct → incorrect) first.
    ``query`` keeps the items whose id, prompt, expected answer or either output contains it
    (case-insensitive)."""
    run = _get(store, run_id)
    snaps = store.get_suite_snapshots(run_id)
    flipping = [s for s in snaps if kind_class(s["kind"]).shows_flips()]
    roles = [f"candidate:{i}" for i in range(len(run.spec.candidates))]
    chosen = [s for s in flipping if suite in (None, "", s["name"])]
    # Flips per candidate (the candidate menu shows them); without a choice the page opens on
    # the first candidate that has any, not on one with none while another has seven.
    per_role = ({r: _count_flips(store, run_id, chosen, r) for r in roles}
                if len(roles) > 1 else {})
    if role not in roles:
        role = next((r for r in roles if per_role.get(r)), roles[0] if roles else None)
    needle = (query or "").strip().casefold()
    found: list[tuple[dict[str, Any], Scored, str, str]] = []
    slices: set[str] = set()
    counts = Counter[str]()
    for snap in chosen:
        cls = kind_class(snap["kind"])
        for rb, rc in _flipped_pairs(store, run_id, snap["name"], cls, role or ""):
            way: str | None = cls.flip(float(rb[3]), float(rc[3]))  # type: ignore[arg-type]
            if way is None:
                continue
            sl = cls.slice_label(rb[4]) or "all"
            slices.add(sl)
            counts[way] += 1
            if direction in _WAYS and way != direction:
                continue
            if slice_ and sl != slice_:
                continue
            found.append((snap, rb, way, sl))
    # Regressions first (what blocks a rollout), then by suite and item order.
    found.sort(key=lambda f: _WAYS.index(f[2]))
    rows: list[dict[str, Any]] = []
    matched = 0
    samples: dict[tuple[str, str, str, int], Sample] = {}
    built: dict[str, Suite | None] = {}
    # A search reads every flipped pair's text; without one, only the page shown.
    wanted = found if needle else found[:limit]
    for name in dict.fromkeys(f[0]["name"] for f in wanted):
        ids = [f[1][1] for f in wanted if f[0]["name"] == name]
        for x in store.dashboard.samples_of_items(run_id, name, ids):
            samples[(name, x.endpoint, x.item_id, x.repeat)] = x
    for snap, rb, way, sl in wanted:
        name = snap["name"]
        sb = samples.get((name, "baseline", rb[1], rb[2]))
        sc = samples.get((name, role or "", rb[1], rb[2]))
        if sb is None or sc is None:
            continue
        first = samples.get((name, "baseline", rb[1], 0)) or sb
        prompt = item_prompt(snap, sb.item_id, first.data, built)
        expected = expected_text(kind_class(snap["kind"]), sb.data)
        if needle:
            hay = " ".join(str(x) for x in (sb.item_id, prompt or "", expected or "",
                                            sb.output, sc.output)).casefold()
            if needle not in hay:
                continue
        matched += 1
        if len(rows) >= limit:
            continue
        rows.append({
            "suite": name,
            "kind": snap["kind"],
            "item_id": sb.item_id,
            "repeat": sb.repeat,
            "direction": way,
            "slice": sl,
            "expected": expected,
            "prompt": prompt,
            "baseline_output": sb.output,
            "candidate_output": sc.output,
            "diff": first_divergence(sb.output, sc.output),
            "notes": notes_of(kind_class(snap["kind"]), sc),
        })
    return {
        "run_id": run_id,
        "role": role,
        "roles": roles,
        "role_flips": per_role,
        "labels": _labels_of(store, run),
        "suites": [s["name"] for s in flipping],
        "suite": suite or "",
        "slices": sorted(slices),
        "slice": slice_ or "",
        "direction": direction or "",
        "query": query or "",
        "counts": dict(counts),
        "total": matched if needle else len(found),
        "rows": rows,
    }
