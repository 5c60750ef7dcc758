"""Evaluator speed and memory against a zero-latency endpoint (issue 21, P3 and P6).

Contract: starts ``benchmarks/stub_server.py`` (its own process, two loopback ports: baseline
and candidate; ``--urls`` names real endpoints instead, for P1), then for each ``--items`` size
and each of ``--repeats`` rounds runs, alternated in the same round:

- ``minimal``: ``benchmarks/minimal_client.py``, the same chat requests through bare aiohttp;
- ``evalsvc``: ``python -m evalsvc.cli.main compare BASE CAND --suite reasoning --samples N
  --concurrency C`` into a fresh SQLite database, in-process as a user runs it;
- with ``--lmeval``, ``lm-eval``: lm-evaluation-harness's ``local-chat-completions`` model on the
  same items written as an lm-eval task (a YAML over a JSONL file), ``num_concurrent`` C, one
  ``python -m lm_eval`` per endpoint as a user runs it; its figure is the two process walls
  summed (issue 21's P3 also bounds evalsvc's process wall at 0.2 × lm-eval's).

Each is a child process of its own, started through ``benchmarks/_hwm.py``, which records the
child's own peak RSS (``VmHWM``; ``ru_maxrss`` survives ``exec`` and would report this
driver's). Figures per run: process wall (start to exit), the sending wall (the peer's first
request to last answer; evalsvc's ``duration_s`` in its JSON report: probe, planning, sending,
storing and gating), peak RSS. Prints the runs as JSON lines and the medians as a Markdown
table; ``--out`` writes the same JSON to a file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


@contextmanager
def stub(*options: str) -> Iterator[list[str]]:
    """The stub in its own process; yields the two base URLs. ``options`` are the stub's own
    (``--engine sglang``, ``--max-model-len N``: ``stub_server.py``)."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "stub_server.py"), "--ports", "0", "0", "--watch-stdin",
         *options],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if not line or line[0] != "STUB":
            raise RuntimeError("the stub server did not start")
        yield [f"http://127.0.0.1:{port}/v1" for port in line[1:]]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _env(repo: Path = REPO) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH")) if p)
    return env


#: The checkout whose evalsvc is measured (``--evalsvc-repo``: e.g. the main branch, for a
#: before/after in one session); the stub and the minimal client always come from this one.
EVALSVC_REPO = [REPO]


def _child(args: list[str], workdir: Path, tag: str, repo: Path = REPO) -> dict[str, Any]:
    hwm = workdir / f"{tag}.hwm"
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(HERE / "_hwm.py"), str(hwm), *args],
        capture_output=True,
        text=True,
        env=_env(repo),
        cwd=workdir,
    )
    wall = time.perf_counter() - start
    return {
        "wall_s": round(wall, 3),
        "peak_rss_mb": round(int(hwm.read_text()) / 1024, 1) if hwm.exists() else None,
        "rc": proc.returncode,
        "stdout": proc.stdout,
        "stderr": proc.stderr[-2000:],
    }


def run_minimal(urls: list[str], n: int, concurrency: int, workdir: Path, tag: str) -> dict[str, Any]:
    res = _child(
        [str(HERE / "minimal_client.py"), *urls, "--samples", str(n), "--concurrency", str(concurrency)],
        workdir,
        tag,
    )
    if res["rc"] != 0:
        raise RuntimeError(f"minimal client failed: {res['stderr']}")
    out = json.loads(res["stdout"].strip().splitlines()[-1])
    if out["errors"]:
        raise RuntimeError(f"minimal client: {out['errors']} errors")
    return {"client": "minimal", "items": n, "wall_s": res["wall_s"], "send_s": out["send_s"],
            "peak_rss_mb": res["peak_rss_mb"]}


def run_evalsvc(urls: list[str], n: int, concurrency: int, workdir: Path, tag: str) -> dict[str, Any]:
    db = workdir / f"{tag}.db"
    report = workdir / f"{tag}.json"
    res = _child(
        # --no-calibrate: the items the peers send (the suite as written; the catalog's
        # `reasoning` would otherwise first pilot the baseline and pick its own levels).
        ["-m", "evalsvc.cli.main", "compare", *urls, "--suite", "reasoning", "--samples", str(n),
         "--no-calibrate", "--concurrency", str(concurrency), "--database-url", f"sqlite:///{db}",
         "--json", str(report)],
        workdir,
        tag,
        EVALSVC_REPO[0],
    )
    # Exit 3 (inconclusive) is the expected verdict: the stub's answers solve too few items
    # for an informative baseline. 4 (error) or a crash is a failed benchmark.
    if res["rc"] not in (0, 1, 3) or not report.exists():
        raise RuntimeError(f"evalsvc compare exited {res['rc']}: {res['stderr']}")
    data = json.loads(report.read_text())
    n_samples = sum(s.get("n", 0) or 0 for c in data["candidates"] for s in c["suites"])
    for path in (db, report):
        path.unlink(missing_ok=True)
    return {"client": "evalsvc", "items": n, "wall_s": res["wall_s"], "send_s": data["duration_s"],
            "peak_rss_mb": res["peak_rss_mb"], "verdict": data["verdict"], "pairs": n_samples}


_LMEVAL_TASK = """task: evalsvc_reasoning_peer
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: []
  max_gen_toks: {max_tokens}
  do_sample: false
  temperature: 0.0
metric_list:
  - metric: exact_match
"""


def _lmeval_task(n: int, workdir: Path) -> Path:
    """The same items as an lm-eval task (its own format: a YAML over a JSONL file)."""
    import asyncio

    sys.path.insert(0, str(HERE))
    from minimal_client import _items

    items, max_tokens = asyncio.run(_items("reasoning", n))
    task_dir = workdir / f"lmeval-task-{n}"
    task_dir.mkdir(exist_ok=True)
    data = task_dir / "items.jsonl"
    with data.open("w", encoding="utf-8") as fh:
        for it in items:
            # The reasoning kind's chat prompt is one user message; lm-eval's chat template
            # (--apply_chat_template) sends doc_to_text as that message.
            assert isinstance(it.prompt, list) and len(it.prompt) == 1, it.prompt
            fh.write(json.dumps({"question": it.prompt[0]["content"], "answer": str(it.expected)}))
            fh.write("\n")
    (task_dir / "task.yaml").write_text(_LMEVAL_TASK.format(data=data, max_tokens=max_tokens))
    return task_dir


def run_lmeval(
    urls: list[str], n: int, concurrency: int, workdir: Path, tag: str, python: Path
) -> dict[str, Any]:
    """lm-eval's ``local-chat-completions`` on the same items, one run per endpoint (as a user
    runs it): the process walls summed, the larger peak RSS."""
    import urllib.request

    task_dir = _lmeval_task(n, workdir)
    walls, rss = [], []
    documents: list[int] = []
    for i, url in enumerate(urls):
        with urllib.request.urlopen(f"{url}/models") as resp:
            model = json.load(resp)["data"][0]["id"]
        args = [
            "-m", "lm_eval", "--model", "local-chat-completions",
            "--model_args",
            f"model={model},base_url={url}/chat/completions,num_concurrent={concurrency},"
            "max_retries=1,tokenized_requests=False",
            "--tasks", "evalsvc_reasoning_peer", "--include_path", str(task_dir),
            "--apply_chat_template", "--batch_size", "1",
            "--output_path", str(workdir / f"{tag}-{i}"),
        ]
        hwm = workdir / f"{tag}-{i}.hwm"
        env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
               "OPENAI_API_KEY": "none", "TOKENIZERS_PARALLELISM": "false"}
        start = time.perf_counter()
        proc = subprocess.run([str(python), str(HERE / "_hwm.py"), str(hwm), *args],
                              capture_output=True, text=True, env=env, cwd=workdir)
        walls.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise RuntimeError(f"lm_eval exited {proc.returncode}: {proc.stderr[-2000:]}")
        rss.append(int(hwm.read_text()) / 1024)
        # lm-eval's own count of the documents it evaluated (its results file).
        results = sorted((workdir / f"{tag}-{i}").rglob("results_*.json"))
        counts = json.loads(results[-1].read_text())["n-samples"]["evalsvc_reasoning_peer"]
        documents.append(int(counts["effective"]))
    return {"client": "lm-eval", "items": n, "wall_s": round(sum(walls), 3), "send_s": None,
            "peak_rss_mb": round(max(rss), 1), "walls_s": [round(w, 3) for w in walls],
            "documents": documents}


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| items × 2 | client | runs | wall (process) | sending wall | peak RSS | evalsvc ÷ minimal (sending) |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in sorted({r["items"] for r in rows}):
        mine = {c: [r for r in rows if r["items"] == n and r["client"] == c]
                for c in ("minimal", "evalsvc", "lm-eval")}
        ratio = None
        if mine["minimal"] and mine["evalsvc"]:
            ratio = _median(mine["evalsvc"], "send_s") / _median(mine["minimal"], "send_s")  # type: ignore[operator]
        for client, runs in mine.items():
            if not runs:
                continue
            shown = f"×{ratio:.2f}" if ratio is not None and client == "evalsvc" else ""
            if client == "lm-eval" and mine["evalsvc"]:
                # The second P3 bound compares whole processes: evalsvc's one compare of
                # both endpoints against lm-eval's two runs.
                peer = _median(mine["evalsvc"], "wall_s") / _median(runs, "wall_s")  # type: ignore[operator]
                shown = f"evalsvc wall ÷ lm-eval wall: ×{peer:.2f}"
            send = _median(runs, "send_s")
            lines.append(
                f"| {n:,} | {client} | {len(runs)} | {_median(runs, 'wall_s')} s | "
                f"{f'{send} s' if send is not None else '—'} | {_median(runs, 'peak_rss_mb')} MB "
                f"| {shown} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[3000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--skip-minimal", action="store_true", help="evalsvc only (memory runs)")
    parser.add_argument("--out", type=Path, help="also write the runs as JSON here")
    parser.add_argument("--evalsvc-repo", type=Path, default=REPO, help="checkout to measure")
    parser.add_argument(
        "--lmeval", action="store_true",
        help="also run the lm-eval peer (local-chat-completions, one run per endpoint)",
    )
    parser.add_argument(
        "--lmeval-python", type=Path,
        help="the Python that has lm_eval (default: the lmeval kind's: the managed vLLM venv's, "
        "lm-eval installed there on first use)",
    )
    parser.add_argument(
        "--urls", nargs=2, metavar=("BASELINE", "CANDIDATE"),
        help="real endpoints instead of the stub (P1: e.g. the local bf16 and fp8-kv servers)",
    )
    args = parser.parse_args(argv)
    if args.lmeval and args.lmeval_python is None:
        from evalsvc.suites.kinds._lmeval_python import lmeval_python

        args.lmeval_python = Path(lmeval_python())
    EVALSVC_REPO[0] = args.evalsvc_repo.resolve()
    rows: list[dict[str, Any]] = []
    endpoints = contextlib.nullcontext(args.urls) if args.urls else stub()
    with endpoints as urls, tempfile.TemporaryDirectory(prefix="evalsvc-bench-") as tmp:
        workdir = Path(tmp)
        for n in args.items:
            for r in range(args.repeats):
                # Alternate which goes first: a warming host favours neither.
                order = [run_minimal, run_evalsvc] if r % 2 == 0 else [run_evalsvc, run_minimal]
                for fn in order:
                    if args.skip_minimal and fn is run_minimal:
                        continue
                    row = fn(urls, n, args.concurrency, workdir, f"{fn.__name__}-{n}-{r}")
                    row["load_avg_1m"] = round(os.getloadavg()[0], 2)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                if args.lmeval:
                    row = run_lmeval(urls, n, args.concurrency, workdir, f"lmeval-{n}-{r}",
                                     args.lmeval_python)
                    row["load_avg_1m"] = round(os.getloadavg()[0], 2)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
