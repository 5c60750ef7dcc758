"""The store at scale (issue 21, P5): ingesting 1M samples, listing 10k runs, reading the report
of a 100k-sample run.

Contract: one fresh database (``--admin-url``: a private PostgreSQL database, dropped after;
``--sqlite``: a file in a temporary directory), filled in three steps, then measured through
the real server:

1. **One real run.** ``evalsvc compare`` (its own process, as a user runs it) against the
   zero-latency stub (``benchmarks/stub_server.py``): ``--suite reasoning --samples
   --real-items``. Its rows — run, endpoint and suite snapshots, samples, gate rows, report —
   are the template for every other run: the shape the runner writes, not a hand-made one.
2. **Ingest (timed).** ``--ingest-runs`` runs of ``--samples-per-run`` samples each (1M by
   default), every sample a copy of one of the real run's samples under a new item id
   (``<item>~<k>``), handed one by one to ``SampleWriter.put``: the runner's own sink, its
   batch size and its write thread. The figure is the wall time from the first ``put`` to the
   last flush committed, samples built on the fly included (their build alone is timed too).
3. **Fill.** Runs copied from the real one through the ``Store`` API (create, snapshots,
   ``--fill-samples`` of its samples, gate rows, its report, finish) until ``--runs`` are
   stored. Not timed.

The first ingested run is "the 100k-sample run": it holds the real run's report with its own
run id (a report summarises each suite, so its size does not grow with the samples; the pages
that read samples are measured too). Then ``evalsvc api serve`` (uvicorn, its own process,
loopback, ``EVALSVC_API_AUTH=off``) serves the database and each URL is requested ``--repeats``
times after one warm-up over one keep-alive ``httpx`` connection; the median, min and max
client-side times are printed as a Markdown table, and the whole result as JSON (``--out``).

Usage::

    python benchmarks/store_scale.py --admin-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres
    python benchmarks/store_scale.py --sqlite
    python benchmarks/store_scale.py --sqlite --samples-per-run 2000 --ingest-runs 2 --runs 20  # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import httpx  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from evaluator_speed import _env, stub  # noqa: E402

from evalsvc.db import SampleWriter, Store  # noqa: E402
from evalsvc.db.testing import temporary_postgres_database  # noqa: E402
from evalsvc.domain import RunInfo, RunStatus, Sample  # noqa: E402


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- the real run


def real_run(db_url: str, items: int, workdir: Path) -> str:
    """``evalsvc compare`` against the stub into ``db_url``; returns the run id."""
    report = workdir / "real.json"
    with stub() as urls:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "evalsvc.cli.main",
                "compare",
                *urls,
                "--suite",
                "reasoning",
                "--samples",
                str(items),
                "--concurrency",
                "16",
                "--database-url",
                db_url,
                "--json",
                str(report),
            ],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=workdir,
        )
    # 3 (inconclusive) is the stub's usual verdict: its answers solve few items. 4 or a crash
    # would be a broken template.
    if proc.returncode not in (0, 1, 3) or not report.exists():
        raise RuntimeError(f"evalsvc compare exited {proc.returncode}: {proc.stderr[-2000:]}")
    return str(json.loads(report.read_text())["run_id"])


class Template:
    """The real run's rows, read back through the store."""

    def __init__(self, store: Store, run_id: str) -> None:
        run = store.get_run(run_id)
        report = store.get_report(run_id)
        assert run is not None and report is not None, "the real run has no report"
        self.run: RunInfo = run
        self.report = report
        self.samples = store.get_samples(run_id)
        self.endpoints = store.get_endpoint_snapshots(run_id)
        self.suites = store.get_suite_snapshots(run_id)
        self.gates = store.get_gate_results(run_id)

    def new_run(self, store: Store, n: int) -> str:
        """A run with the real one's spec (a label ``copy=n``) and snapshots, still running."""
        spec = self.run.spec.model_copy(
            update={
                "labels": {
                    **self.run.spec.labels,
                    "copy": str(n),
                    "team": ("serving", "infra")[n % 2],
                }
            }
        )
        run = store.create_run(spec, status=RunStatus.running)
        for role, (ref, prov) in self.endpoints.items():
            store.save_endpoint_snapshot(run.id, role=role, endpoint=ref, provenance=prov)
        for s in self.suites:
            store.save_suite_snapshot(
                run.id, name=s["name"], kind=s["kind"], version=s["version"], spec=s["spec"]
            )
        return run.id

    def finish(self, store: Store, run_id: str) -> None:
        store.save_gate_results(run_id, self.gates)
        store.save_report(run_id, {**self.report, "run_id": run_id})
        store.finish_run(run_id, status=RunStatus.completed, verdict=self.report["verdict"])

    def copies(self, n: int) -> Iterator[Sample]:
        """``n`` samples: the real ones, again and again, each under a new item id."""
        k = 0
        while True:
            for s in self.samples:
                if n <= 0:
                    return
                # Both endpoints of one real item get the same new id: pairs stay pairs.
                yield s.model_copy(update={"item_id": f"{s.item_id}~{k}"})
                n -= 1
            k += 1


# --------------------------------------------------------------------------------- ingest


async def _ingest_one(store: Store, tpl: Template, run_id: str, n: int) -> None:
    writer = SampleWriter(store, run_id)
    for sample in tpl.copies(n):
        await writer.put(sample)
    # flushed(): waits for the write in flight, then writes the rest, as the runner's end does
    await writer.flushed(lambda: asyncio.sleep(0))()


def ingest(store: Store, tpl: Template, runs: int, per_run: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    for _ in tpl.copies(per_run):
        pass
    build_s = time.perf_counter() - t0
    ids, walls = [], []
    for i in range(runs):
        run_id = tpl.new_run(store, i)
        t0 = time.perf_counter()
        asyncio.run(_ingest_one(store, tpl, run_id, per_run))
        walls.append(time.perf_counter() - t0)
        tpl.finish(store, run_id)
        ids.append(run_id)
        _log(f"  ingested run {i + 1}/{runs}: {per_run:,} samples in {walls[-1]:.1f} s")
    stored = sum(store.count_samples(r)["total"] for r in ids)
    assert stored == runs * per_run, (stored, runs * per_run)
    total = sum(walls)
    return {
        "runs": ids,
        "samples": stored,
        "wall_s": round(total, 2),
        "samples_per_s": round(stored / total),
        "per_run_s": [round(w, 2) for w in walls],
        "build_s_per_run": round(build_s, 2),
    }


def fill(store: Store, tpl: Template, count: int, samples: int, start: int, threads: int) -> None:
    """``count`` copies of the real run through the ``Store`` API; ``threads`` writers at once
    (PostgreSQL: each store call waits on its commit; SQLite has one writer). About 8
    transactions per run: 150 runs a minute on the loaded 2-core host, so ``--fill rows``."""
    t0 = time.perf_counter()
    chunk = tpl.samples[:samples]
    done = [0]
    lock = threading.Lock()

    def one(i: int) -> None:
        run_id = tpl.new_run(store, start + i)
        store.add_samples(run_id, chunk)
        tpl.finish(store, run_id)
        with lock:
            done[0] += 1
            if done[0] % 1000 == 0:
                _log(f"  filled {done[0]:,}/{count:,} runs ({time.perf_counter() - t0:.0f} s)")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))


def fill_rows(url: str, template_id: str, count: int, samples: int, start: int) -> None:
    """``count`` copies of the real run's stored rows, every table that holds a run's rows
    (the run, its candidates, endpoint and suite snapshots, gate rows, report and its first
    ``samples`` samples), under new run ids, labels and creation times, written with one
    ``executemany`` per table and 500 runs: the shape the runner wrote, copied row by row."""
    from evalsvc.db._orm import Base

    engine = sa.create_engine(url)
    tables = {t.name: t for t in Base.metadata.sorted_tables}
    runs = tables["runs"]
    children = [t for t in Base.metadata.sorted_tables if "run_id" in t.c and t is not runs]
    with engine.connect() as conn:
        run = dict(conn.execute(sa.select(runs).where(runs.c.id == template_id)).mappings().one())
        rows = {}
        for t in children:
            stmt = sa.select(t).where(t.c.run_id == template_id)
            if "id" in t.c:
                stmt = stmt.order_by(t.c.id)
            if t.name == "samples":
                stmt = stmt.limit(samples)
            rows[t.name] = [dict(r) for r in conn.execute(stmt).mappings()]
    t0 = time.perf_counter()
    base = datetime.now(UTC) - timedelta(seconds=count)
    for first in range(0, count, 500):
        batch: dict[str, list[dict[str, Any]]] = {t.name: [] for t in (runs, *children)}
        for i in range(first, min(first + 500, count)):
            new_id = uuid.uuid4().hex
            n = start + i
            labels = {
                **run["spec"].get("labels", {}),
                "copy": str(n),
                "team": ("serving", "infra")[n % 2],
            }
            batch["runs"].append(
                {
                    **run,
                    "id": new_id,
                    "spec": {**run["spec"], "labels": labels},
                    "created_at": base + timedelta(seconds=i),
                }
            )
            for t in children:
                for r in rows[t.name]:
                    copy = {k: v for k, v in r.items() if not (k == "id" and t.name != "runs")}
                    copy["run_id"] = new_id
                    if t.name == "reports":
                        copy["report"] = {**copy["report"], "run_id": new_id}
                    batch[t.name].append(copy)
        with engine.begin() as conn:
            for t in (runs, *children):
                if batch[t.name]:
                    conn.execute(t.insert(), batch[t.name])
        _log(
            f"  filled {min(first + 500, count):,}/{count:,} runs "
            f"({time.perf_counter() - t0:.0f} s)"
        )
    engine.dispose()


# ----------------------------------------------------------------------------- measuring


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def api_serve(db_url: str, workdir: Path) -> Iterator[str]:
    """``evalsvc api serve`` on a free loopback port, authentication off; yields its base URL."""
    port = _free_port()
    env = {**_env(), "EVALSVC_API_AUTH": "off"}
    log = (workdir / "api.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evalsvc.cli.main",
            "api",
            "serve",
            "--port",
            str(port),
            "--database-url",
            db_url,
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        # generous: on a loaded 2-core host the import alone took 44 s
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                raise RuntimeError((workdir / "api.log").read_text()[-2000:])
            try:
                if httpx.get(url + "/api/v1/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("api serve did not become healthy")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def measure(client: httpx.Client, path: str, repeats: int) -> dict[str, Any]:
    resp = client.get(path)
    if resp.status_code != 200:
        raise RuntimeError(f"{path}: {resp.status_code} {resp.text[:300]}")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        resp = client.get(path)
        times.append(time.perf_counter() - t0)
        if resp.status_code != 200:
            raise RuntimeError(f"{path}: {resp.status_code}")
    return {
        "median_ms": round(1000 * statistics.median(times), 1),
        "min_ms": round(1000 * min(times), 1),
        "max_ms": round(1000 * max(times), 1),
        "bytes": len(resp.content),
    }


def pages(big: str, per_run: int, runs: int, suite: str) -> dict[str, str]:
    n, k = f"{per_run:,}", f"{runs:,}"
    return {
        f"GET /api/v1/runs (50 of {k})": "/api/v1/runs",
        f"GET /api/v1/runs?limit=1000 (of {k})": "/api/v1/runs?limit=1000",
        "GET /api/v1/runs?status=completed&verdict=…": "/api/v1/runs?status=completed&limit=50",
        f"dashboard runs page (50 of {k})": "/",
        "dashboard runs page, label filter": "/?label=team%3Dserving",
        f"report JSON, API ({n}-sample run)": f"/api/v1/runs/{big}/report",
        f"report JSON download ({n}-sample run)": f"/runs/{big}/report.json",
        f"report Markdown ({n}-sample run)": f"/runs/{big}/report.md",
        f"dashboard run page ({n}-sample run)": f"/runs/{big}",
        f"suite page ({n}-sample run)": f"/runs/{big}/suites/{suite}",
        f"flips page ({n}-sample run)": f"/runs/{big}/flips",
        f"samples page ({n}-sample run, 50 shown)": f"/runs/{big}/suites/{suite}/samples",
    }


# ---------------------------------------------------------------------------------- main


@contextmanager
def database(args: argparse.Namespace, workdir: Path) -> Iterator[str]:
    if args.admin_url:
        with temporary_postgres_database(args.admin_url, prefix="bench_p5") as url:
            yield url
    else:
        yield f"sqlite:///{workdir / 'bench.db'}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    # SIGTERM ends the run through the finally blocks: the server stops, the database is dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--admin-url", help="PostgreSQL URL (a private database is created)")
    parser.add_argument("--sqlite", action="store_true", help="a SQLite file (the default)")
    parser.add_argument("--real-items", type=int, default=200, help="items of the real run")
    parser.add_argument("--ingest-runs", type=int, default=10)
    parser.add_argument("--samples-per-run", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=10_000, help="runs stored in all")
    parser.add_argument("--fill-samples", type=int, default=20, help="samples of each fill run")
    parser.add_argument(
        "--fill",
        choices=("rows", "store"),
        default="rows",
        help="copy the real run's rows (default) or go through the Store API",
    )
    parser.add_argument("--fill-threads", type=int, help="default: 4 on PostgreSQL, 1 on SQLite")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--out", type=Path, help="also write the result as JSON here (after each step)"
    )
    parser.add_argument("--no-pages", action="store_true", help="ingest and fill, no server")
    args = parser.parse_args(argv)

    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }

    def save() -> None:
        if args.out:
            args.out.write_text(json.dumps(result, indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="evalsvc-store-scale-") as tmp:
        workdir = Path(tmp)
        with database(args, workdir) as url:
            store = Store.from_url(url)
            store.upgrade()
            result["backend"] = store.dialect
            t0 = time.perf_counter()
            tpl = Template(store, real_run(url, args.real_items, workdir))
            result["real_run"] = {
                "id": tpl.run.id,
                "samples": len(tpl.samples),
                "verdict": tpl.report["verdict"],
                "wall_s": round(time.perf_counter() - t0, 1),
            }
            _log(f"real run {tpl.run.id}: {len(tpl.samples)} samples, {tpl.report['verdict']}")
            result["ingest"] = ingest(store, tpl, args.ingest_runs, args.samples_per_run)
            _log(
                f"ingest: {result['ingest']['samples']:,} samples in {result['ingest']['wall_s']} s"
            )
            save()
            t0 = time.perf_counter()
            if args.fill == "store":
                fill(
                    store,
                    tpl,
                    args.runs - args.ingest_runs - 1,
                    args.fill_samples,
                    args.ingest_runs,
                    args.fill_threads or (4 if store.dialect == "postgresql" else 1),
                )
            else:
                fill_rows(
                    url,
                    tpl.run.id,
                    args.runs - args.ingest_runs - 1,
                    args.fill_samples,
                    args.ingest_runs,
                )
            result["fill_s"] = round(time.perf_counter() - t0, 1)
            stored = len(store.list_runs(limit=args.runs + 10))
            assert stored == args.runs, (stored, args.runs)
            big = result["ingest"]["runs"][0]
            store.close()
            result["load_avg_measure"] = [round(x, 2) for x in os.getloadavg()]
            save()
            if args.no_pages:
                return result
            rows: dict[str, Any] = {}
            with api_serve(url, workdir) as base, httpx.Client(base_url=base, timeout=120) as c:
                for name, path in pages(
                    big, args.samples_per_run, args.runs, tpl.suites[0]["name"]
                ).items():
                    rows[name] = measure(c, path, args.repeats)
                    _log(f"  {name}: {rows[name]['median_ms']} ms")
                    result["pages"] = rows
                    save()
            result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    save()
    print(json.dumps(result, indent=1))
    print(table(result))
    return result


def table(result: dict[str, Any]) -> str:
    ing = result["ingest"]
    lines = [
        f"{result['backend']}: ingest {ing['samples']:,} samples in {ing['wall_s']} s "
        f"({ing['samples_per_s']:,}/s; building them alone {ing['build_s_per_run']} s per run)",
        "",
        "| request | median | min | max | body |",
        "|---|---|---|---|---|",
    ]
    for name, m in result["pages"].items():
        lines.append(
            f"| {name} | {m['median_ms']:.0f} ms | {m['min_ms']:.0f} ms | "
            f"{m['max_ms']:.0f} ms | {m['bytes'] / 1024:.0f} KiB |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
