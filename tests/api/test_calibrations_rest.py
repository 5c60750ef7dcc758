"""``POST /calibrations`` queues an endpoint against itself; a real worker runs it through the
real runner; ``GET /calibrations/{id}`` then returns the stored noise floor (issue 40). The
endpoint is a loopback fault proxy whose ``noisy`` path changes answers that arrive while
another request is in flight (``tests/runner/fault_proxy.py``). ``evalsvc calibrate --server``
does the same through the REST client, against the real server and a real worker."""

from __future__ import annotations

import json

from evalsvc.scheduler import default_executor
from tests.fixtures.cli import run_cli
from tests.fixtures.faults import base_url, fault_server
from tests.fixtures.loopback import free_port
from tests.runner.fault_proxy import fault_proxy

from .conftest import Api
from .test_cli import background_worker


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
        assert done["adopted"] is False and listed[0]["adopted"] is False

    # The operator adopts it on the server's database (as POST /calibrations/{id}/adopt does).
    env = {"EVALSVC_DATABASE_URL": api.db_url}
    shown = run_cli("calibrations", "list", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    (row,) = json.loads(shown.stdout)
    assert row["id"] == cal_id and row["adopted"] is False and row["submitted_by"] == "t-submit"
    adopted = run_cli("calibrations", "adopt", cal_id, env=env)
    assert adopted.returncode == 0 and f"calibration {cal_id} adopted (by local)" in adopted.stderr
    shown = run_cli("calibrations", "show", cal_id, env=env)
    assert json.loads(shown.stdout)["adopted_by"] == "local"
    unknown = run_cli("calibrations", "adopt", "0" * 32, env=env)
    assert unknown.returncode == 2 and "evalsvc calibrations list" in unknown.stderr


def test_calibrate_through_a_server(api: Api) -> None:
    """``evalsvc calibrate --server``: queued with ``POST /calibrations``, run by a real worker
    through the real runner, and the figures printed are the ones the server stored; a bad
    ``--server`` names the URL it meant (2), an unreachable one is infrastructure (4), what the
    server refuses exits 2 with its reason, queueing nothing, and ``--wait-timeout`` cancels the
    calibration on the server (4)."""
    submit = {"EVALSVC_TOKEN": api.tokens["submit"]}
    with fault_server() as srv, fault_proxy(base_url(srv, "ok"), alter_p=0.8, seed=5) as px:
        endpoint = px.url("noisy")
        with background_worker(api.db_url, default_executor):
            # The API's base path, as `evalsvc api serve` prints it, is the same server.
            done = run_cli("calibrate", endpoint, "--suite", "determinism-smoke",
                           "--server", f"{api.base_url}/api/v1/", "--json", "-", env=submit)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["status"] == "completed" and out["error"] is None
        floor = out["floors"]["determinism-smoke"]
        assert floor["calibration"] == out["id"] and floor["fingerprint"] == out["fingerprint"]
        assert floor["clusters"] == 8 and floor["pairs"] > 0  # 4 probes, 2 passes
        assert f"submitted calibration {out['id']}" in done.stderr
        assert f"calibration {out['id']} stored for fingerprint" in done.stderr
        # A submit token's calibration waits for an admin before gates and plan use it.
        assert out["adopted"] is False and out["submitted_by"] == "t-submit"
        assert "not adopted: gates and `plan` use it once an admin adopts it" in " ".join(
            done.stderr.split())
        with api.client("read") as reader:
            assert reader.get(f"/calibrations/{out['id']}").json() == out
        run = api.store.get_run(out["id"])
        assert run is not None and run.submitted_by == "t-submit"

        bare = api.base_url.removeprefix("http://")
        r = run_cli("calibrate", endpoint, "--suite", "determinism-smoke", "--server", bare,
                    env=submit)
        assert r.returncode == 2, r.stderr
        assert f"--server '{bare}' is not a URL: did you mean http://{bare}?" in r.stderr
        down = f"http://127.0.0.1:{free_port()}"
        r = run_cli("calibrate", endpoint, "--suite", "determinism-smoke", "--server", down,
                    env=submit)
        assert r.returncode == 4 and f"server {down} unreachable" in r.stderr, r.stderr

        def refused(*args: str, token: str = api.tokens["submit"]) -> str:
            r = run_cli("calibrate", *args, "--server", api.base_url,
                        env={"EVALSVC_TOKEN": token})
            assert r.returncode == 2, r.stderr
            return r.stderr

        assert "HTTP 403" in (e := refused(endpoint, "--suite", "determinism-smoke",
                                           token=api.tokens["read"]))
        assert "lacks the submit scope" in e
        e = refused(endpoint, "--suite", "my/suite.yaml")
        assert "HTTP 422" in e and "catalog suite or set names" in e
        assert "ghost" in refused("ghost", "--suite", "determinism-smoke")
        assert [r.id for r in api.store.list_runs()] == [out["id"]]  # refused: nothing queued

        # No worker: --wait-timeout passes first, and the calibration is cancelled on the server.
        late = run_cli("calibrate", endpoint, "--suite", "determinism-smoke", "--server",
                       api.base_url, "--wait-timeout", "1", env=submit)
    assert late.returncode == 4, late.stderr
    assert "no figures within --wait-timeout 1 s" in late.stderr
    (waited,) = [r for r in api.store.list_runs() if r.id != out["id"]]
    assert waited.status.value == "cancelled"
    assert f"calibration {waited.id} cancelled on {api.base_url}" in late.stderr
