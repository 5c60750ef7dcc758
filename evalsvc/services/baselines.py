"""Blessed baselines: a finished run's baseline samples as the reference later runs reuse.

Contract:
- ``bless(store, run_ids, suites=…, note=…, by=…)`` stores one blessing per suite of the runs
  (``store.blessed``, migration 0007), keyed by ``fingerprint``: a hash of the baseline
  endpoint's provenance fingerprint (``evalsvc.domain.provenance_fingerprint``), the suite
  snapshot (its spec without the gate: a gate does not change what the baseline answers), the
  seed, and the run's decoding and calibration options. The items a suite plans are a function
  of its snapshot and seed, so the key covers them. Several runs (``bless R1 R2 R3``) must
  share every suite's key; the **first** run's samples are the ones reused, and all of them
  measure the baseline's noise floor between runs (``noise_floor``). One run blesses without a
  noise floor; two are refused (an SD of two runs is no floor: at least three). A blessing
  belongs to the endpoint its runs measured (``evalsvc.services.identity``: the registered
  name, or the normalized base URL, recorded on the run's baseline snapshot): the runs must
  share it, and a run recorded before identities existed is refused (run it again).
- ``Reuse`` is what a run does with blessings (``services.runs._execute``): once the baseline is
  probed, each suite whose kind is ``Suite.baseline_reusable`` and whose key has an unrevoked
  blessing **measured on this run's baseline endpoint** (same identity: the provenance facts a
  server reports name a model, not a deployment, so a second server reporting the same facts
  never donates its samples) younger than ``EVALSVC_BASELINE_MAX_AGE`` gets the blessed run's
  error-free baseline
  samples copied in and marked done, so the runner sends those items to the candidates only
  (the mechanism of ``compare(reuse_baseline_from=…)`` that sweeps use). A key that changed or
  a stale blessing re-runs the baseline with a warning naming why and the command that
  refreshes it; so does a blessing of the same key on another endpoint (``other-endpoint``) or
  one made before identities were recorded (``unbound``). ``annotate(report)`` adds
  ``baseline_reuse`` (one entry per suite) to the report (``evalsvc.reports._reuse.reuse_lines``
  renders it); each entry carries ``blessing``, ``endpoint`` (the blessing's identity),
  ``baseline_endpoint`` (this run's), ``measured_at`` (when the blessed run finished),
  ``age_s`` (the blessing's age), ``applied`` and ``reason`` (why, and how to make it apply).
- Errors are ``UsageError`` (exit 2, 422 over REST) naming the fix; an unknown blessing or run
  is ``LookupError`` (exit 2, 404).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from itertools import combinations
from typing import Any

from evalsvc.db import SampleWriter, Store
from evalsvc.domain import (
    FINGERPRINT_FIELDS,
    EndpointRef,
    Provenance,
    RunInfo,
    RunOptions,
    RunStatus,
    provenance_fingerprint,
)
from evalsvc.reports import human_age
from evalsvc.services.identity import shown
from evalsvc.settings import Settings
from evalsvc.suites import Suite, pilot_name, suite_kinds

#: Spec keys a suite's key leaves out: they change how a run is gated or described, never what
#: the baseline answers.
_NOT_KEYED = frozenset({"gate", "resolved_gate", "description", "comparability"})

#: Runs a blessing needs to measure its noise floor (an SD over two values is one difference).
MIN_NOISE_RUNS = 3


class UsageError(ValueError):
    """A blessing that cannot be made as asked (exit 2, HTTP 422); the message names the fix."""


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def suite_key(snapshot: dict[str, Any], options: RunOptions, prov: Provenance) -> dict[str, Any]:
    """The parts a blessing of one suite is keyed by, from the run's suite snapshot (what
    ``services.runs._execute`` records: ``{"name", "kind", "version", "spec"}``), its options
    and the baseline's probed provenance. Each part is kept so a mismatch names what changed."""
    spec = {k: v for k, v in (snapshot.get("spec") or {}).items() if k not in _NOT_KEYED}
    kind = _snapshot_suite(snapshot)
    if kind is not None:  # the kind's own form: specs that plan the same items key the same
        spec = kind.reuse_spec(spec)
    data = prov.model_dump(mode="json")
    return {
        "suite": snapshot["name"],
        "kind": snapshot.get("kind"),
        "version": snapshot.get("version"),
        "suite_fingerprint": _hash(spec)[:16],
        "seed": spec.get("seed"),
        "decoding": options.sampling.model_dump(mode="json") if options.sampling else None,
        "calibrate": options.calibrate,
        "endpoint_fingerprint": provenance_fingerprint(prov),
        "endpoint": {name: data.get(name) for name in FINGERPRINT_FIELDS},
    }


def key_fingerprint(key: dict[str, Any]) -> str:
    """The hash blessings are found by (the ``endpoint`` details are in its fingerprint)."""
    return _hash({k: v for k, v in key.items() if k != "endpoint"})


def changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two keys, endpoint fields as ``endpoint.<field>``."""
    out = [k for k in sorted(set(old) | set(new))
           if k not in ("endpoint", "endpoint_fingerprint") and old.get(k) != new.get(k)]
    eo, en = old.get("endpoint") or {}, new.get("endpoint") or {}
    out += [f"endpoint.{k}" for k in sorted(set(eo) | set(en)) if eo.get(k) != en.get(k)]
    if not out and old.get("endpoint_fingerprint") != new.get("endpoint_fingerprint"):
        out.append("endpoint_fingerprint")
    return out


def _snapshot_suite(snapshot: dict[str, Any]) -> type[Suite] | None:
    return suite_kinds().get(str(snapshot.get("kind")))


def reusable(snapshot: dict[str, Any]) -> bool:
    cls = _snapshot_suite(snapshot)
    return bool(cls is None or cls.baseline_reusable)


# ---------------------------------------------------------------------------------- blessing


def _finished_run(store: Store, run_id: str) -> RunInfo:
    from evalsvc.services.history import AmbiguousRunId, RunNotFound, find_run

    try:  # an id or a unique 8+ character prefix, as every command that names a run
        run = find_run(store, run_id)
    except RunNotFound as exc:
        raise LookupError(f"{exc} (list them: evalsvc runs list)") from None
    except AmbiguousRunId as exc:
        raise UsageError(f"{exc}: give more of the id") from None
    run_id = run.id
    if run.status != RunStatus.completed:
        raise UsageError(
            f"run {run_id} is {run.status.value}: only a completed run's baseline can be "
            "blessed (wait for it, or bless another: evalsvc runs list --status completed)"
        )
    return run


def _run_keys(store: Store, run: RunInfo) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """``{suite: (snapshot, key)}`` of a finished run."""
    snaps = store.get_endpoint_snapshots(run.id)
    if "baseline" not in snaps:
        raise UsageError(f"run {run.id} has no probed baseline to bless")
    prov = snaps["baseline"][1]
    return {
        s["name"]: (s, suite_key(s, run.spec.options, prov))
        for s in store.get_suite_snapshots(run.id)
    }


def _scores(store: Store, run_id: str, suite: str) -> dict[tuple[str, int], float]:
    return {
        (s.item_id, s.repeat): float(s.score)
        for s in store.get_samples(run_id, suite=suite, endpoint="baseline")
        if s.error is None and s.score is not None
    }


def _measured_on(store: Store, runs: Sequence[RunInfo]) -> str:
    """The endpoint identity every run's baseline was measured on (a blessing belongs to it)."""
    found: list[str] = []
    for run in runs:
        identity = store.get_endpoint_identities(run.id).get("baseline")
        if identity is None:
            raise UsageError(
                f"run {run.id} has no recorded baseline endpoint (a run from before evalsvc "
                "bound measurements to the endpoint they were made on, or one gated from logs): "
                "its baseline cannot be blessed; run the baseline again and bless that run"
            )
        found.append(identity)
    if len(set(found)) > 1:
        raise UsageError(
            "the runs' baselines were measured on different endpoints "
            f"({', '.join(sorted(set(found)))}); a blessing aggregates runs of the same endpoint"
        )
    return found[0]


def noise_floor(per_run: Sequence[dict[tuple[str, int], float]]) -> dict[str, Any] | None:
    """The baseline's variation between runs of the same key: the SD (n−1) of its mean score
    across runs, and the discordance (the share of units, item × sample, scored differently by
    two runs) averaged and maximised over the pairs of runs, on the units every run scored.
    None for fewer than two runs. With greedy decoding on a deterministic engine both are 0;
    batch-dependent numerics (vLLM's batch invariance notes) make them not."""
    if len(per_run) < 2:
        return None
    common = set.intersection(*(set(r) for r in per_run))
    if not common:
        return {"runs": len(per_run), "units": 0, "sd": None, "discordance": None,
                "discordance_max": None, "means": []}
    units = sorted(common)
    means = [statistics.fmean(r[u] for u in units) for r in per_run]
    pairs = [
        sum(1 for u in units if a[u] != b[u]) / len(units) for a, b in combinations(per_run, 2)
    ]
    return {
        "runs": len(per_run),
        "units": len(units),
        "means": [round(m, 6) for m in means],
        "sd": statistics.stdev(means),
        "discordance": statistics.fmean(pairs),
        "discordance_max": max(pairs),
    }


def bless(
    store: Store,
    run_ids: Sequence[str],
    *,
    suites: Iterable[str] | None = None,
    note: str | None = None,
    by: str | None = None,
) -> list[dict[str, Any]]:
    """Bless the baseline of ``run_ids`` (the first's samples are reused; all of them give the
    noise floor) for ``suites`` (default: every reusable suite of the runs). Returns the
    blessings made, one per suite."""
    if not run_ids:
        raise UsageError("name a run to bless: evalsvc baselines bless RUN [RUN2 RUN3]")
    runs = [_finished_run(store, r) for r in dict.fromkeys(run_ids)]  # unknown: 404 over REST
    runs = list({r.id: r for r in runs}.values())  # a prefix and the full id name one run
    ids = [r.id for r in runs]
    if len(ids) == 2:
        raise UsageError(
            f"two runs cannot measure a noise floor (it needs at least {MIN_NOISE_RUNS} runs of "
            "the same baseline): bless one run, or add a third"
        )
    keyed = [_run_keys(store, r) for r in runs]
    first = keyed[0]
    wanted = list(dict.fromkeys(suites)) if suites else None
    if wanted:
        unknown = [s for s in wanted if s not in first]
        if unknown:
            raise UsageError(
                f"run {ids[0]} has no suite {', '.join(unknown)} (its suites: "
                f"{', '.join(first) or 'none'})"
            )
        refused = [s for s in wanted if not reusable(first[s][0])]
        if refused:
            raise UsageError(
                f"{', '.join(refused)}: a kind whose statistic needs both sides under the same "
                "traffic (determinism, speed) always runs both sides; leave it out of --suite"
            )
    names = wanted or [s for s in first if reusable(first[s][0])]
    if not names:
        raise UsageError(
            f"run {ids[0]} has no suite whose baseline can be reused (determinism and speed "
            "always run both sides)"
        )
    baseline_url = runs[0].spec.baseline.url
    endpoint = _measured_on(store, runs)
    out = []
    for name in names:
        snap, key = first[name]
        fp = key_fingerprint(key)
        for run, other in zip(runs[1:], keyed[1:], strict=True):
            if name not in other:
                raise UsageError(f"run {run.id} has no suite {name}: bless runs of the same suites")
            if key_fingerprint(other[name][1]) != fp:
                what = ", ".join(changed_fields(key, other[name][1]))
                raise UsageError(
                    f"suite {name}: run {run.id}'s baseline differs from run {ids[0]}'s ({what}); "
                    "a blessing aggregates runs of the same endpoint, suite and seed"
                )
        per_run = [_scores(store, r, name) for r in ids]
        if not per_run[0]:
            raise UsageError(f"run {ids[0]} has no error-free baseline sample of suite {name}")
        out.append(
            store.blessed.add(
                fingerprint=fp,
                suite=name,
                endpoint_url=baseline_url,
                endpoint=endpoint,
                key=key,
                run_ids=ids,
                items=len({item for item, _ in per_run[0]}),
                noise=noise_floor(per_run),
                note=note,
                blessed_by=by,
            )
        )
    return out


def get(store: Store, blessing_id: str) -> dict[str, Any]:
    found = store.blessed.get(blessing_id)
    if found is None:
        raise LookupError(f"no blessed baseline {blessing_id!r} (list them: evalsvc baselines list)")
    return found


def revoke(store: Store, blessing_id: str, *, by: str | None = None) -> dict[str, Any]:
    found = store.blessed.revoke(blessing_id, by=by)
    if found is None:
        raise LookupError(f"no blessed baseline {blessing_id!r} (list them: evalsvc baselines list)")
    return found


def age_s(blessing: dict[str, Any], now: datetime | None = None) -> float:
    created: datetime = blessing["created_at"]
    return ((now or datetime.now(UTC)) - created).total_seconds()


def view(blessing: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """A blessing as JSON views show it (dates as ISO text, its age and whether it is stale)."""
    age = age_s(blessing, now)
    max_age = Settings().baseline_max_age.total_seconds()
    out = {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in blessing.items()}
    out["age_s"] = round(age, 1)
    out["stale"] = age > max_age
    return out


# ---------------------------------------------------------------------------------- reuse


class Reuse:
    """What one run does with blessed baselines (see the module contract)."""

    def __init__(self, store: Store, run: RunInfo, suites: Sequence[Suite]) -> None:
        self.store, self.run, self.suites = store, run, list(suites)
        self.enabled = run.spec.options.blessed_baseline
        self.entries: dict[str, dict[str, Any]] = {}
        self.warnings: list[str] = []

    def apply(
        self,
        ref: EndpointRef,
        prov: Provenance,
        done: set[tuple[str, str, str, int]],
        *,
        endpoint: str,
    ) -> None:
        """Copy every matching blessing's baseline samples into the run and add their keys to
        ``done`` (called once the baseline is probed, before any item is sent). ``endpoint`` is
        the identity of this run's baseline (``evalsvc.services.identity``)."""
        now = datetime.now(UTC)
        max_age = Settings().baseline_max_age
        for suite in self.suites:
            snap = {"name": suite.name, "kind": suite.kind, "version": suite.version,
                    "spec": {**suite.spec.model_dump(mode="json"), **suite.snapshot_extra()}}
            if not suite.baseline_reusable:
                self.entries[suite.name] = self._none(
                    suite.name, "not-reusable", endpoint,
                    "a kind whose statistic needs both sides under the same traffic always "
                    "runs both sides")
                continue
            if not self.enabled:
                self.entries[suite.name] = self._none(
                    suite.name, "off", endpoint, "blessed baselines are off for this run "
                    "(--no-blessed-baseline)")
                continue
            key = suite_key(snap, self.run.spec.options, prov)
            fp = key_fingerprint(key)
            found = self.store.blessed.find(fp, endpoint=endpoint)
            if found is None:
                elsewhere = self.store.blessed.find(fp, endpoint=None)
                if elsewhere is not None:
                    self._elsewhere(suite.name, endpoint, elsewhere)
                else:
                    self._unmatched(suite.name, ref, endpoint, key)
                continue
            age = age_s(found, now)
            entry = self._entry(found, age, endpoint)
            if age > max_age.total_seconds():
                why = (f"the blessed baseline {found['id']} is {human_age(age)} old, past "
                       f"EVALSVC_BASELINE_MAX_AGE ({human_age(max_age.total_seconds())}): the "
                       f"baseline was run again; refresh it: evalsvc baselines bless {self.run.id}")
                entry.update(status="stale", reason=why)
                self.entries[suite.name] = entry
                self.warnings.append(f"{suite.name}: {why}")
                continue
            entry["items_reused"] = self._copy(found["run_id"], suite.name, done)
            entry.update(status="reused", applied=True, reason=(
                f"blessed on {shown(found['endpoint'])}, this run's baseline; same suite, seed, "
                "decoding and provenance fingerprint"))
            self.entries[suite.name] = entry

    def _none(self, name: str, status: str, endpoint: str, reason: str) -> dict[str, Any]:
        return {"suite": name, "status": status, "blessing": None, "endpoint": None,
                "baseline_endpoint": endpoint, "measured_at": None, "applied": False,
                "reason": reason}

    def _entry(self, found: dict[str, Any], age: float, endpoint: str) -> dict[str, Any]:
        blessed_run = self.store.get_run(found["run_id"])
        measured = blessed_run.finished_at if blessed_run is not None else None
        return {
            "suite": found["suite"],
            "blessing": found["id"],
            "blessing_id": found["id"],
            "blessed_run": found["run_id"],
            "runs": found["run_ids"],
            "blessed_at": found["created_at"].isoformat(),
            "age_s": round(age, 1),
            "noise": found.get("noise"),
            "endpoint": found.get("endpoint"),
            "baseline_endpoint": endpoint,
            "measured_at": measured.isoformat() if measured is not None else None,
            "applied": False,
        }

    def _elsewhere(self, name: str, endpoint: str, found: dict[str, Any]) -> None:
        """A blessing of this very key measured on another endpoint (or on one not recorded):
        its samples are not this baseline's, so the baseline runs here."""
        entry = self._entry(found, age_s(found), endpoint)
        if found.get("endpoint") is None:
            why = (f"the blessed baseline {found['id']} was blessed before evalsvc recorded the "
                   "endpoint a blessing was measured on, so it is not reused; the baseline was "
                   f"run again; bless again to reuse it: evalsvc baselines bless {self.run.id}")
            entry.update(status="unbound", reason=why)
        else:
            why = (f"blessed on {shown(found['endpoint'])}; this run's baseline is "
                   f"{shown(endpoint)}: the blessing {found['id']} was not used and the baseline "
                   "was run again (a blessing applies only to the endpoint it was measured on); "
                   f"to reuse one here, bless a run of this endpoint: evalsvc baselines bless "
                   f"{self.run.id}, or run against the registered endpoint "
                   f"{shown(found['endpoint'])} by its name")
            entry.update(status="other-endpoint", reason=why)
        self.entries[name] = entry
        self.warnings.append(f"{name}: {why}")

    def _unmatched(self, name: str, ref: EndpointRef, endpoint: str, key: dict[str, Any]) -> None:
        last = self.store.blessed.latest_for_suite(name, endpoint=endpoint, endpoint_url=ref.url)
        if last is None:
            self.entries[name] = self._none(name, "none", endpoint,
                                            f"no blessed baseline of this suite on {shown(endpoint)}")
            return
        what = ", ".join(changed_fields(last["key"], key)) or "the key"
        entry = self._entry(last, age_s(last), endpoint)
        why = (f"the blessed baseline {last['id']} does not match this baseline ({what} "
               f"changed): the baseline was run again; bless this run to reuse it: "
               f"evalsvc baselines bless {self.run.id}")
        entry.update(status="changed", changed=what, reason=why)
        self.entries[name] = entry
        self.warnings.append(f"{name}: {why}")

    def _copy(self, source: str, suite: str, done: set[tuple[str, str, str, int]]) -> int:
        # A calibrated suite's pilot samples too: the pilot then picks the same levels.
        names = {suite, pilot_name(suite)}
        items: set[str] = set()
        with SampleWriter(self.store, self.run.id) as writer:
            for name in names:
                for sample in self.store.get_samples(source, suite=name, endpoint="baseline"):
                    if sample.error is not None:
                        continue  # an item that errored in the blessed run is sent again
                    if name == suite:
                        items.add(sample.item_id)
                    if sample.key not in done:  # a resumed run has them already
                        writer.add(sample)
                        done.add(sample.key)
        return len(items)

    def annotate(self, report: dict[str, Any]) -> dict[str, Any]:
        """Add ``baseline_reuse`` and this run's reuse warnings to its JSON report."""
        if not self.entries:
            return report
        report["baseline_reuse"] = [self.entries[s.name] for s in self.suites
                                    if s.name in self.entries]
        report["warnings"] = [*report.get("warnings", []), *self.warnings]
        return report


# ---------------------------------------------------------------------------------- dashboard


def run_view(store: Store, run_id: str, status: str, report: dict[str, Any] | None,
             *, admin: bool) -> dict[str, Any]:
    """The run page's "Baseline" section: the report's reuse lines, the unrevoked blessings
    made from this run, and whether (and as what) the bless button is offered: on a completed
    run with a reusable suite; "refresh" when this run re-ran a stale or changed blessing."""
    from evalsvc.reports import noise_text, reuse_lines

    entries = (report or {}).get("baseline_reuse") or []
    blessings = []
    for b in store.blessed.for_run(run_id):
        shown = view(b)
        shown.update(age=human_age(shown["age_s"]), floor=noise_text(b.get("noise")))
        blessings.append(shown)
    snaps = store.get_suite_snapshots(run_id) if status == RunStatus.completed.value else []
    return {
        "lines": reuse_lines(report or {}),
        "blessings": blessings,
        "can_bless": any(reusable(s) for s in snaps),
        "refresh": any(e.get("status") in ("stale", "changed", "other-endpoint", "unbound")
                       for e in entries) or bool(blessings),
        "admin": admin,
    }
