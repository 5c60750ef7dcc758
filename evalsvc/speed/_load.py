"""Load generation: open-loop arrivals (Poisson or gamma-bursty) and closed loops.

Contract: ``send(i)`` performs request ``i`` and returns an ``Outcome`` (never raises for a
failed request: it returns ``error``); the drivers add the wall-clock timing. Times in a
``RequestRecord`` are seconds from the load's start.

Arrivals follow ``vllm bench serve``: inter-arrival gaps are gamma distributed with shape
``burstiness`` and mean ``1 / rate`` (scale ``1 / (rate * burstiness)``); burstiness 1 is a
Poisson process, below 1 burstier, above 1 more regular (vllm/benchmarks/serve.py, ``get_request``).
An open loop sends on schedule whatever is in flight (the arrivals do not wait for answers),
which is what exposes queueing; a closed loop of ``c`` workers never has more than ``c`` in flight
and so can never overload a server (it measures latency at a concurrency, not capacity).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np


@dataclass
class Outcome:
    """What one request returned (timings measured by the sender where it can see tokens)."""

    ttft_s: float | None = None
    output_tokens: int = 0
    itl_s: list[float] = field(default_factory=list)
    error: str | None = None


Send = Callable[[int], Awaitable[Outcome]]


@dataclass
class RequestRecord:
    """One timed request: scheduled and actual start, end, and what came back."""

    index: int
    t_sched: float
    t_start: float
    t_end: float
    ttft_s: float | None
    output_tokens: int
    itl_s: list[float]
    error: str | None = None

    @property
    def latency_s(self) -> float:
        return self.t_end - self.t_start

    @property
    def tpot_s(self) -> float | None:
        """(E2E − TTFT) / (output tokens − 1), as ``vllm bench serve``; None below 2 tokens."""
        if self.error is not None or self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def arrival_offsets(
    n: int,
    rate: float,
    *,
    arrival: Literal["poisson", "gamma"] = "poisson",
    burstiness: float = 1.0,
    seed: int = 0,
) -> np.ndarray:
    """``n`` arrival times (s from the start, the first at 0) at ``rate`` requests/s."""
    if n <= 0:
        return np.zeros(0)
    if rate <= 0:
        raise ValueError("rate must be positive")
    shape = 1.0 if arrival == "poisson" else burstiness
    if shape <= 0:
        raise ValueError("burstiness must be positive")
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=shape, scale=1.0 / (rate * shape), size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


async def _timed(send: Send, index: int, t_sched: float, origin: float) -> RequestRecord:
    t0 = time.perf_counter()
    try:
        out = await send(index)
    except Exception as exc:  # noqa: BLE001 - a sender bug must count as an error, not vanish
        out = Outcome(error=f"{type(exc).__name__}: {exc}")
    t1 = time.perf_counter()
    return RequestRecord(
        index=index,
        t_sched=t_sched,
        t_start=t0 - origin,
        t_end=t1 - origin,
        ttft_s=out.ttft_s,
        output_tokens=out.output_tokens,
        itl_s=list(out.itl_s),
        error=out.error,
    )


async def open_loop(send: Send, offsets: Sequence[float]) -> list[RequestRecord]:
    """Send request ``i`` at ``offsets[i]`` seconds, whatever is still in flight."""
    origin = time.perf_counter()
    tasks: list[asyncio.Task[RequestRecord]] = []
    for i, at in enumerate(offsets):
        delay = origin + float(at) - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_timed(send, i, float(at), origin)))
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        raise


async def closed_loop(send: Send, n: int, concurrency: int) -> list[RequestRecord]:
    """``concurrency`` workers, each sending the next request as soon as its last one ended."""
    origin = time.perf_counter()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    out: list[RequestRecord] = []

    async def worker() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            out.append(await _timed(send, i, time.perf_counter() - origin, origin))

    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    return sorted(out, key=lambda r: r.index)
