"""Every Eval Ever against the ``every-eval-ever`` package itself, run in its own Python 3.12 venv.

The package requires Python 3.12 (evalsvc runs on 3.11), so it is installed with uv into a
venv of this session from PyPI (about 10 s with a warm uv cache). Two checks run there:

- evalsvc's ``export --format eee`` of a real run (the runner against the loopback fault
  server) parses as the package's own ``InstanceLevelEvaluationLog`` model, whose validators
  are stricter than the JSON Schema evalsvc checks with;
- the package's own lm-eval converter, run now on the real lm-eval logs of
  ``tests/fixtures/logs/lmeval_eee``, writes the records committed beside them (so the fast
  test in ``test_gatelogs_eee.py`` gates what the package writes), and gating its fresh output
  gives the numbers of gating the lm-eval logs.

Skipped with the reason where no Python 3.12 interpreter is found.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.services import exports, runs
from evalsvc.services.gatelogs import gate_logs
from tests.fixtures.faults import base_url, fault_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "lmeval_eee"
PACKAGE = "every-eval-ever==0.3.0"


def _python312() -> str | None:
    found = [shutil.which("python3.12"),
             *sorted(str(p) for p in (Path.home() / ".pyenv" / "versions").glob("3.12*/bin/python3.12"))]
    for candidate in found:
        if candidate and subprocess.run([candidate, "-c", "import sys"], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="module")
def eee_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = _python312()
    if python is None:
        pytest.skip("every-eval-ever requires Python 3.12 and none is installed (python3.12)")
    uv = Path(sys.executable).with_name("uv")
    venv = tmp_path_factory.mktemp("eee") / "venv"
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run([str(uv), "venv", "-q", "-p", python, str(venv)], check=True, env=env)
    subprocess.run(
        [str(uv), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), PACKAGE],
        check=True, env=env, timeout=600,
    )
    return venv / "bin" / "python"


def _run(python: Path, code: str, *args: str) -> str:
    r = subprocess.run([str(python), "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_the_export_parses_as_the_packages_own_model(eee_python: Path, tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'store.db'}")
    store.ensure_ready(upgrade_fresh_sqlite=True)
    suite = tmp_path / "tiny.yaml"
    suite.write_text("name: tiny\nkind: reasoning\nseed: 3\nparams:\n  n: 6\n  max_tokens: 8\n")
    try:
        with fault_server() as srv:
            endpoint = base_url(srv, "ok")
            report = runs.compare(
                RunSpec(baseline=EndpointRef(url=endpoint), candidates=[EndpointRef(url=endpoint)],
                        suites=[str(suite)], options=RunOptions(concurrency=4)),
                store=store,
            )
        files = exports.export_eee(store, report["run_id"], out_dir=tmp_path / "eee")
    finally:
        store.close()
    code = (
        "import sys\n"
        "from every_eval_ever.instance_level_types import InstanceLevelEvaluationLog as Log\n"
        "n = 0\n"
        "for path in sys.argv[1:]:\n"
        "    for line in open(path, encoding='utf-8'):\n"
        "        Log.model_validate_json(line); n += 1\n"
        "print(n)\n"
    )
    assert int(_run(eee_python, code, *(str(f.path) for f in files))) == 12


def _records(path: Path) -> list[dict[str, Any]]:
    # evaluation_id holds the conversion's own timestamp: everything else must be the same.
    return [
        {k: v for k, v in json.loads(line).items() if k != "evaluation_id"}
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def test_the_packages_converter_writes_the_fixture_and_gates_like_lm_eval(
    eee_python: Path, tmp_path: Path
) -> None:
    fresh = {}
    for side in ("bf16", "fp8-kv"):
        out = tmp_path / side
        subprocess.run(
            [str(eee_python), "-m", "every_eval_ever.converters.lm_eval", "--log_path",
             str(LOGS / "lm-eval" / side), "--output_dir", str(out), "--include_samples"],
            check=True, capture_output=True, timeout=300,
        )
        (fresh[side],) = out.rglob("*_samples.jsonl")
        (committed,) = (LOGS / "eee" / side).glob("*_samples.jsonl")
        assert _records(fresh[side]) == _records(committed)
    store = Store.from_url(f"sqlite:///{tmp_path / 'store.db'}")
    store.ensure_ready(upgrade_fresh_sqlite=True)
    try:
        a = gate_logs(LOGS / "lm-eval" / "bf16", LOGS / "lm-eval" / "fp8-kv", store=store)
        b = gate_logs(fresh["bf16"], fresh["fp8-kv"], store=store)
    finally:
        store.close()
    sa, sb = a["candidates"][0]["suites"][0], b["candidates"][0]["suites"][0]
    for key in ("baseline", "candidate", "delta", "n", "p_value"):
        assert sb[key] == pytest.approx(sa[key]), key
    assert sb["ci"] == pytest.approx(sa["ci"]) and sb["verdict"] == sa["verdict"]
