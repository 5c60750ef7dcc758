"""``dataset``: your own prompts from a file or a Hugging Face hub dataset, scored per row.

Method: rows are read through Hugging Face ``datasets`` (local JSON, JSONL, CSV, Parquet or
Arrow files; or a hub dataset by name, cached under ``<EVALSVC_HOME>/datasets``). ``n`` rows
are drawn with a seeded permutation (the first ``n`` of ``Random(f"{seed}:dataset")``'s
shuffle of the row indices, so ``--samples 50`` is a subset of ``--samples 100``). Each row
becomes one item: its prompt is a chat-messages column or a template over columns, sent
greedily (temperature 0) unless the suite's ``sampling:`` samples it k times (with a reference
column only: ``Suite.sample`` applies the decoding, docs/suites.md). The output is scored by one
of six scorers:

- ``exact``: the stripped output equals the reference;
- ``normalized``: equal after SQuAD's answer normalization (lower case, punctuation and
  articles removed, whitespace collapsed: Rajpurkar et al. 2016, arXiv 1606.05250, the official
  v1.1 evaluation script), applied to the text after the last "answer is" marker when there is
  one;
- ``numeric``: the committed number (``_extract.extract_number``) equals the reference within
  ``tolerance``;
- ``regex``: the first (or last, ``select``) match of ``pattern`` (its first group when it has
  one), normalized, equals the normalized reference (lm-eval's ``regex`` filter);
- ``choice``: multiple choice; the committed option label (``A``, ``B``...; or the unique
  option text the output names) equals the reference (a label, a 0-based index or the option's
  text); a ``choices`` column renders as lettered options through ``{choices}`` in the template;
- ``contains``: the normalized reference occurs in the normalized output as whole words.

A reference column may hold a list of acceptable answers (any one counts).

**Without a reference** the metric is ``agreement`` with the baseline's own answer: the
baseline's first answer (repeat 0) is the reference, compared under the scorer's extraction
(the exact text, the normalized text, the number, the regex match, the option). The baseline
answers every item a **second time** (repeat 1), and the gate pairs, per item, the baseline's
agreement with itself (repeat 1 vs repeat 0) with the candidate's agreement with the baseline
(candidate vs repeat 0). The baseline's agreement with its own reference pass would be 1 by
construction, so without the second pass an unstable but unchanged model (bf16 batch variance,
docs/statistics.md) would read as a regression; with it, a candidate identical to the baseline
is exchangeable with the second pass and Δ is centred on 0. Two answers that both yield no
number/option/match agree. In this mode a sample's own ``score`` is 1 when the scorer found an
answer in it (always for ``exact``/``normalized``); ``analyze`` computes the agreement. What
the gate tests is ``params.compare``: ``quality`` (the default without a judge: degenerate
answers, ``_degeneration``, against the baseline's, and meaning by the judge or by identical
answers, ``_quality``: a rewording is never a fail), ``judge`` (the default with one,
``_judge``), ``similarity`` (wording) or ``agreement``; every answer carries its degeneration
signals (``data["degeneration"]``) whatever is gated.

Contract: everything is read and checked when the suite is loaded (a missing file or column,
an unreadable file, a bad template, a reference that cannot be scored, an unknown scorer):
``ValueError``, which the registry turns into a ``SuiteError`` naming the YAML file (exit 2),
before any request. Listed only (``catalog(for_listing=True)``: ``suites list``), a local JSON
Lines or CSV file's rows are counted and its columns checked with the standard library, and the
items are built (and checked) on first use. Relative paths resolve against the suite file's directory (or the catalog
directory for a spec built in code). ``plan()`` sends nothing. Slices: any column's value and
``prompt_length`` (quantile buckets of the prompt's characters, or fixed edges); items are
independent rows, so no clusters. Hub datasets are fetched at load time; offline, the error
says so (``HF_DATASETS_OFFLINE=1`` uses the cache only).

Presentation: the baseline's first answer to an item stores the item's prompt in its ``data``
(once per item), so the dashboard's samples and flips pages and ``evalsvc export`` show your
own prompts without reading the dataset again; the reference column is the expected answer,
the slice label names each dimension (``category math``), and the suite page has a table of
paired rates per slice dimension (``dataset.html``).
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import re
import string
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalsvc import limits
from evalsvc.domain import Item, Provenance, Sample
from evalsvc.gates import (
    KURTIC_SOURCE,
    MIN_N_CONTINUOUS,
    VLLM_CI_SOURCE,
    GateDefaults,
)
from evalsvc.settings import Settings
from evalsvc.suites._base import (
    Analysis,
    Emit,
    Suite,
    first_divergent_token,
    flips,
    listing_only,
    paired_scores,
    prompt_text,
)
from evalsvc.suites._paths import catalog_dir
from evalsvc.suites._present import Finding, ViewInput
from evalsvc.suites.kinds._degeneration import SIGNALS as DEGENERATION_SIGNALS
from evalsvc.suites.kinds._degeneration import signals as degeneration_signals
from evalsvc.suites.kinds._degeneration import tally as degeneration_tally
from evalsvc.suites.kinds._extract import answer_span, extract_number
from evalsvc.suites.kinds._judge import Judge, JudgeSpec, judge_outcome
from evalsvc.suites.kinds._judge import summary as judge_summary
from evalsvc.suites.kinds._pairs_present import findings as reference_free_findings
from evalsvc.suites.kinds._pairs_present import headline as reference_free_headline
from evalsvc.suites.kinds._pairs_present import sample_notes as reference_free_notes
from evalsvc.suites.kinds._quality import quality_outcome
from evalsvc.suites.kinds._similarity import PAIR_FIELD, score_pairs, similarity

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import EndpointClient

Scorer = Literal["exact", "normalized", "numeric", "regex", "choice", "contains"]
PROMPT_LENGTH = "prompt_length"
"""The slice name of the prompt-length bucket (any other slice name is a column)."""
_FORMATS = {
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".csv": "csv",
    ".parquet": "parquet",
    ".arrow": "arrow",
}
_ROLES = frozenset({"system", "user", "assistant"})


class PromptSpec(BaseModel):
    """How a row becomes a prompt: a chat-messages column, or a template over columns."""

    model_config = ConfigDict(extra="forbid")

    messages: str | None = None
    """Column holding OpenAI chat messages (a list of ``{role, content}``)."""
    template: str | None = Field(default=None, max_length=limits.MAX_PROMPT_CHARS)
    """``str.format``-style template over columns (``"Q: {question}\\nA:"``); ``{choices}``
    renders the ``choices`` column as lettered options. Plain field names only."""
    system: str | None = Field(default=None, max_length=limits.MAX_PROMPT_CHARS)
    """Optional system message (chat) or preamble (completions) before every prompt."""

    @model_validator(mode="after")
    def _one_source(self) -> PromptSpec:
        if (self.messages is None) == (self.template is None):
            raise ValueError("give exactly one of prompt.messages (a column) or prompt.template")
        return self


class EmbeddingSpec(BaseModel):
    """The suite's ``params.embeddings``: an OpenAI-compatible ``/embeddings`` endpoint."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str = Field(min_length=1, max_length=500)
    """A registered endpoint name (``evalsvc endpoints add``), or a URL for a local compare."""


class DatasetParams(BaseModel):
    """Parameters of a dataset suite (validated from the YAML ``params`` mapping)."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = None
    """Local file, directory or glob of one format, or a ``Dataset.save_to_disk`` directory.
    Relative: against the suite file."""
    hub: str | None = Field(default=None, max_length=500)
    """Hugging Face hub dataset name (``org/name``); needs network unless cached."""
    config: str | None = None
    """Hub configuration (subset) name."""
    split: str = "train"
    revision: str | None = None
    """Hub revision (a commit pins the data)."""
    format: Literal["json", "csv", "parquet", "arrow"] | None = None
    """File format; default from the extension (``.json``/``.jsonl``/``.csv``/``.parquet``/``.arrow``)."""
    n: int | None = Field(default=200, ge=1, le=limits.MAX_ITEMS)
    """Rows to sample (``--samples``); None: every row (at most ``MAX_ITEMS``)."""
    prompt: PromptSpec
    api: Literal["chat", "completions"] = "chat"
    reference: str | None = None
    """Reference column; None: the metric is agreement with the baseline's own answer."""
    id_column: str | None = None
    """Column of unique row ids (default: ``row-<index>``)."""
    scorer: Scorer = "exact"
    pattern: str | None = Field(default=None, max_length=1000)
    """``regex``: the pattern (its first group, if any, is the answer)."""
    select: Literal["first", "last"] = "first"
    """``regex``: which match counts."""
    tolerance: float = Field(default=1e-6, ge=0)
    """``numeric``: largest absolute difference that still counts as equal."""
    choices: str | None = None
    """``choice``: column holding the list of options (rendered by ``{choices}``)."""
    labels: str = Field(default="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_length=2)
    """``choice``: option labels, in order."""
    slices: list[str] = Field(default_factory=list, max_length=limits.MAX_PARAM_LIST)
    """Slice dimensions: column names, or ``prompt_length``."""
    length_buckets: int | list[int] = 3
    """``prompt_length``: number of quantile buckets, or increasing character edges."""
    max_tokens: int = Field(default=64, ge=1, le=limits.MAX_TOKENS)
    max_tokens_column: str | None = None
    """Column with a per-row ``max_tokens`` (replayed requests); capped at ``max_tokens``."""
    compare: Literal["quality", "similarity", "judge", "agreement"] | None = None
    """Without a reference: what the gate tests against the baseline's own answers (module
    docstring). Default: ``judge`` when a judge is set, else ``quality``."""
    similarity: Literal["rouge_l", "token_f1", "embedding"] = "rouge_l"
    """``compare: similarity``: the measure the gate tests (``embedding`` needs ``embeddings``)."""
    embeddings: EmbeddingSpec | None = None
    """An embedding endpoint: adds embedding similarity to the reported measures."""
    judge: JudgeSpec | None = None
    """A judge endpoint (``evalsvc.suites.kinds._judge``): ``compare: judge`` gates on it."""

    @property
    def mode(self) -> Literal["reference", "quality", "similarity", "judge", "agreement"]:
        """How answers are scored: against the reference column, or one of the reference-free
        comparisons with the baseline's answers."""
        if self.reference is not None:
            return "reference"
        if self.compare is not None:
            return self.compare
        return "judge" if self.judge is not None else "quality"

    @model_validator(mode="after")
    def _check(self) -> DatasetParams:
        if (self.path is None) == (self.hub is None):
            raise ValueError("give exactly one of path (a local file) or hub (a dataset name)")
        if self.scorer == "regex":
            if not self.pattern:
                raise ValueError("scorer 'regex' needs a pattern")
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern {self.pattern!r} is not a regular expression: {exc}") from None
        elif self.pattern is not None:
            raise ValueError(f"pattern is only used by scorer 'regex', not {self.scorer!r}")
        if self.scorer == "contains" and self.reference is None:
            raise ValueError("scorer 'contains' needs a reference column")
        if self.reference is not None and (self.compare or self.judge):
            raise ValueError(
                "compare and judge are for suites without a reference column (the reference "
                "scores the answers); remove them or the reference"
            )
        if self.compare == "judge" and self.judge is None:
            raise ValueError("compare 'judge' needs a judge (judge: {endpoint: NAME})")
        if self.similarity == "embedding" and self.embeddings is None:
            raise ValueError(
                "similarity 'embedding' needs an embedding endpoint (embeddings: {endpoint: NAME})"
            )
        if self.api == "completions" and self.prompt.messages is not None:
            raise ValueError("api 'completions' needs prompt.template (messages are chat)")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("labels must be distinct characters")
        if isinstance(self.length_buckets, int):
            if not 2 <= self.length_buckets <= 10:
                raise ValueError("length_buckets: between 2 and 10 quantile buckets")
        elif not self.length_buckets or sorted(set(self.length_buckets)) != self.length_buckets:
            raise ValueError("length_buckets: character edges in increasing order")
        return self


class DatasetError(ValueError):
    """A dataset suite cannot be built from its data (refused at load time, exit 2)."""


# ---- loading --------------------------------------------------------------------------------

_CACHE: dict[tuple[Any, ...], Any] = {}


def _datasets_cache() -> Path:
    return Settings().home / "datasets"


def _quiet_datasets() -> Any:
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def resolve_path(raw: str, base_dir: Path | None) -> Path:
    """A data path: absolute as given, else under the suite file's directory (or the catalog)."""
    path = Path(os.path.expanduser(raw))
    if path.is_absolute():
        return path
    return (base_dir if base_dir is not None else catalog_dir()) / path


def load_rows(params: DatasetParams, base_dir: Path | None) -> Any:
    """The ``datasets.Dataset`` the params name (memoized per file state / hub coordinates)."""
    if params.path is not None:
        path = resolve_path(params.path, base_dir)
        if path.is_dir() and (path / "state.json").is_file():
            return _load_saved(path)
        fmt = params.format or _FORMATS.get(path.suffix.lower())
        if fmt is None:
            raise DatasetError(
                f"{path}: cannot tell the format from the extension {path.suffix!r}; set "
                f"format to one of json, csv, parquet, arrow"
            )
        has_glob = any(ch in str(path) for ch in "*?[")
        if not has_glob and not path.exists():
            raise DatasetError(f"data file not found: {path}")
        if not has_glob and path.is_file() and not os.access(path, os.R_OK):
            raise DatasetError(f"{path}: cannot read (permission denied)")
        try:
            stat = path.stat() if not has_glob else None
        except OSError as exc:
            raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}") from None
        key: tuple[Any, ...] = (
            "file",
            str(path),
            fmt,
            stat.st_mtime_ns if stat else None,
            stat.st_size if stat else None,
        )
        if key not in _CACHE:
            datasets = _quiet_datasets()
            files = str(path / "*") if path.is_dir() else str(path)
            try:
                ds = datasets.load_dataset(
                    fmt, data_files=files, split="train", cache_dir=str(_datasets_cache())
                )
            except Exception as exc:  # noqa: BLE001 - any parser error is "unreadable"
                raise DatasetError(f"{path}: cannot read as {fmt}: {_reason(exc)}") from None
            _CACHE[key] = ds
        return _CACHE[key]
    hub = str(params.hub)
    key = ("hub", hub, params.config, params.split, params.revision)
    if key not in _CACHE:
        datasets = _quiet_datasets()
        try:
            ds = datasets.load_dataset(
                hub,
                params.config,
                split=params.split,
                revision=params.revision,
                cache_dir=str(_datasets_cache()),
            )
        except Exception as exc:  # noqa: BLE001 - network, auth, missing split...
            raise DatasetError(
                f"hub dataset {hub!r} (config {params.config!r}, split {params.split!r}) could "
                f"not be loaded: {_reason(exc)}. Hub datasets need network access to "
                f"huggingface.co unless already cached under {_datasets_cache()} (then set "
                "HF_DATASETS_OFFLINE=1); or download the files and use params.path"
            ) from None
        _CACHE[key] = ds
    return _CACHE[key]


def _scan_json_lines(path: Path) -> tuple[list[str], int] | None:
    """The columns (the union of the objects' keys, in first-seen order) and the rows of a JSON
    Lines file, blank lines skipped as ``datasets`` skips them; None when a line is not a JSON
    object."""
    columns: dict[str, None] = {}
    rows = 0
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row, dict):
                return None
            columns.update(dict.fromkeys(row))
            rows += 1
    return list(columns), rows


def _scan_csv(path: Path) -> tuple[list[str], int] | None:
    """The header and the data rows of a CSV file (quoted line breaks inside a field; blank
    lines skipped, as pandas' reader under ``datasets`` skips them); None for a line of blanks,
    which only the full reader judges."""
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            return None
        rows = 0
        for row in reader:
            if not row:
                continue
            if len(row) == 1 and not row[0].strip():
                return None
            rows += 1
    return header, rows


def _load_saved(path: Path) -> Any:
    """A directory written by ``Dataset.save_to_disk`` (Arrow files plus ``state.json``)."""
    state = path / "state.json"
    key = ("saved", str(path), state.stat().st_mtime_ns)
    if key not in _CACHE:
        datasets = _quiet_datasets()
        try:
            ds = datasets.load_from_disk(str(path))
        except Exception as exc:  # noqa: BLE001 - any error reading the directory
            raise DatasetError(f"{path}: cannot read the saved dataset: {_reason(exc)}") from None
        if not isinstance(ds, datasets.Dataset):
            raise DatasetError(f"{path}: holds several splits; point path at one of them")
        _CACHE[key] = ds
    return _CACHE[key]


def _reason(exc: BaseException) -> str:
    # datasets wraps parser errors (DatasetGenerationError from an ArrowInvalid...): the
    # innermost cause says what is wrong with the file.
    inner: BaseException = exc
    while inner.__cause__ is not None and inner.__cause__ is not inner:
        inner = inner.__cause__
    text = f"{type(inner).__name__}: {inner}".strip()
    return text[:500]


# ---- scoring --------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")


#: ``str.translate`` deletes what SQuAD's generator skipped, in C: an answer of megabytes from an
#: endpoint that ignores ``max_tokens`` cost seconds of event-loop CPU per call (issue 48).
_NO_PUNCT = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    """SQuAD v1.1's ``normalize_answer``: lower case, no punctuation, no articles, one space."""
    text = text.lower().translate(_NO_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _to_number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(str(value).replace(",", "").strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


class _Scorer:
    """One scorer: ``key(output)`` extracts the answer; ``same(a, b)`` compares two keys;
    ``ref_keys(reference)`` canonicalizes the reference (a list: any one counts)."""

    def __init__(self, p: DatasetParams) -> None:
        self.p = p
        self.pattern = re.compile(p.pattern) if p.pattern else None

    def key(self, output: str, choices: Sequence[str] = ()) -> str | None:
        s = self.p.scorer
        if s == "exact":
            return output.strip()
        if s in ("normalized", "contains"):
            span = answer_span(output) if s == "normalized" else None
            return normalize(span if span is not None else output)
        if s == "numeric":
            return extract_number(output)
        if s == "regex":
            assert self.pattern is not None
            matches = list(self.pattern.finditer(output))
            if not matches:
                return None
            m = matches[0] if self.p.select == "first" else matches[-1]
            return normalize(m.group(1) if self.pattern.groups else m.group(0))
        return self._choice(output, choices)

    def _choice(self, output: str, choices: Sequence[str]) -> str | None:
        labels = self.p.labels[: len(choices)] if choices else self.p.labels
        # Labels are matched case-sensitively as whole words: "a" in prose is an article, "A"
        # an option. After an explicit answer marker the first label wins, else the last one.
        pattern = re.compile(r"(?<![\w])([" + re.escape(labels) + r"])(?![\w])")
        span = answer_span(output)
        if span is not None and (found := pattern.findall(span)):
            return str(found[0])
        if choices:
            said = f" {normalize(output)} "  # once, not once per choice
            named = {labels[i] for i, c in enumerate(choices) if c and normalize(c) and
                     f" {normalize(c)} " in said}
            if len(named) == 1:
                return named.pop()
        found = pattern.findall(output)
        return str(found[-1]) if found else None

    def ref_keys(self, reference: Any, choices: Sequence[str] = ()) -> list[str]:
        """The reference's acceptable keys; ``DatasetError`` when it cannot be scored."""
        values = reference if isinstance(reference, list) else [reference]
        out: list[str] = []
        for value in values:
            if value is None:
                continue
            s = self.p.scorer
            if s == "exact":
                out.append(str(value).strip())
            elif s in ("normalized", "contains", "regex"):
                out.append(normalize(str(value)))
            elif s == "numeric":
                if isinstance(value, bool) or _to_number(str(value)) is None:
                    raise DatasetError(f"reference {value!r} is not a number (scorer 'numeric')")
                out.append(str(value))
            else:
                out.append(self._ref_label(value, choices))
        if not out:
            raise DatasetError("the reference is empty")
        return out

    def _ref_label(self, value: Any, choices: Sequence[str]) -> str:
        labels = self.p.labels[: len(choices)] if choices else self.p.labels
        if isinstance(value, int) and not isinstance(value, bool):
            if 0 <= value < len(labels):
                return labels[value]
            raise DatasetError(f"reference index {value} is out of range for {len(labels)} options")
        text = str(value).strip()
        if len(text) == 1 and text in labels:
            return text
        for i, c in enumerate(choices):
            if normalize(str(c)) == normalize(text):
                return labels[i]
        raise DatasetError(
            f"reference {value!r} is neither an option label ({labels}), an index nor one of "
            "the options' texts"
        )

    def same(self, a: str | None, b: str | None) -> bool:
        if a is None or b is None:
            return a is None and b is None
        if self.p.scorer == "numeric":
            x, y = _to_number(a), _to_number(b)
            return x is not None and y is not None and abs(x - y) <= self.p.tolerance
        if self.p.scorer == "contains":
            return bool(b) and f" {b} " in f" {a} "
        return a == b


# ---- prompts --------------------------------------------------------------------------------


def template_fields(template: str) -> list[str]:
    """The column names a template uses; ``DatasetError`` for anything but plain ``{name}``."""
    fields: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise DatasetError(f"prompt.template: {exc}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        # Attribute and index access ({x.__class__}, {x[0]}) and format specs are refused: a
        # template names columns, nothing else.
        if not name or not re.fullmatch(r"[^.\[\]{}!:]+", name) or spec or conversion:
            raise DatasetError(
                f"prompt.template: field {{{name}}} must be a plain column name "
                "(no attribute, index, conversion or format spec)"
            )
        fields.append(name)
    return fields


def render_choices(choices: Sequence[Any], labels: str) -> str:
    return "\n".join(f"{labels[i]}. {c}" for i, c in enumerate(choices))


def _messages(value: Any, row_id: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise DatasetError(f"row {row_id}: the messages column must hold a non-empty list")
    out = []
    for m in value:
        if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(
            m.get("content"), str
        ):
            raise DatasetError(
                f"row {row_id}: each message needs a role ({', '.join(sorted(_ROLES))}) and "
                "string content"
            )
        out.append({"role": str(m["role"]), "content": str(m["content"])})
    return out


def _length_labels(lengths: list[int], buckets: int | list[int]) -> list[str]:
    """A bucket label per prompt length (characters): quantile buckets or fixed edges."""
    if isinstance(buckets, list):
        edges = buckets
    else:
        ordered = sorted(lengths)
        # Interior quantile edges (nearest rank); duplicates collapse, so a sample of equal
        # lengths has a single bucket.
        edges = sorted({ordered[min(len(ordered) - 1, (len(ordered) * k) // buckets)]
                        for k in range(1, buckets)}) if ordered else []
    out = []
    for n in lengths:
        i = sum(1 for e in edges if n >= e)
        if i == 0:
            out.append(f"<{edges[0]} chars" if edges else "all")
        elif i == len(edges):
            out.append(f">={edges[-1]} chars")
        else:
            out.append(f"{edges[i - 1]}-{edges[i] - 1} chars")
    return out


# ---- the kind -------------------------------------------------------------------------------

_ACCURACY_GATE = GateDefaults.paired_noninferiority(
    "dataset",
    margin=0.05,
    rationale=(
        "Accuracy against the dataset's reference column, paired by row; the same 5-point "
        "margin as reasoning and needle. Slices: the columns named in params.slices and the "
        "prompt-length bucket."
    ),
    sources=(VLLM_CI_SOURCE, KURTIC_SOURCE),
)
_AGREEMENT_GATE = GateDefaults.paired_noninferiority(
    "dataset",
    metric="agreement",
    margin=0.05,
    rationale=(
        "No reference column: agreement with the baseline's first answer. The candidate's "
        "agreement is paired with the baseline's own second pass (its agreement with itself), "
        "so a model as unstable as the baseline is centred on a zero difference "
        "(docs/statistics.md section 6b); 5 points as for reasoning and needle."
    ),
    sources=(VLLM_CI_SOURCE, KURTIC_SOURCE),
)


_SIMILARITY_SOURCE = (
    "Lin 2004, 'ROUGE: A Package for Automatic Evaluation of Summaries' (ROUGE-1/ROUGE-L "
    "F-measure; rouge-score, Google Research); Rajpurkar et al. 2016, arXiv 1606.05250 (token F1)"
)
_JUDGE_SOURCE = (
    "Zheng et al. 2023, 'Judging LLM-as-a-Judge with MT-Bench and Chatbot Arena', arXiv "
    "2306.05685: pairwise comparison in both orders, an inconsistent pair a tie; GPT-4 agrees "
    "with human experts on 66% of pairs with ties, as often as experts agree with each other"
)


_DEGENERATION_SOURCE = (
    "Welleck et al. 2019, 'Neural Text Generation with Unlikelihood Training', arXiv "
    "1908.04319 (seq-rep-n as the measure of degenerate repetition); Holtzman et al. 2020, "
    "'The Curious Case of Neural Text Degeneration', arXiv 1904.09751"
)


def _similarity_gate(measure: str) -> GateDefaults:
    return GateDefaults.paired_noninferiority(
        "dataset",
        metric=measure,
        kind="continuous",
        margin=0.05,
        rationale=(
            f"No reference column: the mean {measure} of each answer with the baseline's first "
            "answer, the candidate's paired with the baseline's own second pass (its similarity "
            "with itself, 1 where it repeats itself), so an unchanged model is centred on a zero "
            "difference; 5 points of mean similarity, the agreement gate's margin. A measure of "
            "wording, not of quality: a changed but equally good answer scores lower (use a "
            "judge for quality)."
        ),
        sources=(_SIMILARITY_SOURCE,),
    )


_JUDGE_GATE = GateDefaults.paired_noninferiority(
    "dataset",
    metric="judge_not_worse",
    margin=0.10,
    rationale=(
        "No reference column, a judge: the share of items judged not worse than the baseline's "
        "answer (both orders, an order-inconsistent pair a tie), paired with the share where "
        "the baseline was not judged worse, so Δ is the net share judged better minus worse and "
        "an equally good candidate is centred on 0. 10 points, twice the accuracy gates': a "
        "judge is a noisier instrument than a reference (it agrees with human experts about as "
        "often as they agree with each other, two pairs in three). A judge that is position-"
        "inconsistent or cannot tell a cut answer from a whole one makes the gate inconclusive."
    ),
    sources=(_JUDGE_SOURCE,),
)


_QUALITY_GATE = GateDefaults.paired_noninferiority(
    "dataset",
    metric="not_degenerate",
    margin=0.05,
    rationale=(
        "No reference column: a replay's quality, not its wording. Two checks decide: the share "
        "of answers that are not degenerate (empty, looping, leaked template markup, "
        "gibberish), the candidate's paired with the baseline's per item, a paired binary gate "
        "at 5 points as for accuracy; and whether the changed answers mean the same: a judge's "
        "pairwise verdicts where the suite has a judge (margin 0.10), else identical answers "
        "(agreement, margin 0.05). A candidate that degenerates more fails; one whose answers "
        "changed with no judge to tell what they mean is inconclusive, never failed on wording."
    ),
    sources=(_DEGENERATION_SOURCE, _JUDGE_SOURCE),
)


class DatasetSuite(Suite):
    kind = "dataset"
    scores_answers = True
    version = "1"
    Params = DatasetParams
    requires = frozenset({"chat"})
    gate_default = _ACCURACY_GATE
    description = (
        "Your own prompts from a local JSON/JSONL/CSV/Parquet/Arrow file or a hub dataset, "
        "scored against a reference column or by agreement with the baseline."
    )
    params: DatasetParams

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        p = self.params
        self.requires = frozenset({p.api})  # type: ignore[misc]
        self._scorer = _Scorer(p)
        problem = self.sampling_problem()
        if problem is not None:
            raise ValueError(problem)
        self._warnings: list[str] = []
        self._built: list[Item] | None = None
        self._total: int | None = None
        """The rows the data holds (``details.items_available``: no advice asks for more)."""
        # Listed, not run (``suites list``): a local JSON Lines or CSV file's rows are counted
        # with the standard library (importing ``datasets`` brings pandas and pyarrow, about a
        # CPU-second); the items are built on first use. Anything else is read in full now.
        self._count = self._quick_count() if listing_only() else None
        if self._count is None:
            self._built = self._build_items()

    @property
    def _items(self) -> list[Item]:
        if self._built is None:
            self._built = self._build_items()
        return self._built

    @property
    def agreement(self) -> bool:
        """No reference column: the baseline's own answer is the reference."""
        return self.params.reference is None

    def default_gate(self) -> GateDefaults:
        # The metric depends on the params: accuracy with a reference column, else the
        # reference-free comparison the suite asks for (module docstring).
        mode = self.params.mode
        if mode == "judge":
            return _JUDGE_GATE
        if mode == "quality":
            return _QUALITY_GATE
        if mode == "similarity":
            return _similarity_gate(self.params.similarity)
        return _AGREEMENT_GATE if mode == "agreement" else _ACCURACY_GATE

    # -- scoring that needs both sides' answers (``_similarity``, ``_judge``)

    def helper_endpoints(self) -> dict[str, str]:
        p = self.params
        out = {}
        if p.judge is not None:
            out["judge"] = p.judge.endpoint
        if p.embeddings is not None:
            out["embeddings"] = p.embeddings.endpoint
        return out

    def helper_models(self) -> dict[str, str]:
        # ``judge.model`` picks the judge's model on an endpoint that serves several; the
        # report says when the endpoint served another (``model_differs``).
        p = self.params
        return {"judge": p.judge.model} if p.judge is not None and p.judge.model else {}

    def wants_after_pairs(self) -> bool:
        return self.agreement

    def min_items_to_pass(self, margin: float, alpha: float) -> int | None:
        if self.params.mode != "similarity":
            return super().min_items_to_pass(margin, alpha)
        # A candidate with no loss at all gives paired differences that are all 0, which the
        # continuous gate decides on the exact bound for a mean in [−1, 1]
        # (evalsvc.gates._gate.exact_constant_bounds): its lower end −1 + α^(1/n) is above −margin
        # from n > ln α / ln(1 − margin), 59 items at margin 0.05 and α 0.05.
        if margin <= 0:
            return None
        if margin >= 1:
            return MIN_N_CONTINUOUS
        return max(MIN_N_CONTINUOUS, math.floor(math.log(alpha) / math.log(1 - margin)) + 1)

    def snapshot_extra(self) -> dict[str, Any]:
        p = self.params
        extra: dict[str, Any] = {"judge": p.judge.snapshot()} if p.judge is not None else {}
        if self._total is not None:  # the rows the data holds (reuse_spec reads it)
            extra["items_available"] = self._total
        return extra

    @classmethod
    def reuse_spec(cls, spec: dict[str, Any]) -> dict[str, Any]:
        # The items are a seeded shuffle of the rows cut at n: an n at or past the rows the
        # data holds plans the same items as the spec without n when the default n covers them
        # too (``--samples 500`` on a 45-row file changed the key, so the blessing of the same
        # 45 items was not reused). Specs without a given n, or with an n below the rows, are
        # left as they are, so existing blessings keep their keys.
        out = {k: v for k, v in spec.items() if k != "items_available"}
        rows, params = spec.get("items_available"), dict(spec.get("params") or {})
        n = params.get("n")
        if not isinstance(rows, int) or not isinstance(n, int) or n < rows:
            return out
        default = DatasetParams.model_fields["n"].default
        if isinstance(default, int) and default >= rows:
            params.pop("n")
        else:
            params["n"] = rows
        return {**out, "params": params}

    async def after_pairs(
        self,
        items: Sequence[Item],
        samples: Sequence[Sample],
        helpers: dict[str, EndpointClient],
        *,
        emit: Emit,
        concurrency: int,
    ) -> None:
        # Here, not in ``run``: a comparison needs the baseline's answer and the other one,
        # which exist together only once every endpoint has answered the batch.
        changed = await score_pairs(items, samples, self._scorer.same, helpers.get("embeddings"))
        for sample in changed:
            await emit(sample)
        judge = self.params.judge
        if judge is None:
            return
        if "judge" not in helpers:
            # The service layer resolves every helper endpoint (``resolve_helpers``); a caller
            # of the runner that does not would otherwise see every pair as an error.
            raise RuntimeError(
                f"suite {self.name}: its judge endpoint {judge.endpoint!r} was not given to the "
                "runner (execute(helpers=...), evalsvc.services.runs.resolve_helpers)"
            )
        merged = list({s.key: s for s in [*samples, *changed]}.values())
        controls = sum("judge_control" in s.data for s in merged)
        await Judge(judge, helpers["judge"], concurrency).judge(items, merged, emit, controls)

    def item_count(self) -> int:
        if self._built is None and self._count is not None:
            return self._count
        return len(self._items)

    def load_warnings(self) -> list[str]:
        _ = self._items  # the warnings are found while building the items
        return list(self._warnings)

    def _quick_count(self) -> int | None:
        """The items a local ``.jsonl``/``.ndjson`` or ``.csv`` file yields, read with the
        standard library, after the same column check as a full load; None (read it in full)
        for any other source, and for a file the full load should judge (unreadable, empty,
        a line that is not a JSON object, a CSV line of blanks), so its error is unchanged.
        Rows as ``datasets`` counts them: blank lines skipped, JSON columns the union of
        the keys."""
        p = self.params
        if p.path is None:
            return None
        path = resolve_path(p.path, self.spec_base_dir())
        suffix = path.suffix.lower()
        fmt = p.format or _FORMATS.get(suffix)
        if fmt == "json" and suffix in (".jsonl", ".ndjson"):
            scan = _scan_json_lines
        elif fmt == "csv" and suffix == ".csv":
            scan = _scan_csv
        else:
            return None
        try:
            if not path.is_file():
                return None
            scanned = scan(path)
        except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError included
            return None
        if scanned is None or scanned[1] == 0:
            return None
        columns, total = scanned
        self._check_columns(columns, p.path)
        return min(total, p.n if p.n is not None else limits.MAX_ITEMS)

    # -- items

    def _build_items(self) -> list[Item]:
        p = self.params
        try:
            ds = load_rows(p, self.spec_base_dir())
            return self._items_from(ds)
        except DatasetError:
            raise
        except (OSError, TypeError, KeyError, IndexError) as exc:
            raise DatasetError(f"cannot build items: {_reason(exc)}") from None

    def spec_base_dir(self) -> Path | None:
        return self.spec.base_dir

    def _check_columns(self, columns: list[str], where: str) -> None:
        """Every column the params name is in the data (``DatasetError`` otherwise)."""
        p = self.params
        needed: dict[str, str] = {}
        if p.prompt.messages is not None:
            needed[p.prompt.messages] = "prompt.messages"
        if p.prompt.template is not None:
            for name in template_fields(p.prompt.template):
                if not (name == "choices" and p.choices is not None):
                    needed[name] = "prompt.template"
        for field, value in (
            ("reference", p.reference),
            ("id_column", p.id_column),
            ("choices", p.choices),
            ("max_tokens_column", p.max_tokens_column),
        ):
            if value is not None:
                needed[value] = field
        for s in p.slices:
            if s != PROMPT_LENGTH:
                needed[s] = "slices"
        missing = [f"{col!r} ({field})" for col, field in needed.items() if col not in columns]
        if missing:
            raise DatasetError(
                f"{where}: missing column{'s' if len(missing) > 1 else ''} "
                f"{', '.join(missing)}; the data has columns: {', '.join(columns) or '(none)'}"
            )

    def _items_from(self, ds: Any) -> list[Item]:
        p = self.params
        where = p.path if p.path is not None else f"hub:{p.hub}"
        self._check_columns(list(ds.column_names), where)
        total = len(ds)
        if total == 0:
            raise DatasetError(f"{where}: the data has no rows")
        self._total = total
        order = list(range(total))
        random.Random(f"{self.spec.seed}:dataset").shuffle(order)
        take = order[: min(total, p.n if p.n is not None else limits.MAX_ITEMS)]
        if p.n is not None and p.n > total and "n" in p.model_fields_set:
            # Asked for more rows than there are: it runs them all, and says so (a user who
            # sized the run for n items must not read a verdict on fewer as one on n). The
            # default n asks for nothing: a file of fewer rows than it simply runs them all.
            self._warnings.append(
                f"{self.name}: --samples/n {p.n} asks for more rows than {where} has: it runs "
                f"all {total}"
            )
        rows = ds.select(take).to_list()
        items: list[dict[str, Any]] = []
        seen: set[str] = set()
        for index, row in zip(take, rows, strict=True):
            row_id = str(row[p.id_column]) if p.id_column else f"row-{index}"
            if row_id in seen:
                raise DatasetError(f"{where}: id_column {p.id_column!r} repeats {row_id!r}")
            seen.add(row_id)
            items.append(self._item_parts(row, row_id))
        lengths = [it["length"] for it in items]
        length_labels = _length_labels(lengths, p.length_buckets)
        out = []
        for parts, length_label in zip(items, length_labels, strict=True):
            slices = {
                ("prompt length" if s == PROMPT_LENGTH else s): (
                    length_label if s == PROMPT_LENGTH else parts["slice_values"][s]
                )
                for s in p.slices
            }
            out.append(
                Item(
                    id=parts["id"],
                    prompt=parts["prompt"],
                    expected=parts["reference"],
                    metadata={
                        "slices": slices,
                        "choices": parts["choices"],
                        "max_tokens": parts["max_tokens"],
                        "prompt_chars": parts["length"],
                    },
                )
            )
        return out

    def _item_parts(self, row: dict[str, Any], row_id: str) -> dict[str, Any]:
        p = self.params
        choices: list[str] = []
        if p.choices is not None:
            raw = row[p.choices]
            if not isinstance(raw, list) or not raw or len(raw) > len(p.labels):
                raise DatasetError(
                    f"row {row_id}: column {p.choices!r} must hold a list of 1 to "
                    f"{len(p.labels)} options"
                )
            choices = [str(c) for c in raw]
        prompt: str | list[dict[str, str]]
        if p.prompt.messages is not None:
            prompt = _messages(row[p.prompt.messages], row_id)
            if p.prompt.system:
                prompt = [{"role": "system", "content": p.prompt.system}, *prompt]
            length = sum(len(m["content"]) for m in prompt)
        else:
            assert p.prompt.template is not None
            values = {
                name: "" if row.get(name) is None else str(row[name])
                for name in template_fields(p.prompt.template)
                if name in row
            }
            if choices:
                values["choices"] = render_choices(choices, p.labels)
            text = p.prompt.template.format(**values)
            if p.api == "chat":
                prompt = [{"role": "user", "content": text}]
                if p.prompt.system:
                    prompt.insert(0, {"role": "system", "content": p.prompt.system})
                length = sum(len(m["content"]) for m in prompt)
            else:
                prompt = (p.prompt.system + "\n\n" if p.prompt.system else "") + text
                length = len(prompt)
        reference: list[str] | None = None
        if p.reference is not None:
            try:
                reference = self._scorer.ref_keys(row[p.reference], choices)
            except DatasetError as exc:
                raise DatasetError(f"row {row_id}: column {p.reference!r}: {exc}") from None
        max_tokens = p.max_tokens
        if p.max_tokens_column is not None and row.get(p.max_tokens_column) is not None:
            value = row[p.max_tokens_column]
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 1:
                raise DatasetError(
                    f"row {row_id}: column {p.max_tokens_column!r} must be a positive number"
                )
            max_tokens = min(int(value), p.max_tokens)
        slice_values = {
            s: "(missing)" if row.get(s) is None else str(row[s])[:100]
            for s in p.slices
            if s != PROMPT_LENGTH
        }
        return {
            "id": row_id,
            "prompt": prompt,
            "reference": reference,
            "choices": choices,
            "max_tokens": max_tokens,
            "length": length,
            "slice_values": slice_values,
        }

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        return list(self._items)

    # -- running

    def expected_samples(self, items: Sequence[Item]) -> int:
        # The baseline's second pass (agreement mode) is not counted: the progress bars count
        # one answer per item per endpoint, and the gate sees one pair per item.
        return len(items) * self.samples_per_item

    def sampling_problem(self) -> str | None:
        if self.agreement and self.samples_per_item > 1:
            return (
                f"sampling: k = {self.samples_per_item} needs a reference column: without one "
                "the baseline's first answer is the reference, and k random answers have no "
                "single one; set params.reference, or sampling.k: 1"
            )
        return None

    def repeats(self, role: str) -> Sequence[int]:
        # Agreement mode: the baseline answers every item a second time (repeat 1), after
        # its first pass (the send loop is sample-major): the paired control of the
        # candidate's agreement (module docstring).
        if self.agreement and role == "baseline":
            return (0, 1)
        return super().repeats(role)

    async def run(
        self,
        items: Sequence[Item],
        client: EndpointClient,
        *,
        role: str,
        emit: Emit,
        done: set[tuple[str, int]],
        concurrency: int,
    ) -> None:
        if role == "baseline":
            # The baseline's first answer keeps the item's prompt (chat messages or text), so
            # the views show your own prompts without reading the dataset again (a hub dataset,
            # a file the server cannot see); once per item, not once per endpoint.
            prompts = {item.id: item.prompt for item in items}
            emit = _with_prompt(emit, prompts, Settings().max_output_chars)
        await super().run(
            items, client, role=role, emit=emit, done=done, concurrency=concurrency
        )

    async def solve(self, item: Item, client: EndpointClient) -> Sample:
        meta = item.metadata
        max_tokens = int(meta.get("max_tokens") or self.params.max_tokens)
        # The decoding (greedy, or the suite's sampling) is the client's: Suite.sample.
        if isinstance(item.prompt, list):
            out = await client.chat(item.prompt, max_tokens=max_tokens)
        else:
            out = await client.complete(item.prompt, max_tokens=max_tokens)
        choices = meta.get("choices") or []
        answer = self._scorer.key(out.text, choices) if out.ok else None
        score: float | None = None
        if not out.error:
            if self.agreement:
                score = float(answer is not None)
            else:
                refs = item.expected or []
                score = float(any(self._scorer.same(answer, r) for r in refs))
        return Sample(
            suite=self.name,
            item_id=item.id,
            endpoint="",
            output=out.text,
            score=score,
            prompt_tokens=out.prompt_tokens,
            completion_tokens=out.completion_tokens,
            latency_s=out.latency_s,
            error=out.error,
            data={
                "answer": answer,
                "reference": item.expected,
                "slices": meta.get("slices") or {},
                "prompt_chars": meta.get("prompt_chars"),
                "finish_reason": out.finish_reason,
                # Reference-free: the answer's degeneration signals, on every side alike
                # (``_degeneration``; ``compare: quality`` gates on them).
                **({"degeneration": degeneration_signals(out.text, out.finish_reason)}
                   if self.agreement and not out.error else {}),
            },
        )

    def slice_of(self, sample: Sample) -> dict[str, str]:
        slices = sample.data.get("slices") or {}
        return {str(k): str(v) for k, v in slices.items()}

    # -- presentation (the views call these with stored sample data and report entries)

    # The slices are one JSON object in the sample's data: the database hands it over as text.
    slice_fields = (("slices", "str"),)
    view_template = "dataset.html"

    @classmethod
    def slice_label(cls, data: dict[str, Any]) -> str | None:
        """``dimension label`` per slice dimension (``category math · prompt length <120``),
        from ``data["slices"]`` (a mapping, or its JSON text as the database returns it)."""
        slices = data.get("slices")
        if isinstance(slices, str):
            try:
                slices = json.loads(slices)
            except ValueError:
                return None
        if not isinstance(slices, dict) or not slices:
            return None
        return " · ".join(f"{dim} {slices[dim]}" for dim in sorted(slices))

    @classmethod
    def expected_answer(cls, data: dict[str, Any]) -> Any:
        # The reference column's value (or list of acceptable values); None in agreement mode.
        return data.get("reference")

    @classmethod
    def view_model(cls, view: ViewInput) -> dict[str, Any]:
        d = view.details
        return {"scorer": d.get("scorer"), "reference": d.get("reference"),
                "by_slice": d.get("by_slice") or []}

    @classmethod
    def findings(cls, entry: dict[str, Any]) -> list[Finding]:
        details = dict(entry.get("details") or {})
        if details.get("compare") in ("quality", "similarity", "judge"):
            # The gate's flip counts would read "correct → incorrect" for a similarity or a
            # judged preference: the reference-free findings say what changed instead.
            return reference_free_findings(details, entry.get("helpers"))
        return [*super().findings(entry), *reference_free_findings(details, entry.get("helpers"))]

    @classmethod
    def headline(cls, entry: dict[str, Any]) -> str | None:
        details = dict(entry.get("details") or {})
        return reference_free_headline(details) or super().headline(entry)

    @classmethod
    def sample_notes(cls, data: dict[str, Any]) -> list[dict[str, str]]:
        return reference_free_notes(data)

    # -- analysis

    def analyze(
        self,
        baseline: list[Sample],
        candidate: list[Sample],
        *,
        provenance: tuple[Provenance, Provenance] | None = None,
    ) -> Analysis:
        if not self.agreement:
            analysis = paired_scores(baseline, candidate, slicer=self.slice_of)
            analysis.details["scorer"] = self.params.scorer
            analysis.details["flips"] = flips(analysis.baseline, analysis.candidate)
            analysis.details["by_slice"] = by_slice(analysis)
        else:
            analysis = self._agreement(baseline, candidate)
        if self._total is not None:
            analysis.details["items_available"] = self._total
        return analysis

    def _agreement(self, baseline: list[Sample], candidate: list[Sample]) -> Analysis:
        """The reference-free analysis: per item the baseline's second answer and the
        candidate's, each compared with the baseline's first (agreement, similarity or the
        judge's preference, as ``params.mode`` says); the other comparisons are reported."""
        mode = self.params.mode
        first = {s.item_id: s for s in baseline if s.repeat == 0}
        second = {s.item_id: s for s in baseline if s.repeat == 1}
        cand = {s.item_id: s for s in candidate if s.repeat == 0}
        b: list[float] = []
        c: list[float] = []
        keys: list[str] = []
        tokens: list[tuple[str | None, str | None] | None] = []
        slices: dict[str, list[str]] = {}
        agree: tuple[list[float], list[float]] = ([], [])
        measures: dict[str, tuple[list[float], list[float]]] = {}
        judged: list[dict[str, Any]] = []
        aa: list[dict[str, Any]] = []
        examples: list[dict[str, Any]] = []
        # ``quality``: the degeneration signals of both sides' answers, and (with a judge) the
        # judge's per-item scores, with the items whose answers address the judge.
        deg_pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
        judge_b: list[float] = []
        judge_c: list[float] = []
        addressed: list[str] = []
        addressed_flags: list[bool] = []
        errors = 0
        for item_id in sorted(set(first) | set(second) | set(cand)):
            ref, again, other = first.get(item_id), second.get(item_id), cand.get(item_id)
            if any(s is None or s.error is not None or s.score is None for s in (ref, again, other)):
                errors += 1
                continue
            assert ref is not None and again is not None and other is not None
            pair_b, pair_c = pair_scores(ref, again, self._scorer.same), pair_scores(
                ref, other, self._scorer.same
            )
            verdict = other.data.get("judge")
            uses_judge = mode == "judge" or (mode == "quality" and self.params.judge is not None)
            if uses_judge:
                if not isinstance(verdict, dict) or verdict.get("error"):
                    errors += 1  # the judge failed on this pair (or never saw it)
                    continue
                pref = int(verdict["preference"])
                judge_b.append(0.0 if pref > 0 else 1.0)
                judge_c.append(0.0 if pref < 0 else 1.0)
                flagged = bool(verdict.get("addressed_judge"))
                addressed_flags.append(flagged)
                if flagged:
                    addressed.append(item_id)
                judged.append(verdict)
                aa_verdict = again.data.get("judge")
                if isinstance(aa_verdict, dict) and not aa_verdict.get("error"):
                    aa.append(aa_verdict)
            deg = (_degeneration(ref), _degeneration(other))
            deg_pairs.append(deg)
            if mode == "judge":
                b.append(judge_b[-1])
                c.append(judge_c[-1])
            elif mode == "quality":
                b.append(0.0 if deg[0]["degenerate"] else 1.0)
                c.append(0.0 if deg[1]["degenerate"] else 1.0)
            elif mode == "similarity":
                vb, vc = pair_b.get(self.params.similarity), pair_c.get(self.params.similarity)
                if vb is None or vc is None:
                    errors += 1  # no embedding for one of the answers
                    continue
                b.append(float(vb))
                c.append(float(vc))
            else:
                b.append(float(pair_b["same_answer"]))
                c.append(float(pair_c["same_answer"]))
            agree[0].append(float(pair_b["same_answer"]))
            agree[1].append(float(pair_c["same_answer"]))
            for m in ("rouge_l", "token_f1", "embedding"):
                if pair_b.get(m) is not None and pair_c.get(m) is not None:
                    measures.setdefault(m, ([], []))[0].append(float(pair_b[m]))
                    measures[m][1].append(float(pair_c[m]))
            if (not pair_c["same_answer"] or (isinstance(verdict, dict) and (
                    verdict.get("preference") or verdict.get("addressed_judge")))
                    or deg[1]["degenerate"]):
                examples.append(pair_example(item_id, ref, other, pair_c, verdict, deg))
            keys.append(item_id)
            tokens.append(first_divergent_token(ref.output, other.output))
            for dim, label in self.slice_of(ref).items():
                slices.setdefault(dim, []).append(label)
        analysis = Analysis(
            b,
            c,
            None,
            n_errors=errors,
            slices={d: v for d, v in slices.items() if len(v) == len(b)} or None,
            keys=keys,
            first_tokens=tokens,
            value_range=(0.0, 1.0) if mode == "similarity" else None,
        )
        d = analysis.details
        d["degeneration"] = degeneration_tally(deg_pairs)
        d["scorer"] = self.params.scorer
        d["reference"] = f"baseline ({mode})"
        d["compare"] = mode
        d["baseline_self_agreement"] = _mean(agree[0])
        d["candidate_agreement"] = _mean(agree[1])
        # The "flips" of the literature (arXiv 2407.09141) without a reference: answers that
        # changed (by the scorer's extraction) from the baseline's first answer.
        d["changed_answers"] = {
            "candidate": sum(x < 0.5 for x in agree[1]),
            "baseline_second_pass": sum(x < 0.5 for x in agree[0]),
            "n": len(agree[1]),
            "share": 1 - d["candidate_agreement"] if agree[1] else None,
        }
        d["similarity"] = {
            m: {"baseline": _mean(v[0]), "candidate": _mean(v[1])} for m, v in measures.items()
        }
        if self.params.judge is not None:
            controls = [
                s.data["judge_control"]
                for s in first.values()
                if isinstance(s.data.get("judge_control"), dict)
                and not s.data["judge_control"].get("error")
            ]
            d["judge"] = judge_summary(self.params.judge, judged, aa, controls)
            d["judge"]["addressed"] = {"n": len(addressed), "items": addressed[:50]}
        if mode == "judge":
            summary = d["judge"]
            if not summary["informative"] or addressed:
                # Slice gates only add fail calls; from a judge that cannot tell (or that
                # answers the judge talked to), none.
                analysis.slices = None
            analysis.gate_test = lambda gate, seed: judge_outcome(
                b, c, addressed_flags, summary, metric=gate.metric, margin=gate.margin or 0.0,
                alpha=gate.alpha, seed=seed,
            )
        elif mode == "quality":
            analysis.slices = None  # the verdict is two checks' (below), not one interval's
            judge_info = d.get("judge")
            agree_b, agree_c = list(agree[0]), list(agree[1])
            analysis.gate_test = lambda gate, seed: quality_outcome(
                b, c, agreement=(agree_b, agree_c), judged=(judge_b, judge_c, addressed_flags),
                judge=judge_info, gate=gate, seed=seed,
            )
        # Worst first: degenerate, judged worse, then the least similar changed answers.
        examples.sort(key=lambda e: (not e.get("degenerate"), e.get("preference") or 0,
                                     e.get("rouge_l") or 0.0))
        d["pair_examples"] = examples[:PAIR_EXAMPLES]
        # "lost": the baseline kept its answer and the candidate did not (agreement, similarity),
        # or the candidate was judged worse (judge); "gained" the other way round.
        d["flips"] = (flips(b, c) if mode not in ("similarity", "quality")
                      else flips(agree[0], agree[1]))
        d["by_slice"] = by_slice(analysis)
        return analysis


PAIR_EXAMPLES = 20
"""Changed or judged answers the report shows with their prompt (worst first)."""


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def pair_scores(first: Sample, other: Sample, same: Any) -> dict[str, Any]:
    """``other``'s comparison with the baseline's ``first`` answer: as the post-pass stored it
    (``data["vs_baseline"]``), else computed from the outputs (samples of a run stored before
    the post-pass existed; no embedding then)."""
    stored = other.data.get(PAIR_FIELD)
    if isinstance(stored, dict) and "same_answer" in stored:
        return stored
    return {
        "same_answer": bool(same(other.data.get("answer"), first.data.get("answer"))),
        "rouge_l": similarity("rouge_l", first.output, other.output),
        "token_f1": similarity("token_f1", first.output, other.output),
    }


def _degeneration(sample: Sample) -> dict[str, Any]:
    """The answer's degeneration record as ``solve`` stored it, else computed from the output
    (a sample stored before the signals existed)."""
    stored = sample.data.get("degeneration")
    if isinstance(stored, dict) and "degenerate" in stored:
        return stored
    return degeneration_signals(sample.output, sample.data.get("finish_reason"))


def pair_example(
    item_id: str, first: Sample, other: Sample, pair: dict[str, Any], verdict: Any,
    deg: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One changed (or judged) item as the report shows it: prompt, both answers, the
    similarities and the judge's verdicts with its reasons, each text cut to 600 characters."""
    cut = 600
    example: dict[str, Any] = {
        "item": item_id,
        "prompt": (prompt_text(first.data.get("prompt")) or "")[:cut],
        "baseline": first.output[:cut],
        "candidate": other.output[:cut],
        "same_answer": pair.get("same_answer"),
        "rouge_l": pair.get("rouge_l"),
        "token_f1": pair.get("token_f1"),
    }
    if deg is not None:
        example["degenerate"] = bool(deg[1].get("degenerate"))
        example["signals"] = {
            side: [k for k in DEGENERATION_SIGNALS if r.get(k)] for side, r in
            (("baseline", deg[0]), ("candidate", deg[1]))
        }
    if isinstance(verdict, dict):
        if verdict.get("addressed_judge"):
            example["addressed_judge"] = verdict.get("addressed_judge")
        example["preference"] = verdict.get("preference")
        example["consistent"] = verdict.get("consistent")
        example["verdicts"] = verdict.get("verdicts")
        example["reasons"] = [str(r)[-cut:] for r in verdict.get("reasons") or []]
    return example


def _with_prompt(emit: Emit, prompts: dict[str, Any], cap: int) -> Emit:
    """``emit`` that stores the item's prompt in the data of each first answer (repeat 0). A
    prompt longer than ``cap`` characters (``EVALSVC_MAX_OUTPUT_CHARS``, the bound on a stored
    output) is stored as its text cut there, with ``prompt_truncated`` and ``prompt_chars``."""

    async def emit_with_prompt(sample: Sample) -> None:
        if sample.repeat == 0 and sample.item_id in prompts:
            prompt = prompts[sample.item_id]
            extra: dict[str, Any] = {"prompt": prompt}
            text = prompt if isinstance(prompt, str) else prompt_text(prompt) or ""
            if len(text) > cap:
                extra = {"prompt": text[:cap], "prompt_truncated": True, "prompt_chars": len(text)}
            sample = sample.model_copy(update={"data": {**sample.data, **extra}})
        await emit(sample)

    return emit_with_prompt


def by_slice(analysis: Analysis) -> list[dict[str, Any]]:
    """Paired rates per slice label (each dimension apart): where a drop comes from."""
    rows: list[dict[str, Any]] = []
    for dim, labels in sorted((analysis.slices or {}).items()):
        counts = Counter(labels)
        for label in sorted(counts):
            idx = [i for i, lab in enumerate(labels) if lab == label]
            b = [analysis.baseline[i] for i in idx]
            c = [analysis.candidate[i] for i in idx]
            rows.append(
                {
                    "slice": dim,
                    "label": label,
                    "n": len(idx),
                    "baseline": sum(b) / len(b),
                    "candidate": sum(c) / len(c),
                    **flips(b, c),
                }
            )
    return rows
