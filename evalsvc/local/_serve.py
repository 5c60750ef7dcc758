"""Detached local HTTP servers: launch, health-check, adopt, stop; recorded in the state file.

Contract:
- A server is launched in a new session (it survives the CLI, and its whole process group can be
  signalled), with stdout+stderr to ``logs/<name>.log`` and its record saved before waiting.
- ``ensure_running`` returns once every spec is healthy, or, if any server dies or the deadline
  passes, prints that server's log tail to stderr, stops everything this call launched or waited
  for, and raises ``LocalError``. It never waits past the deadline.
- A recorded server counts as running only if its pid is alive with the recorded start time (so a
  reused pid is never signalled) and its spec fingerprint matches; otherwise it is replaced.
- Callers hold ``state_lock``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ._errors import LocalError
from ._paths import Layout
from ._state import ServerRecord, State, load_state, save_state
from ._ui import console, info, kill_group, print_log_tail, root_cause

if TYPE_CHECKING:
    import httpx

HOST = "127.0.0.1"
BASE_PORT = 8100
PORT_SPAN = 400
PORT_PLACEHOLDER = "{port}"
POLL_INTERVAL = 0.5
STOP_GRACE = 20.0
# Variables of the caller's interpreter that must not leak into a managed venv's interpreter.
_DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__")


@dataclass(frozen=True)
class ServerSpec:
    """What to run for one named server; ``{port}`` in ``argv`` is replaced at launch."""

    name: str
    role: Literal["baseline", "candidate"]
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    """Overrides on top of the caller's environment (minus Python-path variables)."""
    model_dir: str = ""
    served_model_name: str = ""
    health_path: str = "/health"
    smoke_test: bool = False
    """After /health, also require a 1-token completion: vLLM-CPU reports healthy before its
    kernels first run, and a missing kernel only shows at the first request."""

    identity: tuple[str, ...] | None = None
    """What ``key()`` hashes instead of ``argv`` when set: the command with machine-local paths
    (the launcher inside this checkout) replaced by their content hashes, so that another clone
    of the project reuses a running server instead of restarting it."""

    def key(self) -> str:
        argv = self.argv if self.identity is None else self.identity
        blob = json.dumps({"argv": argv, "env": dict(sorted(self.env.items()))})
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def render(self, port: int) -> list[str]:
        return [arg.replace(PORT_PLACEHOLDER, str(port)) for arg in self.argv]


def base_url(port: int) -> str:
    return f"http://{HOST}:{port}/v1"


# ---------------------------------------------------------------------------- processes


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in ticks) from /proc, or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # Field 2 (the command name) may contain spaces and ')'; fields resume after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def proc_start_time(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return stat[1] if stat else None


def pid_alive(pid: int, proc_start: int | None = None) -> bool:
    """Whether ``pid`` runs (not a zombie) and, if given, started at ``proc_start``."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own exited child
    if not Path("/proc/self/stat").exists():  # no procfs: best effort
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    stat = _proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return False
    return proc_start is None or stat[1] == proc_start


def is_alive(rec: ServerRecord) -> bool:
    return pid_alive(rec.pid, rec.proc_start)


@functools.cache
def _probe_client() -> httpx.Client:
    """One HTTP client for every probe of this process. ``httpx.get`` builds a client per call,
    and with it an SSL context that loads the CA bundle, about 20 ms of CPU even for a plain
    ``http://`` URL: a start of four servers polled twice a second spent 15 CPU-s on it (2-core
    AVX-512 host, docs/benchmarks-log.md, "session 20"). No keep-alive: each probe opens a fresh
    connection, so a server restarted on the same port is probed as itself."""
    import httpx  # here, not at the top: `evalsvc --help` imports this module

    return httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


def is_healthy(port: int, path: str = "/health", timeout: float = 3.0) -> bool:
    import httpx

    try:
        resp = _probe_client().get(f"http://{HOST}:{port}{path}", timeout=timeout)
    except httpx.HTTPError:
        return False
    return resp.status_code == 200


def smoke_test(rec: ServerRecord, timeout: float) -> str | None:
    """Ask for one greedy token; None if it came back, else a one-line reason."""
    body = {
        "model": rec.served_model_name,
        "prompt": "Hello",
        "max_tokens": 1,
        "temperature": 0,
    }
    import httpx

    try:
        resp = _probe_client().post(f"{rec.url}/completions", json=body, timeout=timeout)
    except httpx.HTTPError as err:
        return f"completion request failed ({type(err).__name__}: {err})"
    if resp.status_code != 200:
        return f"completion returned HTTP {resp.status_code}: {resp.text[:200]}"
    return None


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Same option uvicorn uses, so a port in TIME_WAIT counts as free, as it is for the server.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def choose_port(taken: Iterable[int], base: int | None = None, span: int = PORT_SPAN) -> int:
    """The lowest port >= ``base`` (default ``BASE_PORT``) not recorded as taken nor bound."""
    base = BASE_PORT if base is None else base
    skip = set(taken)
    for port in range(base, base + span):
        if port not in skip and port_is_free(port):
            return port
    raise LocalError(f"no free port in {base}-{base + span - 1} on {HOST}")


def child_env(overrides: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env.update(overrides)
    return env


def launch(
    layout: Layout, spec: ServerSpec, port: int
) -> tuple[ServerRecord, subprocess.Popen[bytes]]:
    """Start one server detached; its previous log is kept as ``<name>.log.1``."""
    log = layout.log(spec.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    if log.exists():
        os.replace(log, log.with_name(log.name + ".1"))
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            spec.render(port),
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=child_env(spec.env),
            cwd=layout.home,
            start_new_session=True,
        )
    record = ServerRecord(
        name=spec.name,
        role=spec.role,
        pid=proc.pid,
        proc_start=proc_start_time(proc.pid),
        port=port,
        url=base_url(port),
        model_dir=spec.model_dir,
        served_model_name=spec.served_model_name,
        started_at=datetime.now(UTC),
        log=str(log),
        spec_key=spec.key(),
    )
    return record, proc


def stop(rec: ServerRecord, grace: float = STOP_GRACE) -> bool:
    """Stop a recorded server's process group; False if it was no longer running."""
    if not is_alive(rec):
        return False
    kill_group(rec.pid, grace)
    return True


# ---------------------------------------------------------------------------- orchestration


@dataclass
class _Pending:
    spec: ServerSpec
    record: ServerRecord
    proc: subprocess.Popen[bytes] | None
    since: float


def ensure_running(
    layout: Layout,
    specs: Sequence[ServerSpec],
    *,
    timeout: float,
    prepare: Callable[[Sequence[ServerSpec]], None] | None = None,
    port_base: int | None = None,
) -> dict[str, ServerRecord]:
    """Make every spec a healthy running server; return their records by name (new servers
    get the lowest free port from ``port_base``, default ``BASE_PORT``)."""
    state = load_state(layout.state_file)
    ready: dict[str, ServerRecord] = {}
    waiting: dict[str, _Pending] = {}
    to_launch: list[ServerSpec] = []
    for spec in specs:
        rec = state.servers.get(spec.name)
        if rec is not None and rec.spec_key == spec.key() and is_alive(rec):
            if is_healthy(rec.port, spec.health_path):
                ready[spec.name] = rec
            else:  # alive but not answering yet (or wedged): wait for it under the same deadline
                waiting[spec.name] = _Pending(spec, rec, None, time.monotonic())
            continue
        if rec is not None:
            if stop(rec):
                info(f"stopped {rec.name} (pid {rec.pid}): its configuration changed")
            del state.servers[spec.name]
        to_launch.append(spec)
    save_state(layout.state_file, state)
    if not to_launch and not waiting:
        return ready

    try:
        if to_launch and prepare is not None:
            prepare(to_launch)
        deadline = time.monotonic() + timeout
        for spec in to_launch:
            taken = {r.port for r in state.servers.values()}
            port = choose_port(taken, port_base)
            rec, proc = launch(layout, spec, port)
            state.servers[spec.name] = rec
            save_state(layout.state_file, state)  # recorded before waiting, so `down` can stop it
            info(f"started {spec.name} on {rec.url} (pid {rec.pid}, log: {rec.log})")
            waiting[spec.name] = _Pending(spec, rec, proc, time.monotonic())
        ready.update(_wait(waiting, deadline, timeout))
    except BaseException:
        for pending in waiting.values():
            stop(pending.record, grace=5.0)
            state.servers.pop(pending.spec.name, None)
        save_state(layout.state_file, state)
        raise
    return ready


def _wait(waiting: dict[str, _Pending], deadline: float, timeout: float) -> dict[str, ServerRecord]:
    """Poll until all are healthy; raise (after printing a log tail) on death or deadline."""
    done: dict[str, ServerRecord] = {}
    pending = dict(waiting)
    with console.status("waiting for servers") as status:
        while pending:
            for name, p in list(pending.items()):
                if p.proc is not None:
                    rc = p.proc.poll()
                    dead = rc is not None
                else:
                    rc, dead = None, not is_alive(p.record)
                if dead:
                    log = Path(p.record.log)
                    print_log_tail(log)
                    how = f"exit status {rc}" if rc is not None else "it exited"
                    cause = root_cause(log)
                    raise LocalError(
                        f"server {name} died during startup ({how}; log: {log})"
                        + (f": {cause}" if cause else "")
                    )
                if is_healthy(p.record.port, p.spec.health_path):
                    if p.spec.smoke_test:
                        status.update(f"{name}: /health ok, sending a 1-token completion")
                        problem = smoke_test(p.record, max(deadline - time.monotonic(), 1.0))
                        if problem is not None:
                            print_log_tail(Path(p.record.log))
                            raise LocalError(
                                f"server {name} is up but cannot generate: {problem} "
                                f"(log: {p.record.log})"
                            )
                    elapsed = time.monotonic() - p.since
                    info(f"{name} is healthy at {p.record.url} after {elapsed:.1f} s")
                    done[name] = p.record
                    del pending[name]
            if not pending:
                break
            now = time.monotonic()
            if now >= deadline:
                name, p = next(iter(pending.items()))
                print_log_tail(Path(p.record.log))
                raise LocalError(
                    f"server {name} not healthy after {timeout:.0f} s (log: {p.record.log})"
                )
            status.update(
                f"waiting for {', '.join(pending)} to answer /health ({deadline - now:.0f} s left)"
            )
            time.sleep(min(POLL_INTERVAL, max(deadline - now, 0.05)))
    return done


def stop_all(layout: Layout, names: Iterable[str] | None = None) -> list[ServerRecord]:
    """Stop recorded servers (all, or ``names``), drop them from the state; return the stopped."""
    state: State = load_state(layout.state_file)
    wanted = set(state.servers) if names is None else set(names) & set(state.servers)
    stopped: list[ServerRecord] = []
    for name in sorted(wanted):
        rec = state.servers.pop(name)
        if stop(rec):
            stopped.append(rec)
    save_state(layout.state_file, state)
    return stopped
