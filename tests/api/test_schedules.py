"""``/schedules``: create (endpoint names resolved, suites checked), list, get, delete."""

from __future__ import annotations

from typing import Any

from .conftest import Api

TEMPLATE: dict[str, Any] = {
    "baseline": {"name": "bf16"},
    "candidates": [{"url": "http://127.0.0.1:9002/v1"}],
    "suites": ["needle-smoke"],
}


def test_schedule_crud(api: Api) -> None:
    api.store.upsert_endpoint(name="bf16", url="http://127.0.0.1:9001/v1")
    with api.client("admin") as admin:
        resp = admin.post(
            "/schedules", json={"name": "nightly", "cron": "0 3 * * *", "template": TEMPLATE}
        )
        assert resp.status_code == 201, resp.text
        created = resp.json()
        assert created["template"]["baseline"]["url"] == "http://127.0.0.1:9001/v1"
        assert created["enabled"] and created["next_fire_time"]
        assert [s["name"] for s in admin.get("/schedules").json()] == ["nightly"]
        assert admin.get("/schedules/nightly").json()["id"] == created["id"]
        assert admin.get(f"/schedules/{created['id']}").json()["name"] == "nightly"

        dup = admin.post(
            "/schedules", json={"name": "nightly", "cron": "0 4 * * *", "template": TEMPLATE}
        )
        assert dup.status_code == 409 and "already exists" in dup.json()["detail"]

        assert admin.delete("/schedules/nightly").status_code == 204
        assert admin.get("/schedules/nightly").status_code == 404
        assert admin.delete("/schedules/nightly").status_code == 404


def test_bad_schedule_is_422(api: Api) -> None:
    api.store.upsert_endpoint(name="bf16", url="http://127.0.0.1:9001/v1")
    with api.client("admin") as admin:
        resp = admin.post("/schedules", json={"name": "x", "cron": "at dawn", "template": TEMPLATE})
        assert resp.status_code == 422 and "invalid cron" in resp.json()["detail"]
        bad_suite = {**TEMPLATE, "suites": ["no-such-suite"]}
        resp = admin.post(
            "/schedules", json={"name": "x", "cron": "0 3 * * *", "template": bad_suite}
        )
        assert resp.status_code == 422 and "no-such-suite" in resp.json()["detail"]
        ghost = {**TEMPLATE, "baseline": {"name": "ghost"}}
        resp = admin.post("/schedules", json={"name": "x", "cron": "0 3 * * *", "template": ghost})
        assert resp.status_code == 422 and "ghost" in resp.json()["detail"]
    assert api.store.list_schedules() == []
