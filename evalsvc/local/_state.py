"""The JSON state file of running local servers, and the lock that serialises changes to it.

Contract: ``load_state`` never raises on a missing or corrupt file (it returns an empty state, as
nothing can be trusted in it); ``save_state`` replaces the file atomically. ``state_lock`` is an
exclusive ``flock`` held by ``up``/``down`` so that concurrent callers (e.g. test workers) do not
prepare or start the same thing twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from ._ui import info

STATE_VERSION = 1


class ServerRecord(BaseModel):
    """One server that ``up`` started and has not yet seen stopped."""

    name: str
    role: Literal["baseline", "candidate"]
    pid: int
    """Leader of the server's process group (started in a new session, so pgid == pid)."""
    proc_start: int | None = None
    """Start time of ``pid`` in clock ticks since boot (Linux), to tell it from a reused pid."""
    port: int
    url: str
    """OpenAI base URL, ``http://127.0.0.1:<port>/v1``."""
    model_dir: str
    served_model_name: str
    started_at: datetime
    log: str
    spec_key: str
    """Fingerprint of the command and environment; a mismatch means the server is restarted."""


class State(BaseModel):
    version: int = STATE_VERSION
    servers: dict[str, ServerRecord] = Field(default_factory=dict)


def load_state(path: Path) -> State:
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return State()
    try:
        state = State.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        return State()
    return state if state.version == STATE_VERSION else State()


def save_state(path: Path, state: State) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(state.model_dump_json(indent=2))
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def state_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed) for the duration of the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another `up`/`down` is working; it has its own deadlines, so waiting is bounded.
            info(f"waiting for another evalsvc local process (lock: {path})")
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
