"""The noise floor on file, read: an A/A calibration's figures per suite and the latest one of
an endpoint's provenance fingerprint, attached to a run's gates (``evalsvc.services.calibration``
runs and stores calibrations; this module only reads them, so the runs service can use it).

Contract: :func:`figures` computes one suite's ``evalsvc.gates.NoiseFloor`` from a stored A/A
report (the calibration module's docstring says what each figure is); :func:`floor_for` finds
the latest **adopted** calibration of (endpoint identity, fingerprint, suite) through
``Store.runs.latest_calibration``: a floor belongs to the endpoint it was measured on (its
registered name or normalized URL, ``evalsvc.services.identity``), since any server can report
another's fingerprint, and to the operator's policy (a submitter's calibration is used only once
an admin adopts it). :func:`attach_floors` puts it on each suite's gate once the baseline is
probed (``evalsvc.services.runs``), never failing the run when the lookup fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from evalsvc.domain import Provenance, provenance_fingerprint
from evalsvc.gates import NoiseFloor

if TYPE_CHECKING:
    from evalsvc.db import Store
    from evalsvc.suites import Suite

def figures(
    store: Store,
    report: dict[str, Any],
    suite: str,
    *,
    run_id: str,
    fingerprint: str,
    measured_at: datetime,
    endpoint: str | None = None,
    adopted_by: str | None = None,
    submitted_by: str | None = None,
) -> NoiseFloor:
    """One suite's noise floor from an A/A run's report (the module contract)."""
    entries = [
        s for cand in report.get("candidates") or [] for s in cand.get("suites") or []
        if s.get("suite") == suite
    ]
    discordant = 0.0
    pairs = 0
    counted = True
    for e in entries:
        d = (e.get("details") or {}).get("discordance")
        n = int(e.get("n") or 0)
        if d is None:
            counted = False
            break
        discordant += float(d) * n
        pairs += n
    if not counted:
        discordant, pairs = _sample_discordance(store, run_id, suite)
    noise = [(e.get("details") or {}).get("noise") or {} for e in entries]
    sides = [n["baseline"] for n in noise[:1] if "baseline" in n]
    sides += [n["candidate"] for n in noise if "candidate" in n]
    answers = sum(int(s.get("answers") or 0) for s in sides)
    clusters = sum(int(s.get("clusters") or 0) for s in sides)
    return NoiseFloor(
        calibration=run_id,
        measured_at=measured_at.isoformat(),
        fingerprint=fingerprint,
        discordance=discordant / pairs if pairs else None,
        pairs=pairs,
        instability=sum(int(s.get("unstable") or 0) for s in sides) / answers if answers else None,
        varying_clusters=(
            sum(int(s.get("varying_clusters") or 0) for s in sides) / clusters if clusters else None
        ),
        clusters=clusters or None,
        endpoint=endpoint,
        adopted_by=adopted_by,
        submitted_by=submitted_by,
    )
def _sample_discordance(store: Store, run_id: str, suite: str) -> tuple[float, int]:
    """Pairs (item, repeat) scored on the baseline pass and a candidate pass, and how many of
    them scored differently: for gates that do not report a discordance (continuous scores)."""
    base: dict[tuple[str, int], float] = {}
    others: list[tuple[tuple[str, int], float]] = []
    for s in store.get_samples(run_id, suite=suite):
        if s.score is None:
            continue
        key = (s.item_id, s.repeat)
        if s.endpoint == "baseline":
            base[key] = s.score
        else:
            others.append((key, s.score))
    paired = [(base[k], v) for k, v in others if k in base]
    return float(sum(1 for b, c in paired if b != c)), len(paired)
def floor_for(store: Store, fingerprint: str, suite: str, *, endpoint: str) -> NoiseFloor | None:
    """The noise floor of the latest adopted calibration measured on ``endpoint`` (an identity)
    with the provenance ``fingerprint`` that gated ``suite``."""
    found = store.runs.latest_calibration(fingerprint=fingerprint, suite=suite, endpoint=endpoint)
    if found is None:
        return None
    return figures(
        store, found["report"], suite, run_id=found["run_id"], fingerprint=fingerprint,
        measured_at=found["finished_at"], endpoint=found["endpoint"],
        adopted_by=found["adopted_by"], submitted_by=found["submitted_by"],
    )


def attach_floors(
    store: Store, suites: Sequence[Suite], baseline: Provenance, *, endpoint: str
) -> None:
    """Put the baseline's adopted noise floor on this endpoint (if any) on each suite's gate. A
    lookup that fails (the database) leaves the gates without one: a floor is evidence, never
    required."""
    fingerprint = provenance_fingerprint(baseline)
    for suite in suites:
        if not suite.gate_bound:
            continue
        try:
            floor = floor_for(store, fingerprint, suite.name, endpoint=endpoint)
        except Exception:  # noqa: BLE001 - the run goes on as if nothing was on file
            floor = None
        if floor is not None:
            suite.attach_noise_floor(floor)
