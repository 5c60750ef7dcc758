"""Human-facing output (always stderr) and logged subprocess steps.

Contract: nothing here writes to stdout, so ``--json`` output stays clean. ``run_logged`` runs a
command with its output appended to a log file, shows a spinner meanwhile, never outlives its
timeout, and on failure prints the log's tail to stderr and raises ``LocalError``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from ._errors import LocalError

# stderr=True: rich resolves sys.stderr at write time, so pytest/CliRunner capture works too.
console = Console(stderr=True, highlight=False, soft_wrap=True)

TAIL_LINES = 40


def info(message: str) -> None:
    if _live_elsewhere():
        _above_live(Text.from_markup(message).plain)
    else:
        console.print(message)


def _live_elsewhere() -> bool:
    """Whether another live display (``compare``'s progress bars) owns the terminal: rich then
    redirects ``sys.stderr`` through a ``FileProxy``."""
    from rich.file_proxy import FileProxy

    return isinstance(sys.stderr, FileProxy)


def _above_live(line: str) -> None:
    # Through the proxy, which prints the line above the bars. A console of our own would not:
    # rich consoles write to the proxied file itself, beneath the bars, which then redraw over it.
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of a log file ([] if it does not exist)."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            return [line.rstrip("\n") for line in deque(fh, maxlen=lines)]
    except FileNotFoundError:
        return []


_EXCEPTION_LINE = re.compile(r"(?:^|\] )((?:[A-Za-z_][\w.]*)?(?:Error|Exception): \S.*)$")


def root_cause(path: Path, limit: int = 240) -> str | None:
    """The first ``SomethingError: message`` line of a log (vLLM logs the root cause first)."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                match = _EXCEPTION_LINE.search(line.rstrip("\n"))
                if match and not match.group(1).startswith("OSError: [Errno 24]"):
                    return match.group(1)[:limit]
    except FileNotFoundError:
        return None
    return None


def print_log_tail(path: Path, lines: int = TAIL_LINES) -> None:
    tail = log_tail(path, lines)
    console.print(f"--- last {len(tail)} lines of {path} ---", style="dim")
    for line in tail:
        # markup=False: log lines contain brackets that rich would otherwise interpret.
        console.print(line, markup=False, highlight=False)
    console.print("--- end of log ---", style="dim")


def kill_group(pid: int, grace: float = 15.0) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL it after ``grace`` seconds.

    Only for processes started with ``start_new_session=True`` (so pgid == pid).
    """
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(pid)
        if not _group_exists(pid):
            return
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and _group_exists(pid):
        _reap(pid)
        time.sleep(0.1)


def _reap(pid: int) -> None:
    # If the process is our own child, collect it so it does not linger as a zombie.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _group_exists(pgid: int) -> bool:
    """Whether any non-zombie process is left in the group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not Path("/proc").is_dir():
        return True
    # Zombies count for killpg until their new parent reaps them, which a container's init may
    # do late; they hold no resources, so waiting for them would only stretch `down`.
    return any(fields[0] not in ("Z", "X") for _, fields in group_processes(pgid))


def group_processes(pgid: int) -> Iterator[tuple[str, list[str]]]:
    """(command name, the /proc stat fields after it: state first) of each process in process
    group ``pgid``; nothing where there is no procfs."""
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        # The command name may contain spaces and ')'; the fields resume after the last ')'.
        fields = raw[raw.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:
            yield raw[raw.index("(") + 1 : raw.rindex(")")], fields


def run_logged(
    label: str,
    argv: Sequence[str],
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 1800.0,
    expected_s: float | None = None,
) -> float:
    """Run one preparation command, output appended to ``log``; returns elapsed seconds.

    ``expected_s`` (how long the step usually takes) adds the time left to the spinner."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("a", encoding="utf-8") as fh:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        fh.write(f"\n=== {stamp} {label}\n$ {' '.join(map(str, argv))}\n")
        fh.flush()
        with _status(label, log, expected_s) as status:
            # A new session lets a timeout or Ctrl-C take down pip's/torch's children too.
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
            )
            try:
                rc = _wait_showing_eta(proc, status, label, log, started, timeout, expected_s)
            except subprocess.TimeoutExpired:
                kill_group(proc.pid)
                print_log_tail(log)
                raise LocalError(f"{label}: timed out after {timeout:.0f} s (log: {log})") from None
            except BaseException:
                kill_group(proc.pid)
                raise
    elapsed = time.monotonic() - started
    if rc != 0:
        print_log_tail(log)
        raise LocalError(f"{label}: failed with exit status {rc} (log: {log})")
    return elapsed


#: Seconds between progress lines when a spinner cannot be drawn (see ``_status``).
LINE_EVERY_S = 15.0


class _Lines:
    """A spinner's stand-in that prints lines: the first at once, then at most one every
    ``every`` seconds (none after the first when ``every`` is None)."""

    def __init__(self, every: float | None) -> None:
        self.every = every
        self.last = time.monotonic()

    def update(self, text: str) -> None:
        if self.every is not None and time.monotonic() - self.last >= self.every:
            self.last = time.monotonic()
            _above_live(text)


@contextlib.contextmanager
def _status(label: str, log: Path, expected_s: float | None) -> Iterator[Any]:
    """A spinner on stderr; lines instead when another live display owns the terminal (rich
    then redirects ``sys.stderr`` through a ``FileProxy``: ``compare``'s progress bars while a
    suite prepares what it needs, where a second spinner would garble both) or when stderr is no
    terminal (a log, CI: a spinner draws nothing there, so the step says once what it does and
    how long it usually takes)."""
    live_elsewhere = _live_elsewhere()
    if not live_elsewhere and console.is_terminal:
        with console.status(f"{label} (log: {log})") as status:
            yield status
        return
    usual = f", usually {eta_text(expected_s, None)}" if expected_s else ""
    first = f"{label} (log: {log}{usual})"
    if live_elsewhere:
        _above_live(first)
    else:
        console.print(first, markup=False, highlight=False)
    yield _Lines(LINE_EVERY_S if live_elsewhere else None)


def eta_text(elapsed: float, expected_s: float | None) -> str:
    """``0:42, about 1:18 left`` from how long a step usually takes; past that, say so."""

    def clock(seconds: float) -> str:
        m, sec = divmod(int(seconds), 60)
        return f"{m}:{sec:02d}"

    if expected_s is None or expected_s <= 0:
        return clock(elapsed)
    left = expected_s - elapsed
    if left >= 1:
        return f"{clock(elapsed)}, about {clock(left)} left"
    return f"{clock(elapsed)}, longer than the usual {clock(expected_s)}"


def _wait_showing_eta(
    proc: subprocess.Popen[bytes],
    status: Any,
    label: str,
    log: Path,
    started: float,
    timeout: float,
    expected_s: float | None,
) -> int:
    """``proc.wait(timeout)``, redrawing the spinner's elapsed time and time left each second."""
    deadline = started + timeout
    while True:
        try:
            return proc.wait(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
        elapsed = time.monotonic() - started
        status.update(f"{label} ({eta_text(elapsed, expected_s)}; log: {log})")
