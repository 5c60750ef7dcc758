"""``/alerts``, ``evalsvc alerts`` and ``evalsvc_alerts_open`` over alerts that real runs raised:
three in-process runs (``evalsvc.services.runs.compare``) against a loopback endpoint that
answers no JSON end in ``error`` and raise one ``error_streak`` alert."""

from __future__ import annotations

import json

import pytest

from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.services import runs
from tests.fixtures.cli import run_cli
from tests.fixtures.faults import base_url, fault_server

from .conftest import Api


def _streak(api: Api, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("EVALSVC_ALERT_ERROR_STREAK", "3")
    monkeypatch.delenv("EVALSVC_ALERT_WEBHOOKS", raising=False)
    with fault_server() as srv:
        dead = base_url(srv, "garbage")
        for _ in range(3):
            spec = RunSpec(baseline=EndpointRef(url=dead, name="bf16"),
                           candidates=[EndpointRef(url=dead)], suites=["reasoning-smoke"],
                           options=RunOptions(samples=2))
            with pytest.raises(Exception):  # noqa: B017 - each run ends in error: the point
                runs.compare(spec, store=api.store)
    return [r.id for r in api.store.list_runs(limit=3)]


def test_alerts_are_listed_acknowledged_and_counted(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    newest = _streak(api, monkeypatch)[0]
    with api.client("read") as reader:
        (alert,) = reader.get("/alerts").json()
        assert (alert["kind"], alert["severity"], alert["status"], alert["run_id"]) == (
            "error_streak", "critical", "open", newest)
        assert "3 finished runs in a row ended in error" in alert["message"]
        assert reader.get("/alerts", params={"kind": "verdict_change"}).json() == []
        bad = reader.get("/alerts", params={"status": "closed"})
        assert bad.status_code == 422
        # Reading is not acting: acknowledging needs the submit scope.
        assert reader.post(f"/alerts/{alert['id']}/acknowledge").status_code == 403
        page = reader.get(f"{api.base_url}/metrics").text
        assert 'evalsvc_alerts_open{kind="error_streak",severity="critical"} 1.0' in page

    listed = run_cli("alerts", "list", "--status", "open", "--json",
                     env={"EVALSVC_DATABASE_URL": api.db_url})
    assert listed.returncode == 0, listed.stderr
    assert [a["id"] for a in json.loads(listed.stdout)] == [alert["id"]]

    with api.client("submit") as submitter:
        done = submitter.post(f"/alerts/{alert['id']}/acknowledge")
        assert done.status_code == 200, done.text
        assert done.json()["acknowledged_by"] == "t-submit"
        again = submitter.post(f"/alerts/{alert['id']}/acknowledge")
        assert again.status_code == 409 and "already acknowledged" in again.json()["detail"]
        assert submitter.post(f"/alerts/{'0' * 32}/acknowledge").status_code == 404
        assert submitter.get("/alerts", params={"status": "open"}).json() == []
        page = submitter.get(f"{api.base_url}/metrics").text
        assert 'evalsvc_alerts_open{kind="error_streak",severity="critical"} 0.0' in page

    env = {"EVALSVC_DATABASE_URL": api.db_url}
    twice = run_cli("alerts", "ack", alert["id"], env=env)
    assert twice.returncode == 2 and "already acknowledged" in twice.stderr
    assert "evalsvc alerts list --status open" in twice.stderr
    wrong = run_cli("alerts", "list", "--kind", "nonsense", env=env)
    assert wrong.returncode == 2 and "kind must be one of" in wrong.stderr
