"""``gate-logs`` on logs written by the real ``lm_eval`` CLI against the real local endpoints.

The direct run is ``evalsvc compare`` with the catalog's lm-eval task (``evalsvc_mc``, run by
name in lm-eval's own venv) and ``keep_logs`` set, so the lm-eval ``--output_path`` directories
that run wrote with ``--log_samples`` — the real CLI's files, against bf16 and the candidate —
are kept. ``gate-logs`` on exactly those logs must give the same verdict, the same numbers and
the same per-document scores as the direct run: the same items, paired by ``doc_id``. Host
kernels do not enter the assertion (both sides read the same lm-eval output).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.services import runs
from evalsvc.services.gatelogs import gate_logs

pytestmark = [pytest.mark.endpoints, pytest.mark.slow, pytest.mark.timeout(3600)]

N_DOCS = 16


def _candidate(local_endpoints: Any) -> str:
    cands = local_endpoints.candidates
    for name in ("fp8-kv", "w8a8", "w4a16"):
        if name in cands:
            return str(cands[name])
    pytest.skip("no local candidate endpoint is served")


def test_gate_logs_on_real_lm_eval_logs_equals_the_direct_run(
    local_endpoints: Any, tmp_path: Path
) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'store.db'}")
    store.ensure_ready(upgrade_fresh_sqlite=True)
    catalog = Path(__file__).resolve().parents[2] / "evalsvc" / "suites" / "catalog"
    spec = yaml.safe_load((catalog / "lmeval-mc.yaml").read_text())
    spec["name"] = "lmeval-mc-kept"
    spec["params"]["include_path"] = str(catalog / "data" / "lmeval")
    spec["params"]["keep_logs"] = str(tmp_path / "logs")
    # The first N documents of the bundled task: the shared CPU endpoints answer a
    # loglikelihood request in seconds under load, and the comparison needs no more.
    spec["params"]["n"] = N_DOCS
    suite_file = tmp_path / "lmeval-mc-kept.yaml"
    suite_file.write_text(yaml.safe_dump(spec))

    direct = runs.compare(
        RunSpec(
            baseline=EndpointRef(url=local_endpoints.baseline),
            candidates=[EndpointRef(url=_candidate(local_endpoints))],
            suites=[str(suite_file)],
            options=RunOptions(concurrency=2),
        ),
        store=store,
    )
    d = direct["candidates"][0]["suites"][0]
    assert d["n_errors"] == 0, d["details"].get("error_examples")
    assert d["recovery"] is not None and d["recovery"]["n"] == d["n"] == N_DOCS
    # The lmeval kind pairs lm-eval's documents by id: every one of the first N on both sides,
    # with the task's details (this run also serves as the kind's own endpoint test).
    assert d["details"]["task"] == "evalsvc_mc" and d["details"]["by_family"]
    direct_samples = store.get_samples(direct["run_id"])
    for side in ("baseline", "candidate:0"):
        assert sorted(s.item_id for s in direct_samples if s.endpoint == side) == sorted(
            f"doc{i}" for i in range(N_DOCS)
        ), side
    assert not [s.error for s in direct_samples if s.error]

    base_dir = tmp_path / "logs" / "lmeval-mc-kept" / "baseline"
    cand_dir = tmp_path / "logs" / "lmeval-mc-kept" / "candidate-0"
    assert list(base_dir.rglob("samples_evalsvc_mc_*.jsonl"))  # written by lm_eval --log_samples
    logged = gate_logs(
        base_dir, cand_dir, store=store, metric="acc", gate={"baseline_floor": 0.25}
    )
    g = logged["candidates"][0]["suites"][0]
    assert g["suite"] == "evalsvc_mc" and g["details"]["log_pairs"]["paired"] == N_DOCS
    assert logged["verdict"] == direct["verdict"] and g["verdict"] == d["verdict"]
    for key in ("baseline", "candidate", "delta", "n", "n_errors"):
        assert g[key] == pytest.approx(d[key]), key
    assert g["ci"] == pytest.approx(d["ci"])
    assert g["recovery"]["estimate"] == pytest.approx(d["recovery"]["estimate"])
    # Per document, the scores gate-logs paired are the ones the direct run stored.
    stored = {
        (s.endpoint, s.item_id): s.score for s in store.get_samples(direct["run_id"])
    }
    again = {
        (s.endpoint, s.item_id): s.score for s in store.get_samples(logged["run_id"])
    }
    assert stored == again
    # Both runs are in the store's history, with their reports.
    ids = [r.id for r in store.list_runs()]
    assert direct["run_id"] in ids and logged["run_id"] in ids
    assert json.dumps(store.get_report(logged["run_id"]))  # stored and serialisable
