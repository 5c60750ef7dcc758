"""Executors injected into worker processes by the tests
(``--executor tests.scheduler.executors:NAME``).

Parameters travel in the run's labels, so one worker can execute differently shaped runs.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

from evalsvc.db import Store
from evalsvc.domain import RunInfo, RunStatus, Sample


def _log_claim(run: RunInfo, worker_id: str) -> None:
    """Append ``run_id worker_id time`` to $EVALSVC_TEST_CLAIM_LOG."""
    line = f"{run.id} {worker_id} {time.time():.6f}\n"
    # O_APPEND writes of one short line are atomic: two processes never interleave lines.
    fd = os.open(os.environ["EVALSVC_TEST_CLAIM_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def record_and_complete(
    store: Store, run: RunInfo, cancel: threading.Event, worker_id: str
) -> None:
    """Append ``run_id worker_id time`` to $EVALSVC_TEST_CLAIM_LOG, then complete the run."""
    _log_claim(run, worker_id)
    delay = float(run.spec.labels.get("delay", "0"))
    if delay:
        time.sleep(delay)
    store.finish_run(run.id, status=RunStatus.completed, verdict="pass", worker_id=worker_id)


def slow_samples(store: Store, run: RunInfo, cancel: threading.Event, worker_id: str) -> None:
    """Write one sample per item, slowly, resuming from ``done_keys``; honour ``cancel`` the way
    the real executor must (stop, keep what is written, return without finishing)."""
    items = int(run.spec.labels.get("items", "20"))
    delay = float(run.spec.labels.get("delay", "0.1"))
    done = store.done_keys(run.id)
    for i in range(items):
        if cancel.is_set():
            return
        sample = Sample(
            suite="needle-4k",
            item_id=str(i),
            endpoint="baseline",
            score=1.0,
            data={"worker": worker_id, "attempt": run.attempts},
        )
        if sample.key in done:
            continue
        store.add_samples(run.id, [sample])
        time.sleep(delay)
    store.finish_run(run.id, status=RunStatus.completed, verdict="pass", worker_id=worker_id)


def ask_the_baseline(store: Store, run: RunInfo, cancel: threading.Event, worker_id: str) -> None:
    """Log the claim, send the run's one item (a chat request) to its baseline through the real
    endpoint client, store the answer as the run's sample and complete the run: the whole
    claim → send → store → settle cycle at the cost of one request."""
    from evalsvc.endpoints import EndpointClient

    _log_claim(run, worker_id)

    async def ask() -> Sample:
        async with EndpointClient(run.spec.baseline, retries=3) as client:
            out = await client.chat([{"role": "user", "content": f"{run.id}: 2+2?"}], max_tokens=8)
        return Sample(
            suite="drill",
            item_id="0",
            endpoint="baseline",
            output=out.text,
            score=1.0 if out.ok else None,
            error=out.error,
        )

    store.add_samples(run.id, [asyncio.run(ask())])
    store.finish_run(run.id, status=RunStatus.completed, verdict="pass", worker_id=worker_id)
