"""``POST /api/v1/gate-logs`` with Every Eval Ever files (written by every-eval-ever's own lm-eval
converter: tests/fixtures/logs/README.md): told from lm-eval samples files by their first record,
gated by a real worker like the CLI gates them."""

from __future__ import annotations

from pathlib import Path

from evalsvc.db import Store
from evalsvc.services.gatelogs import gate_logs
from tests.api.test_gate_logs import _files, gate_upload
from tests.services.test_gatelogs import check_schema

from .conftest import Api

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "lmeval_eee" / "eee"


def test_an_eee_upload_gives_the_cli_report(api: Api, tmp_path: Path) -> None:
    (b,) = (LOGS / "bf16").glob("*_samples.jsonl")
    (c,) = (LOGS / "fp8-kv").glob("*_samples.jsonl")
    with api.client("submit") as client:
        run, report = gate_upload(api, client, _files("baseline", b) + _files("candidate", c))
    assert report is not None and run.status.value == "completed", run.error
    check_schema(report)
    local = Store.from_url(f"sqlite:///{tmp_path / 'local.db'}")
    local.ensure_ready(upgrade_fresh_sqlite=True)
    direct = gate_logs(b, c, store=local)
    got, want = report["candidates"][0]["suites"][0], direct["candidates"][0]["suites"][0]
    for key in ("suite", "metric", "verdict", "n", "baseline", "candidate", "delta", "ci"):
        assert got[key] == want[key], key
    assert got["n"] == 40
