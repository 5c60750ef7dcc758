"""Alerts: what a finished run raises, how it is stored once and delivered once.

Contract:
- ``after_run(store, run_id)`` is called once a run has finished (``evalsvc.services.runs.
  compare`` for an in-process run, the worker for a claimed one, after the run's verdict is
  stored): it detects, stores and delivers; it never raises and never changes the run.
- **Identity.** Runs are "the same comparison" when they share the baseline URL, the candidate
  URL (both without a trailing slash) and the suite name: the key that stored gates, the trend
  page and ``/metrics`` already use. Endpoint *names* are labels (one name can be re-registered
  to another URL), so they never split or join an identity. Runs of a sweep (its
  configurations are served in turn at one URL) and calibrations (an endpoint against itself)
  are no step in that history: they raise nothing and are skipped as previous runs.
- **Kinds** (``KINDS``), each detected by a pure rule over the stored gates or runs:
  ``verdict_change`` (the verdict of an identity differs from its previous completed run's),
  ``margin_trend`` (over the last ``EVALSVC_ALERT_TREND_RUNS`` runs of an identity the worse end
  of Δ's interval fell run after run and crossed the gate's boundary −margin at the latest),
  ``error_streak`` (the last ``EVALSVC_ALERT_ERROR_STREAK`` finished runs of an endpoint URL all
  ended in ``error``) and ``stale_baseline`` (the run found its blessed baseline older than
  ``EVALSVC_BASELINE_MAX_AGE`` and ran the baseline again: the report's ``baseline_reuse``).
  ``register_detector`` adds a detector of another kind.
- **Once.** Every alert has a ``dedupe_key`` (kind, identity and the run that completed the
  event; an error streak: the run that began it; a stale baseline: the blessing); the store's
  unique index decides which of two concurrent raisers stores it (``AlertStore.raise_alert``),
  and a compare-and-set on its
  delivery state decides which process sends its webhooks (``AlertStore.claim_delivery``): at
  most once, also when the sender dies mid-way.
- **Webhooks** (``EVALSVC_ALERT_WEBHOOKS``): ``slack:URL`` gets ``{"text": ...}`` (its ``&``,
  ``<`` and ``>`` escaped: ``slack_escape``), ``json:URL`` or a bare URL the generic JSON body
  (``payload``). Each is sent through the server's egress
  policy (``EVALSVC_ALLOWED_ENDPOINTS``, the one that endpoints follow; no redirect is
  followed), with a timeout per attempt and retries with back-off on timeouts, connection
  errors, 429 and 5xx (tenacity); a 4xx other than 429 is final.
- Views call ``list_alerts``, ``acknowledge`` and ``open_count``; ``AlertNotFound`` (exit 2 /
  HTTP 404), ``AlertNotOpen`` (exit 2 / HTTP 409) and ``AlertConfigError`` (exit 2 / HTTP 422)
  are their errors.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from evalsvc.domain import RunInfo, RunStatus
from evalsvc.endpoints import redact_url
from evalsvc.settings import Settings

if TYPE_CHECKING:
    from evalsvc.db import Store

log = logging.getLogger(__name__)

KINDS = ("verdict_change", "margin_trend", "error_streak", "stale_baseline")
SEVERITIES = ("critical", "warning", "info")
#: Verdicts that make a change critical: the candidate may no longer replace the baseline.
_BAD = frozenset({"fail", "error", "non-comparable"})


class AlertConfigError(ValueError):
    """``EVALSVC_ALERT_WEBHOOKS`` (or another alert setting) cannot be used; says the fix."""


class AlertNotFound(LookupError):
    """No alert has this id."""


class AlertNotOpen(ValueError):
    """The alert was already acknowledged."""


# ---- webhooks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Webhook:
    url: str
    format: Literal["json", "slack"]

    @property
    def label(self) -> str:
        """How logs and stored deliveries name it: the format and host, never the path (a
        Slack webhook's path is its secret)."""
        from urllib.parse import urlsplit

        return f"{self.format}:{urlsplit(self.url).netloc.rpartition('@')[2]}"


def parse_webhooks(spec: str) -> list[Webhook]:
    """``EVALSVC_ALERT_WEBHOOKS``: comma-separated ``[slack:|json:]URL`` entries."""
    hooks = []
    for raw in (e.strip() for e in spec.split(",")):
        if not raw:
            continue
        fmt: Literal["json", "slack"] = "json"
        url = raw
        for prefix in ("slack:", "json:"):
            if raw.lower().startswith(prefix):
                fmt, url = prefix[:-1], raw[len(prefix):].strip()  # type: ignore[assignment]
        if not url.lower().startswith(("http://", "https://")):
            shown = raw.split("://")[0][:20]
            raise AlertConfigError(
                f"EVALSVC_ALERT_WEBHOOKS: an entry starting {shown!r} is not [slack:|json:]"
                "http(s)://URL; separate entries with commas, e.g. "
                "slack:https://hooks.slack.com/services/...,https://ops.example.com/hook"
            )
        hooks.append(Webhook(url=url, format=fmt))
    return hooks


def configured_webhooks(settings: Settings | None = None) -> list[Webhook]:
    s = settings or Settings()
    return parse_webhooks(s.alert_webhooks.get_secret_value()) if s.alert_webhooks else []


def slack_escape(text: str) -> str:
    """``text`` as Slack reads it literally: its three control characters as the entities
    Slack's "Formatting text for app surfaces" page names (``&amp;``, ``&lt;``, ``&gt;``).

    Why: an alert's message quotes what submitters and endpoints chose (endpoint labels, served
    model ids); unescaped, ``<!channel>`` pings a whole channel and ``<http://x|Click here>``
    renders as a link with a text of the submitter's choosing (docs/security.md, round 4)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def payload(alert: dict[str, Any], hook: Webhook) -> dict[str, Any]:
    """The body POSTed to ``hook``: Slack's ``{"text"}``, or the generic JSON alert."""
    if hook.format == "slack":
        return {"text": f"[evalsvc {alert['severity']}] {slack_escape(alert['message'])}"}
    created = alert.get("created_at")
    return {
        "source": "evalsvc",
        "alert": {
            "id": alert["id"], "kind": alert["kind"], "severity": alert["severity"],
            "message": alert["message"],
            "baseline": redact_url(alert["baseline_url"]) if alert.get("baseline_url") else None,
            "candidate": (redact_url(alert["candidate_url"]) if alert.get("candidate_url")
                          else None),
            "suite": alert.get("suite"), "run_id": alert.get("run_id"),
            "previous_run_id": alert.get("previous_run_id"),
            "created_at": created.isoformat() if created is not None else None,
            "details": alert.get("details") or {},
        },
    }


class _Retry(Exception):
    """A webhook answer worth another attempt (timeout, connection, 429, 5xx)."""


async def _post(hook: Webhook, body: dict[str, Any], *, attempts: int,
                timeout_s: float) -> dict[str, Any]:
    import aiohttp
    from tenacity import (
        AsyncRetrying,
        RetryError,
        retry_if_exception_type,
        stop_after_attempt,
        wait_exponential,
    )

    from evalsvc.endpoints import EgressPolicy, EgressRefused, GuardedResolver

    result: dict[str, Any] = {"webhook": hook.label, "format": hook.format, "attempts": 0}
    try:
        policy = EgressPolicy.from_settings()
        policy.check_url(hook.url)
    except (ValueError, EgressRefused) as exc:
        return {**result, "status": "refused", "error": str(exc)}
    connector = aiohttp.TCPConnector(resolver=GuardedResolver(policy))
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        try:
            # Back-off 0.5 s, 1 s, 2 s... (at most 8 s) between attempts: a webhook that is
            # briefly down recovers within the retries without a storm of requests.
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(attempts), wait=wait_exponential(multiplier=0.5, max=8),
                retry=retry_if_exception_type(_Retry), reraise=False,
            ):
                with attempt:
                    result["attempts"] += 1
                    try:
                        async with session.post(hook.url, json=body,
                                                allow_redirects=False) as resp:
                            await resp.read()
                            status = resp.status
                    except EgressRefused as exc:
                        return {**result, "status": "refused", "error": str(exc)}
                    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                        raise _Retry(f"{type(exc).__name__}: {exc}") from None
                    if status == 429 or status >= 500:
                        raise _Retry(f"HTTP {status}")
                    if not 200 <= status < 300:
                        return {**result, "status": "failed", "error": f"HTTP {status}"}
                    return {**result, "status": "delivered", "error": None}
        except RetryError as exc:
            last = exc.last_attempt.exception()
            return {**result, "status": "failed", "error": redact_url(str(last))}
    return {**result, "status": "failed", "error": "no attempt made"}


def _run_async(coro: Any) -> Any:
    """``asyncio.run`` here, or on a helper thread when this thread runs a loop already."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(asyncio.run(coro)), daemon=True)
    thread.start()
    thread.join()
    return out[0] if out else None


def deliver(store: Store, alert_id: str, *, owner: str | None = None,
            settings: Settings | None = None) -> bool:
    """Send one alert to every webhook if this process wins its delivery; True if it did.
    A process without webhooks leaves the alert to one that has them (a worker configured
    differently from the ``compare`` that raised it); a bad setting is recorded on the alert."""
    s = settings or Settings()
    owner = owner or f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
    results: list[dict[str, Any]] = []
    try:
        hooks = configured_webhooks(s)
    except AlertConfigError as exc:
        results = [{"webhook": "EVALSVC_ALERT_WEBHOOKS", "status": "refused", "error": str(exc)}]
        hooks = []
    if not hooks and not results:
        return False
    if not store.alerts.claim_delivery(alert_id, owner=owner):
        return False
    alert = store.alerts.get_alert(alert_id)
    if alert is not None and hooks:

        async def send_all() -> list[dict[str, Any]]:
            return list(await asyncio.gather(*(
                _post(h, payload(alert, h), attempts=s.alert_webhook_attempts,
                      timeout_s=s.alert_webhook_timeout_s) for h in hooks)))

        results = _run_async(send_all()) or []
    for r in results:
        if r.get("status") != "delivered":
            log.warning("alert %s: webhook %s: %s (%s)", alert_id, r.get("webhook"),
                        r.get("status"), r.get("error"))
    ok = bool(results) and all(r.get("status") == "delivered" for r in results)
    store.alerts.finish_delivery(alert_id, owner=owner, delivered=ok, deliveries=results)
    return True


# ---- detection ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NewAlert:
    """An alert a detector found, before it is stored."""

    kind: str
    severity: str
    message: str
    anchor: str
    """What makes this event unique besides kind and identity (the run that completed it; an
    error streak: the run that began it; a stale baseline: the blessing)."""
    baseline_url: str | None = None
    candidate_url: str | None = None
    suite: str | None = None
    run_id: str | None = None
    previous_run_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def dedupe_key(self) -> str:
        parts = [self.kind, self.baseline_url or "", self.candidate_url or "", self.suite or "",
                 self.anchor]
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


Detector = Callable[["Store", RunInfo, Settings], list[NewAlert]]
_DETECTORS: list[Detector] = []


def register_detector(detector: Detector) -> Detector:
    """Add a detector run after every finished run (the ``stale_baseline`` kind's owner, the
    blessed-baselines service, registers its own); usable as a decorator."""
    if detector not in _DETECTORS:
        _DETECTORS.append(detector)
    return detector


def _norm(url: str) -> str:
    return url.rstrip("/")


def _is_endpoint(url: str) -> bool:
    return url[:8].lower().startswith(("http://", "https://"))


def _labels(run: RunInfo) -> dict[str, str]:
    from evalsvc.reports import endpoint_label

    out: dict[str, str] = {}
    for r in [run.spec.baseline, *run.spec.candidates]:
        if _norm(r.url) not in out or r.name:  # a URL in two roles: its registered name wins
            out[_norm(r.url)] = endpoint_label({"name": r.name, "url": redact_url(r.url),
                                                "model": r.model})
    return out


def _worse_end(p: dict[str, Any]) -> tuple[float, float] | None:
    """(the worse end of Δ's interval, the boundary) oriented so that lower is worse: the CI's
    lower end against −margin, or for a lower-is-better metric its upper end negated."""
    ci, margin = p.get("ci") or [None, None], p.get("margin")
    if margin is None or len(ci) != 2:
        return None
    d = p.get("details") or {}
    hib = d.get("higher_is_better", (d.get("gate") or {}).get("higher_is_better", True))
    end = ci[0] if hib else (None if ci[1] is None else -float(ci[1]))
    return None if end is None else (float(end), -float(margin))


#: The label of a sweep's runs (``evalsvc.services.sweeps``) and the label and value of a
#: calibration's (``evalsvc.services.calibration``; a test holds them equal).
SWEEP_LABEL = "sweep"
PURPOSE_LABEL, CALIBRATION = "evalsvc.purpose", "calibration"


def _outside_history(run: RunInfo) -> bool:
    """Runs that are no step in a comparison's history: a sweep's configurations are served in
    turn at one launched URL, and a calibration is an endpoint against itself."""
    labels = run.spec.labels
    return SWEEP_LABEL in labels or labels.get(PURPOSE_LABEL) == CALIBRATION


def _series(store: Store, run: RunInfo, gate: dict[str, Any], need: int) -> list[dict[str, Any]]:
    """The identity's completed gates up to and including this run's, oldest first: at most
    ``need``, sweeps' and calibrations' runs left out."""
    want = _norm(str(gate.get("candidate_url") or ""))
    rows = [r for r in store.dashboard.gate_history(baseline_url=run.spec.baseline.url,
                                                    suite=str(gate["suite"]))
            if _norm(str(r["payload"].get("candidate_url") or "")) == want]
    upto = next((i for i, r in enumerate(rows) if r["run_id"] == run.id), None)
    if upto is None:
        return []
    kept = [rows[upto]]
    for row in reversed(rows[:upto]):
        if len(kept) >= need:
            break
        other = store.get_run(row["run_id"])
        if other is not None and not _outside_history(other):
            kept.insert(0, row)
    return kept


def detect_gates(store: Store, run: RunInfo, settings: Settings) -> list[NewAlert]:
    """``verdict_change`` and ``margin_trend`` of every gated (candidate, suite) of ``run``."""
    out: list[NewAlert] = []
    labels = _labels(run)
    base = _norm(run.spec.baseline.url)
    if not _is_endpoint(base):
        return out  # gated logs (gate-logs): their sides are files, not endpoints
    for gate in store.get_gate_results(run.id):
        if not gate.get("gated", True) or not _is_endpoint(str(gate.get("candidate_url") or "")):
            continue  # an informational suite (speed with its gate off) decides nothing
        series = _series(store, run, gate, need=max(2, settings.alert_trend_runs))
        if len(series) < 2:
            continue
        cand, suite = _norm(str(gate["candidate_url"])), str(gate["suite"])
        who = f"{suite}: {labels.get(cand, cand)} against {labels.get(base, base)}"
        prev, cur = series[-2], series[-1]
        before, now = prev["payload"].get("verdict"), cur["payload"].get("verdict")
        common = {"baseline_url": base, "candidate_url": cand, "suite": suite,
                  "run_id": run.id, "previous_run_id": prev["run_id"], "anchor": run.id}
        if before != now:
            out.append(NewAlert(
                kind="verdict_change",
                severity="critical" if now in _BAD else ("info" if now == "pass" else "warning"),
                message=f"{who}: verdict {before} → {now} (run {run.id[:8]}, previous "
                        f"{prev['run_id'][:8]})",
                details={"from": before, "to": now, "metric": gate.get("metric"),
                         "delta": gate.get("delta"), "ci": gate.get("ci"),
                         "margin": gate.get("margin"),
                         "scheduled": cur["schedule_id"] is not None,
                         "previous_scheduled": prev["schedule_id"] is not None},
                **common,
            ))
        window = series[-settings.alert_trend_runs:]
        ends = [_worse_end(r["payload"]) for r in window]
        if len(window) == settings.alert_trend_runs and all(e is not None for e in ends):
            values = [e[0] for e in ends if e is not None]
            bound = ends[-1][1] if ends[-1] is not None else 0.0
            falling = all(b <= a for a, b in zip(values, values[1:], strict=False))
            if falling and all(v >= bound for v in values[:-1]) and values[-1] < bound:
                out.append(NewAlert(
                    kind="margin_trend", severity="warning",
                    message=f"{who}: the interval of Δ {gate.get('metric') or ''} fell over "
                            f"{len(values)} runs and crossed the margin "
                            f"({values[0]:+.3f} → {values[-1]:+.3f}, boundary {bound:+.3f})",
                    details={"worse_ends": values, "boundary": bound,
                             "runs": [r["run_id"] for r in window],
                             "metric": gate.get("metric")},
                    **common,
                ))
    return out


#: Finished runs read back when an error streak is measured (a longer streak is still one alert).
_STREAK_LOOKBACK = 500


def detect_error_streaks(store: Store, run: RunInfo, settings: Settings) -> list[NewAlert]:
    """``error_streak`` of each endpoint URL of ``run`` (baseline and candidates) when this run
    ended in ``error``: one alert per streak, anchored at the run that began it."""
    ended_in_error = run.status == RunStatus.error or run.verdict == "error"
    if not ended_in_error or run.finished_at is None:
        return []
    need = settings.alert_error_streak
    labels = _labels(run)
    out = []
    for url in dict.fromkeys(_norm(r.url) for r in [run.spec.baseline, *run.spec.candidates]
                             if _is_endpoint(r.url)):
        recent = store.alerts.finished_runs_of(url, until=run.finished_at,
                                               limit=max(need, _STREAK_LOOKBACK))
        streak = 0
        for _, verdict in recent:
            if verdict != "error":
                break
            streak += 1
        if streak < need:
            continue
        first = recent[streak - 1][0]
        out.append(NewAlert(
            kind="error_streak", severity="critical", anchor=first, run_id=run.id,
            candidate_url=None if url == _norm(run.spec.baseline.url) else url,
            baseline_url=url if url == _norm(run.spec.baseline.url) else None,
            message=f"{labels.get(url, redact_url(url))}: {streak} finished runs in a row ended "
                    f"in error (latest {run.id[:8]}: {(run.error or 'no reason recorded')[:200]})",
            details={"endpoint": redact_url(url), "streak": streak,
                     "runs": [r for r, _ in recent[:streak]][:need],
                     "first_run_id": first},
        ))
    return out


def detect_stale_baselines(store: Store, run: RunInfo, settings: Settings) -> list[NewAlert]:
    """``stale_baseline``: the run found a blessed baseline for a suite older than
    ``EVALSVC_BASELINE_MAX_AGE`` and ran the baseline again (``evalsvc.services.baselines``
    records it in the report's ``baseline_reuse``). One alert per blessing, whichever run saw
    it first: every nightly run after it would say the same until someone blesses again."""
    report = store.get_report(run.id) or {}
    labels = _labels(run)
    base = _norm(run.spec.baseline.url)
    out = []
    for entry in report.get("baseline_reuse") or []:
        if entry.get("status") != "stale" or not entry.get("blessing_id"):
            continue
        age_days = float(entry.get("age_s") or 0.0) / 86400
        out.append(NewAlert(
            kind="stale_baseline", severity="warning", anchor=str(entry["blessing_id"]),
            baseline_url=base, suite=str(entry.get("suite")), run_id=run.id,
            previous_run_id=entry.get("blessed_run"),
            message=f"{entry.get('suite')}: the blessed baseline of {labels.get(base, base)} is "
                    f"{age_days:.1f} days old, past EVALSVC_BASELINE_MAX_AGE: run {run.id[:8]} "
                    f"ran the baseline again; refresh it: evalsvc baselines bless {run.id}",
            details={"blessing_id": entry["blessing_id"], "age_s": entry.get("age_s"),
                     "blessed_at": entry.get("blessed_at")},
        ))
    return out


register_detector(detect_gates)
register_detector(detect_error_streaks)
register_detector(detect_stale_baselines)


def evaluate(store: Store, run_id: str, *, settings: Settings | None = None) -> list[dict[str, Any]]:
    """Detect and store the alerts ``run_id`` raises; the ones this call stored (an event
    stored before, by this or another process, is not returned again)."""
    s = settings or Settings()
    run = store.get_run(run_id)
    if run is None or run.status not in (RunStatus.completed, RunStatus.error):
        return []
    if _outside_history(run):
        return []
    try:
        delivery = "pending" if configured_webhooks(s) else "none"
    except AlertConfigError as exc:
        log.warning("alerts: %s", exc)
        delivery = "pending"  # delivery records the refusal on the alert itself
    raised = []
    for detector in list(_DETECTORS):
        for found in detector(store, run, s):
            stored = store.alerts.raise_alert(
                dedupe_key=found.dedupe_key(), kind=found.kind, severity=found.severity,
                message=found.message, details=found.details, delivery=delivery,
                baseline_url=found.baseline_url, candidate_url=found.candidate_url,
                suite=found.suite, run_id=found.run_id, previous_run_id=found.previous_run_id,
            )
            if stored is not None:
                raised.append(stored)
    return raised


def after_run(store: Store, run_id: str, *, owner: str | None = None) -> list[dict[str, Any]]:
    """Raise and deliver what a finished run calls for, then any alert still waiting for its
    delivery (raised by a process that stopped before sending). Never raises: alerts must not
    turn a run's outcome into an error; failures are logged."""
    try:
        settings = Settings()
        raised = evaluate(store, run_id, settings=settings)
        for alert_id in store.alerts.pending_ids():
            deliver(store, alert_id, owner=owner, settings=settings)
        return raised
    except Exception:  # noqa: BLE001 - alerting is best-effort around a finished run
        log.exception("alerts after run %s failed", run_id)
        return []


# ---- the views' use cases ------------------------------------------------------------------


def list_alerts(store: Store, *, status: str | None = None, kind: str | None = None,
                run_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Alerts newest first; URLs redacted (a stored URL may predate the userinfo rule)."""
    if status is not None and status not in ("open", "acknowledged"):
        raise AlertConfigError(f"status must be open or acknowledged, not {status!r}")
    if kind is not None and kind not in KINDS:
        raise AlertConfigError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    runs = None if run_id is None else [run_id]
    return [_redacted(a) for a in store.alerts.list_alerts(status=status, kind=kind,
                                                           run_ids=runs, limit=limit)]


def _redacted(alert: dict[str, Any]) -> dict[str, Any]:
    return {**alert, **{k: redact_url(alert[k]) for k in ("baseline_url", "candidate_url")
                        if alert.get(k)}}


def acknowledge(store: Store, alert_id: str, *, by: str | None) -> dict[str, Any]:
    """Acknowledge an open alert (it stays listed; ``/metrics`` stops counting it as open)."""
    if not store.alerts.acknowledge(alert_id, by=by):
        current = store.alerts.get_alert(alert_id)
        if current is None:
            raise AlertNotFound(f"no alert {alert_id!r}")
        raise AlertNotOpen(f"alert {alert_id} is already acknowledged "
                           f"(by {current.get('acknowledged_by') or 'someone'})")
    found = store.alerts.get_alert(alert_id)
    assert found is not None
    return _redacted(found)


def open_by_run(store: Store, run_ids: Sequence[str]) -> dict[str, int]:
    """Open alerts per run (the runs list's badge)."""
    return store.alerts.open_by_run(run_ids)


def open_count(store: Store) -> int:
    """Open alerts in all (the alerts page's heading; ``/metrics`` has them per kind)."""
    return sum(store.alerts.open_counts().values())
