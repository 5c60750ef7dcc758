"""Issue 37, N8: ``evalsvc suites from-requests`` on a deeply nested request line printed a
``RecursionError`` traceback and exited 1 (which a pipeline reads as "a gate failed"). The
contract is exit 2 with one line naming the file, the line and the field; nothing is written.
A nested line that stays within the bound (a tool's JSON Schema) is still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsvc.services.replay import MAX_DEPTH
from tests.fixtures.cli import run_cli, run_cli_process

GOOD = json.dumps({"messages": [{"role": "user", "content": "What is 2 + 2?"}]})


def _deep(opening: str, closing: str, n: int) -> str:
    return opening * n + closing * n


#: name → (the request line, the field the message must name)
DEEP: dict[str, tuple[str, str]] = {
    "messages nested 100,000 deep": (
        '{"messages": ' + _deep("[", "]", 100_000) + "}", "messages"),
    "content nested 990 deep": (
        '{"messages": [{"role": "user", "content": ' + _deep("[", "]", 990) + "}]}",
        "messages[].content"),
    "objects nested 990 deep in metadata": (
        '{"messages": [{"role": "user", "content": "hi"}], "metadata": '
        + '{"a": ' * 990 + "1" + "}" * 990 + "}", "metadata.a.a.a.a"),
    "a Batch API line with a text part nested past the bound": (
        '{"custom_id": "x", "body": {"messages": [{"role": "user", "content": '
        '[{"type": "text", "text": ' + _deep("[", "]", MAX_DEPTH) + "}]}]}}",
        "body.messages[].content[].text"),
}


@pytest.mark.parametrize("case", list(DEEP))
def test_a_deeply_nested_request_line_is_exit_2_with_one_line(tmp_path: Path, case: str) -> None:
    line, field = DEEP[case]
    log = tmp_path / "requests.jsonl"
    log.write_text(GOOD + "\n" + line + "\n" + GOOD + "\n")
    out = tmp_path / "replay.yaml"
    result = run_cli("suites", "from-requests", str(log), "-o", str(out))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"error: {log}:2: {field}"), lines[0]
    assert f"more than {MAX_DEPTH} levels" in lines[0] and len(lines[0]) < 360
    assert not out.exists() and not out.with_suffix(".jsonl").exists()


def test_nesting_within_the_bound_is_read(tmp_path: Path) -> None:
    """A request with a tool whose JSON Schema nests 40 properties deep (85 JSON levels, more
    than any real one) and
    brackets inside strings (not structure) is read; its tools are dropped as before."""
    schema: object = {"type": "string"}
    for _ in range(40):
        schema = {"type": "object", "properties": {"x": schema}}
    body = {"messages": [{"role": "user", "content": "[[[[{{{{ " * 200}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]}
    log = tmp_path / "requests.jsonl"
    log.write_text(json.dumps(body) + "\n")
    result = run_cli("suites", "from-requests", str(log), "-o", str(tmp_path / "r.yaml"),
                     "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["written"] == 1 and summary["dropped_fields"]["tools"] == 1


def test_the_real_command_exits_2_on_a_line_nested_100000_deep(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    log.write_text(DEEP["messages nested 100,000 deep"][0] + "\n")
    proc = run_cli_process("suites", "from-requests", str(log), "-o", str(tmp_path / "r.yaml"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"error: {log}:1: messages: JSON nested more than {MAX_DEPTH} levels deep; a chat "
        "request is a few levels deep, so this line is not one (remove it); pass "
        "--skip-bad-lines to skip such lines (they are counted)"
    ]
    assert "Traceback" not in proc.stderr
