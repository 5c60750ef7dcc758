"""Issue 48, items 2 and 5: a hostile answer is an invalid answer, and a wrong port names its fix.

Every case runs the real ``evalsvc compare`` (in this process, ``tests.fixtures.cli.run_cli``;
one through a real interpreter) against real loopback servers: the faithful ``tool_server`` as
the baseline and a candidate that answers with the hostile payloads of the issue
(``tests/fixtures/hostile_answers.py``): ``[`` × 5,000 as content and as tool-call arguments,
60,000 tool calls in one answer, an 8 MB ``[0,0,…]`` structured answer, 5,000 keys, a lone
surrogate, a body nested 5,000 deep, and the probe's own answers nested so. Each asserts that
the run completes with a verdict (never a traceback or an ``error`` for a content problem),
that the answers are scored invalid and counted in the report, and that what the store holds
per sample is bounded (its size measured in the database).

Before (HEAD of the issue, the same payloads, 6 items): ``[`` × 5,000 ended the run with a
``RecursionError`` traceback; 60,000 calls stored 12.4 MB of ``data`` per sample (62.9 MB of
database), peak RSS 770 MB and 18.9 CPU-s; the 8 MB structured answer cost 31 CPU-s and 754 MB.
After: 4.3 KB of ``data`` per sample, 0.34 MB of database, 195 MB and 4.4 CPU-s; 178 MB and
2.7 CPU-s (docs/security.md, "Round 5 probes").
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from evalsvc.db import Store
from tests.fixtures.cli import CliResult, run_cli, run_cli_process
from tests.fixtures.db import db_url  # noqa: F401  (fixture: SQLite, and PostgreSQL when set)
from tests.fixtures.hostile_answers import MANY_CALLS, HostileAnswers, hostile_answers
from tests.fixtures.loopback import aiohttp_app, free_port
from tests.fixtures.tool_server import ToolServer, tool_server

from .hostile_peers import model_server

SEED = 5  # the catalog suites' seed: tool_server knows their items
#: What one stored sample may hold at most here: the 64 KiB output cap, plus a bounded data
#: record (16 calls of at most 2,000 argument characters each, the errors, the prompt).
SAMPLE_BYTES = 65_536 + 64_000


@pytest.fixture(scope="module")
def baseline() -> Iterator[ToolServer]:
    with tool_server([SEED], per_type=20) as server:
        yield server


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileAnswers]:
    with hostile_answers() as server:
        yield server


def _compare(base: str, cand: str, suite: str, tmp_path: Path, *extra: str) -> CliResult:
    return run_cli(
        "compare", base, cand, "--suite", suite, "--samples", "6",
        "--database-url", f"sqlite:///{tmp_path / 'e.db'}", "--json", str(tmp_path / "r.json"),
        *extra,
    )


def _stored(tmp_path: Path) -> list[dict[str, Any]]:
    """The candidate's stored samples, with the bytes each takes in the database."""
    with sqlite3.connect(tmp_path / "e.db") as db:
        rows = db.execute(
            "SELECT output, data, error, score, length(CAST(output AS BLOB)) "
            "+ length(CAST(data AS BLOB)) + coalesce(length(CAST(error AS BLOB)), 0) "
            "FROM samples WHERE endpoint = 'candidate:0'"
        ).fetchall()
    return [{"output": o, "data": json.loads(d), "error": e, "score": s, "bytes": n}
            for o, d, e, s, n in rows]


def _suite_entry(tmp_path: Path) -> dict[str, Any]:
    report = json.loads((tmp_path / "r.json").read_text())
    (candidate,) = report["candidates"]
    (entry,) = candidate["suites"]
    return dict(entry)


def _completed(r: CliResult) -> None:
    """A verdict, never a crash or an infrastructure error for what the answers held."""
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr, r.stderr[-3000:]
    assert r.returncode in (1, 3), r.stderr[-3000:]  # fail, or inconclusive at 6 items


@pytest.mark.parametrize(("mode", "error"), [
    ("deep", "JSON nested too deeply to parse (at most 32 levels are scored)"),
    ("zeros", "an answer of 8,000,001 characters; at most 65,536 are parsed as JSON"),
    ("wide", "more than 1,000 JSON values; at most 1,000 are scored"),
])
def test_a_structured_answer_past_the_json_budget_is_invalid_and_counted(
    baseline: ToolServer, hostile: HostileAnswers, tmp_path: Path, mode: str, error: str
) -> None:
    r = _compare(baseline.base_url("faithful"), hostile.base_url(mode), "structured", tmp_path)
    _completed(r)
    samples = _stored(tmp_path)
    assert len(samples) == 6
    for s in samples:
        # Scored (an invalid answer), not an errored request: it counts against validity.
        assert s["error"] is None and s["score"] == 0.0
        assert s["data"]["valid"] is False and s["data"]["field_accuracy"] == 0.0
        assert s["data"]["errors"] == [error]
        assert s["bytes"] < SAMPLE_BYTES
    entry = _suite_entry(tmp_path)
    gates = entry["details"]["tool_gates"]
    assert gates["valid"]["baseline"] == 1.0 and gates["valid"]["candidate"] == 0.0
    assert gates["valid"]["n"] == 6
    assert len(entry["details"]["invalid_examples"]) == 6
    if mode == "zeros":  # the 8 MB answer: stored as its first 64 KiB, and said so
        assert all(s["data"]["output_truncated"] and s["data"]["output_chars"] == 8_000_001
                   and len(s["output"]) == 65_536 for s in samples)


@pytest.mark.parametrize(("mode", "suite"), [
    ("deep", "toolcalls"), ("deep", "toolcalls-smoke"), ("wide", "toolcalls"),
    ("surrogate", "toolcalls"),
])
def test_tool_call_arguments_that_cannot_be_scored_are_schema_errors(
    baseline: ToolServer, hostile: HostileAnswers, tmp_path: Path, mode: str, suite: str
) -> None:
    # toolcalls-smoke streams: the calls arrive as delta.tool_calls pieces.
    r = _compare(baseline.base_url("faithful"), hostile.base_url(mode), suite, tmp_path)
    _completed(r)
    samples = _stored(tmp_path)
    called = [s for s in samples if s["data"]["calls"]]
    assert called and all(s["error"] is None for s in samples)
    reason = {"deep": "arguments are JSON nested too deeply to parse",
              "wide": "arguments are more than 1,000 JSON values",
              "surrogate": "arguments are a string that is not valid Unicode"}[mode]
    for s in called:
        (call,) = s["data"]["calls"]
        assert call["valid"] is False and call["errors"][0].startswith(reason), call["errors"]
        assert call["parsed"] is None and s["score"] == 0.0
        assert "schema error" in s["data"]["faults"] or "spurious call" in s["data"]["faults"]
        assert s["bytes"] < SAMPLE_BYTES
    if mode == "surrogate":  # the content's lone surrogate is stored, as U+FFFD
        assert all(s["output"].startswith("\ufffd") for s in samples)
    gates = _suite_entry(tmp_path)["details"]["tool_gates"]
    assert gates["schema_valid_calls"]["candidate"] == 0.0


@pytest.mark.parametrize("mode", ["nul", "surrogate"])
def test_text_the_store_cannot_write_is_stored_replaced_on_both_backends(
    baseline: ToolServer, hostile: HostileAnswers, tmp_path: Path, mode: str,
    db_url: str,  # noqa: F811
) -> None:
    # A NUL in an answer ended the run on PostgreSQL ("text fields cannot contain NUL"), a lone
    # surrogate on both (UnicodeEncodeError); both are stored as U+FFFD, the scores stand.
    r = run_cli("compare", baseline.base_url("faithful"), hostile.base_url(mode), "--suite",
                "toolcalls", "--samples", "6", "--database-url", db_url,
                "--json", str(tmp_path / "r.json"))
    _completed(r)
    run_id = json.loads((tmp_path / "r.json").read_text())["run_id"]
    with Store.from_url(db_url) as store:
        samples = store.get_samples(run_id, endpoint="candidate:0")
    assert len(samples) == 6 and all(s.error is None and s.score is not None for s in samples)
    assert all(s.output.startswith("a\ufffdb" if mode == "nul" else "\ufffd") for s in samples)
    called = [s for s in samples if s.data["calls"]]
    assert called
    for s in called:
        (call,) = s.data["calls"]
        if mode == "nul":  # valid JSON with a NUL in a string: scored, stored replaced
            assert call["arguments"] == '{"city": "Os\\u0000lo"}'
            if call["valid"]:
                assert call["parsed"] == {"city": "Os\ufffdlo"}
        else:  # a lone surrogate in a JSON answer is not valid Unicode: invalid
            assert call["valid"] is False and call["parsed"] is None


def test_sixty_thousand_tool_calls_are_a_wrong_answer_stored_bounded(
    baseline: ToolServer, hostile: HostileAnswers, tmp_path: Path
) -> None:
    r = _compare(baseline.base_url("faithful"), hostile.base_url("manycalls"), "toolcalls",
                 tmp_path)
    _completed(r)
    samples = _stored(tmp_path)
    called = [s for s in samples if s["data"].get("calls_total")]
    assert called
    for s in called:
        d = s["data"]
        assert d["calls_total"] == MANY_CALLS and len(d["calls"]) == 16
        assert "too many calls" in d["faults"] and d["schema_ok"] is False and s["score"] == 0.0
        assert f"… {MANY_CALLS - 16:,} more calls" in s["output"]
    # 12.4 MB of data per sample before (60,000 entries of calls); now a few KB.
    assert max(s["bytes"] for s in samples) < 16_000, [s["bytes"] for s in samples]
    assert (tmp_path / "e.db").stat().st_size < 2_000_000
    entry = _suite_entry(tmp_path)
    rows = {(r["tool"], r["fault"]): r for r in entry["details"]["faults"]["rows"]}
    assert sum(r["candidate"] for (_, f), r in rows.items() if f == "too many calls") == len(called)


def test_a_body_nested_past_the_parser_is_a_request_error_naming_it(
    baseline: ToolServer, hostile: HostileAnswers, tmp_path: Path
) -> None:
    # The body itself cannot be read (not the answer in it): an error of the request, counted
    # by the error budget (an unparseable answer stream is infrastructure, issue 48 item 1),
    # never a RecursionError out of the client. Streamed and not.
    for suite in ("structured", "toolcalls-smoke"):
        r = _compare(baseline.base_url("faithful"), hostile.base_url("deepbody"), suite,
                     tmp_path / suite)
        assert "Traceback" not in r.stderr, r.stderr[-3000:]
        assert r.returncode == 4, r.stderr[-3000:]
        errors = {s["error"] for s in _stored(tmp_path / suite)}
        expected = ("malformed JSON body: nested too deeply to read (HTTP 200 OK)"
                    if suite == "structured" else
                    "malformed stream event: nested too deeply to read")
        assert errors == {expected}, errors


def test_a_probe_answer_nested_past_the_parser_is_a_missing_capability_not_unreachable(
    baseline: ToolServer, hostile: HostileAnswers, tmp_path: Path
) -> None:
    r = _compare(baseline.base_url("faithful"), hostile.base_url("deepprobe"), "structured",
                 tmp_path)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "unreachable" not in r.stderr and "Traceback" not in r.stderr
    assert "needs json_schema, which" in r.stderr


def test_the_deep_answer_through_a_real_interpreter(
    baseline: ToolServer, hostile: HostileAnswers, tmp_path: Path
) -> None:
    r = run_cli_process(
        "compare", baseline.base_url("faithful"), hostile.base_url("deep"), "--suite",
        "structured", "--samples", "6", "--database-url", f"sqlite:///{tmp_path / 'e.db'}",
        "--json", str(tmp_path / "r.json"),
    )
    assert r.returncode == 1, r.stderr[-3000:]  # fail: every candidate answer invalid
    assert "Traceback" not in r.stderr
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "fail"


# ---- item 5: wrong ports ----------------------------------------------------------------------

def _other_server() -> web.Application:
    """An HTTP server that is not an OpenAI one: 404 everywhere, except a ``/deep`` prefix whose
    ``/v1/models`` answers 200 with JSON nested 5,000 deep, and ``/key`` whose answers 401 (an
    OpenAI server that wants a key)."""
    async def deep(request: web.Request) -> web.Response:
        return web.Response(body=b"[" * 5000 + b"]" * 5000, content_type="application/json")

    async def key(request: web.Request) -> web.Response:
        return web.json_response({"error": "no key"}, status=401)

    app = web.Application()
    app.router.add_get("/deep/v1/models", deep)
    app.router.add_get("/key/v1/models", key)
    return app


def test_a_closed_port_says_nothing_listens_there(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    r = run_cli("compare", url, url, "--suite", "reasoning-smoke",
                "--database-url", f"sqlite:///{tmp_path / 'e.db'}")
    assert r.returncode == 4, r.stderr  # nothing answered: infrastructure, as documented
    assert (f"nothing listens on 127.0.0.1:{port} — is the server running, is the port right?"
            in r.stderr)
    # "refused" stays in the words (a run's error kinds count it as a lost connection).
    assert f"(connection refused: {url}/models)" in r.stderr
    assert "ClientConnectorError" not in r.stderr and "ssl:default" not in r.stderr


def test_another_http_server_is_not_an_openai_server_exit_2(tmp_path: Path) -> None:
    with aiohttp_app(_other_server, access_log=None) as other:
        host = other.removeprefix("http://")
        for base, said in [
            (f"{other}/v1", f"{host} answered 404 on /v1/models: not an OpenAI-compatible server"),
            (f"{other}/deep/v1",
             f"{host} answered 200 without a model list on /deep/v1/models: not an "
             "OpenAI-compatible server"),
            (f"{other}/key/v1",
             f"{host} answered HTTP 401 Unauthorized on /key/v1/models: the server wants an API "
             "key: register the endpoint with one (`evalsvc endpoints add NAME URL "
             "--api-key-env VAR`) and pass NAME"),
        ]:
            r = run_cli("compare", base, base, "--suite", "reasoning-smoke",
                        "--database-url", f"sqlite:///{tmp_path / 'e.db'}")
            assert r.returncode == 2, r.stderr  # it answered: a configuration mistake
            assert said in r.stderr, r.stderr
            assert "unreachable" not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("model_id", ["evil\ud800model", "evil\x00model"], ids=["surrogate", "nul"])
def test_a_served_model_id_that_is_not_valid_text_is_refused_not_a_traceback(
    tmp_path: Path, model_id: str
) -> None:
    # Stored as text with the run: a lone surrogate ended the run with UnicodeEncodeError.
    with model_server("base-model") as base, model_server(model_id) as cand:
        r = run_cli("compare", base.url, cand.url, "--suite", "reasoning-smoke", "--samples", "4",
                    "--database-url", f"sqlite:///{tmp_path / 'e.db'}")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "serves a model id that is not valid text (a lone surrogate or a NUL)" in r.stderr
    assert "Traceback" not in r.stderr
