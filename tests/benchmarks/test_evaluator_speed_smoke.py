"""The evaluator speed benchmarks keep working: each script runs end to end on a tiny size.

Nothing here is timed (targets live in docs/benchmarks.md): each case asserts what the script
must produce — the stub answers like an OpenAI-compatible server, every request of the peer and
of evalsvc got an answer, and the peak RSS was read from the child process itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _run(*args: str, timeout: float = 600) -> str:
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=_env(), timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def stub_urls() -> object:
    sys.path.insert(0, str(BENCH))
    try:
        import evaluator_speed
    finally:
        sys.path.remove(str(BENCH))
    with evaluator_speed.stub() as urls:
        yield urls


def test_the_stub_is_an_openai_compatible_endpoint_the_probe_accepts(stub_urls: list[str]) -> None:
    import asyncio

    from evalsvc.domain import EndpointRef
    from evalsvc.endpoints import EndpointClient, probe

    async def go() -> tuple[object, object, object]:
        async with EndpointClient(EndpointRef(url=stub_urls[0]), retries=1) as c:
            prov = await probe(c)
            chat = await c.chat([{"role": "user", "content": "2+2?"}], max_tokens=8)
            streamed = await c.chat([{"role": "user", "content": "2+2?"}], max_tokens=8, stream=True)
        return prov, chat, streamed

    prov, chat, streamed = asyncio.run(go())
    assert prov.model == "stub-model" and prov.engine == "vllm"  # type: ignore[attr-defined]
    caps = prov.capabilities  # type: ignore[attr-defined]
    assert caps["chat"] and caps["completions"] and caps["logprobs"] and caps["echo"]
    assert caps["prompt_logprobs"] and caps["tokenize"]
    assert chat.ok and chat.text.startswith("The answer is ")  # type: ignore[attr-defined]
    assert streamed.ok and streamed.text == chat.text  # type: ignore[attr-defined]
    assert streamed.ttft_s is not None  # type: ignore[attr-defined]


def test_http_clients_script_measures_both_libraries(stub_urls: list[str]) -> None:
    out = json.loads(
        _run(str(BENCH / "http_clients.py"), *stub_urls, "--requests", "20", "--repeats", "1")
    )
    assert set(out["median_s"]) == {"aiohttp", "httpx"}
    assert all(v > 0 for v in out["median_s"].values())


def test_evaluator_speed_script_runs_peer_and_evalsvc(tmp_path: Path) -> None:
    out_file = tmp_path / "runs.json"
    stdout = _run(
        str(BENCH / "evaluator_speed.py"), "--items", "12", "--repeats", "1",
        "--concurrency", "4", "--out", str(out_file),
    )
    rows = json.loads(out_file.read_text())
    by = {r["client"]: r for r in rows}
    assert set(by) == {"minimal", "evalsvc"}
    assert by["evalsvc"]["pairs"] == 12 and by["evalsvc"]["verdict"] in {"pass", "fail", "inconclusive"}
    for row in rows:
        assert row["send_s"] > 0 and row["wall_s"] >= row["send_s"]
        # The child's own VmHWM: a Python process with evalsvc imported is tens of MB at least.
        assert row["peak_rss_mb"] is not None and row["peak_rss_mb"] > 20
    assert "| 12 | evalsvc | 1 |" in stdout
