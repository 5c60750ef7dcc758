"""A greedy lm-eval suite on one endpoint: one ``_lmeval_run.py`` process, the ``lm_eval``
command's results.

With lm-eval (``lmeval_python``, slow: lm-eval's start-up), against real loopback servers: the
suite's run (kept with ``keep_logs``) and the ``lm_eval`` command it replaced, run by hand with
the same arguments, write the same per-document records and the same ``results_*.json`` but for
the clock, in the same layout, for a generate task through the chat API
(``tests/suites/lmeval_gen_server.py``) and a loglikelihood task through the engine's own
tokenizer (``benchmarks/stub_server.py``: completions with echo and logprobs, ``/tokenize``); the
emitted samples carry the command's scores.

Without lm-eval (a stand-in Python that sleeps): a run past ``timeout_s`` and a cancelled run
kill the process; the run script imports nothing of evalsvc (lm-eval's Python may lack it).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, Item, Sample
from evalsvc.suites import SuiteSpec, suite_kinds
from evalsvc.suites.kinds.lmeval import ENGINE_MODEL, read_samples
from tests.fixtures.bench_stub import bench_stub
from tests.suites.lmeval_gen_server import gen_server

ROOT = Path(__file__).resolve().parents[2]
ENGINE_SCRIPT = ROOT / "evalsvc" / "suites" / "kinds" / "_lmeval_engine.py"
#: What differs between two runs of the same evaluation: the clock.
CLOCK = {"date", "total_evaluation_time_seconds"}


def _lmeval(name: str, **params: Any) -> Any:
    return suite_kinds()["lmeval"](SuiteSpec(name=name, kind="lmeval", seed=1234, params=params))


@contextmanager
def _stub() -> Iterator[str]:
    """``benchmarks/stub_server.py`` (vLLM-shaped: echo, logprobs, ``/tokenize``): its URL."""
    with bench_stub() as urls:
        yield urls[0]


@contextmanager
def _gen() -> Iterator[str]:
    with gen_server(0.6) as server:
        yield server.url


def _run(suite: Any, url: str, n: int) -> list[Sample]:
    from evalsvc.endpoints import EndpointClient

    items = [Item(id=f"doc{i}", metadata={"doc_id": i}) for i in range(n)]
    emitted: list[Sample] = []

    async def emit(sample: Sample) -> None:
        emitted.append(sample)

    async def go() -> None:
        client = EndpointClient(EndpointRef(url=url, model="m"))
        try:
            await suite.run(items, client, role="baseline", emit=emit, done=set(), concurrency=2)
        finally:
            await client.aclose()

    asyncio.run(go())
    return emitted


def _command(python: str, config: dict[str, Any]) -> list[str]:
    """The ``lm_eval`` command the greedy path ran before ``_lmeval_run.py``."""
    entry = [str(ENGINE_SCRIPT)] if config["engine"] else ["-m", "lm_eval"]
    cmd = [python, *entry, "--model", config["model"], "--model_args", config["model_args"],
           "--tasks", config["task"], "--output_path", config["output"], "--log_samples",
           "--limit", str(config["limit"]), "--seed", str(config["seed"]),
           "--include_path", config["include"]]
    return cmd + (["--apply_chat_template"] if config["apply_chat_template"] else [])


def _files(output: Path) -> dict[str, Path]:
    """lm-eval's files under ``output`` by relative path, the timestamp in their names cut."""
    return {str(p.relative_to(output).parent / p.name.rsplit("_", 1)[0]): p
            for p in output.rglob("*") if p.is_file()}


def _without_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items() if k not in CLOCK}
    return value


CASES: dict[str, tuple[Any, dict[str, Any], int]] = {
    "generate-chat": (_gen, {"task": "evalsvc_gen", "model_type": "local-chat-completions",
                             "metric": "exact_match", "capabilities": ["chat"]}, 12),
    "loglikelihood-engine-tokenizer": (_stub, {"task": "evalsvc_mc", "metric": "acc"}, 10),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_run_writes_what_the_lm_eval_command_writes(
    case: str, lmeval_python: str, tmp_path: Path
) -> None:
    from evalsvc.endpoints import EndpointClient

    server, params, n = CASES[case]
    kept = tmp_path / "kept"
    suite = _lmeval("greedy", keep_logs=str(kept), num_concurrent=2, **params)
    with server() as url:
        emitted = _run(suite, url, n)
        config = suite.greedy_config(EndpointClient(EndpointRef(url=url, model="m")),
                                     tmp_path / "cmd", n)
        assert (config["model"] == ENGINE_MODEL) == (case == "loglikelihood-engine-tokenizer")
        env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
               "OPENAI_API_KEY": "EMPTY"}
        done = subprocess.run(_command(lmeval_python, config), cwd=config["include"], env=env,
                              capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    ours, theirs = _files(kept / "greedy" / "baseline"), _files(tmp_path / "cmd")
    assert sorted(ours) == sorted(theirs) and len(ours) == 2, (ours, theirs)
    for name in ours:
        if Path(name).name.startswith("samples_"):
            mine = [json.loads(x) for x in ours[name].read_text().splitlines()]
            cmd = [json.loads(x) for x in theirs[name].read_text().splitlines()]
            assert len(mine) == n and mine == cmd
        else:
            mine_r = json.loads(ours[name].read_text())
            cmd_r = json.loads(theirs[name].read_text())
            assert mine_r["model_name"] == "m" and mine_r["config"]["limit"] == float(n)
            assert _without_clock(mine_r) == _without_clock(cmd_r)
    # Every document emitted with the command's score for it.
    records = read_samples(tmp_path / "cmd", params["task"])
    assert len(emitted) == n and all(s.error is None for s in emitted), emitted[:1]
    metric = params["metric"]
    assert [s.score for s in emitted] == [float(records[i][metric]) for i in range(n)]


# ------------------------------------------------------------------------------ without lm-eval

_SLEEPER = r"""
import os, sys, time
open(PID_FILE, "w").write(str(os.getpid()))
time.sleep(120)
"""


def _sleeper(tmp_path: Path) -> tuple[Path, Path]:
    pid_file = tmp_path / "pid"
    script = tmp_path / "sleeper.py"
    script.write_text(f"PID_FILE = {str(pid_file)!r}\n" + _SLEEPER, encoding="utf-8")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    return python, pid_file


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(pid, 0): it is gone once its state says so.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][:1] != "Z"


async def _start(suite: Any, pid_file: Path) -> tuple[asyncio.Task[None], int]:
    """The suite's run on one document as a task, once its process has started: its pid."""
    from evalsvc.endpoints import EndpointClient

    async def emit(sample: Sample) -> None:
        pass

    async def run() -> None:
        client = EndpointClient(EndpointRef(url="http://127.0.0.1:9/v1", model="m"))
        try:
            await suite.run([Item(id="doc0", metadata={"doc_id": 0})], client, role="baseline",
                            emit=emit, done=set(), concurrency=1)
        finally:
            await client.aclose()

    task = asyncio.create_task(run())
    for _ in range(400):
        if pid_file.exists() and pid_file.read_text():
            return task, int(pid_file.read_text())
        await asyncio.sleep(0.05)
    raise AssertionError("the lm-eval process never started")


def test_a_run_past_timeout_s_kills_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python, pid_file = _sleeper(tmp_path)
    monkeypatch.setenv("EVALSVC_LMEVAL_PYTHON", str(python))
    suite = _lmeval("slow", task="evalsvc_gen", model_type="local-chat-completions",
                    capabilities=["chat"], metric="exact_match", timeout_s=1.5)

    async def go() -> int:
        task, pid = await _start(suite, pid_file)
        with pytest.raises(TimeoutError):
            await task
        return pid

    pid = asyncio.run(go())
    assert not _alive(pid)


def test_a_cancelled_run_kills_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Ctrl-C does to ``evalsvc compare``: the run's task is cancelled."""
    python, pid_file = _sleeper(tmp_path)
    monkeypatch.setenv("EVALSVC_LMEVAL_PYTHON", str(python))
    suite = _lmeval("cancelled", task="evalsvc_gen", model_type="local-chat-completions",
                    capabilities=["chat"], metric="exact_match")

    async def go() -> int:
        task, pid = await _start(suite, pid_file)
        assert _alive(pid)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pid

    pid = asyncio.run(go())
    assert not _alive(pid)


def test_the_run_script_never_imports_evalsvc() -> None:
    """lm-eval's Python may be another environment (the managed venv) without evalsvc."""
    from evalsvc.suites.kinds.lmeval import RUN_SCRIPT

    source = RUN_SCRIPT.read_text(encoding="utf-8")
    assert "import evalsvc" not in source and "from evalsvc" not in source
    assert "from _lmeval_engine import register" in source  # its sibling, by path
