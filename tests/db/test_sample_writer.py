"""SampleWriter: batches, and keeps samples through a database outage (real PostgreSQL behind
a loopback TCP proxy that cuts the connection)."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from evalsvc.db import DatabaseUnavailable, SampleWriter, Store
from evalsvc.domain import Sample
from tests.fixtures.db import make_spec
from tests.fixtures.tcp_proxy import TcpProxy


def _samples(n: int, start: int = 0) -> list[Sample]:
    return [
        Sample(suite="s", item_id=str(i), endpoint="baseline", score=1.0)
        for i in range(start, start + n)
    ]


def test_batches_and_flush(store: Store) -> None:
    run = store.create_run(make_spec())
    writer = SampleWriter(store, run.id, batch_size=10, flush_interval_s=3600)
    for sample in _samples(25):
        writer.add(sample)
    assert store.count_samples(run.id)["total"] == 20 and writer.pending == 5
    with writer:
        pass  # exit flushes
    assert store.count_samples(run.id)["total"] == 25 and writer.pending == 0
    assert writer.written == 25


def test_concurrent_adds_lose_nothing(store: Store) -> None:
    run = store.create_run(make_spec())
    writer = SampleWriter(store, run.id, batch_size=7, flush_interval_s=3600)
    threads = [
        threading.Thread(target=lambda k=k: [writer.add(s) for s in _samples(50, k * 50)])
        for k in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.flush()
    assert store.count_samples(run.id)["total"] == 200


@pytest.mark.postgres
def test_samples_survive_a_database_outage(pg_url: str) -> None:
    upstream = sa.make_url(pg_url)
    proxy = TcpProxy((upstream.host or "127.0.0.1", upstream.port or 5432))
    proxy.restore()
    url = upstream.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    with Store.from_url(url) as store:
        run = store.create_run(make_spec())
        writer = SampleWriter(store, run.id, batch_size=5, flush_interval_s=3600, retry_seconds=20)
        for sample in _samples(5):
            writer.add(sample)
        assert writer.written == 5

        proxy.cut()
        for sample in _samples(12, start=5):
            writer.add(sample)  # deferred, never raises, never blocks for long
        assert writer.pending == 12
        impatient = SampleWriter(store, run.id, retry_seconds=0.5)
        impatient.add(_samples(1, start=100)[0])
        with pytest.raises(DatabaseUnavailable):
            impatient.flush()  # gives up, but keeps the sample
        assert impatient.pending == 1

        restorer = threading.Timer(1.5, proxy.restore)
        restorer.start()
        started = time.monotonic()
        writer.flush()  # retries with backoff until the proxy is back
        assert time.monotonic() - started >= 1.0
        restorer.join()
        assert writer.pending == 0
        assert store.count_samples(run.id)["total"] == 17
    proxy.cut()


async def test_the_runner_sink_writes_whole_batches_and_flushed_reads_see_everything(
    store: Store,
) -> None:
    """``put`` (the runner's sink) hands a full batch to a thread and goes on; a read through
    ``flushed`` waits for that write and first writes what is still buffered."""
    from evalsvc.db import BATCH_SIZE

    run = store.create_run(make_spec())
    writer = SampleWriter(store, run.id, flush_interval_s=3600)
    assert writer.batch_size == BATCH_SIZE
    for sample in _samples(BATCH_SIZE + 3):
        await writer.put(sample)
    assert writer.pending + writer.written == BATCH_SIZE + 3  # nothing lost in between

    async def stored() -> list[Sample]:
        return store.get_samples(run.id)

    assert len(await writer.flushed(stored)()) == BATCH_SIZE + 3
    assert writer.pending == 0 and writer.written == BATCH_SIZE + 3


async def test_the_runner_sink_waits_for_the_store_only_past_its_backlog(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a write is held up, ``put`` keeps returning until ``BACKLOG`` samples are pending;
    then it waits for that write (bounded memory whatever the database's speed), and nothing is
    lost."""
    import asyncio

    from evalsvc.db import BATCH_SIZE, _writer

    monkeypatch.setattr(_writer, "BACKLOG", 2 * BATCH_SIZE)
    run = store.create_run(make_spec())
    writer = SampleWriter(store, run.id, flush_interval_s=3600)
    held = threading.Event()
    real_add = writer.store.add_samples

    def slow_add(run_id: str, batch: list[Sample]) -> None:
        assert held.wait(30)
        real_add(run_id, batch)

    monkeypatch.setattr(writer.store, "add_samples", slow_add)
    samples = _samples(3 * BATCH_SIZE)
    for sample in samples[: 2 * BATCH_SIZE - 1]:
        await writer.put(sample)  # the first full batch's write is held: put still returns
    assert writer.pending == 2 * BATCH_SIZE - 1 and writer.written == 0
    blocked = asyncio.ensure_future(writer.put(samples[2 * BATCH_SIZE - 1]))
    await asyncio.sleep(0.3)
    assert not blocked.done()  # at the backlog: waits for the write in flight
    held.set()
    await asyncio.wait_for(blocked, 30)
    assert writer.written >= BATCH_SIZE
    for sample in samples[2 * BATCH_SIZE :]:
        await writer.put(sample)

    async def stored() -> list[Sample]:
        return store.get_samples(run.id)

    assert len(await writer.flushed(stored)()) == 3 * BATCH_SIZE
    assert writer.pending == 0
