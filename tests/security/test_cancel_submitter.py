"""Issue 17 break 14: any submit token could cancel any run, scheduled ones included, and runs
recorded no submitter. Runs queued through the REST API record the token's name; cancelling
through the API is limited to that token and admin tokens. A real server on loopback, on SQLite
and PostgreSQL."""

from __future__ import annotations

from typing import Any

from evalsvc.domain import EndpointRef, RunSpec, RunStatus

from .conftest import Api

BODY: dict[str, Any] = {
    "baseline": {"url": "http://127.0.0.1:9001/v1"},
    "candidates": [{"url": "http://127.0.0.1:9002/v1"}],
    "suites": ["needle-smoke"],
    "options": {"samples": 5},
}


def test_only_the_submitter_or_an_admin_cancels(api: Api) -> None:
    other, _ = api.store.create_api_token(name="t-other", scopes=["submit"])
    with api.client("submit") as mine, api.client(token=other) as theirs, \
            api.client("admin") as admin, api.client("read") as reader:
        run_id = mine.post("/runs", json=BODY).json()["id"]
        assert reader.get(f"/runs/{run_id}").json()["submitted_by"] == "t-submit"
        refused = theirs.post(f"/runs/{run_id}/cancel")
        assert refused.status_code == 403, refused.text
        assert "only its submitter or an admin" in refused.json()["detail"]
        assert api.store.get_run(run_id).status is RunStatus.queued  # type: ignore[union-attr]
        assert reader.post(f"/runs/{run_id}/cancel").status_code == 403  # read scope: none
        assert mine.post(f"/runs/{run_id}/cancel").status_code == 200
        theirs_run = theirs.post("/runs", json=BODY).json()["id"]
        assert admin.post(f"/runs/{theirs_run}/cancel").status_code == 200


def test_runs_without_a_submitter_are_cancelled_by_admins_only(api: Api) -> None:
    """Scheduled runs, CLI runs and runs stored before the submitter was recorded."""
    spec = RunSpec(
        baseline=EndpointRef(url="http://127.0.0.1:9001/v1"),
        candidates=[EndpointRef(url="http://127.0.0.1:9002/v1")],
        suites=["needle-smoke"],
    )
    run = api.store.create_run(spec)
    assert run.submitted_by is None
    with api.client("submit") as submitter, api.client("admin") as admin:
        assert submitter.post(f"/runs/{run.id}/cancel").status_code == 403
        assert submitter.get(f"/runs/{run.id}").json()["submitted_by"] is None
        assert admin.post(f"/runs/{run.id}/cancel").status_code == 200
