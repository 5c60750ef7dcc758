"""Helpers every dashboard page shares: endpoint and suite labels, the run lookup, the kind
registry lookups (a page knows no kind by name), CI boundaries.

See the package docstring for the contract every page keeps.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import Any

from evalsvc.db import Store
from evalsvc.domain import RunInfo
from evalsvc.suites import Suite, SuiteSpec, suite_kinds

_log = logging.getLogger(__name__)


class NotFound(LookupError):
    """No such run (the views answer 404)."""


def _iso(t: datetime | None) -> str | None:
    return t.astimezone(UTC).isoformat() if t else None


def endpoint_name(name: str | None, url: str | None, model: str | None) -> str:
    """The one label every view gives an endpoint: its registered name, else host:port, with
    the engine's model name (``evalsvc.reports.endpoint_label``; URL userinfo redacted)."""
    from evalsvc.endpoints import redact_url
    from evalsvc.reports import endpoint_label

    return endpoint_label({"name": name, "url": redact_url(url) if url else "", "model": model})


def _roles(run: RunInfo) -> list[str]:
    return ["baseline", *(f"candidate:{i}" for i in range(len(run.spec.candidates)))]


def endpoint_labels(run: RunInfo, stored: dict[str, dict[str, str | None]]) -> dict[str, str]:
    """``{role: label}`` of a run's endpoints: from their snapshots (``stored``, with the
    served model) once the run has started, else from the spec."""
    out = {}
    for i, role in enumerate(_roles(run)):
        ref = run.spec.baseline if i == 0 else run.spec.candidates[i - 1]
        snap = stored.get(role) or {}
        out[role] = endpoint_name(snap.get("name") or ref.name, snap.get("url") or ref.url,
                                  snap.get("model") or ref.model)
    return out


def suite_label(requested: str) -> str:
    """A requested suite as a name: a file path (``--suite ./x.yaml``) shows its file's stem
    until the run has started and its snapshot gives the suite's own name."""
    if "/" in requested or "\\" in requested or requested.endswith((".yaml", ".yml")):
        stem = requested.replace("\\", "/").rsplit("/", 1)[-1]
        return stem.rsplit(".", 1)[0] if stem.endswith((".yaml", ".yml")) else stem
    return requested


def _get(store: Store, run_id: str) -> RunInfo:
    run = store.get_run(run_id) if re.fullmatch(r"[0-9a-f]{1,64}", run_id) else None
    if run is None:
        raise NotFound(f"no run {run_id!r}")
    return run


def _boundary(s: dict[str, Any]) -> float | None:
    """Where the gate's null boundary sits on the Δ axis (GateOutcome's conventions)."""
    margin = s.get("margin")
    if margin is None:
        return None
    d = s.get("details") or {}
    # The gate's direction is in details.gate (the resolved gate); older payloads had it at top.
    hib = d.get("higher_is_better", (d.get("gate") or {}).get("higher_is_better", True))
    return -float(margin) if hib else float(margin)


def _labels_of(store: Store, run: RunInfo) -> dict[str, str]:
    return endpoint_labels(run, store.dashboard.endpoints_of([run.id]).get(run.id, {}))


def kind_class(kind: str) -> type[Suite]:
    """The registered class of ``kind``; the base class (generic parts only) when it is not
    installed (any more)."""
    return suite_kinds().get(kind, Suite)


def kind_template(kind: str) -> str | None:
    """The Jinja source of ``kind``'s dashboard section (shipped beside the kind), if any."""
    cls = suite_kinds().get(kind)
    return cls.template_source() if cls is not None else None


def _suite_of(snapshot: dict[str, Any]) -> Suite | None:
    """The suite as it ran, from its snapshot (for prompts rebuilt from the seed); ``None`` when
    its kind is not installed or the stored spec no longer validates."""
    cls = suite_kinds().get(str(snapshot.get("kind")))
    if cls is None:
        return None
    # The snapshot keeps the spec plus how it was gated (``resolved_gate``) and what the kind
    # records besides (``Suite.snapshot_extra``: a judge, the rows a dataset holds), which are
    # not fields of SuiteSpec (it forbids extra keys).
    spec = {k: v for k, v in dict(snapshot.get("spec") or {}).items()
            if k in SuiteSpec.model_fields}
    try:
        return cls(SuiteSpec.model_validate(spec))
    except (ValueError, TypeError, KeyError) as exc:
        _log.info("suite %r: stored spec not usable for prompts: %s", snapshot.get("name"), exc)
        return None


def item_prompt(snapshot: dict[str, Any], item_id: str, data: dict[str, Any],
                built: dict[str, Suite | None]) -> str | None:
    """An item's prompt as text: what its sample ``data`` holds (``Suite.stored_prompt``),
    else ``Suite.prompt`` of the suite rebuilt from its snapshot (once per suite: ``built``
    caches it by name); ``None`` when neither knows it. A plugin's bug loses the prompt, never
    the page."""
    cls = kind_class(str(snapshot.get("kind")))
    try:
        prompt = cls.stored_prompt(data)
        if prompt is None:
            name = str(snapshot.get("name"))
            if name not in built:
                built[name] = _suite_of(snapshot)
            runnable = built[name]
            prompt = runnable.prompt(item_id, data) if runnable is not None else None
    except Exception:
        _log.exception("suite %r: prompt of %r failed", snapshot.get("name"), item_id)
        return None
    return prompt


def notes_of(cls: type[Suite], sample: Any) -> list[dict[str, str]]:
    """The kind's notes on one stored sample (``Suite.sample_notes``: a judge's verdicts and
    reasons...); a plugin's bug loses the notes, never the page."""
    try:
        notes = cls.sample_notes(dict(sample.data or {}))
    except Exception:
        _log.exception("kind %r: sample_notes failed", cls.kind)
        return []
    return [{"label": str(n.get("label", "")), "text": str(n.get("text", ""))} for n in notes]


def expected_text(cls: type[Suite], data: dict[str, Any]) -> str | int | float | None:
    """The kind's expected answer of an item (``Suite.expected_answer``) as one value: a list
    of acceptable answers is joined with commas."""
    try:
        expected = cls.expected_answer(data)
    except Exception:  # a plugin's bug loses the expected answer, never the page
        _log.exception("kind %r: expected_answer failed", cls.kind)
        return None
    if expected is None or isinstance(expected, (str, int, float)):
        return expected
    if isinstance(expected, (list, tuple)):
        return ", ".join(str(e) for e in expected)
    return str(expected)


def _suite_entry(report: dict[str, Any] | None, suite: str, role: str) -> dict[str, Any] | None:
    for cand in (report or {}).get("candidates") or []:
        if cand.get("role") == role:
            for s in cand.get("suites") or []:
                if s.get("suite") == suite:
                    return dict(s)
    return None


def _findings(entry: dict[str, Any]) -> list[dict[str, Any]]:
    from evalsvc.reports import suite_findings

    return [f.to_dict() for f in suite_findings(entry)]
