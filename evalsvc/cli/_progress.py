"""Progress a pipeline's log can read: plain lines when stderr is not a terminal.

Contract: :func:`progress_view` is the one place ``compare`` and ``calibrate`` choose how a run's
progress is shown. On a terminal it is rich's live bars (``_report.RichProgressBars``); anywhere
else (a CI log, a file, a pipe) rich draws its bars only when they stop, so a log showed
"calibrating needle-gpu on the baseline" and then nothing for five minutes. There it is
:class:`PlainProgress`: the run's messages as timestamped lines, and at least every
``EVALSVC_PROGRESS_EVERY_S`` seconds (default :data:`EVERY_S`) one line per suite and side still
running: items done of planned, errored answers, time elapsed and an estimate of the time left,
or, while no suite is running (a calibration pilot, planning, lm-eval being prepared), a line
saying what is still going on. Every line is flushed as it is written, so a log read while
the run goes on tells slow from stuck. Text from endpoints and suites has its control
characters made visible (``_safe.plain``); the lines are printed without markup.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console

from evalsvc.cli._safe import plain

#: The longest a CI log goes without a line while a run is in progress (issue: a pipeline must
#: tell slow from stuck; 30 s is under the usual "no output" watchdogs of CI runners).
EVERY_S = 30.0


def _every() -> float:
    """``EVALSVC_PROGRESS_EVERY_S`` (a Settings field); the default where it does not parse:
    progress never stops a run."""
    from pydantic import ValidationError

    from evalsvc.settings import Settings

    try:
        return Settings().progress_every_s
    except ValidationError:
        return EVERY_S


def _clock(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


@dataclass
class _Side:
    label: str
    total: int
    done: int
    errors: int = 0
    started: float = 0.0
    resumed: int = 0

    def line(self, now: float) -> str:
        elapsed = now - self.started
        fresh = self.done - self.resumed
        if fresh > 0 and self.done < self.total:
            left = f", about {_clock(elapsed / fresh * (self.total - self.done))} left"
        elif self.done < self.total:
            left = ", no answer yet"
        else:
            left = ""
        errors = f", {self.errors} errored" if self.errors else ""
        return f"{self.label}: {self.done}/{self.total} done{errors}, {_clock(elapsed)} elapsed{left}"


class PlainProgress:
    """The ``runner.Progress`` protocol as plain, timestamped lines (module contract)."""

    def __init__(self, console: Console, labels: dict[str, str], every: float | None = None
                 ) -> None:
        self.console, self.labels = console, labels
        self.every = _every() if every is None else every
        self.order: list[str] = []
        self.sides: dict[tuple[str, str], _Side] = {}
        self.started = time.monotonic()
        self._last_message = ""
        self._last_line = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="evalsvc-progress", daemon=True)
        self._ticker.start()

    # -- the Progress protocol

    def suites(self, names: Sequence[str]) -> None:
        self.order = list(names)

    def planned(
        self, suite: str, roles: Sequence[str], n_items: int, n_done: dict[str, int]
    ) -> None:
        from evalsvc.cli._report import suite_position

        which = suite_position(self.order, suite)
        now = time.monotonic()
        with self._lock:
            for role in roles:
                done = n_done.get(role, 0)
                self.sides[(suite, role)] = _Side(
                    label=f"{which}{plain(suite)} · {plain(self.labels.get(role, role))}",
                    total=n_items, done=done, started=now, resumed=done,
                )
        resumed = sum(n_done.get(r, 0) for r in roles)
        self._print(f"{which}{plain(suite)}: {n_items} items per side"
                    + (f" ({resumed} answers from an earlier attempt)" if resumed else ""))

    def advance(self, suite: str, role: str, error: bool = False) -> None:
        with self._lock:
            side = self.sides.get((suite, role))
            if side is None:
                return
            side.done += 1
            side.errors += bool(error)
            finished = side.done == side.total
        if finished:
            self._print(side.line(time.monotonic()))

    def message(self, text: str) -> None:
        self._last_message = text
        self._print(plain(text))

    def flush(self) -> None:
        """Nothing is buffered: every line is written as it happens (``RichProgressBars``'s)."""

    def close(self) -> None:
        self._stop.set()

    # -- the ticker

    def _running(self) -> list[_Side]:
        with self._lock:
            return [s for s in self.sides.values() if s.done < s.total]

    def _tick(self) -> None:
        while not self._stop.wait(min(self.every, 1.0)):
            now = time.monotonic()
            if now - self._last_line < self.every:
                continue
            running = self._running()
            if running:
                for side in running:
                    self._print(side.line(now))
            else:
                what = plain(self._last_message) if self._last_message else "starting"
                self._print(f"still going: {what} ({_clock(now - self.started)} since the start)")

    def _print(self, text: str) -> None:
        self._last_line = time.monotonic()
        stamp = time.strftime("%H:%M:%S")
        self.console.print(f"[{stamp}] {text}", markup=False, highlight=False, soft_wrap=True)
        self.console.file.flush()


@contextmanager
def progress_view(console: Console, labels: dict[str, str]) -> Iterator[object]:
    """The run's progress view for ``console`` (module contract): rich bars on a terminal,
    plain lines elsewhere. Yields an object with the ``runner.Progress`` methods and
    ``suites``/``flush``."""
    if console.is_terminal:
        from rich.progress import Progress as RichProgress

        from evalsvc.cli._report import RichProgressBars, progress_columns

        # Two redraws a second: at the default ten the bar's thread took a tenth of the CPU of
        # a fast run (docs/benchmarks.md, "Evaluator speed").
        with RichProgress(*progress_columns(console.width), console=console, transient=False,
                          refresh_per_second=2) as bar:
            bars = RichProgressBars(bar, labels)
            try:
                yield bars
            finally:
                bars.flush()  # the last counts, before the bars' final redraw
        return
    plain = PlainProgress(console, labels)
    try:
        yield plain
    finally:
        plain.close()
