"""``evalsvc sweep``: launched configurations, failed starts, ABBA capacity, baseline reuse,
the frontier and the recommendation, and what is left running after Ctrl-C, SIGTERM or SIGKILL.

Servers are real processes on loopback: ``tests/fixtures/queue_server.py`` (an
OpenAI-compatible M/D/1 queue with a known service time) started from a command template, and
the fault server's well-formed ``ok`` mode for the quality gates.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalsvc import local
from evalsvc.db import Store
from evalsvc.services import sweeps
from evalsvc.services.runs import UsageError
from evalsvc.services.sweeps import ConfigSpec, SpeedSpec, SweepSpec
from tests.fixtures.faults import base_url, fault_server
from tests.fixtures.loopback import free_port
from tests.speed.conftest import SCRIPT, wait_healthy

PY = sys.executable
TEMPLATE = f"{PY} {SCRIPT} --port {{port}} --service-ms {{service_ms}} {{extra}}"
ECHO = "name: echo-sweep\nkind: echo\nseed: 5\nparams: {n: 8, max_tokens: 8}\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private evalsvc home (state file, logs) and database."""
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EVALSVC_DATABASE_URL", f"sqlite:///{tmp_path / 'db.sqlite'}")
    return tmp_path / "home"


@pytest.fixture
def store(home: Path) -> Store:
    s = Store.from_url(None)
    s.ensure_ready(upgrade_fresh_sqlite=True)
    return s


@pytest.fixture
def baseline_queue(request: pytest.FixtureRequest) -> Any:
    port = free_port()
    service_ms = getattr(request, "param", "50")
    proc = subprocess.Popen([PY, str(SCRIPT), "--port", str(port), "--service-ms", service_ms],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(port, proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_command_template_renders_and_refuses_bad_templates() -> None:
    argv = sweeps.render_command(TEMPLATE, {"service_ms": "5", "extra": ""}, "x")
    assert argv == [PY, str(SCRIPT), "--port", "{port}", "--service-ms", "5"]
    # A value with spaces stays one argument.
    assert sweeps.render_command("serve {m} --port {port}", {"m": "a b"}, "x")[1] == "a b"
    with pytest.raises(UsageError, match="needs {model}"):
        sweeps.render_command("vllm serve {model} --port {port}", {}, "x")
    with pytest.raises(UsageError, match="no {port}"):
        sweeps.render_command("vllm serve m", {}, "x")


def test_command_template_launcher_starts_and_stops_a_real_server(home: Path) -> None:
    argv = sweeps.render_command(TEMPLATE, {"service_ms": "5", "extra": ""}, "t")
    info = local.start_command("sweep-test-t", argv, timeout=120, port_base=free_port())
    try:
        assert info.healthy and info.url.endswith("/v1")
        assert httpx.get(info.url.removesuffix("/v1") + "/health", timeout=30).status_code == 200
        assert "queue server on" in Path(info.log).read_text()  # its log is captured
        assert "sweep-test-t" in local.recorded_names()
    finally:
        assert local.stop_servers(["sweep-test-t"]) == ["sweep-test-t"]
    assert dead(info.pid)
    assert local.recorded_names() == []


def test_frontier_and_recommendation() -> None:
    pts = [
        {"name": "a", "quality": 0.0, "capacity": 1.2},
        {"name": "b", "quality": -0.01, "capacity": 1.9},
        {"name": "c", "quality": -0.02, "capacity": 1.5},  # dominated by b
        {"name": "d", "quality": -0.20, "capacity": 2.5},
    ]
    assert sweeps.pareto_frontier(pts) == ["a", "b", "d"]

    def cfg(name: str, verdict: str, ratio: float | None, status: str = "measured") -> dict:
        cap = {"ratio": ratio, "ci": [ratio, ratio] if ratio else None, "reason": None,
               "candidate_median": 10.0}
        return {"name": name, "status": status, "quality": {"verdict": verdict},
                "speed": {"capacity": cap}}

    rec = sweeps.recommend([cfg("a", "pass", 1.2), cfg("b", "pass", 1.9),
                            cfg("d", "fail", 2.5)], True)
    assert rec["config"] == "b" and "×1.90" in rec["reason"]
    none = sweeps.recommend([cfg("d", "fail", 2.5), cfg("e", "inconclusive", 3.0)], True)
    assert none["config"] is None and "d: quality fail" in none["reason"]
    assert sweeps.recommend([cfg("a", "pass", 1.2)], False)["config"] is None


@pytest.mark.parametrize("baseline_queue", ["100"], indirect=True)
def test_bad_flag_fails_to_start_and_the_sweep_goes_on_with_abba_capacity(
    home: Path, store: Store, baseline_queue: str
) -> None:
    """Baseline 100 ms per request (saturates at 10 req/s); 'fast' 10 ms (100 req/s); 'bad' has
    an unknown flag. Rates 1.5, 3, 6, 15 req/s: the baseline holds TTFT ≤ 1 s up to 6 and saturates
    at 15; 'fast' holds it at 15, where it is 15% busy (rates kept well below what the loaded
    test host's client can send; at 40% busy a queue server missed the SLO under `make test`'s
    load once, its process not scheduled in time)."""
    spec = SweepSpec(
        baseline=baseline_queue,
        command_template=TEMPLATE,
        configs=[
            ConfigSpec(name="bad", kind="command", params={"service_ms": "25",
                                                           "extra": "--no-such-flag"}),
            ConfigSpec(name="fast", kind="command", params={"service_ms": "10", "extra": ""}),
        ],
        health_timeout_s=120,
        # 1.5 req/s too: a repetition in which the loaded host delayed the baseline's queue
        # server past the SLO even at 3 req/s left its block without a capacity (a CI run,
        # load ~11, 2026-12-04); at 15% busy it still has one.
        speed=SpeedSpec(rates=[1.5, 3, 6, 15], requests=20, blocks=2, warmup=2, refine=0,
                        slo_ttft_ms=1000, slo_tpot_ms=None, max_tokens=4),
    )
    lines: list[str] = []
    report = sweeps.run_sweep(spec, store=store, log=lines.append)
    bad, fast = report["configs"]
    assert bad["status"] == "failed-to-start"
    assert "died during startup (exit status 2" in bad["error"]
    assert fast["status"] == "measured", fast.get("error")
    speed = fast["speed"]
    assert [o["role"][0].upper() for o in speed["order"]] == list("BCCBBCCB")
    assert [o["repetition"] for o in speed["order"]] == [0, 0, 1, 1, 2, 2, 3, 3]
    cap = speed["capacity"]
    assert cap["blocks"] == 2 and cap["ratio"] is not None, (cap, speed["capacity_rps"])
    assert cap["ci"][0] <= cap["ratio"] <= cap["ci"][1]
    assert cap["candidate_median"] == 15 and cap["baseline_median"] in (1.5, 3, 6)
    assert all(s is not None and s < 12 for s in speed["saturation_rps"]["baseline"])
    # Nothing this sweep launched is left.
    assert local.recorded_names() == []
    assert report["recommendation"]["config"] is None  # no quality suite: nothing can pass
    md = sweeps.markdown(report)
    assert "failed-to-start" in md and "Order B C C B B C C B" in md
    json.dumps(report)  # JSON-ready


def test_every_configuration_is_gated_against_the_same_baseline_samples(
    home: Path, store: Store, tmp_path: Path, echo_kind: dict[str, str]
) -> None:
    (tmp_path / "echo.yaml").write_text(ECHO)
    with fault_server() as srv:
        chat = "/ok/v1/chat/completions"
        at_second: dict[str, int] = {}

        def log(line: str) -> None:
            if line.startswith("configuration c2"):
                at_second["hits"] = srv.hits.get(chat, 0)

        spec = SweepSpec(
            baseline=base_url(srv, "ok"),
            configs=[ConfigSpec(name="c1", kind="existing", url=base_url(srv, "long")),
                     ConfigSpec(name="c2", kind="existing", url=base_url(srv, "flaky"))],
            suites=[str(tmp_path / "echo.yaml")],
            speed=SpeedSpec(enabled=False),
        )
        report = sweeps.run_sweep(spec, store=store, log=log)
        after = srv.hits.get(chat, 0)
    c1, c2 = report["configs"]
    assert c1["status"] == c2["status"] == "measured", (c1.get("error"), c2.get("error"))
    run1, run2 = c1["quality"]["run_id"], c2["quality"]["run_id"]
    b1 = {s.item_id: s.output for s in store.get_samples(run1, endpoint="baseline")}
    b2 = {s.item_id: s.output for s in store.get_samples(run2, endpoint="baseline")}
    assert len(b1) == 8 and b1 == b2
    # The second configuration sent the baseline no item again (at most the probe's requests).
    assert after - at_second["hits"] < 8
    assert [s["suite"] for s in c2["quality"]["suites"]] == ["echo-sweep"]
    rec = report["recommendation"]
    passing = [c["name"] for c in report["configs"] if c["quality"]["verdict"] == "pass"]
    assert (rec["config"] in passing) if passing else rec["config"] is None


def _start_sweep(home: Path, baseline: str, tmp: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "EVALSVC_HOME": str(home),
           "EVALSVC_DATABASE_URL": f"sqlite:///{tmp / 'sub.sqlite'}"}
    return subprocess.Popen(
        [PY, "-m", "evalsvc.cli.main", "sweep", "--baseline", baseline,
         "--command-template", TEMPLATE, "--config", "slow:service_ms=5,extra=",
         "--rates", "2,3,4,5,6,7,8", "--requests", "200", "--blocks", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def _wait_launched(home: Path, proc: subprocess.Popen[str], timeout: float = 300) -> int:
    """Pid of the server the sweep launched, once it is recorded and healthy."""
    state = home / "local-state.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if state.exists():
            servers = json.loads(state.read_text()).get("servers", {})
            for name, rec in servers.items():
                if name.startswith("sweep-"):
                    url = rec["url"].removesuffix("/v1")
                    try:
                        if httpx.get(url + "/health", timeout=1).status_code == 200:
                            return int(rec["pid"])
                    except httpx.HTTPError:
                        pass
        time.sleep(0.2)
    raise AssertionError("the sweep never launched its server")


@pytest.mark.slow
def test_sigterm_stops_what_the_sweep_launched(
    home: Path, baseline_queue: str, tmp_path: Path
) -> None:
    proc = _start_sweep(home, baseline_queue, tmp_path)
    pid = _wait_launched(home, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, err
    assert "everything it launched was stopped" in err
    assert dead(pid)
    assert local.recorded_names() == []


@pytest.mark.slow
def test_sigkilled_sweep_leaves_nothing_after_local_down_or_the_next_sweep(
    home: Path, baseline_queue: str, tmp_path: Path
) -> None:
    proc = _start_sweep(home, baseline_queue, tmp_path)
    pid = _wait_launched(home, proc)
    proc.kill()
    proc.wait(timeout=10)
    assert not dead(pid)  # SIGKILL runs no cleanup: the server is an orphan now
    down = subprocess.run([PY, "-m", "evalsvc.cli.main", "local", "down"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "EVALSVC_HOME": str(home)})
    assert down.returncode == 0, down.stderr
    assert dead(pid)
    assert local.recorded_names() == []

    # The next sweep reaps such orphans itself (a sweep whose pid is gone).
    proc = _start_sweep(home, baseline_queue, tmp_path)
    pid = _wait_launched(home, proc)
    proc.kill()
    proc.wait(timeout=10)
    assert sweeps.reap_orphans(lambda _m: None) != []
    assert dead(pid)


def test_bad_input_is_refused_before_anything_starts(home: Path, store: Store) -> None:
    cfg = [ConfigSpec(name="x", kind="command", params={"service_ms": "5", "extra": ""})]
    with pytest.raises(UsageError):
        sweeps.run_sweep(SweepSpec(baseline="http://127.0.0.1:9/v1", command_template=TEMPLATE,
                                   configs=cfg, suites=["no-such-suite"]), store=store)
    with pytest.raises(UsageError, match="unknown local configuration"):
        sweeps.run_sweep(SweepSpec(baseline="http://127.0.0.1:9/v1",
                                   configs=[ConfigSpec(name="w9a9", kind="local")]), store=store)
    with pytest.raises(UsageError, match="needs {service_ms}"):
        sweeps.run_sweep(SweepSpec(baseline="http://127.0.0.1:9/v1", command_template=TEMPLATE,
                                   configs=[ConfigSpec(name="y", kind="command")]), store=store)
    assert local.recorded_names() == []  # nothing was launched


def test_scatter_draws_both_intervals_the_frontier_and_the_recommendation() -> None:
    import xml.etree.ElementTree as ET

    from evalsvc.services.sweep_plot import scatter_svg

    def cfg(name: str, ratio: float | None, qd: float | None) -> dict[str, Any]:
        cap = {"ratio": ratio, "ci": [ratio * 0.9, ratio * 1.1] if ratio else None}
        return {"name": name, "status": "measured", "speed": {"capacity": cap},
                "quality_delta": qd, "quality_ci": [qd - 0.01, qd + 0.01] if qd is not None
                else None}

    report = {
        "configs": [cfg("a", 1.2, 0.0), cfg("b<x>", 1.9, -0.01), cfg("c", 1.5, -0.02),
                    cfg("d", None, -0.03)],
        "frontier": ["a", "b<x>"],
        "recommendation": {"config": "b<x>"},
    }
    svg = scatter_svg(report)
    root = ET.fromstring(svg)  # well-formed, names escaped
    ns = "{http://www.w3.org/2000/svg}"
    groups = root.findall(f"{ns}g")
    assert [g.get("data-name") for g in groups] == ["a", "b<x>", "c"]
    for g in groups:
        assert g.find(f"{ns}line[@class='xci']") is not None
        assert g.find(f"{ns}line[@class='yci']") is not None
    b = groups[1]
    xci = b.find(f"{ns}line[@class='xci']")
    assert xci is not None and float(xci.get("x1", 0)) < float(xci.get("x2", 0))
    assert b.find(f"{ns}circle[@class='recommended']") is not None
    frontier = root.find(f"{ns}polyline[@class='frontier']")
    assert frontier is not None and len(frontier.get("points", "").split()) == 2
    missing = root.find(f"{ns}text[@class='missing']")
    assert missing is not None and "d (measured, no capacity ratio)" in (missing.text or "")


class _CancelAfter(threading.Event):
    """A cancel that fires at its ``n``-th check: the sweep checks it before each configuration,
    so it stops between two configurations as at a worker's shutdown."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.checks, self.n = 0, n

    def is_set(self) -> bool:
        self.checks += 1
        return self.checks >= self.n or super().is_set()


def test_a_released_sweep_resumes_after_its_finished_configurations(
    home: Path, store: Store, tmp_path: Path, echo_kind: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker's shutdown gives a running sweep back to the queue (``release_sweep``); the next
    claim runs only the configurations not finished yet, and the first configuration's run still
    lends its baseline samples to the next."""
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")  # server mode, loopback
    with fault_server() as srv:
        spec = SweepSpec.model_validate({
            "baseline": base_url(srv, "ok"),
            "configs": [{"name": "c1", "kind": "existing", "url": base_url(srv, "ok")},
                        {"name": "c2", "kind": "existing", "url": base_url(srv, "flaky")}],
            "suites": ["determinism-smoke"], "samples": 2, "speed": {"enabled": False},
        })
        queued = sweeps.submit_sweep(spec, store=store, submitted_by="t")
        first = store.sweeps.claim_sweep(worker_id="w1", lease_seconds=120)
        assert first is not None
        sweeps.execute_stored_sweep(store, first, cancel=_CancelAfter(2), worker_id="w1")
        assert store.sweeps.release_sweep(queued["id"], worker_id="w1")
        given_back = store.sweeps.get_sweep(queued["id"])
        assert given_back is not None and given_back["status"] == "queued"
        assert [d["name"] for d in given_back["progress"]["done"]] == ["c1"]
        run1 = given_back["progress"]["entries"][0]["quality"]["run_id"]

        second = store.sweeps.claim_sweep(worker_id="w2", lease_seconds=120)
        assert second is not None and second["id"] == queued["id"]
        sweeps.execute_stored_sweep(store, second, cancel=threading.Event(), worker_id="w2")
    done = store.sweeps.get_sweep(queued["id"])
    assert done is not None and done["status"] == "completed", done and done["error"]
    c1, c2 = done["report"]["configs"]
    assert (c1["name"], c2["name"]) == ("c1", "c2")
    assert c1["quality"]["run_id"] == run1  # kept, not run again
    assert c2["status"] == "measured" and c2["quality"]["run_id"] != run1
    assert [d["name"] for d in done["progress"]["done"]] == ["c1", "c2"]
    assert sorted(r["config"] for r in done["runs"]) == ["c1", "c2"]
    # The second attempt reused the first configuration's baseline samples.
    b1 = {s.item_id: s.output for s in store.get_samples(run1, endpoint="baseline")}
    b2 = {s.item_id: s.output for s in store.get_samples(c2["quality"]["run_id"],
                                                        endpoint="baseline")}
    assert b1 and b1 == b2
