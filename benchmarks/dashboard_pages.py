"""Server time of the dashboard's heaviest pages: the runs list over 10,000 stored runs and the
pages of one run holding 5,000 samples.

The store is filled through ``Store`` (10,000 runs with labels and two gate rows each; one run
with a 2,500-pair needle suite, its snapshots and a report), then each page is requested
in-process through the ASGI app (``fastapi.testclient``: the server's whole work, no network)
``--repeats`` times after one warm-up; the median and the spread are printed.

Usage::

    python benchmarks/dashboard_pages.py --sqlite
    python benchmarks/dashboard_pages.py --admin-url postgresql+psycopg://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from evalsvc.db import Store  # noqa: E402
from evalsvc.db.testing import temporary_postgres_database  # noqa: E402
from evalsvc.domain import EndpointRef, Provenance, RunSpec, RunStatus, Sample  # noqa: E402


def fill_runs(store: Store, n: int) -> list[str]:
    rng = random.Random(1)
    ids = []
    for i in range(n):
        spec = RunSpec(
            baseline=EndpointRef(url="http://gpu-a:8000/v1", name="prod-bf16"),
            candidates=[EndpointRef(url=f"http://gpu-{'bcd'[i % 3]}:8000/v1")],
            suites=["needle-4k", "reasoning"],
            labels={"team": rng.choice(["serving", "research", "infra"]), "n": str(i % 10)},
        )
        run = store.create_run(spec, status=RunStatus.queued)
        verdict = rng.choice(["pass", "pass", "fail", "inconclusive"])
        store.save_gate_results(run.id, [
            {"candidate": "candidate:0", "suite": s, "verdict": verdict, "metric": "accuracy",
             "delta": -0.01, "ci": [-0.03, 0.01], "margin": 0.05,
             "candidate_url": spec.candidates[0].url}
            for s in ("needle-4k", "reasoning")
        ])
        store.finish_run(run.id, status=RunStatus.completed, verdict=verdict)
        ids.append(run.id)
        if (i + 1) % 1000 == 0:
            print(f"  {i + 1} runs stored", flush=True)
    return ids


def big_run(store: Store, pairs: int) -> str:
    spec = RunSpec(
        baseline=EndpointRef(url="http://gpu-a:8000/v1", name="prod-bf16"),
        candidates=[EndpointRef(url="http://gpu-b:8000/v1", name="prod-fp8")],
        suites=["needle-big"],
    )
    run = store.create_run(spec, status=RunStatus.running)
    store.save_suite_snapshot(run.id, name="needle-big", kind="needle", version="2", spec={})
    for role, kv in (("baseline", "auto"), ("candidate:0", "fp8")):
        store.save_endpoint_snapshot(
            run.id, role=role, endpoint=spec.baseline if role == "baseline" else spec.candidates[0],
            provenance=Provenance(engine="vllm", version="0.11", kv_cache_dtype=kv,
                                  kv_capacity_tokens=100_000 if kv == "auto" else 200_000))
    rng = random.Random(2)
    lengths, depths = [1024, 2048, 4096, 8192, 16384], [0.1, 0.3, 0.5, 0.7, 0.9]
    samples = []
    for k in range(pairs):
        length, depth = lengths[k % 5], depths[(k // 5) % 5]
        data = {"context_length": length, "depth": depth, "expected": [str(k)], "cluster": str(k)}
        b = float(rng.random() < 0.9)
        c = b if rng.random() < 0.95 else 1.0 - b
        for role, score in (("baseline", b), ("candidate:0", c)):
            samples.append(Sample(suite="needle-big", item_id=f"i{k}", endpoint=role,
                                  output=f"The special magic number is {k}. " * 3, score=score,
                                  latency_s=0.5, data=data))
    for start in range(0, len(samples), 1000):
        store.add_samples(run.id, samples[start:start + 1000])
    heat = [{"context_length": length, "depth": d, "accuracy": 0.9, "n": pairs // 25}
            for length in lengths for d in depths]
    report = {
        "schema_version": 1, "run_id": run.id, "verdict": "pass", "error": None, "warnings": [],
        "baseline": {"url": spec.baseline.url}, "candidates": [{
            "role": "candidate:0", "url": spec.candidates[0].url, "name": "prod-fp8",
            "verdict": "pass", "suites": [{
                "suite": "needle-big", "kind": "needle", "verdict": "pass", "gated": True,
                "metric": "accuracy", "baseline": 0.9, "candidate": 0.895, "delta": -0.005,
                "ci": [-0.02, 0.01], "p_value": 0.0001, "margin": 0.05, "alpha": 0.05,
                "n": pairs, "n_planned": pairs, "n_errors": 0, "mde": 0.02, "test": "tango",
                "details": {"higher_is_better": True, "heatmap": {"baseline": heat,
                                                                  "candidate": heat}},
            }],
        }],
    }
    store.save_report(run.id, report)
    store.finish_run(run.id, status=RunStatus.completed, verdict="pass")
    return run.id


def measure(client: Any, url: str, repeats: int) -> dict[str, float]:
    resp = client.get(url)
    assert resp.status_code == 200, (url, resp.status_code, resp.text[:300])
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        resp = client.get(url)
        times.append(time.perf_counter() - t0)
        assert resp.status_code == 200
    return {"median_ms": 1000 * statistics.median(times), "min_ms": 1000 * min(times),
            "max_ms": 1000 * max(times), "bytes": len(resp.content)}


@contextmanager
def database(args: argparse.Namespace) -> Iterator[str]:
    if args.admin_url:
        with temporary_postgres_database(args.admin_url) as url:
            yield url
    else:
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/bench.db"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--admin-url", help="PostgreSQL URL (a private database is created)")
    parser.add_argument("--sqlite", action="store_true", help="embedded SQLite (default)")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from evalsvc.webapp import create_app

    with database(args) as url:
        store = Store.from_url(url)
        store.upgrade()
        t0 = time.perf_counter()
        ids = fill_runs(store, args.runs)
        run = big_run(store, args.samples // 2)
        print(f"filled in {time.perf_counter() - t0:.0f} s ({store.dialect})", flush=True)
        deep = ids[len(ids) // 2]
        created = store.get_run(deep)
        assert created is not None
        cursor = f"{created.created_at.isoformat()}~{deep}"
        pages = {
            "runs list, first page (50 of 10,000)": "/",
            "runs list, page in the middle (keyset)": f"/?older={cursor}",
            "runs list, label filter team=serving": "/?label=team%3Dserving",
            "runs list, endpoint + verdict filter": "/?endpoint=http://gpu-c:8000/v1&verdict=fail",
            "run page (5,000 samples)": f"/runs/{run}",
            "needle heatmap page (5,000 samples)": f"/runs/{run}/suites/needle-big",
            "flips page (5,000 samples)": f"/runs/{run}/flips",
            "samples page (5,000 samples, 50 shown)": f"/runs/{run}/suites/needle-big/samples",
            "samples page, last page (offset 2,450)":
                f"/runs/{run}/suites/needle-big/samples?offset=2450",
            "samples page, outcome filter": (
                f"/runs/{run}/suites/needle-big/samples?outcome=regression"),
        }
        with TestClient(create_app(url, auth=False)) as client:
            print("\n| page | median | min | max | HTML |\n|---|---|---|---|---|")
            for name, path in pages.items():
                m = measure(client, path, args.repeats)
                print(f"| {name} | {m['median_ms']:.0f} ms | {m['min_ms']:.0f} ms | "
                      f"{m['max_ms']:.0f} ms | {m['bytes'] / 1024:.0f} KiB |", flush=True)
        store.close()


if __name__ == "__main__":
    main()
