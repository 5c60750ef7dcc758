"""Both sides at 0% (a blanking fault proxy in front of a real server) exit 3, not 0.

The hole (issue: an uninformative baseline passes): with nothing solved on either side the paired
test sees no discordance and would say ``pass``; the informative-baseline guard makes it
``inconclusive`` with the reason in the JSON report, the verdict table and the Markdown findings.

The proxy blanks every answer whatever its upstream says, so no model is needed underneath: the
upstream is the loopback fault server's ``ok`` route (``tests/fixtures/faults.py``). In front of
the real bf16 endpoint this test took 25 s of the second vLLM group (60 answers of up to 80
tokens on the baseline's core, which the other endpoint tests wait on) and skipped on hosts
without the vLLM tier; now it runs on every host, through the real CLI as before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fixtures.faults import base_url, fault_server
from tests.runner.fault_proxy import fault_proxy


def test_blank_answers_on_both_sides_are_inconclusive(tmp_path: Path) -> None:
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    with fault_server() as upstream, fault_proxy(base_url(upstream, "ok")) as proxy:
        url = proxy.url("blank")
        # 30 items at the suite's margin 0.15: enough that 0 vs 0 passes without the guard.
        r = subprocess.run(
            [sys.executable, "-m", "evalsvc.cli.main", "compare", url, url,
             "--suite", "reasoning-smoke", "--samples", "30", "--json", str(out),
             "--markdown", str(md)],
            capture_output=True, text=True, timeout=1200,
        )
        damaged = proxy.damaged
    assert r.returncode == 3, r.stderr
    assert damaged >= 60  # every item on both sides went through the upstream and was blanked
    report = json.loads(out.read_text())
    suite = report["candidates"][0]["suites"][0]
    assert suite["baseline"] == 0 and suite["candidate"] == 0
    assert suite["verdict"] == "inconclusive"
    d = suite["details"]
    assert d["verdict_before_guard"] == "pass"
    assert "uninformative baseline" in d["reason"]
    assert d["baseline_guard"]["informative"] is False
    assert "uninformative baseline" in md.read_text()
    assert "uninformative baseline" in " ".join(r.stderr.split())
