"""Tests of evalsvc.local's pure parts and of its server lifecycle with stand-in servers.

Stand-in servers are real processes on loopback (a tiny http.server, or a process that dies or
never answers); one test runs the real launcher in the managed vllm venv when it is installed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import platformdirs
import pytest
from typer.testing import CliRunner

import evalsvc.local as local
from evalsvc.cli.local import app
from evalsvc.local import _catalog, _core, _host, _prepare, _serve
from evalsvc.local._errors import LocalError, UnknownCandidateError
from evalsvc.local._paths import Layout, home_dir, venv_python
from evalsvc.local._state import ServerRecord, State, load_state, save_state

# A stand-in server: answers 200 to every GET, and starts a grandchild (printed to its log) so
# that stopping can be checked to take the whole process group.
FAKE_SERVER = r"""
import http.server, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(f"fake server child={child.pid}", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")
    def do_POST(self):  # the smoke test's completion; "broken" mimics a missing kernel
        self.send_response(500 if "broken" in sys.argv else 200)
        self.end_headers()
        self.wfile.write(b'{"error": "no attribute cpu_gemm_wna16"}')
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
# The home in effect before any fixture changes EVALSVC_HOME (where a real vllm venv may be).
REAL_HOME = home_dir()
DIES = "print('boom: the model dir is bogus', flush=True); import sys; sys.exit(3)"
# A shell, not Python: its log line must be written within a 2 s deadline, and an interpreter
# alone can take longer than that to start on a loaded host.
HANGS = ("sh", "-c", "echo sleepy server; exec sleep 120", "sh", "{port}")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Layout]:
    """An isolated EVALSVC_HOME, with servers on ports far from the real ones (8100+)."""
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(_serve, "BASE_PORT", 18_100 + (os.getpid() % 500) * 4)
    layout = Layout.current()
    yield layout
    _serve.stop_all(layout)


def spec(name: str, code: str, *extra: str, **env: str) -> _serve.ServerSpec:
    role: Literal["baseline", "candidate"] = "baseline" if name == local.BASELINE else "candidate"
    return _serve.ServerSpec(
        name=name, role=role, argv=(sys.executable, "-c", code, "{port}", *extra), env=env
    )


# ------------------------------------------------------------------------------------ paths


def test_home_dir_honours_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path / "x"))
    assert home_dir() == (tmp_path / "x").resolve()
    assert local.home_dir() == home_dir()


def test_home_dir_default_is_user_cache_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVALSVC_HOME", raising=False)
    assert home_dir() == Path(platformdirs.user_cache_dir("evalsvc")).resolve()


def test_layout(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert layout.vllm_venv == tmp_path / "venvs" / "vllm"
    assert layout.quant_venv == tmp_path / "venvs" / "quant"
    assert layout.model_dir("w4a16") == tmp_path / "models" / "w4a16"
    assert layout.log("fp8-kv") == tmp_path / "logs" / "fp8-kv.log"
    assert layout.state_file.parent == tmp_path
    assert venv_python(layout.vllm_venv) == tmp_path / "venvs" / "vllm" / "bin" / "python"


# ------------------------------------------------------------------------------------ state


def _record(name: str = "bf16", port: int = 8100) -> ServerRecord:
    return ServerRecord(
        name=name,
        role="baseline",
        pid=123,
        proc_start=456,
        port=port,
        url=_serve.base_url(port),
        model_dir="/m",
        served_model_name="smollm2-135m-bf16",
        started_at=datetime(2026, 11, 29, tzinfo=UTC),
        log="/l",
        spec_key="k",
    )


def test_state_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "s" / "state.json"
    assert load_state(path) == State()
    state = State(servers={"bf16": _record()})
    save_state(path, state)
    assert load_state(path) == state
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temp files left


@pytest.mark.parametrize("content", ["{not json", '{"servers": 3}', '{"version": 99}'])
def test_state_corrupt_or_foreign_is_empty(tmp_path: Path, content: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(content)
    assert load_state(path) == State()


# ------------------------------------------------------------------------------------ ports


def test_choose_port_skips_bound_and_taken() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        assert _serve.choose_port([], base=busy) != busy
        chosen = _serve.choose_port([busy + 1], base=busy)
        assert chosen not in (busy, busy + 1)
        assert chosen > busy


def test_choose_port_gives_up() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        with pytest.raises(LocalError, match="no free port"):
            _serve.choose_port([], base=busy, span=1)


# ------------------------------------------------------------------------------------ catalog


def test_validate_candidates() -> None:
    assert _catalog.parse_candidates(" w8a8, fp8-kv,,w8a8 ") == ("w8a8", "fp8-kv")
    assert _catalog.parse_candidates("") == ()
    with pytest.raises(UnknownCandidateError, match="fp4") as info:
        _catalog.parse_candidates("fp8-kv,fp4")
    assert info.value.exit_code == 2
    assert set(local.CANDIDATES) == {"fp8-kv", "w8a8", "w4a16"}


def test_build_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = Layout(tmp_path)
    fp8 = _catalog.build_spec(layout, "fp8-kv", eager=True)
    argv = list(fp8.argv)
    assert argv[0] == str(tmp_path / "venvs/vllm/bin/python")
    assert argv[1].endswith("_launcher.py") and argv[2] == "serve"
    assert argv[3] == str(tmp_path / "models/bf16")
    for flag, value in [
        ("--host", "127.0.0.1"),
        ("--port", "{port}"),
        ("--dtype", "bfloat16"),
        ("--max-model-len", "4096"),
        ("--served-model-name", "smollm2-135m-fp8-kv"),
        ("--kv-cache-dtype", "fp8"),
    ]:
        assert argv[argv.index(flag) + 1] == value
    assert "--enforce-eager" in argv
    assert fp8.render(8123)[argv.index("--port") + 1] == "8123"
    assert fp8.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert fp8.env["VLLM_USE_AOT_COMPILE"] == "0"
    assert fp8.env["HF_HUB_OFFLINE"] == "1"
    assert fp8.env["VLLM_CACHE_ROOT"].startswith(str(tmp_path))
    assert fp8.env["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path))
    # The launcher's nap comes from Settings (validated there), in the server's environment.
    assert fp8.env["EVALSVC_LOCAL_SHM_NAP_US"] == "100"
    monkeypatch.setenv("EVALSVC_LOCAL_SHM_NAP_US", "0")
    assert _catalog.build_spec(layout, "fp8-kv").env["EVALSVC_LOCAL_SHM_NAP_US"] == "0"
    monkeypatch.setenv("EVALSVC_LOCAL_SHM_NAP_US", "-5")
    with pytest.raises(ValueError, match="local_shm_nap_us"):
        _catalog.build_spec(layout, "fp8-kv")
    monkeypatch.delenv("EVALSVC_LOCAL_SHM_NAP_US")
    # Baseline and candidates compute on different cores; EVALSVC_LOCAL_BIND=auto leaves vLLM's own.
    if len(os.sched_getaffinity(0)) >= 2:
        base = _catalog.build_spec(layout, "bf16", eager=True)
        assert base.env["VLLM_CPU_OMP_THREADS_BIND"] != fp8.env["VLLM_CPU_OMP_THREADS_BIND"]
    monkeypatch.setenv("EVALSVC_LOCAL_BIND", "auto")
    assert "VLLM_CPU_OMP_THREADS_BIND" not in _catalog.build_spec(layout, "fp8-kv").env
    assert fp8.role == "candidate"

    assert fp8.smoke_test

    monkeypatch.setattr(_catalog, "emulation_reason", lambda name: None)
    w4 = _catalog.build_spec(layout, "w4a16", eager=False)
    assert w4.model_dir == str(tmp_path / "models/w4a16")
    assert "--kv-cache-dtype" not in w4.argv and "--enforce-eager" not in w4.argv
    assert _catalog.build_spec(layout, "bf16").role == "baseline"

    monkeypatch.setenv(_catalog.ENV_EAGER, "0")
    assert "--enforce-eager" not in _catalog.build_spec(layout, "bf16").argv
    monkeypatch.setenv(_catalog.ENV_EAGER, "1")
    assert "--enforce-eager" in _catalog.build_spec(layout, "bf16").argv


def test_server_key_does_not_depend_on_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another clone of the project (CI's, a demo's) reuses running servers; a changed launcher
    or a changed command line restarts them."""
    layout = Layout(tmp_path / "home")
    here = _catalog.build_spec(layout, "w8a8", eager=True)
    clone = tmp_path / "clone" / "_launcher.py"
    clone.parent.mkdir()
    clone.write_bytes(_catalog.LAUNCHER.read_bytes())
    monkeypatch.setattr(_catalog, "LAUNCHER", clone)
    there = _catalog.build_spec(layout, "w8a8", eager=True)
    assert there.argv[1] == str(clone) and there.argv != here.argv
    assert there.key() == here.key()
    clone.write_bytes(clone.read_bytes() + b"\n# changed\n")
    assert _catalog.build_spec(layout, "w8a8", eager=True).key() != here.key()
    assert _catalog.build_spec(layout, "w8a8", eager=False).key() != there.key()


AVX2 = frozenset({"sse2", "avx2", "fma"})
AVX512 = AVX2 | {"avx512f", "avx512bw"}


def test_host_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _host.unsupported_reason("fp8-kv", AVX2) is not None
    assert _host.unsupported_reason("fp8-kv", AVX2 | {"amx_tile"}) is None
    assert _host.unsupported_reason("fp8-kv", AVX512) is None
    assert _host.unsupported_reason("w8a8", AVX2) is None
    assert _host.emulation_reason("w4a16", AVX2) is not None
    assert _host.emulation_reason("w4a16", AVX512) is None
    assert _host.emulation_reason("w8a8", AVX2) is None
    assert _host.unsupported_reason("fp8-kv", frozenset()) is None  # unknown CPU: let vLLM try
    monkeypatch.setenv(_host.ENV_SKIP, "1")
    assert _host.unsupported_reason("fp8-kv", AVX2) is None
    assert _host.emulation_reason("w4a16", AVX2) is None


def test_emulated_w4a16_where_the_kernel_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_catalog, "emulation_reason", lambda name: "no kernel")
    w4 = _catalog.build_spec(Layout(tmp_path), "w4a16")
    assert w4.model_dir == str(tmp_path / "models/w4a16-qdq")
    assert w4.served_model_name == "smollm2-135m-w4a16-qdq"
    assert _catalog.server_kind("w8a8").model == "w8a8"


def test_unsupported_candidate_is_refused_at_once(
    home: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    reasons = {"fp8-kv": "no AVX-512"}
    monkeypatch.setattr(_core, "unsupported_reason", reasons.get)
    assert local.supported_candidates() == ("w8a8", "w4a16")
    with pytest.raises(LocalError, match="fp8-kv cannot be served on this host: no AVX-512"):
        local.ensure_up(["w8a8", "fp8-kv"])
    assert not home.state_file.exists()
    result = CliRunner().invoke(app, ["up", "--candidates", "fp8-kv"])
    assert result.exit_code == 4


def test_endpoints_json() -> None:
    eps = local.LocalEndpoints(
        baseline="http://127.0.0.1:8100/v1", candidates={"fp8-kv": "http://127.0.0.1:8101/v1"}
    )
    assert eps.to_json() == (
        '{"baseline": "http://127.0.0.1:8100/v1", '
        '"candidates": {"fp8-kv": "http://127.0.0.1:8101/v1"}}'
    )


# ------------------------------------------------------------------------------------ prepare


def test_staged_dir_is_all_or_nothing(tmp_path: Path) -> None:
    final = tmp_path / "models" / "bf16"
    final.parent.mkdir()
    (final.parent / ".bf16.tmp-stale").mkdir()  # leftover of an interrupted run
    with pytest.raises(RuntimeError), _prepare._staged_dir(final, "k1") as tmp:
        (tmp / "half").write_text("x")
        raise RuntimeError("interrupted")
    assert not final.exists()
    assert list(final.parent.iterdir()) == []
    with _prepare._staged_dir(final, "k1") as tmp:
        (tmp / "config.json").write_text("{}")
    assert _prepare._marker_ok(final, "k1")
    assert not _prepare._marker_ok(final, "k2")
    assert sorted(p.name for p in final.parent.iterdir()) == ["bf16"]


def test_prepare_steps_skip_when_marked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = Layout(tmp_path)

    def no_subprocess(*args: object, **kwargs: object) -> float:
        raise AssertionError("a completed step ran again")

    monkeypatch.setattr(_prepare, "run_logged", no_subprocess)
    venv = layout.vllm_venv
    venv_python(venv).parent.mkdir(parents=True)
    venv_python(venv).touch()
    key = json.dumps(
        {"install": list(_prepare.VLLM_REQUIREMENTS), "remove": list(_prepare.VLLM_REMOVE)}
    )
    _prepare._write_marker(venv, key)
    gguf = layout.model_dir("gguf")
    gguf.mkdir(parents=True)
    _prepare._write_marker(gguf, f"{_prepare.GGUF_PACKAGE}:{_prepare.GGUF_MEMBER}")
    bf16 = layout.model_dir("bf16")
    bf16.mkdir()
    _prepare._write_marker(bf16, f"convert-v{_prepare.CONVERT_VERSION}:{_prepare._stamp(gguf)}")
    preparer = _prepare.Preparer(layout)
    preparer.models(["bf16"])
    assert preparer.timings == {}


def test_eta_text_counts_down_then_says_it_is_late() -> None:
    from evalsvc.local._ui import eta_text

    assert eta_text(42.0, None) == "0:42"
    assert eta_text(42.0, 120.0) == "0:42, about 1:18 left"
    assert eta_text(130.0, 120.0) == "2:10, longer than the usual 2:00"


def test_a_step_is_estimated_from_its_last_time_in_this_home(tmp_path: Path) -> None:
    """The spinner's estimate: the typical figure first, then what this host measured; a real
    command through ``run_logged`` runs to its end through the redrawing wait."""
    from evalsvc.local._ui import run_logged

    layout = Layout(tmp_path)
    preparer = _prepare.Preparer(layout)
    assert preparer.expected("venv-llamacpp") == _prepare.TYPICAL_STEP_S["venv-llamacpp"]
    assert preparer.expected("no-such-step") is None
    preparer._done("venv-llamacpp", time.monotonic() - 12.34)
    assert preparer.expected("venv-llamacpp") == pytest.approx(12.3, abs=0.1)
    assert _prepare.Preparer(layout).expected("venv-llamacpp") == pytest.approx(12.3, abs=0.1)
    (layout.logs / "step-times.json").write_text("[not, json")  # a damaged file costs the figure
    assert preparer.expected("venv-llamacpp") == _prepare.TYPICAL_STEP_S["venv-llamacpp"]
    elapsed = run_logged(
        "sleeping", [sys.executable, "-c", "import time; time.sleep(1.6)"],
        layout.log("eta"), expected_s=60.0,
    )
    assert elapsed >= 1.5
    assert "sleeping" in layout.log("eta").read_text()


# ------------------------------------------------------------------------------------ serving


def test_pid_alive_treats_exited_child_as_dead() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 120  # a loaded host can take seconds to start an interpreter
    while _serve.pid_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _serve.pid_alive(proc.pid)
    assert _serve.pid_alive(os.getpid())
    assert not _serve.pid_alive(os.getpid(), proc_start=-1)  # a reused pid is not ours


def _child_pid(log: str) -> int:
    for line in Path(log).read_text().splitlines():
        if line.startswith("fake server child="):
            return int(line.split("=")[1])
    raise AssertionError("no child pid in the log")


def test_ensure_running_start_reuse_and_stop(home: Layout) -> None:
    prepared: list[list[str]] = []
    specs = [spec("bf16", FAKE_SERVER), spec("fp8-kv", FAKE_SERVER)]

    def prepare(todo: object) -> None:
        prepared.append([s.name for s in todo])  # type: ignore[attr-defined]

    records = _serve.ensure_running(home, specs, timeout=30, prepare=prepare)
    assert prepared == [["bf16", "fp8-kv"]]
    assert records["bf16"].port != records["fp8-kv"].port
    assert records["bf16"].url == f"http://127.0.0.1:{records['bf16'].port}/v1"
    assert load_state(home.state_file).servers.keys() == {"bf16", "fp8-kv"}
    assert all(_serve.is_healthy(r.port) for r in records.values())

    # Already running: the same processes, nothing prepared (no timing: a loaded CI host's
    # health probes alone took over 2 s once).
    again = _serve.ensure_running(home, specs, timeout=30, prepare=prepare)
    assert {n: r.pid for n, r in again.items()} == {n: r.pid for n, r in records.items()}
    assert len(prepared) == 1

    # A changed configuration restarts only that server.
    changed = [specs[0], spec("fp8-kv", FAKE_SERVER, EXTRA="1")]
    third = _serve.ensure_running(home, changed, timeout=120, prepare=prepare)
    assert third["bf16"].pid == records["bf16"].pid
    assert third["fp8-kv"].pid != records["fp8-kv"].pid
    assert not _serve.pid_alive(records["fp8-kv"].pid)
    assert prepared[-1] == ["fp8-kv"]

    # Stopping takes the whole process group, grandchildren included.
    child = _child_pid(third["bf16"].log)
    assert _serve.pid_alive(child)
    stopped = _serve.stop_all(home)
    assert {r.name for r in stopped} == {"bf16", "fp8-kv"}
    assert not _serve.pid_alive(third["bf16"].pid)
    deadline = time.monotonic() + 60
    while _serve.pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)  # reparented to init, which reaps it
    assert not _serve.pid_alive(child)
    assert load_state(home.state_file).servers == {}


def test_failed_start_prints_log_tail_and_cleans_up(
    home: Layout, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = [spec("bf16", FAKE_SERVER), spec("w8a8", DIES)]
    started = time.monotonic()
    with pytest.raises(LocalError, match=r"w8a8 died during startup \(exit status 3") as info:
        _serve.ensure_running(home, specs, timeout=600)
    # Found dead, not left to the deadline: well within it, whatever the host's load.
    assert time.monotonic() - started < 300
    assert info.value.exit_code == 4
    err = capsys.readouterr().err
    assert "boom: the model dir is bogus" in err
    assert "last 1 lines of" in err
    # Everything this call started is stopped and forgotten.
    assert load_state(home.state_file).servers == {}


def test_smoke_test_catches_a_server_that_cannot_generate(
    home: Layout, capsys: pytest.CaptureFixture[str]
) -> None:
    good = dataclasses.replace(spec("bf16", FAKE_SERVER), smoke_test=True)
    broken = dataclasses.replace(spec("w4a16", FAKE_SERVER, "broken"), smoke_test=True)
    with pytest.raises(LocalError, match="w4a16 is up but cannot generate: .*HTTP 500"):
        _serve.ensure_running(home, [good, broken], timeout=300)
    assert "fake server child=" in capsys.readouterr().err
    assert load_state(home.state_file).servers == {}
    assert _serve.ensure_running(home, [good], timeout=300).keys() == {"bf16"}


def test_deadline_is_hard(home: Layout, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    with pytest.raises(LocalError, match="not healthy after 2 s"):
        _serve.ensure_running(home, [dataclasses.replace(spec("bf16", ""), argv=HANGS)], timeout=2)
    assert time.monotonic() - started < 15
    assert "sleepy server" in capsys.readouterr().err
    pid = int(json.loads(home.state_file.read_text())["servers"].get("bf16", {}).get("pid", 0))
    assert pid == 0


def test_launcher_aliases_distribution(tmp_path: Path) -> None:
    """The launcher answers metadata lookups of an alias (vllm → vllm-cpu) with a +cpu version."""
    code = (
        "import runpy, sys, os, importlib.metadata as m\n"
        f"g = runpy.run_path({str(_catalog.LAUNCHER)!r}, run_name='probe')\n"
        "g['_ALIASES']['zz-alias'] = ('pydantic', 'cpu')\n"
        "print(m.version('zz-alias'), m.version('pydantic'), m.metadata('zz-alias')['Name'])\n"
        "print(os.environ['VLLM_TARGET_DEVICE'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out[0] == f"{out[1]}+cpu"
    assert out[2:] == ["zz-alias", "cpu"]


@pytest.mark.parametrize("nap_us", ["100", "0"])
def test_launcher_naps_in_the_shm_queue_busy_loop(tmp_path: Path, nap_us: str) -> None:
    """The launcher swaps the name vLLM's shared-memory queue spins on (``sched_yield``) for a
    short sleep when that module is imported, in every process that imports the launcher;
    ``EVALSVC_LOCAL_SHM_NAP_US=0`` leaves vLLM's own loop. A stand-in package of the same module
    path stands for vLLM (the real one is exercised by every server of the endpoint tier)."""
    pkg = tmp_path / "vllm" / "distributed" / "device_communicators"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "shm_broadcast.py").write_text("import os\nsched_yield = os.sched_yield\n")
    code = (
        "import os, runpy, sys, time\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        f"g = runpy.run_path({str(_catalog.LAUNCHER)!r}, run_name='probe')\n"
        "import vllm.distributed.device_communicators.shm_broadcast as shm\n"
        "t = time.perf_counter(); [shm.sched_yield() for _ in range(20)]\n"
        "print(shm.sched_yield is g['_nap'], shm.sched_yield is os.sched_yield,\n"
        "      time.perf_counter() - t >= 20 * 100e-6)\n"
    )
    env = {**os.environ, "EVALSVC_LOCAL_SHM_NAP_US": nap_us}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
        env=env,
    ).stdout.split()
    # Each of the 20 naps sleeps at least 100 us; vLLM's own sched_yield has no lower bound, so its
    # timing is not asserted (on a loaded host a yield can take a time slice).
    assert out[:2] == (["True", "False"] if nap_us == "100" else ["False", "True"])
    if nap_us == "100":
        assert out[2] == "True"


# ------------------------------------------------------------------------------------ CLI / API


@pytest.fixture
def fake_catalog(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Make ensure_up serve stand-ins (code per name) and skip real preparation."""
    codes = {name: FAKE_SERVER for name in (local.BASELINE, *local.CANDIDATES)}

    class NoPrepare:
        def __init__(self, layout: Layout) -> None:
            pass

        def models(self, names: object) -> None:
            pass

    def build(layout: Layout, name: str, *, eager: bool | None = None) -> _serve.ServerSpec:
        return dataclasses.replace(spec(name, codes[name]), served_model_name=f"fake-{name}")

    monkeypatch.setattr(_core, "Preparer", NoPrepare)
    monkeypatch.setattr(_core, "build_spec", build)
    monkeypatch.setattr(_core, "unsupported_reason", lambda name: None)
    return codes


def test_cli_unknown_candidate_exits_2(home: Layout) -> None:
    result = CliRunner().invoke(app, ["up", "--candidates", "fp8-kv,nope", "--json"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "unknown candidate 'nope'" in result.stderr


def test_cli_status_when_nothing_runs(home: Layout) -> None:
    result = CliRunner().invoke(app, ["status", "--json"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert local.status() is None


def test_cli_up_status_down(home: Layout, fake_catalog: dict[str, str]) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["up", "--candidates", "w8a8,fp8-kv", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"baseline", "candidates"}
    assert list(data["candidates"]) == ["w8a8", "fp8-kv"]
    assert data["baseline"].startswith("http://127.0.0.1:") and data["baseline"].endswith("/v1")

    status = runner.invoke(app, ["status", "--json"])
    assert status.exit_code == 0
    assert json.loads(status.stdout) == {
        "baseline": data["baseline"],
        "candidates": {"fp8-kv": data["candidates"]["fp8-kv"], "w8a8": data["candidates"]["w8a8"]},
    }
    human = runner.invoke(app, ["status"])
    assert human.exit_code == 0 and human.stdout == ""
    assert "fake-w8a8" in human.stderr

    # Asking for one more candidate starts only that one.
    pids = {i.name: i.pid for i in local.server_info()}
    eps = local.ensure_up(["fp8-kv", "w4a16"], timeout=300)
    assert set(eps.candidates) == {"fp8-kv", "w4a16"}
    after = {i.name: i.pid for i in local.server_info()}
    assert {n: after[n] for n in pids} == pids and "w4a16" in after

    down = runner.invoke(app, ["down"])
    assert down.exit_code == 0
    assert all(not _serve.pid_alive(pid) for pid in after.values())
    assert local.server_info() == []


def test_cli_up_failure_exits_4_with_log_tail(home: Layout, fake_catalog: dict[str, str]) -> None:
    fake_catalog["fp8-kv"] = DIES
    started = time.monotonic()
    result = CliRunner().invoke(app, ["up", "--json", "--timeout", "600"])
    assert result.exit_code == 4
    assert time.monotonic() - started < 300  # found dead, not left to the deadline
    assert result.stdout == ""
    assert "boom: the model dir is bogus" in result.stderr
    assert "error:" in result.stderr and "fp8-kv died during startup" in result.stderr
    assert local.server_info() == []  # the baseline this call started was stopped too


@pytest.mark.slow
def test_real_vllm_bogus_model_dir_fails_fast(home: Layout, tmp_path: Path) -> None:
    """The real launcher in the managed vllm venv, pointed at a model dir that does not exist."""
    real = Layout(REAL_HOME)
    python = venv_python(real.vllm_venv)
    if not (real.vllm_venv / _prepare.MARKER).exists():
        pytest.skip("the managed vllm venv is not prepared")
    bogus = _catalog.build_spec(home, "bf16")  # home's models/ is empty: a bogus model dir
    bogus = dataclasses.replace(bogus, argv=(str(python), *bogus.argv[1:]))
    started = time.monotonic()
    with pytest.raises(LocalError, match="bf16 died during startup"):
        _serve.ensure_running(home, [bogus], timeout=1200)
    # Found dead, not left to the deadline (importing vLLM on a loaded host takes minutes).
    assert time.monotonic() - started < 600
    assert "bf16" in Path(home.log("bf16")).read_text()
