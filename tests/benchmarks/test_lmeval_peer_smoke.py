"""The lm-eval peer of the evaluator speed benchmark keeps working (issue 21, P3).

``benchmarks/evaluator_speed.py --lmeval`` runs lm-evaluation-harness itself (its
``local-chat-completions`` model, one run per endpoint) on the same items as evalsvc and the
minimal client, against the zero-latency stub. lm-eval lives in the managed vLLM venv (the
``lmeval`` kind installs it there on first use), so this case asks for that venv (the
``lmeval_python`` fixture), not for the servers: it runs beside the endpoint tests instead of in
their chain. Nothing here is timed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.test_evaluator_speed_smoke import BENCH, _run


def test_the_lmeval_peer_answers_every_item(lmeval_python: str, tmp_path: Path) -> None:
    out_file = tmp_path / "runs.json"
    stdout = _run(
        str(BENCH / "evaluator_speed.py"), "--items", "12", "--repeats", "1", "--concurrency",
        "4", "--skip-minimal", "--lmeval", "--lmeval-python", lmeval_python,
        "--out", str(out_file), timeout=1200,
    )
    rows = {r["client"]: r for r in json.loads(out_file.read_text())}
    assert set(rows) == {"evalsvc", "lm-eval"}
    peer = rows["lm-eval"]
    assert peer["documents"] == [12, 12]  # lm-eval's own count, per endpoint
    assert len(peer["walls_s"]) == 2 and peer["wall_s"] == pytest.approx(sum(peer["walls_s"]), abs=0.01)
    assert peer["peak_rss_mb"] > 20
    assert "evalsvc wall ÷ lm-eval wall" in stdout
