"""The lmeval kind's Python: found, or prepared on first use in ``<EVALSVC_HOME>/venvs/lmeval``
(``evalsvc.local._lmeval``), once however many processes ask, never on a worker unless allowed,
and a failed preparation is the suite's skip reason with the log and the fix.

The fast cases run the real decision with a fresh ``EVALSVC_HOME`` and a package index on a
loopback port that refuses connections (``UV_INDEX_URL``/``PIP_INDEX_URL``): an installer that
ran would fail, so a case that must not install proves it did not, and the failure case is a real
uv (or pip) failing. The slow case prepares the venv from the package index, from two processes
at once, while ``evalsvc compare`` runs the bundled lm-eval task against an SGLang-shaped stub.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsvc.domain import Provenance
from evalsvc.local._lmeval import LMEVAL_REQUIREMENTS, lmeval_venv, lmeval_venv_ready
from evalsvc.local._paths import Layout
from evalsvc.suites import SuiteSpec, suite_kinds
from evalsvc.suites._base import _SERVER_RUN
from evalsvc.suites.kinds._lmeval_python import LmevalError, lmeval_python

ROOT = Path(__file__).resolve().parents[2]


def _refusing_index() -> str:
    """A package index URL on a loopback port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh EVALSVC_HOME, no lm-eval Python named, every index refusing, empty uv cache."""
    if _lmeval_beside_evalsvc():
        pytest.skip("lm-eval is installed beside evalsvc here: nothing would be prepared")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("EVALSVC_HOME", str(home))
    monkeypatch.delenv("EVALSVC_LMEVAL_PYTHON", raising=False)
    monkeypatch.delenv("EVALSVC_LMEVAL_AUTO_INSTALL", raising=False)
    index = _refusing_index()
    for name in ("UV_INDEX_URL", "PIP_INDEX_URL"):
        monkeypatch.setenv(name, index)
    for name in ("UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX", "PIP_EXTRA_INDEX_URL",
                 "PIP_FIND_LINKS", "UV_FIND_LINKS", "UV_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")  # refused is refused: no backoff in a fast test
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no machine-wide find-links or mirror
    return home


def _lmeval_beside_evalsvc() -> bool:
    import importlib.util

    return importlib.util.find_spec("lm_eval") is not None


def _log(home: Path) -> Path:
    return home / "logs" / "prepare-venv-lmeval.log"


def test_a_named_python_is_used_as_it_is(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSVC_LMEVAL_PYTHON", "/opt/lm-eval/bin/python")
    assert lmeval_python() == "/opt/lm-eval/bin/python"
    assert not (home / "venvs").exists()


def test_opt_out_skips_with_every_way_to_get_one(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSVC_LMEVAL_AUTO_INSTALL", "0")
    with pytest.raises(LmevalError) as err:
        lmeval_python()
    msg = str(err.value)
    assert msg.startswith("no Python with lm-eval") and "EVALSVC_LMEVAL_AUTO_INSTALL=0" in msg
    assert "pip install 'evalsvc[lmeval]'" in msg and "EVALSVC_LMEVAL_PYTHON" in msg
    assert "evalsvc local lmeval" in msg
    assert not lmeval_venv(Layout(home)).exists() and not _log(home).exists()


def test_a_worker_prepares_nothing_unless_its_operator_allows_it(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Server mode (the runner sets it for a run under the server's egress policy)."""

    def as_worker() -> str:
        _SERVER_RUN.set(True)
        return lmeval_python()

    with pytest.raises(LmevalError, match="a worker prepares it only with "
                       "EVALSVC_LMEVAL_AUTO_INSTALL=1"):
        contextvars.copy_context().run(as_worker)
    assert not _log(home).exists()
    # Allowed: the worker tries (and here fails: the index refuses), as the CLI would.
    monkeypatch.setenv("EVALSVC_LMEVAL_AUTO_INSTALL", "1")
    with pytest.raises(LmevalError, match="preparing it failed"):
        contextvars.copy_context().run(as_worker)
    assert _log(home).exists()


def test_a_failed_preparation_is_the_suites_skip_reason_with_log_and_fix(home: Path) -> None:
    """A real installer against an index that refuses: the preflight problem (so the run
    skips the suite, or --strict refuses it) names the log and the fix; nothing looks complete,
    so the next use tries again."""
    suite = suite_kinds()["lmeval"](SuiteSpec(name="mc", kind="lmeval", params={"n": 4}))
    problems = asyncio.run(suite.preflight(Provenance()))
    assert len(problems) == 1, problems
    msg = problems[0]
    log = _log(home)
    assert msg.startswith("no Python with lm-eval: preparing it failed")
    assert f"log: {log}" in msg and "UV_INDEX_URL / PIP_INDEX_URL" in msg
    assert "pip install 'evalsvc[lmeval]'" in msg
    text = log.read_text()
    assert "127.0.0.1" in text and LMEVAL_REQUIREMENTS[0] in text  # the installer's own error
    assert not lmeval_venv_ready(Layout(home))


_HOLDER = r"""
import fcntl, os, sys
from pathlib import Path
from evalsvc.local._lmeval import _KEY
from evalsvc.local._prepare import _write_marker
venvs = Path(sys.argv[1])
venvs.mkdir(parents=True, exist_ok=True)
lock = (venvs / ".lmeval.lock").open("a")
fcntl.flock(lock, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
# What a finished preparation leaves: the interpreter, then the marker (written last).
(venvs / "lmeval" / "bin").mkdir(parents=True)
os.symlink(sys.executable, venvs / "lmeval" / "bin" / "python")
_write_marker(venvs / "lmeval", _KEY)
fcntl.flock(lock, fcntl.LOCK_UN)
print("done", flush=True)
"""


@pytest.fixture
def holder(home: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the preparation lock (as a preparing ``compare`` would)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(home / "venvs")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait()


def test_a_second_first_use_waits_for_the_lock_and_installs_nothing(
    home: Path, holder: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]
) -> None:
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(_call(lmeval_python)))
    waiter.start()
    deadline = time.monotonic() + 60
    while "waiting for another process preparing lm-eval" not in capsys.readouterr().err:
        assert waiter.is_alive() and time.monotonic() < deadline
        time.sleep(0.2)
    assert waiter.is_alive() and got == []  # still waiting: the lock is held
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("go\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "done"
    waiter.join(timeout=60)
    assert got == [str(home.resolve() / "venvs" / "lmeval" / "bin" / "python")]
    assert not _log(home).exists()  # this process ran no installer


def _call(fn: object) -> object:
    try:
        return fn()  # type: ignore[operator]
    except Exception as exc:  # noqa: BLE001 (the test asserts what came back)
        return exc


@pytest.mark.timeout(1200)
def test_first_use_prepares_once_for_two_processes_then_compare_runs_lm_eval(
    tmp_path: Path,
) -> None:
    """From the package index, in a fresh EVALSVC_HOME: ``evalsvc local lmeval`` and ``evalsvc
    compare --suite lmeval-mc-gpu`` started together both need the venv; one prepares it (one
    install in the log), the other waits, and the compare runs the task through the engine's
    ``/tokenize`` with the prepared Python. Slow (conftest ``SLOW``): 16-63 s of install."""
    if _lmeval_beside_evalsvc():
        pytest.skip("lm-eval is installed beside evalsvc here: nothing would be prepared")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import evaluator_speed
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items()
           if k not in ("EVALSVC_LMEVAL_PYTHON", "EVALSVC_LMEVAL_AUTO_INSTALL")}
    env.update(EVALSVC_HOME=str(home), PYTHONPATH=str(ROOT),
               EVALSVC_DATABASE_URL=f"sqlite:///{tmp_path / 'store.db'}")
    cli = [sys.executable, "-m", "evalsvc.cli.main"]
    with evaluator_speed.stub("--engine", "sglang") as (base, cand):
        started = time.monotonic()
        prep = subprocess.Popen([*cli, "local", "lmeval"], env=env, cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        run = subprocess.run(
            [*cli, "compare", base, cand, "--suite", "lmeval-mc-gpu", "--samples", "4",
             "--json", "-"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=1100,
        )
        out, err = prep.communicate(timeout=1100)
        elapsed = time.monotonic() - started
    python = home.resolve() / "venvs" / "lmeval" / "bin" / "python"
    assert prep.returncode == 0, err[-3000:]
    assert out.strip() == str(python)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["skipped"] == []
    (suite,) = report["candidates"][0]["suites"]
    assert suite["suite"] == "lmeval-mc-gpu" and suite["n"] == 4 and suite["n_errors"] == 0
    both = err + run.stderr
    assert both.count("preparing lm-eval for the lmeval suites on first use") == 1, both[-3000:]
    assert "installing lm-eval (log: " in both and "usually 0:" in both
    log = (home / "logs" / "prepare-venv-lmeval.log").read_text()
    assert log.count("installing lm-eval\n") == 1  # one install for the two processes
    assert lmeval_venv_ready(Layout(home.resolve()))
    times = json.loads((home / "logs" / "step-times.json").read_text())
    print(f"\nfirst use: {times} (install), {elapsed:.1f} s with the compare")
