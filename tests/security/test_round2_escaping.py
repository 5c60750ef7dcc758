"""Issue 17, breaks 7, 9, 11 and 12: text from endpoints, models and submitters is shown
literally and inertly, and a server that is not the API is an infrastructure error.

- Break 7: a model id holding rich markup (``[/]``) made ``compare`` raise ``MarkupError``, exit 1
  and write no report (also with ``--server``); a candidate name ``[/]`` crashed ``runs list``
  and ``runs show``.
- Break 11: ANSI escapes in a model id reached the terminal and ``report.md``.
- Break 9: ``compare --server`` exited 1 with a traceback when the server answered non-JSON.
- Break 12: ``export -f csv`` wrote formula cells as is.

Every probe runs the real CLI (the same Typer app) against real loopback servers
(``tests/security/hostile_peers.py``) and, for ``--server``, the real API server with a real
worker executing the run. The CLI runs in the test's own process (``tests.fixtures.cli.run_cli``;
an uncaught exception fails the test, and its stderr is captured as a pipe's would be: no
terminal, so no colours): a separate interpreter costs 2-5 CPU-seconds of start-up each on a
2-core host. One case (``sso-page`` of break 9) still runs ``python -m evalsvc.cli.main``, so the
real entry point's exit code and stderr stay covered.
"""

from __future__ import annotations

import csv
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from evalsvc.db import Store
from evalsvc.domain import EXIT_CODES, EndpointRef, Provenance, RunSpec, RunStatus, Sample
from evalsvc.scheduler import Worker
from tests.fixtures.cli import CliResult, run_cli, run_cli_process

from .conftest import Api
from .hostile_peers import model_server, page_server

#: Rich markup that does not parse, markup that would restyle, a screen clear, a green fake
#: verdict, a bell and a bidi override: what a hostile engine can put in its model id.
EVIL_MODEL = "evil[/][bold red]x\x1b[2J\x1b[32mverdict: pass\x1b[0m\x07\u202e"
EVIL_NAME = "[/]cand\x1b]0;owned\x07"
RAW_CONTROLS = ("\x1b", "\x07", "\u202e")


def _cli(*args: str, env: dict[str, str] | None = None) -> CliResult:
    """The CLI in this process; ``env`` is set during the call."""
    return run_cli(*args, env=env)


def _assert_inert(text: str) -> None:
    assert "Traceback" not in text and "MarkupError" not in text
    assert not any(c in text for c in RAW_CONTROLS), repr(text[-2000:])


def test_local_compare_shows_a_hostile_model_id_literally(tmp_path: Path) -> None:
    out = {k: tmp_path / f"report.{k}" for k in ("json", "md", "xml")}
    with model_server("base-model") as base, model_server(EVIL_MODEL) as cand:
        r = _cli("compare", base.url, cand.url, "--suite", "reasoning-smoke", "--samples", "4",
                 "--database-url", f"sqlite:///{tmp_path / 'evalsvc.db'}",
                 "--json", str(out["json"]), "--markdown", str(out["md"]),
                 "--junit", str(out["xml"]))
    assert all(p.exists() for p in out.values()), r.stderr
    report = json.loads(out["json"].read_text())
    assert report["candidates"][0]["model"] == EVIL_MODEL  # the data is kept exactly
    assert r.returncode == EXIT_CODES[report["verdict"]], r.stderr
    _assert_inert(r.stderr + r.stdout)
    _assert_inert(out["md"].read_text())
    assert "evil[/][bold red]x\\x1b[2J" in r.stderr  # shown as it is, controls visible


@contextmanager
def _real_worker(db_url: str) -> Iterator[None]:
    """A real worker with the real executor, polling in a thread until the block ends."""
    with Store.from_url(db_url, endpoint_max_runs=0) as store:
        worker = Worker(store, poll_seconds=0.05, lease_seconds=10)
        thread = threading.Thread(target=worker.run, name="worker", daemon=True)
        thread.start()
        try:
            yield
        finally:
            worker.stop()
            thread.join(30)


def test_compare_server_and_runs_cli_show_hostile_text_literally(
    api: Api, tmp_path: Path
) -> None:
    token = {"EVALSVC_TOKEN": api.tokens["submit"]}
    json_out, md_out = tmp_path / "r.json", tmp_path / "r.md"
    with model_server("base-model") as base, model_server(EVIL_MODEL) as cand:
        with _real_worker(api.db_url):
            r = _cli("compare", base.url, cand.url, "--suite", "reasoning-smoke",
                     "--samples", "4", "--server", api.base_url, "--json", str(json_out),
                     "--markdown", str(md_out), env=token)
        with api.client("submit") as submitter:
            resp = submitter.post("/runs", json={
                "baseline": {"url": base.url}, "candidates": [{"url": cand.url,
                                                               "name": EVIL_NAME}],
                "suites": ["reasoning-smoke"], "options": {"samples": 2}})
            assert resp.status_code == 202, resp.text
            named = resp.json()["id"]
    report = json.loads(json_out.read_text())
    assert report["candidates"][0]["model"] == EVIL_MODEL
    assert r.returncode == EXIT_CODES[report["verdict"]], r.stderr
    _assert_inert(r.stderr + r.stdout)
    _assert_inert(md_out.read_text())

    env = {"EVALSVC_DATABASE_URL": api.db_url}
    listed = _cli("runs", "list", env=env)
    shown = _cli("runs", "show", named, env=env)
    for done in (listed, shown):
        assert done.returncode == 0, done.stderr
        _assert_inert(done.stdout + done.stderr)
    assert "[/]cand\\x1b]0;owned\\x07" in shown.stdout


# ---- break 9: a --server that is not the API ------------------------------------------------------


# In-process, a compare that no longer gave up on the page would wait in the test process.
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("status", "headers", "body", "process"),
    [
        # the real `python -m evalsvc.cli.main` (see the module docstring)
        (200, {"Content-Type": "text/html"}, b"<html>Sign in to Corp SSO sso-secret-9</html>",
         True),
        (302, {"Location": "https://sso.example/login?state=sso-secret-9"}, b"", False),
        (401, {"Content-Type": "text/html"}, b"<html>sso-secret-9</html>", False),
        (200, {"Content-Type": "application/json"}, b'["sso-secret-9"]', False),
    ],
    ids=["sso-page", "redirect", "html-401", "json-not-object"],
)
def test_compare_server_answered_by_something_else_exits_4_with_a_report(
    status: int, headers: dict[str, str], body: bytes, process: bool, tmp_path: Path
) -> None:
    json_out, junit = tmp_path / "r.json", tmp_path / "r.xml"
    with page_server(status, headers, body) as sso:
        args = ("compare", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v2", "--suite",
                "needle-smoke", "--server", sso.url, "--json", str(json_out),
                "--junit", str(junit))
        env = {"EVALSVC_TOKEN": "evs_x"}
        r = run_cli_process(*args, env=env, timeout=120) if process else _cli(*args, env=env)
        assert sso.requests and sso.requests[0] == "POST /api/v1/runs"
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stderr and "sso-secret-9" not in r.stderr
    assert "did not answer as the evalsvc API" in r.stderr
    report = json.loads(json_out.read_text())
    assert report["verdict"] == "error" and "did not answer as the evalsvc API" in report["error"]
    assert junit.exists()


# ---- break 12: CSV formula injection --------------------------------------------------------------

FORMULAS = ["=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(A1:A2)", "\t=1", "\r=1"]


def test_csv_export_defuses_formula_cells(tmp_path: Path, sqlite_template: Path) -> None:
    db = tmp_path / "evalsvc.db"
    db.write_bytes(sqlite_template.read_bytes())
    with Store.from_url(f"sqlite:///{db}") as store:
        spec = RunSpec(baseline=EndpointRef(url="http://127.0.0.1:9/v1"),
                       candidates=[EndpointRef(url="http://127.0.0.1:9/v2")],
                       suites=["reasoning-smoke"])
        run = store.create_run(spec, status=RunStatus.running)
        store.save_endpoint_snapshot(run.id, role="baseline",
                                     endpoint=EndpointRef(url=spec.baseline.url,
                                                          model="=HYPERLINK(\"x\")"),
                                     provenance=Provenance())
        store.add_samples(run.id, [
            Sample(suite="reasoning-smoke", item_id=f"i{k}", endpoint="baseline", output=text,
                   score=-1.5 if k == 0 else 1.0, error=text if k == 1 else None)
            for k, text in enumerate(FORMULAS)
        ])
        store.finish_run(run.id, status=RunStatus.completed, verdict="pass")
    out = tmp_path / "samples.csv"
    r = _cli("export", run.id, "-f", "csv", "-o", str(out),
             env={"EVALSVC_DATABASE_URL": f"sqlite:///{db}"})
    assert r.returncode == 0, r.stderr
    with out.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(row["output"] for row in rows) == sorted("'" + f for f in FORMULAS)
    assert all(row["endpoint_model"] == "'=HYPERLINK(\"x\")" for row in rows)
    assert next(row for row in rows if row["item_id"] == "i1")["error"] == "'+1+1"
    assert next(row for row in rows if row["item_id"] == "i0")["score"] == "-1.5"  # a number
    for row in rows:
        for value in row.values():
            assert not value.startswith(("=", "+", "@", "\t", "\r")) and (
                not value.startswith("-") or value == "-1.5"), row
