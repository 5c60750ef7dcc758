"""Drill (issue 21): 100 concurrent ``POST /runs`` with 50 concurrent readers against a real
``evalsvc api serve`` process (uvicorn on loopback, auth on), on SQLite and PostgreSQL.

What must hold: no 5xx and no refused connection, every submission stored exactly once, the
readers see consistent pages. The client-side latency percentiles are printed (the figure goes
to docs/benchmarks.md, "Drills"); nothing is timed.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from evalsvc.db import Store
from tests.fixtures.apiserve import api_serve
from tests.fixtures.db import db_url, pg_session_url, sqlite_template  # noqa: F401  (fixtures)

WRITERS, READERS, READS_EACH = 100, 50, 4


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.slow
def test_100_concurrent_submissions_with_50_readers_never_5xx(
    db_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    with Store.from_url(db_url) as store:
        submit, _ = store.create_api_token(name="drill-submit", scopes=["submit"])
        read, _ = store.create_api_token(name="drill-read", scopes=["read"])
    body = {
        "baseline": {"url": "http://127.0.0.1:9001/v1"},
        "candidates": [{"url": "http://127.0.0.1:9002/v1"}],
        "suites": ["reasoning-smoke"],
        "options": {"samples": 4},
    }
    start = threading.Barrier(WRITERS + READERS)
    results: list[tuple[str, int, float]] = []
    lock = threading.Lock()

    with api_serve(
        db_url,
        log=tmp_path / "api.log",
        env={"EVALSVC_ALLOWED_ENDPOINTS": "127.0.0.0/8"},
        start_timeout=300,  # a loaded 2-core host imports the app in tens of seconds
    ) as api:
        base = f"{api.url}/api/v1"

        def writer(i: int) -> None:
            with httpx.Client(
                base_url=base, timeout=120, headers={"Authorization": f"Bearer {submit}"}
            ) as c:
                start.wait()
                t0 = time.perf_counter()
                code = c.post("/runs", json={**body, "labels": {"drill": str(i)}}).status_code
                with lock:
                    results.append(("POST /runs", code, time.perf_counter() - t0))

        def reader(i: int) -> None:
            with httpx.Client(
                base_url=base, timeout=120, headers={"Authorization": f"Bearer {read}"}
            ) as c:
                start.wait()
                for k in range(READS_EACH):
                    path = "/runs?limit=50" if (i + k) % 2 else "/runs?status=queued&limit=200"
                    t0 = time.perf_counter()
                    resp = c.get(path)
                    with lock:
                        results.append(("GET /runs", resp.status_code, time.perf_counter() - t0))
                    if resp.status_code == 200:
                        ids = [r["id"] for r in resp.json()]
                        assert len(ids) == len(set(ids))  # a consistent page

        with ThreadPoolExecutor(WRITERS + READERS) as pool:
            futures = [pool.submit(writer, i) for i in range(WRITERS)]
            futures += [pool.submit(reader, i) for i in range(READERS)]
            for f in futures:
                f.result()
        assert api.proc.poll() is None  # the server is still up

    codes = {(what, code) for what, code, _ in results}
    assert codes <= {("POST /runs", 202), ("GET /runs", 200)}, sorted(codes)
    assert len(results) == WRITERS + READERS * READS_EACH
    with Store.from_url(db_url) as store:
        runs = store.list_runs(limit=1000)
    drills = sorted(int(r.spec.labels["drill"]) for r in runs)
    assert drills == list(range(WRITERS))  # every submission stored, once
    backend = db_url.split(":", 1)[0].split("+")[0]
    for what in ("POST /runs", "GET /runs"):
        t = [s for w, _, s in results if w == what]
        print(
            f"\n[load drill] {backend}: {what} n={len(t)} p50 {1000 * statistics.median(t):.0f} ms"
            f" p99 {1000 * _p(t, 0.99):.0f} ms max {1000 * max(t):.0f} ms"
        )
