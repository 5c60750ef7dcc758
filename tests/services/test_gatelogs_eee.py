"""``gate-logs`` on Every Eval Ever files written by that package's own lm-eval converter.

``tests/fixtures/logs/lmeval_eee`` (its README says how each file was written) holds two real
lm-eval ``--log_samples`` output directories (the ``lm_eval`` CLI on the bundled ``evalsvc_mc``
task) and the instance-level files ``every-eval-ever``'s converter wrote from exactly those
logs. Gating the converted files must give the numbers, the verdict and the per-document scores
of gating the lm-eval logs themselves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.services.gatelogs import gate_logs
from tests.fixtures.cli import run_cli

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "lmeval_eee"


def _eee(side: str) -> Path:
    (path,) = (LOGS / "eee" / side).glob("*_samples.jsonl")
    return path


def _scores(store: Store, run_id: str) -> dict[tuple[str, str], float | None]:
    # lm-eval's documents are keyed doc<N>, the converter's records by sample_id N.
    return {
        (s.endpoint, s.item_id.removeprefix("doc")): s.score for s in store.get_samples(run_id)
    }


@pytest.mark.parametrize("metric", ["acc", "acc_norm"])
def test_eee_from_the_packages_converter_gates_like_the_lm_eval_logs(
    tmp_path: Path, metric: str
) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'store.db'}")
    store.ensure_ready(upgrade_fresh_sqlite=True)
    try:
        lmeval = gate_logs(LOGS / "lm-eval" / "bf16", LOGS / "lm-eval" / "fp8-kv", store=store,
                           metric=metric)
        eee = gate_logs(_eee("bf16"), _eee("fp8-kv"), store=store, metric=metric)
        a: dict[str, Any] = lmeval["candidates"][0]["suites"][0]
        b: dict[str, Any] = eee["candidates"][0]["suites"][0]
        assert a["suite"] == b["suite"] == "evalsvc_mc"
        assert a["n"] == b["n"] == 40 and b["details"]["log_pairs"]["paired"] == 40
        for key in ("baseline", "candidate", "delta", "p_value", "margin", "n_errors"):
            assert b[key] == pytest.approx(a[key]), key
        assert b["ci"] == pytest.approx(a["ci"])
        assert b["recovery"]["estimate"] == pytest.approx(a["recovery"]["estimate"])
        assert b["verdict"] == a["verdict"] and eee["verdict"] == lmeval["verdict"]
        assert _scores(store, eee["run_id"]) == _scores(store, lmeval["run_id"])
        # The model comes from the records' model_id.
        assert eee["candidates"][0]["model"] == "evalsvc/dummy-fp8-kv"
    finally:
        store.close()


def test_gate_logs_cli_names_the_eee_result_ids(tmp_path: Path) -> None:
    r = run_cli("gate-logs", str(_eee("bf16")), str(_eee("fp8-kv")), "--metric", "accuracy",
                "--json", str(tmp_path / "r.json"))
    assert r.returncode == 2
    assert "no records with evaluation_result_id 'accuracy'" in r.stderr, r.stderr
    assert "acc, acc_norm" in r.stderr
    ok = run_cli("gate-logs", str(_eee("bf16")), str(_eee("fp8-kv")), "--json",
                 str(tmp_path / "r.json"))
    assert ok.returncode in (0, 1, 3), ok.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["candidates"][0]["suites"][0]["metric"] == "acc"  # the first result id
