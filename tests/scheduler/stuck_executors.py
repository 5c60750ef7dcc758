"""Executors that misbehave the way a real run can (``--executor tests.scheduler.stuck_executors:NAME``).

- ``plans_forever``: CPU-bound work that never looks at ``cancel``, like a suite planning a
  huge number of items; it announces itself in $EVALSVC_TEST_STARTED so the test can signal.
- ``runs_out_of_memory``: raises ``MemoryError`` as an allocation of a huge plan does.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from evalsvc.db import Store
from evalsvc.domain import RunInfo


def plans_forever(store: Store, run: RunInfo, cancel: threading.Event, worker_id: str) -> None:
    Path(os.environ["EVALSVC_TEST_STARTED"]).write_text(run.id)
    items: list[int] = []
    while True:  # ignores cancel on purpose
        items = [i * i for i in range(10_000)]
        del items[:]


def runs_out_of_memory(store: Store, run: RunInfo, cancel: threading.Event, worker_id: str) -> None:
    raise MemoryError("cannot allocate the plan")
