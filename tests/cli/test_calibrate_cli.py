"""``evalsvc calibrate`` and ``evalsvc plan --endpoint`` as a user types them (issue 40): the
A/A run of a loopback endpoint with a planted instability (``tests/runner/fault_proxy.py``'s
``noisy`` path) is stored, ``plan`` of that endpoint names the calibration it sized with (of
another endpoint reporting the same fingerprint, none), and mistakes exit 2 or 4 with the fix."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.cli import run_cli
from tests.fixtures.faults import base_url, fault_server
from tests.runner.fault_proxy import fault_proxy
from tests.services.test_calibration import SUITE


def test_calibrate_then_plan_names_the_calibration(tmp_path: Path) -> None:
    suite = tmp_path / "determinism-floor.yaml"
    suite.write_text(SUITE)
    db = f"sqlite:///{tmp_path / 'evalsvc.db'}"
    with fault_server() as srv, fault_proxy(base_url(srv, "ok"), alter_p=0.25, seed=3) as px:
        res = run_cli("calibrate", px.url("noisy"), "--suite", str(suite), "--database-url", db,
                      "--json", "-")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        floor = out["floors"]["determinism-floor"]
        assert floor["instability"] > 0 and floor["calibration"] == out["id"]
        assert f"calibration {out['id']} stored" in res.stderr

        planned = run_cli("plan", "--suite", str(suite), "--endpoint", px.url("noisy"),
                          "--database-url", db, "--json")
        assert planned.returncode == 0, planned.stderr
        (row,) = json.loads(planned.stdout)
        assert row["discordance_source"] == "calibration"
        assert row["discordance_note"].startswith(f"discordance {row['discordance']:.3g} measured "
                                                  f"by calibration {out['id']} on ")

        # The same server's other path reports the same fingerprint but is another endpoint:
        # a floor belongs to the endpoint it was measured on (issue 47).
        other = run_cli("plan", "--suite", str(suite), "--endpoint", px.url("pass"),
                        "--database-url", db, "--json")
        assert other.returncode == 0, other.stderr
        (row,) = json.loads(other.stdout)
        assert row.get("discordance_source") != "calibration"

        unknown = run_cli("calibrate", px.url("noisy"), "--suite", "no-such-suite",
                          "--database-url", db)
        assert unknown.returncode == 2 and "no-such-suite" in unknown.stderr
    gone = run_cli("plan", "--suite", str(suite), "--endpoint", "http://127.0.0.1:9/v1",
                   "--database-url", db)
    assert gone.returncode == 4 and "unreachable" in gone.stderr
