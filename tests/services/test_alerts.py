"""Alerts from real runs (``evalsvc.services.alerts``), on SQLite and PostgreSQL.

Two real runs of one (baseline, candidate, suite) through ``evalsvc.services.runs.compare``
against loopback servers of known behaviour (``tests/runner/level_server.py``): the first with a
candidate as good as the baseline (pass), the second with the same candidate URL answering half
the items wrong (fail). The verdict change raises one alert, delivered exactly once to each
webhook of a loopback receiver (``tests/fixtures/faults.py``: ``/ok`` answers 200, ``/flaky``
503 once and then 200, ``/500`` always 500), in Slack's and the generic shape; evaluating the
run again, from two threads at once, stores and sends nothing more.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec, RunStatus
from evalsvc.services import alerts, runs
from tests.fixtures.db import (  # noqa: F401  (pytest fixtures)
    db_url,
    pg_session_url,
    sqlite_template,
)
from tests.fixtures.faults import fault_server
from tests.fixtures.loopback import free_port
from tests.services.real_runs import SEED, run_spec, server_pair, write_suite

ALL = dict.fromkeys(range(1, 6), 1.0)
HALF = dict.fromkeys(range(1, 6), 0.5)


@pytest.fixture
def alerts_store(db_url: str) -> Iterator[Store]:  # noqa: F811  (the fixture)
    with Store.from_url(db_url) as opened:
        yield opened


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Any, Any]]:
    """A baseline and a candidate server, shared by the backends (building one reads every
    item of the seed: a second each)."""
    with server_pair(ALL, [SEED]) as both:
        yield both


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    return write_suite(tmp_path, "alert-reasoning", 60)


def _compare(db: Store, suite: Path, base: str, cand: str) -> dict[str, Any]:
    spec = run_spec(suite, base, cand, base_name="bf16", cand_name="fp8")
    return runs.compare(spec, store=db)


def _failed_run(db: Store, dead: str) -> str:
    """A run whose endpoints answer no JSON: it ends in ``error``; its id."""
    spec = RunSpec(baseline=EndpointRef(url=dead), candidates=[EndpointRef(url=dead)],
                   suites=["reasoning-smoke"], options=RunOptions(samples=2))
    with pytest.raises(Exception):  # noqa: B017 - the run's error is the point
        runs.compare(spec, store=db)
    run_id = db.list_runs(limit=1)[0].id
    assert db.get_run(run_id).status == RunStatus.error  # type: ignore[union-attr]
    return run_id


def _bodies(server: Any, path: str) -> list[dict[str, Any]]:
    return [json.loads(b) for p, b in server.bodies_seen if p == path]


def test_a_planted_verdict_change_fires_each_webhook_exactly_once(
    alerts_store: Store, suite: Path, monkeypatch: pytest.MonkeyPatch, pair: tuple[Any, Any]
) -> None:
    b, c = pair
    c.accuracy = ALL
    with fault_server() as hooks:
        root = hooks.origin
        monkeypatch.setenv("EVALSVC_ALERT_WEBHOOKS",
                           f"slack:{root}/ok/slack, json:{root}/flaky/generic,{root}/500/broken")
        monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.1")
        monkeypatch.setenv("EVALSVC_ALERT_WEBHOOK_ATTEMPTS", "2")
        first = _compare(alerts_store, suite, b.url, c.url)
        assert first["verdict"] == "pass", first["verdict"]
        assert alerts_store.alerts.list_alerts() == [] and hooks.bodies_seen == []

        c.accuracy = HALF  # the same candidate URL now answers half the items wrong
        second = _compare(alerts_store, suite, b.url, c.url)
        assert second["verdict"] == "fail", second["verdict"]

        stored = alerts_store.alerts.list_alerts()
        assert [(a["kind"], a["severity"], a["run_id"], a["previous_run_id"]) for a in stored] \
            == [("verdict_change", "critical", second["run_id"], first["run_id"])]
        alert = stored[0]
        assert alert["details"]["from"] == "pass" and alert["details"]["to"] == "fail"
        assert "pass → fail" in alert["message"] and "fp8" in alert["message"]

        slack = _bodies(hooks, "/ok/slack")
        assert slack == [{"text": f"[evalsvc critical] {alert['message']}"}]
        generic = _bodies(hooks, "/flaky/generic")  # refused once (503), then accepted
        assert len(generic) == 2 and generic[0] == generic[1]
        body = generic[-1]["alert"]
        assert (body["id"], body["kind"], body["run_id"], body["suite"]) == (
            alert["id"], "verdict_change", second["run_id"], "alert-reasoning")
        assert body["candidate"] == c.url and body["details"]["to"] == "fail"
        assert len(_bodies(hooks, "/500/broken")) == 2  # both attempts, then given up

        by_hook = {d["webhook"].split(":")[0] + d["format"]: d for d in alert["deliveries"]}
        assert alert["delivery"] == "failed"  # one of the three webhooks never accepted it
        assert [(d["status"], d["attempts"]) for d in alert["deliveries"]] == [
            ("delivered", 1), ("delivered", 2), ("failed", 2)], by_hook

        # Two workers finishing at once evaluate the same run: nothing stored or sent again.
        gate = threading.Barrier(2)

        def again() -> None:
            gate.wait()
            alerts.after_run(alerts_store, second["run_id"])

        threads = [threading.Thread(target=again) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(alerts_store.alerts.list_alerts()) == 1
        assert len(_bodies(hooks, "/ok/slack")) == 1
        assert len(_bodies(hooks, "/flaky/generic")) == 2


def test_one_event_is_stored_once_whoever_raises_it(alerts_store: Store) -> None:
    """Eight threads raise the same event at once: the unique key lets one insert win."""
    gate = threading.Barrier(8)
    won: list[dict[str, Any] | None] = []

    def raise_it() -> None:
        gate.wait()
        won.append(alerts_store.alerts.raise_alert(
            dedupe_key="k" * 64, kind="verdict_change", severity="critical", message="m",
            details={}, delivery="pending"))

    threads = [threading.Thread(target=raise_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(w is not None for w in won) == 1
    alert_id = next(w for w in won if w is not None)["id"]
    claims = [alerts_store.alerts.claim_delivery(alert_id, owner=f"w{i}") for i in range(3)]
    assert claims == [True, False, False]


def test_an_error_streak_raises_one_alert_per_streak(
    alerts_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of an endpoint that answers no JSON end in ``error``: the third in a row
    raises ``error_streak``, the fourth adds nothing, and acknowledging it closes it."""
    monkeypatch.setenv("EVALSVC_ALERT_ERROR_STREAK", "3")
    monkeypatch.delenv("EVALSVC_ALERT_WEBHOOKS", raising=False)
    with fault_server() as srv:
        ids = []
        for _ in range(4):
            ids.append(_failed_run(alerts_store, f"{srv.origin}/garbage/v1"))
            assert len(alerts_store.alerts.list_alerts()) == (0 if len(ids) < 3 else 1)
    (alert,) = alerts_store.alerts.list_alerts()
    assert alert["kind"] == "error_streak" and alert["details"]["first_run_id"] == ids[0]
    assert alert["run_id"] == ids[2] and alert["delivery"] == "none"
    done = alerts.acknowledge(alerts_store, alert["id"], by="oncall")
    assert done["status"] == "acknowledged" and done["acknowledged_by"] == "oncall"
    with pytest.raises(alerts.AlertNotOpen):
        alerts.acknowledge(alerts_store, alert["id"], by="oncall")
    with pytest.raises(alerts.AlertNotFound):
        alerts.acknowledge(alerts_store, "0" * 32, by="oncall")


def test_a_stale_blessed_baseline_raises_one_alert_per_blessing(
    alerts_store: Store, suite: Path, monkeypatch: pytest.MonkeyPatch, pair: tuple[Any, Any]
) -> None:
    """A run blessed as the baseline, then two runs after ``EVALSVC_BASELINE_MAX_AGE`` has
    passed: both run the baseline again (``evalsvc.services.baselines``), the first of them
    raises ``stale_baseline``, the second adds nothing (same blessing)."""
    from evalsvc.services import baselines

    b, c = pair
    c.accuracy = ALL
    monkeypatch.delenv("EVALSVC_ALERT_WEBHOOKS", raising=False)
    blessed = _compare(alerts_store, suite, b.url, c.url)["run_id"]
    (blessing,) = baselines.bless(alerts_store, [blessed])
    monkeypatch.setenv("EVALSVC_BASELINE_MAX_AGE", "0.001")  # every blessing is now stale
    later = [_compare(alerts_store, suite, b.url, c.url) for _ in range(2)]
    assert [e["status"] for r in later for e in r["baseline_reuse"]] == ["stale", "stale"]
    (alert,) = alerts_store.alerts.list_alerts()
    assert (alert["kind"], alert["run_id"], alert["previous_run_id"]) == (
        "stale_baseline", later[0]["run_id"], blessed)
    assert alert["details"]["blessing_id"] == blessing["id"]
    assert f"evalsvc baselines bless {later[0]['run_id']}" in alert["message"]


def test_a_worker_delivers_the_alert_of_a_run_it_finished(
    alerts_store: Store, suite: Path, monkeypatch: pytest.MonkeyPatch, pair: tuple[Any, Any]
) -> None:
    """The second run is queued and executed by a real worker (the default executor, server
    mode): the worker raises the verdict change after settling the run and sends it once."""
    from evalsvc.scheduler import Worker

    b, c = pair
    c.accuracy = ALL
    with fault_server() as hooks:
        monkeypatch.setenv("EVALSVC_ALERT_WEBHOOKS", f"{hooks.origin}/ok/hook")
        monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.1")
        first = _compare(alerts_store, suite, b.url, c.url)
        c.accuracy = HALF
        queued = alerts_store.create_run(run_spec(suite, b.url, c.url), status=RunStatus.queued)
        assert Worker(alerts_store, poll_seconds=0.05, lease_seconds=10).run(once=True) == 1
        assert alerts_store.get_run(queued.id).verdict == "fail"  # type: ignore[union-attr]
        (alert,) = alerts_store.alerts.list_alerts()
        assert (alert["kind"], alert["run_id"], alert["previous_run_id"]) == (
            "verdict_change", queued.id, first["run_id"])
        assert alert["delivery"] == "delivered"
        assert [b["alert"]["id"] for b in _bodies(hooks, "/ok/hook")] == [alert["id"]]


def test_a_falling_interval_that_crosses_the_margin_raises_margin_trend(
    alerts_store: Store, suite: Path, monkeypatch: pytest.MonkeyPatch, pair: tuple[Any, Any]
) -> None:
    """Three runs of one identity: the candidate as good twice, then 20% of the items wrong.
    The interval's lower end holds and then falls below −margin at the third run:
    ``margin_trend`` (beside the verdict change of that run), once."""
    monkeypatch.delenv("EVALSVC_ALERT_WEBHOOKS", raising=False)
    monkeypatch.setenv("EVALSVC_ALERT_TREND_RUNS", "3")
    b, c = pair
    c.accuracy = ALL
    done = [_compare(alerts_store, suite, b.url, c.url)["run_id"] for _ in range(2)]
    c.accuracy = dict.fromkeys(range(1, 6), 0.8)
    done.append(_compare(alerts_store, suite, b.url, c.url)["run_id"])
    found = {a["kind"]: a for a in alerts_store.alerts.list_alerts()}
    assert sorted(found) == ["margin_trend", "verdict_change"]
    trend = found["margin_trend"]
    assert trend["details"]["runs"] == done and trend["run_id"] == done[-1]
    ends, bound = trend["details"]["worse_ends"], trend["details"]["boundary"]
    assert bound == pytest.approx(-0.1) and ends[0] >= bound and ends[1] >= bound > ends[2]
    alerts.after_run(alerts_store, done[-1])
    assert len(alerts_store.alerts.list_alerts()) == 2


def test_webhook_settings_and_what_names_a_webhook() -> None:
    hooks = alerts.parse_webhooks(
        "slack:https://hooks.slack.com/services/T0/B0/SECRET , json:http://10.0.0.5:9000/a,"
        "https://ops.example.com/evalsvc")
    assert [(h.format, h.label) for h in hooks] == [
        ("slack", "slack:hooks.slack.com"), ("json", "json:10.0.0.5:9000"),
        ("json", "json:ops.example.com")]
    assert "SECRET" not in " ".join(h.label for h in hooks)  # the path is Slack's token
    with pytest.raises(alerts.AlertConfigError, match="separate entries with commas"):
        alerts.parse_webhooks("slack:ftp://hooks.example.com/x")


def test_a_webhook_the_egress_policy_refuses_is_never_contacted(
    alerts_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loopback webhook without ``EVALSVC_ALLOWED_ENDPOINTS`` listing it: the alert is stored
    with the refusal and its reason, and the receiver sees no request."""
    monkeypatch.setenv("EVALSVC_ALERT_ERROR_STREAK", "1")
    monkeypatch.delenv("EVALSVC_ALLOWED_ENDPOINTS", raising=False)
    with fault_server() as srv:
        monkeypatch.setenv("EVALSVC_ALERT_WEBHOOKS", f"slack:{srv.origin}/ok/hook")
        _failed_run(alerts_store, f"{srv.origin}/garbage/v1")  # its error raises the alert
        assert [p for p, _ in srv.bodies_seen if p == "/ok/hook"] == []
    (alert,) = alerts_store.alerts.list_alerts()
    assert alert["delivery"] == "failed"
    (refused,) = alert["deliveries"]
    assert refused["status"] == "refused" and "EVALSVC_ALLOWED_ENDPOINTS" in refused["error"]


def test_a_sweep_run_between_two_runs_is_no_step_in_their_history(
    alerts_store: Store, suite: Path, monkeypatch: pytest.MonkeyPatch, pair: tuple[Any, Any]
) -> None:
    """A sweep serves its configurations in turn at one URL: its worse configuration's run
    raises nothing, and the next ordinary run is compared with the one before the sweep."""
    from evalsvc.services import calibration

    assert (alerts.PURPOSE_LABEL, alerts.CALIBRATION) == (
        calibration.CALIBRATION_LABEL, calibration.CALIBRATION)
    monkeypatch.delenv("EVALSVC_ALERT_WEBHOOKS", raising=False)
    b, c = pair
    c.accuracy = ALL
    _compare(alerts_store, suite, b.url, c.url)
    c.accuracy = HALF
    swept = runs.compare(RunSpec(baseline=EndpointRef(url=b.url), candidates=[EndpointRef(url=c.url)],
                                 suites=[str(suite)], labels={"sweep": "w4a16"}),
                         store=alerts_store)
    assert swept["verdict"] == "fail"
    c.accuracy = ALL
    assert _compare(alerts_store, suite, b.url, c.url)["verdict"] == "pass"
    assert alerts_store.alerts.list_alerts() == []


#: What a submitter may name an endpoint (or a server may call its model) to reach a Slack
#: channel through an alert: a channel-wide ping and a link whose text is the submitter's.
SLACK_MARKUP = "<!channel> <http://evil.example/login|Click to re-authenticate> & co"


@pytest.mark.parametrize("field", ["name", "model"])
def test_slack_alerts_carry_endpoint_text_as_text_never_as_markup(
    alerts_store: Store, monkeypatch: pytest.MonkeyPatch, field: str
) -> None:
    """An error streak of an endpoint whose label (its name, or the model it is asked for) is
    Slack markup: the webhook's text has ``&``, ``<`` and ``>`` escaped, so nothing of it is a
    ping or a link, while the generic JSON body keeps the message as it is."""
    monkeypatch.setenv("EVALSVC_ALERT_ERROR_STREAK", "3")
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.1")
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: each run ends in error
    with fault_server() as hooks:
        monkeypatch.setenv("EVALSVC_ALERT_WEBHOOKS",
                           f"slack:{hooks.origin}/ok/slack,json:{hooks.origin}/ok/generic")
        for _ in range(3):
            ref = EndpointRef(url=dead, **{field: SLACK_MARKUP})
            spec = RunSpec(baseline=ref, candidates=[ref], suites=["reasoning-smoke"],
                           options=RunOptions(samples=2))
            with pytest.raises(Exception):  # noqa: B017 - the run's error is the point
                runs.compare(spec, store=alerts_store)
        (alert,) = alerts_store.alerts.list_alerts()
        assert alert["kind"] == "error_streak" and SLACK_MARKUP in alert["message"]
        (slack,) = _bodies(hooks, "/ok/slack")
        text = slack["text"]
        assert "<" not in text and ">" not in text, text
        assert "&lt;!channel&gt; &lt;http://evil.example/login|Click to re-authenticate&gt; " \
               "&amp; co" in text
        (generic,) = _bodies(hooks, "/ok/generic")
        assert generic["alert"]["message"] == alert["message"]


def test_slack_escape_is_slacks_three_entities() -> None:
    assert alerts.slack_escape("a & <b> &amp;") == "a &amp; &lt;b&gt; &amp;amp;"
