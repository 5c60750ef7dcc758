"""Noise floor on file (issue 40): ``evalsvc calibrate`` runs an endpoint against itself, stores
its discordance and batch instability, and ``plan`` and the determinism gate read them back.

A real loopback fault proxy (``tests/runner/fault_proxy.py``) in front of the loopback fault
server's ``ok`` answers plants the instability: its ``noisy`` path changes a share of the chat
answers that arrive while another request is in flight, its ``pass`` path forwards untouched.
Both paths probe as the same configuration (the same provenance fingerprint). A floor belongs
to the endpoint it was measured on (issue 47): the registered endpoint ``prod`` is calibrated on
the noisy path and then moved to the quiet one (``endpoints add --replace``, a redeployment the
operator names), so the calibration is the floor of a later run whose baseline is ``prod`` on
the quiet path: a traffic that did not reach the batching the calibration saw. The same quiet
path by its URL is another endpoint and gets no floor. Every run goes through the real runner
and the real store, on SQLite and PostgreSQL (``db_url``).
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec, provenance_fingerprint
from evalsvc.services import calibration, noise_floor, planning
from evalsvc.services.runs import UsageError, compare
from tests.fixtures.db import (  # noqa: F401  (pytest fixtures)
    db_url,
    pg_session_url,
    sqlite_template,
)
from tests.fixtures.faults import base_url, fault_server
from tests.runner.fault_proxy import FaultProxy, fault_proxy

# 32 probes (above the 29 that a pass with nothing varying needs at δ = 0.10, one look), in
# groups of 4 concurrent requests, twice: 64 gated pairs per pass, milliseconds on loopback.
# The proxy changes a quarter of the answers that arrive while another is in flight: the A/A
# discordance stays well below 0.5 (the most the determinism plan takes) and a quarter or more
# of the prompts vary, so a quiet run of 32 is far below the floor.
SUITE = """\
name: determinism-floor
kind: determinism
seed: 7
params:
  n: 32
  max_tokens: 8
  repeats: 2
  conditions: [concurrency]
  concurrency_levels: [4]
"""


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with fault_server() as srv, fault_proxy(base_url(srv, "ok"), alter_p=0.25, seed=3) as px:
        yield px


@pytest.fixture
def suite_file(tmp_path: Path) -> str:
    path = tmp_path / "determinism-floor.yaml"
    path.write_text(SUITE)
    return str(path)


def _prod(store: Store, url: str) -> EndpointRef:
    """The registered endpoint ``prod``, (re)pointed at ``url``."""
    store.upsert_endpoint(name="prod", url=url)
    return EndpointRef(name="prod", url=url)


def _gate(report: dict, suite: str = "determinism-floor") -> dict:
    (entry,) = [s for s in report["candidates"][0]["suites"] if s["suite"] == suite]
    return entry


# Slow tier: four runs of 32 probes (before, the calibration, after, and plan's probe), 11-15 s
# on a loaded 2-core host; the fast tier keeps the CLI and REST tests of the same chain.
@pytest.mark.slow
def test_calibration_stores_the_floor_plan_sizes_with_it_and_the_gate_uses_it(
    db_url: str, proxy: FaultProxy, suite_file: str  # noqa: F811  (the fixture)
) -> None:
    options = RunOptions(concurrency=8)
    with Store.from_url(db_url) as store:
        noisy = _prod(store, proxy.url("noisy"))
        # Before any calibration: nothing varies on the quiet path, 32 probes pass on the exact
        # zero-loss bound, and the gate has no floor.
        quiet = EndpointRef(url=proxy.url("pass"))
        spec = RunSpec(baseline=quiet, candidates=[quiet], suites=[suite_file], options=options)
        before = _gate(compare(spec, store=store))
        assert before["details"]["gate"]["noise_floor"] is None
        assert before["verdict"] == "pass"

        cal = calibration.calibrate(noisy, [suite_file], store=store, options=options)
        floor = cal["floors"]["determinism-floor"]
        assert cal["status"] == "completed" and floor["calibration"] == cal["id"]
        # The planted noise: the proxy changed answers under load, on many prompts.
        assert floor["instability"] > 0.03 and floor["varying_clusters"] > 0.05
        assert floor["clusters"] == 64  # 32 prompts on each of the two passes
        assert floor["discordance"] > 0.05 and floor["pairs"] == 64
        snaps = store.get_endpoint_snapshots(cal["id"])
        assert cal["fingerprint"] == provenance_fingerprint(snaps["baseline"][1])
        assert calibration.get(store, cal["id"])["floors"] == cal["floors"]
        assert [c["id"] for c in calibration.list_calibrations(store)] == [cal["id"]]
        assert cal["adopted_by"] == calibration.LOCAL_OPERATOR and floor["endpoint"] == "prod"

        # The quiet path by its URL is another endpoint: its plan and gate get no floor.
        assert calibration.floors_for_endpoint(store, quiet, [suite_file])[1] == {}
        assert _gate(compare(spec, store=store))["details"]["gate"]["noise_floor"] is None

        # prod moves to the quiet path: the same deployment as the operator names it.
        quiet = _prod(store, proxy.url("pass"))
        spec = RunSpec(baseline=quiet, candidates=[quiet], suites=[suite_file], options=options)
        # plan: the stored discordance, named with its calibration, instead of a guess.
        fp, floors = calibration.floors_for_endpoint(store, quiet, [suite_file])
        assert fp == cal["fingerprint"] and floors["determinism-floor"].calibration == cal["id"]
        (row,) = planning.plan(suites=[suite_file], margin=None, alpha=None, floors=floors)
        assert row["discordance_source"] == "calibration"
        # Smoothed as the gate smooths for its MDE: (discordant + 1)/(pairs + 2).
        assert row["discordance"] == pytest.approx((floor["discordance"] * 64 + 1) / 66)
        assert f"measured by calibration {cal['id']}" in row["discordance_note"]
        (given,) = planning.plan(
            suites=[suite_file], margin=None, alpha=None, discordance=row["discordance"]
        )
        assert row["required_items"] == given["required_items"]
        assert given["discordance_source"] == "given"
        (unsized,) = planning.plan(suites=[suite_file], margin=None, alpha=None)
        assert "required_items" not in unsized and "evalsvc calibrate" in unsized["note"]

        # The gate: the same quiet run now carries the floor and, having varied on no prompt
        # where the calibration saw many, its pass is no evidence.
        after_report = compare(spec, store=store)
        after = _gate(after_report)
        gate = after["details"]["gate"]["noise_floor"]
        assert gate["calibration"] == cal["id"] and gate["instability"] == floor["instability"]
        check = after["details"]["noise_floor"]
        assert check["observed_varying_clusters"] == 0 and check["p_quieter"] < 0.05
        assert after["verdict"] == "inconclusive"
        assert after["details"]["verdict_before_floor"] == "pass"
        assert "below the noise floor" in after["details"]["reason"]

        # The dashboard shows it beside the gate: the run page's gate row and its rendering.
        from evalsvc.dashboard._routes import _env
        from evalsvc.services.run_verdict import gate_table

        full = store.get_report(str(after_report["run_id"]))
        (row,) = gate_table(full)["rows"]
        assert row["noise_floor"] == gate
        macro = _env.get_template("_macros.html").module.noise_floor  # type: ignore[attr-defined]
        shown = str(macro(row["noise_floor"]))
        assert f"calibration {cal['id'][:8]}" in shown and "instability" in shown
        assert "no noise floor" in str(macro(None))


def test_a_label_alone_is_not_a_calibration(
    db_url: str, proxy: FaultProxy, suite_file: str  # noqa: F811  (the fixture)
) -> None:
    """A run labelled as a calibration whose candidate is another endpoint is never a floor."""
    quiet = EndpointRef(url=proxy.url("pass"))
    other = EndpointRef(url=proxy.url("noisy"))
    with Store.from_url(db_url) as store:
        spec = RunSpec(
            baseline=quiet, candidates=[other], suites=[suite_file],
            labels={calibration.CALIBRATION_LABEL: calibration.CALIBRATION},
        )
        report = compare(spec, store=store)
        assert calibration.list_calibrations(store) == []
        snaps = store.get_endpoint_snapshots(str(report["run_id"]))
        fp = provenance_fingerprint(snaps["baseline"][1])
        identity = store.get_endpoint_identities(str(report["run_id"]))["baseline"]
        assert identity is not None
        assert noise_floor.floor_for(store, fp, "determinism-floor", endpoint=identity) is None
        with pytest.raises(UsageError, match="not an endpoint against itself"):
            calibration.adopt(store, str(report["run_id"]), by="t-admin")
        with pytest.raises(calibration.CalibrationNotFound):
            calibration.get(store, "0" * 32)


def test_the_report_schema_holds_a_real_noise_floor(
    tmp_path: Path, sqlite_template: Path, proxy: FaultProxy  # noqa: F811  (the fixture)
) -> None:
    """A real report that carries a noise floor (a calibration by the real runner, then a run
    whose baseline has its fingerprint) validates against the shipped JSON Schema, which
    defines the floor: a floor that breaks its contract does not validate. One backend: the
    report is the same JSON on both."""
    import jsonschema

    from evalsvc.reports import report_schema

    suite = tmp_path / "determinism-floor.yaml"
    suite.write_text(SUITE.replace("n: 32", "n: 12"))
    shutil.copy(sqlite_template, tmp_path / "evalsvc.db")
    options = RunOptions(concurrency=8)
    with Store.from_url(f"sqlite:///{tmp_path / 'evalsvc.db'}") as store:
        cal = calibration.calibrate(_prod(store, proxy.url("noisy")), [str(suite)],
                                    store=store, options=options)
        quiet = _prod(store, proxy.url("pass"))
        spec = RunSpec(baseline=quiet, candidates=[quiet], suites=[str(suite)], options=options)
        returned = compare(spec, store=store)
        stored = store.get_report(str(returned["run_id"]))
        # A calibration measured before endpoints were recorded (migration 0009 leaves NULL)
        # would be used by no run: adopting it is refused with the fix.
        ref, prov = store.get_endpoint_snapshots(cal["id"])["baseline"]
        store.save_endpoint_snapshot(cal["id"], role="baseline", endpoint=ref, provenance=prov)
        with pytest.raises(UsageError, match="calibrate again"):
            calibration.adopt(store, cal["id"], by="t-admin")
    assert stored is not None
    validator = jsonschema.Draft202012Validator(report_schema())
    for report in (returned, stored):
        validator.validate(report)
    details = _gate(stored)["details"]
    floor = details["gate"]["noise_floor"]
    assert floor == cal["floors"]["determinism-floor"] and floor["calibration"] == cal["id"]
    check = details["noise_floor"]
    assert check["calibration"] == cal["id"] and check["observed_clusters"] > 0

    schema = report_schema()["$defs"]
    assert set(floor) == set(schema["noise_floor"]["properties"])
    assert set(check) == set(floor) | set(schema["noise_floor_check"]["allOf"][1]["properties"])

    def broken(path: str, value: object) -> list[str]:
        report = copy.deepcopy(stored)
        target = _gate(report)["details"]
        *parents, key = path.split(".")
        for p in parents:
            target = target[p]
        if value is KeyError:
            del target[key]
        else:
            target[key] = value
        return [e.message for e in validator.iter_errors(report)]

    assert broken("gate.noise_floor.discordance", "0.2")
    assert broken("gate.noise_floor.discordance", 1.5)
    assert broken("gate.noise_floor.calibration", KeyError)
    assert broken("gate.noise_floor.pairs", -1)
    assert broken("gate.noise_floor", "calibrated")
    assert broken("noise_floor.p_quieter", 2.0)
    assert broken("noise_floor.observed_clusters", KeyError)
    assert broken("verdict_before_floor", "fail")
    # What the schema allows: no floor on file, and older reports without the key.
    assert broken("gate.noise_floor", None) == []
    assert broken("gate.noise_floor", KeyError) == []
