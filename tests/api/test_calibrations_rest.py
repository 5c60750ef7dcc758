"""``POST /calibrations`` queues an endpoint against itself; a real worker runs it through the
real runner; ``GET /calibrations/{id}`` then returns the stored noise floor (issue 40). The
endpoint is a loopback fault proxy whose ``noisy`` path changes answers that arrive while
another request is in flight (``tests/runner/fault_proxy.py``)."""

from __future__ import annotations

from evalsvc.scheduler import default_executor
from tests.fixtures.faults import base_url, fault_server
from tests.runner.fault_proxy import fault_proxy

from .conftest import Api


def test_a_queued_calibration_stores_its_floor(api: Api) -> None:
    with fault_server() as srv, fault_proxy(base_url(srv, "ok"), alter_p=0.8, seed=5) as px:
        body = {"endpoint": {"url": px.url("noisy")}, "suites": ["determinism-smoke"]}
        with api.client("read") as reader:
            assert reader.post("/calibrations", json=body).status_code == 403
        with api.client("submit") as submitter:
            made = submitter.post("/calibrations", json=body)
            assert made.status_code == 202, made.text
            cal_id = made.json()["id"]
            queued = submitter.get(f"/calibrations/{cal_id}").json()
            assert queued["status"] == "queued" and queued["floors"] == {}
            path = submitter.post("/calibrations", json={**body, "suites": ["x/y.yaml"]})
            assert path.status_code == 422 and "catalog suite or set names" in path.text
            extra = submitter.post("/calibrations", json={**body, "runs": 0})
            assert extra.status_code == 422
            assert api.run_worker_once(default_executor) == 1
            done = submitter.get(f"/calibrations/{cal_id}").json()
        assert done["status"] == "completed", done
        floor = done["floors"]["determinism-smoke"]
        assert floor["calibration"] == cal_id and floor["fingerprint"] == done["fingerprint"]
        assert floor["instability"] is not None and floor["clusters"] == 8  # 4 probes, 2 passes
        assert floor["discordance"] is not None and floor["pairs"] > 0
        with api.client("read") as reader:
            listed = reader.get("/calibrations").json()
            assert [c["id"] for c in listed] == [cal_id]
            typo = reader.get("/calibrations", params={"limt": 1})
            assert typo.status_code == 422 and "takes limit" in typo.json()["detail"]
            missing = reader.get(f"/calibrations/{'0' * 32}")
            assert missing.status_code == 404 and "no calibration" in missing.json()["detail"]
