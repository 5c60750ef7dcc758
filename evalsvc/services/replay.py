"""Production replay: a log of OpenAI chat-completions requests becomes a ``dataset`` suite.

Contract: ``suite_from_requests(log, out)`` reads ``log`` (JSON Lines: one chat-completions
request body per line, or an OpenAI Batch API line ``{"custom_id", "method", "url", "body"}``),
and writes ``out`` (the suite YAML) and, beside it, ``<out stem>.jsonl`` (the data). Nothing
is sent anywhere.

- Only the conversation is kept: each message's ``role`` and text ``content``, and the
  request's ``max_tokens`` (or ``max_completion_tokens``). Every other field is dropped and
  counted by name: identifying fields (``user``, ``metadata``, ``safety_identifier``, message
  ``name``...) as well as sampling settings (the replay runs greedily so that two endpoints'
  answers are comparable) and ``model`` (the endpoints under test answer).
- A request that offered ``tools`` (or ``functions``, ``tool_choice``) or a
  ``response_format`` is replayed without them: the model then sees another prompt than in
  production, so such requests are counted in ``changed_prompts`` and the summary and the
  suite's description say so (gate tool use with a ``toolcalls`` suite).
- ``developer`` messages become ``system`` messages (the same role under OpenAI's newer name).
  Requests that cannot be replayed as plain text chat (image or audio parts, tool calls or tool
  results, no messages) are skipped and counted by reason.
- Requests with the same conversation are kept once (deduplicated on the canonical JSON of the
  kept messages); ``occurrences`` records how often each appeared.
- ``n`` conversations are sampled with ``Random(seed)`` (all when there are fewer), in the
  order of the log.
- The suite has no reference column, so it compares the candidate's answers with the
  baseline's own (``evalsvc.suites.kinds.dataset``). By default (``compare: quality``) it gates
  on quality, not wording: the share of degenerate answers (empty, looping, leaked template
  markup, gibberish) against the baseline's, and whether changed answers mean the same: by the
  ``judge`` endpoint's pairwise verdicts when one is given (a registered name), else only
  identical answers count, so a candidate that changed answers without degenerating is
  inconclusive (never failed on wording) and the verdict names the judge or reference that
  would decide. ``compare: judge`` (the judge alone), ``similarity`` (ROUGE-L unless
  ``similarity`` says otherwise: wording) and ``agreement`` (exact answers) are there when
  asked. The summary's ``gates`` says what the written suite gates.

A line that is not JSON, a line nested more than ``MAX_DEPTH`` levels deep (Python's ``json``
recurses: a line ``{"messages": [[[…]]]}`` 100,000 deep, or a ``content`` nested 990 deep under
the CLI's own frames, was a ``RecursionError`` traceback), an unreadable log or an existing
output (without ``force``) raises ``UsageError`` (exit 2) before anything is written; its one
line names the file, the line and the field, and for a bad line the fix: with ``skip_bad``
(``--skip-bad-lines``) such lines are skipped, counted and their numbers listed instead.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evalsvc import limits
from evalsvc.services.runs import UsageError

_KEPT_FIELDS = frozenset({"messages", "max_tokens", "max_completion_tokens"})
#: Request fields whose loss changes what the model is shown (its prompt, or what it may
#: answer), not only how it samples: a request kept without them is counted as a changed prompt
#: and said so (``tool_choice`` and ``functions`` go with ``tools``).
_PROMPT_FIELDS = {"tools": "tools", "functions": "tools", "tool_choice": "tools",
                  "response_format": "response_format"}
#: Line numbers of skipped lines kept in the summary (the count is whole).
_BAD_LINES_SHOWN = 20
_COMPARES = ("quality", "judge", "similarity", "agreement")
_TEXT_SIMILARITY = ("rouge_l", "token_f1")
_GATED_ON = {
    "quality": (
        "Gated on quality, not wording: the share of degenerate answers (empty, looping, leaked "
        "template markup, gibberish) against the baseline's, and whether changed answers mean "
        "the same{meaning}."
    ),
    "judge": (
        "Gated on the judge {judge}'s pairwise verdicts against the baseline's own answers "
        "(both orders); changed answers are reported."
    ),
    "similarity": (
        "Gated on the {similarity} similarity of the answers with the baseline's own, against "
        "the baseline's second pass; changed answers are reported."
    ),
    "agreement": "Gated on exact agreement with the baseline's own answers.",
}
_AGREEMENT_SCORERS = ("exact", "normalized", "numeric", "choice")
_TEXT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
#: Nesting depth of one request line. A chat request nests about six levels (body, messages,
#: message, content parts, part, image_url), a Batch API line one more, and a tool's JSON
#: Schema parameters a few dozen at most; Python's ``json`` recurses with a 1,000-frame limit.
MAX_DEPTH = 100
# A JSON string, closed or running to the end of the line. Possessive quantifiers keep the
# match linear (no backtracking on a string of escaped quotes).
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


@dataclass
class ReplaySummary:
    """What ``suite_from_requests`` read and wrote."""

    suite: Path
    data: Path
    name: str
    lines: int = 0
    requests: int = 0
    unique: int = 0
    written: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    dropped_fields: dict[str, int] = field(default_factory=dict)
    compare: str = "quality"
    """What the written suite gates on: ``quality``, ``judge``, ``similarity`` or ``agreement``."""
    judge: str | None = None
    gates: str = ""
    """What the written suite gates, in a sentence (the suite's description ends with it)."""
    bad_lines: list[int] = field(default_factory=list)
    """Line numbers skipped as unreadable (``skip_bad``); the first ``_BAD_LINES_SHOWN``."""
    changed_prompts: dict[str, int] = field(default_factory=dict)
    """Requests kept whose prompt the replay changes, by what it drops (``tools``: the tool
    definitions the model saw in production; ``response_format``: its output constraint)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": str(self.suite),
            "data": str(self.data),
            "name": self.name,
            "lines": self.lines,
            "requests": self.requests,
            "unique": self.unique,
            "written": self.written,
            "skipped": dict(self.skipped),
            "dropped_fields": dict(self.dropped_fields),
            "compare": self.compare,
            "judge": self.judge,
            "gates": self.gates,
            "bad_lines": list(self.bad_lines),
            "changed_prompts": dict(self.changed_prompts),
        }


def _text(content: Any) -> str | None:
    """A message's content as text; None when it holds anything but text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                return None
            if not isinstance(part.get("text"), str):
                return None
            parts.append(part["text"])
        return "\n".join(parts)
    return None


def _conversation(body: dict[str, Any], dropped: Counter[str]) -> tuple[list[dict[str, str]] | None, str]:
    """The replayable messages of one request body, or (None, why it is skipped)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None, "no chat messages (not a chat-completions body)"
    out: list[dict[str, str]] = []
    for m in messages:
        if not isinstance(m, dict):
            return None, "a message is not an object"
        if m.get("tool_calls") or m.get("function_call") or m.get("role") in ("tool", "function"):
            return None, "tool calls or tool results"
        role = _TEXT_ROLES.get(str(m.get("role")))
        if role is None:
            return None, f"unknown role {str(m.get('role'))[:40]!r}"
        text = _text(m.get("content"))
        if text is None:
            return None, "non-text content (images, audio, files)"
        for key in m:
            if key not in ("role", "content"):
                dropped[f"messages[].{key}"] += 1
        out.append({"role": role, "content": text})
    return out, ""


def _read_line(line: str, where: str) -> dict[str, Any]:
    """One log line as a JSON object, or ``UsageError`` naming the line and what is wrong."""
    _check_depth(line, where)
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not JSON: {exc.msg}") from None
    except RecursionError:  # a backstop: _check_depth refuses far below the limit
        raise UsageError(f"{where}: JSON nested too deeply to read") from None
    if not isinstance(record, dict):
        raise UsageError(f"{where}: not a JSON object")
    return record


def _check_depth(line: str, where: str) -> None:
    """Refuse (``UsageError``) a line nested more than ``MAX_DEPTH`` levels, naming the field
    where it goes past, before ``json`` parses it. The brackets outside strings are counted on
    the line with its strings and everything else removed (regexes: C speed on long lines)."""
    skeleton = _NOT_BRACKETS.sub("", _JSON_STRING.sub("", line))
    depth = 0
    for c in skeleton:
        depth += 1 if c in "[{" else -1
        if depth > MAX_DEPTH:
            raise UsageError(
                f"{where}: {_deep_field(line)}: JSON nested more than {MAX_DEPTH} levels deep; "
                "a chat request is a few levels deep, so this line is not one (remove it)"
            )


def _deep_field(line: str) -> str:
    """The path (``messages[].content``) at which ``line`` first goes past ``MAX_DEPTH``: the
    keys of the objects on the way, ``[]`` for an array, trailing arrays left out. Only called
    for a refused line, so a plain scan is fine."""
    path: list[str] = []  # one entry per open container: "[]", or the object's current key
    i, n = 0, len(line)
    key_next = False  # inside an object, before a key
    while i < n and len(path) <= MAX_DEPTH:
        c = line[i]
        if c == '"':
            m = _JSON_STRING.match(line, i)
            end = m.end() if m else n
            if key_next and path and path[-1] != "[]":
                path[-1] = line[i + 1 : end - 1][:40]
                key_next = False
            i = end
            continue
        if c in "[{":
            path.append("[]" if c == "[" else "")
            key_next = c == "{"
        elif c in "]}":
            if path:
                path.pop()
        elif c == "," and path and path[-1] != "[]":
            key_next = True
        i += 1
    while path and path[-1] in ("[]", ""):
        path.pop()
    keys = sum(part != "[]" for part in path)
    shown = ""
    for part in path:
        if shown and part != "[]" and shown.count(".") >= 4:  # the first five keys say enough
            return f"{shown}.… ({keys} keys deep)"
        shown += part if part == "[]" else (f".{part}" if shown else part)
    return shown or "the line"


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")
    return (slug or "replay")[:100]


def suite_from_requests(
    log: Path,
    out: Path,
    *,
    n: int | None = 200,
    seed: int = 0,
    name: str | None = None,
    max_tokens: int = 256,
    scorer: str = "exact",
    force: bool = False,
    judge: str | None = None,
    similarity: str = "rouge_l",
    compare: str | None = None,
    skip_bad: bool = False,
) -> ReplaySummary:
    """Write a replay suite (``out``) and its data (``out`` with ``.jsonl``) from a request log.
    ``skip_bad``: a line that is not a readable JSON object is skipped and counted (its number
    kept) instead of refusing the log."""
    if n is not None and not 1 <= n <= limits.MAX_ITEMS:
        raise UsageError(f"-n must be between 1 and {limits.MAX_ITEMS}")
    if not 1 <= max_tokens <= limits.MAX_TOKENS:
        raise UsageError(f"--max-tokens must be between 1 and {limits.MAX_TOKENS}")
    if scorer not in _AGREEMENT_SCORERS:
        raise UsageError(
            f"--scorer {scorer!r}: a replay has no reference; use one of "
            f"{', '.join(_AGREEMENT_SCORERS)}"
        )
    mode = compare or "quality"
    if mode not in _COMPARES:
        raise UsageError(f"--compare {mode!r}: use one of {', '.join(_COMPARES)}")
    if mode == "judge" and not judge:
        raise UsageError("--compare judge needs --judge NAME (a registered judge endpoint)")
    if similarity not in _TEXT_SIMILARITY:
        raise UsageError(
            f"--similarity {similarity!r}: use one of {', '.join(_TEXT_SIMILARITY)} (embedding "
            "similarity needs an embeddings endpoint in the suite's params)"
        )
    if out.suffix not in (".yaml", ".yml"):
        raise UsageError(f"{out}: the suite file must end in .yaml or .yml")
    data_path = out.with_suffix(".jsonl")
    for target in (out, data_path):
        if target.exists() and not force:
            raise UsageError(f"{target} exists; pass --force to overwrite it")
    if data_path.resolve() == log.resolve():
        raise UsageError(f"{data_path} is the request log itself; choose another -o")
    summary = ReplaySummary(
        suite=out, data=data_path, name=_slug(name or out.stem), compare=mode, judge=judge
    )
    dropped: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    changed: Counter[str] = Counter()
    unique: dict[str, dict[str, Any]] = {}
    try:
        fh = log.open("r", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{log}: cannot read: {exc.strerror or exc}") from None
    with fh:
        try:
            for lineno, line in enumerate(fh, start=1):
                summary.lines = lineno
                if not line.strip():
                    continue
                try:
                    record = _read_line(line, f"{log}:{lineno}")
                except UsageError as exc:
                    if not skip_bad:
                        raise UsageError(f"{exc}; pass --skip-bad-lines to skip such lines "
                                         "(they are counted)") from None
                    skipped["unreadable line (not a JSON object)"] += 1
                    if len(summary.bad_lines) < _BAD_LINES_SHOWN:
                        summary.bad_lines.append(lineno)
                    continue
                inner = record.get("body")
                body: dict[str, Any] = inner if isinstance(inner, dict) else record
                summary.requests += 1
                for key in body:
                    if key not in _KEPT_FIELDS:
                        dropped[key] += 1
                messages, why = _conversation(body, dropped)
                if messages is None:
                    skipped[why] += 1
                    continue
                for what in sorted({_PROMPT_FIELDS[k] for k in body
                                    if k in _PROMPT_FIELDS and body[k] not in (None, [], {})}):
                    changed[what] += 1
                key = json.dumps(messages, sort_keys=True, ensure_ascii=False)
                if key in unique:
                    unique[key]["occurrences"] += 1
                    continue
                limit = body.get("max_completion_tokens", body.get("max_tokens"))
                ok_limit = isinstance(limit, int) and not isinstance(limit, bool) and limit > 0
                unique[key] = {
                    "id": "req-" + hashlib.sha256(key.encode()).hexdigest()[:16],
                    "messages": messages,
                    "max_tokens": limit if ok_limit else None,
                    "turns": len(messages),
                    "occurrences": 1,
                    "order": len(unique),
                }
        except UnicodeDecodeError as exc:
            raise UsageError(f"{log}: not UTF-8 text ({exc.reason})") from None
    summary.unique = len(unique)
    summary.skipped = dict(skipped)
    summary.dropped_fields = dict(sorted(dropped.items()))
    summary.changed_prompts = dict(sorted(changed.items()))
    if not unique:
        reasons = "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "the log is empty"
        raise UsageError(f"{log}: no replayable chat request ({reasons})")
    rows = list(unique.values())
    if n is not None and n < len(rows):
        order = list(range(len(rows)))
        random.Random(seed).shuffle(order)
        rows = [rows[i] for i in sorted(order[:n])]
    summary.written = len(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    with data_path.open("w", encoding="utf-8") as fh_out:
        for row in rows:
            row = {k: v for k, v in row.items() if k != "order"}
            fh_out.write(json.dumps(row, ensure_ascii=False) + "\n")
    meaning = (
        f" by the judge {judge}'s pairwise verdicts (both orders)" if judge
        else ": without a judge only identical answers count, so changed answers that do not "
        "degenerate read inconclusive; add --judge NAME (a registered endpoint, a model "
        "stronger than the ones under test) to decide them"
    )
    summary.gates = _GATED_ON[mode].format(similarity=similarity, judge=judge, meaning=meaning)
    skipped_text = (
        "; skipped " + ", ".join(f"{v} ({k})" for k, v in skipped.items()) if skipped else ""
    )
    if changed:
        skipped_text += "; replayed without " + ", ".join(
            f"{k} ({v} requests)" for k, v in sorted(changed.items()))
    spec = {
        "name": summary.name,
        "kind": "dataset",
        "description": (
            f"Replay of {summary.written} of {summary.unique} distinct conversations from "
            f"{summary.requests} requests in {log.name} (seed {seed}){skipped_text}. "
            + summary.gates
        ),
        "seed": seed,
        "params": {
            "path": data_path.name,
            "id_column": "id",
            "prompt": {"messages": "messages"},
            "scorer": scorer,
            "n": summary.written,
            "max_tokens": max_tokens,
            "max_tokens_column": "max_tokens",
            "slices": ["prompt_length"],
            "compare": mode,
            **({"similarity": similarity} if mode == "similarity" else {}),
            **({"judge": {"endpoint": judge}} if judge else {}),
        },
    }
    out.write_text(
        "# Written by `evalsvc suites from-requests`: edit freely (scorer, slices, gate).\n"
        + yaml.safe_dump(spec, sort_keys=False, allow_unicode=True),
        encoding="utf-8",
    )
    # The suite must load as written (a scorer that needs a reference, a bad max_tokens...).
    from evalsvc.suites import SuiteError, load_suite

    try:
        load_suite(str(out), allow_paths=True)
    except SuiteError as exc:
        raise UsageError(f"the written suite does not load: {exc}") from exc
    return summary
