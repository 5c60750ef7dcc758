"""Gate options end to end through ``evalsvc compare`` (loopback fault server, no model needed).

``--margin 0`` and a YAML margin of 0 reach the gate and the report shows 0 (the old
``flag or yaml or default`` dropped them); a submitter's margin or α that loosens the suite's
policy, or is out of range, exits 2 before any item is sent.

``compare`` runs in the test's own process (``tests.fixtures.cli.run_cli``, the same Typer app;
an uncaught exception fails the test): a separate interpreter costs 2-5 CPU-seconds of start-up
each on a 2-core host. One refusal (``--margin 0.9``) still runs ``python -m evalsvc.cli.main``,
so the real entry point's exit code and stderr stay covered.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.services import runs
from tests.fixtures.cli import CliResult, run_cli, run_cli_process
from tests.fixtures.faults import base_url, fault_server

SUITE = "name: tiny-reasoning\nkind: reasoning\nseed: 3\nparams:\n  n: 12\n  max_tokens: 8\n"


def _compare(*args: str) -> CliResult:
    return run_cli("compare", *args)


def _compare_process(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli_process("compare", *args)


def _items_sent(hits: dict[str, int]) -> int:
    return sum(v for k, v in hits.items() if k.endswith("chat/completions"))


def test_margin_zero_from_the_flag_and_from_yaml_reach_the_gate(tmp_path: Path) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE)
    zero = tmp_path / "z.yaml"
    zero.write_text(SUITE.replace("tiny-reasoning", "tiny-zero") + "gate:\n  margin: 0\n")
    with fault_server() as srv:
        url = base_url(srv, "ok")
        out = tmp_path / "flag.json"
        md = tmp_path / "flag.md"
        r = _compare(
            url, url, "--suite", str(suite), "--margin", "0", "--json", str(out), "--markdown", str(md)
        )
        assert r.returncode in (0, 1, 3), r.stderr
        s = json.loads(out.read_text())["candidates"][0]["suites"][0]
        assert s["margin"] == 0 and s["details"]["gate"]["margin"] == 0
        assert s["details"]["gate"]["origin"]["margin"] == "submitter"
        assert s["details"]["gate"]["policy"]["margin"] == 0.05
        assert "Gate: margin 0.000 (submitter; policy 0.050)" in md.read_text()
        # The run's suite snapshot stores the resolved gate (existing JSON column, no migration).
        from evalsvc.db import Store

        run_id = json.loads(out.read_text())["run_id"]
        (snap,) = Store(os.environ["EVALSVC_DATABASE_URL"]).get_suite_snapshots(run_id)
        assert snap["spec"]["resolved_gate"]["margin"] == 0
        assert snap["spec"]["resolved_gate"]["origin"]["margin"] == "submitter"
        out = tmp_path / "yaml.json"
        r = _compare(url, url, "--suite", str(zero), "--json", str(out))
        assert r.returncode in (0, 1, 3), r.stderr
        s = json.loads(out.read_text())["candidates"][0]["suites"][0]
        assert s["margin"] == 0 and s["details"]["gate"]["origin"]["margin"] == "suite policy"
        # The verdict table shows the margin the gate used.
        assert "margin" in r.stderr


@pytest.mark.parametrize(
    ("flags", "message", "process"),
    [
        (("--margin", "0.9"), "would loosen", True),  # the real `python -m evalsvc.cli.main`
        (("--margin", "1e308"), "would loosen", False),
        (("--alpha", "0.2"), "would loosen", False),
    ],
)
def test_loosening_options_exit_2_before_any_item(
    tmp_path: Path, flags: tuple[str, str], message: str, process: bool
) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE)
    with fault_server() as srv:
        url = base_url(srv, "ok")
        r = (_compare_process if process else _compare)(url, url, "--suite", str(suite), *flags)
        sent = _items_sent(srv.hits)
    assert r.returncode == 2, r.stderr
    assert message in " ".join(r.stderr.split())
    assert sent == 0  # refused before the probe, let alone an item


def test_service_layer_refuses_for_cli_and_rest_alike() -> None:
    # POST /runs and `compare` both go through runs.load_suites (UsageError → 422 / exit 2).
    ref = EndpointRef(url="http://127.0.0.1:9/v1")
    # model_construct: the request schema refuses some of these already; the service must too.
    for opts in (
        RunOptions(margin=0.9),
        RunOptions.model_construct(alpha=5),
        RunOptions.model_construct(max_error_rate=-1),
    ):
        spec = RunSpec(baseline=ref, candidates=[ref], suites=["reasoning-smoke"], options=opts)
        with pytest.raises(runs.UsageError, match="gate options refused"):
            runs.load_suites(spec)
    spec = RunSpec(
        baseline=ref, candidates=[ref], suites=["reasoning-smoke"], options=RunOptions(margin=0.1)
    )
    assert runs.load_suites(spec)  # tighter than the suite's 0.15: allowed
