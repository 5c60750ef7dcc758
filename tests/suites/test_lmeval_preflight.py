"""The lmeval kind refuses, before any item is sent, an unknown task, missing data and a missing
tokenizer (exit 2 with the reason). lm-eval runs in its own venv (``lmeval_python``); the
end-to-end case runs ``evalsvc compare`` on the real local endpoints with the ``publisher`` set's
ARC-Challenge, whose hub data this offline machine does not have."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalsvc.domain import Provenance
from evalsvc.suites import SuiteSpec, suite_kinds
from evalsvc.suites.kinds._lmeval_python import LmevalError, lmeval_python

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def lmeval() -> str:
    try:
        return lmeval_python()
    except LmevalError as exc:
        pytest.skip(f"no Python with lm-eval here: {exc}")


def _tokenizer_dir() -> Path:
    from evalsvc.local import home_dir

    path = home_dir() / "models" / "bf16"
    if not (path / "tokenizer_config.json").is_file():
        pytest.skip(f"no local tokenizer at {path} (evalsvc local up prepares it)")
    return path


def _problems(**params: Any) -> list[str]:
    cls = suite_kinds()["lmeval"]
    suite = cls(SuiteSpec(name="pf", kind="lmeval", params=params))
    return asyncio.run(suite.preflight(Provenance()))


def test_the_bundled_task_passes_preflight(lmeval: str) -> None:
    assert _problems(tokenizer=str(_tokenizer_dir())) == []


def test_unknown_task_is_refused_with_close_names(lmeval: str) -> None:
    problems = _problems(task="evalsvc_mcq", n=5, tokenizer=str(_tokenizer_dir()))
    assert len(problems) == 1
    assert "no task 'evalsvc_mcq'" in problems[0] and "evalsvc_mc" in problems[0]


def test_missing_tokenizer_is_refused(lmeval: str, tmp_path: Path) -> None:
    problems = _problems(tokenizer=str(tmp_path / "nowhere"))
    assert any("not a local Hugging Face tokenizer directory" in p for p in problems)


def test_a_local_task_whose_data_is_missing_is_refused(lmeval: str, tmp_path: Path) -> None:
    """A task of the include directory is built from that directory alone first; when that
    fails, the preflight builds it again beside lm-eval's own tasks and reports why it fails."""
    bundled = Path(__file__).parents[2] / "evalsvc/suites/catalog/data/lmeval/evalsvc_mc.yaml"
    (tmp_path / "mine.yaml").write_text(
        bundled.read_text().replace("task: evalsvc_mc", "task: mine_mc")
        .replace("evalsvc_mc.jsonl", "gone.jsonl")
    )
    problems = _problems(task="mine_mc", include_path=str(tmp_path), n=5,
                         tokenizer=str(_tokenizer_dir()))
    assert len(problems) == 1 and "task 'mine_mc'" in problems[0], problems
    assert "not available offline" in problems[0]


def test_hub_task_without_cached_data_is_refused(lmeval: str) -> None:
    problems = _problems(
        task="arc_challenge", include_path=None, n=10, tokenizer=str(_tokenizer_dir())
    )
    assert len(problems) == 1 and "not available offline" in problems[0], problems


@pytest.mark.endpoints
def test_compare_refuses_the_publisher_task_before_any_item(
    lmeval: str, local_endpoints: Any, tmp_path: Path
) -> None:
    cand = next(iter(local_endpoints.candidates.values()))
    env = {
        **os.environ,
        "EVALSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'pf.db'}",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "evalsvc.cli.main",
            "compare",
            local_endpoints.baseline,
            str(cand),
            "--suite",
            "publisher-arc-challenge",
            "--json",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "publisher-arc-challenge" in out.stderr and "not available offline" in out.stderr
    assert "refused before sending any item" in out.stderr
    from evalsvc.db import Store

    store = Store.from_url(env["EVALSVC_DATABASE_URL"])
    (run,) = store.list_runs()
    assert store.get_samples(run.id) == []  # nothing was sent
