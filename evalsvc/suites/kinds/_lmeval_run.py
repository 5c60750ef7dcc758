"""An lm-eval suite's evaluations on one endpoint in one lm-eval process: run as a script by
lm-eval's Python.

``python _lmeval_run.py <config.json>`` evaluates one task with lm-eval's documented Python API
(``lm_eval.simple_evaluate`` with a ``TaskManager``, the "external library usage" of its README)
and writes the logs lm-eval's command line writes with ``--output_path`` and ``--log_samples``
(an ``EvaluationTracker``):

- **greedy** (``"greedy": true``): one evaluation, called as the ``lm_eval`` command calls
  ``simple_evaluate`` (the model built from its name and arguments, the command line's batch
  size, device and seeds, the tracker passed in, so ``results_*.json`` names the model and the
  logs land in ``<output>/<model>/``): the same requests, per-document records and files as
  ``lm_eval --model M --model_args A --tasks T --include_path P --log_samples --output_path O
  --limit n --seed S [--num_fewshot F] [--apply_chat_template]``;
- **sampled** (``runs``): once per sample index, each run with that sample's generation
  arguments, each run's logs under ``<output>/sample-<r>/``. A run's directory exists only once
  it is complete, so after a failure the caller keeps the samples already finished.

Why not the ``lm_eval`` command: it indexes lm-eval's few thousand task files before it starts
(about 10 of its 13 CPU-seconds for the bundled ``evalsvc_gen`` on a 2-core host); here a task
of the include directory is first looked up there alone (as the preflight does; a task there
wins over lm-eval's own of that name either way), and the task manager, the model and the
imports are made once, so each further sample costs what its requests cost (40 documents: 2.9
CPU-s for one evaluation, 3.0–3.4 for 3 samples, 12.8–13.1 for a command; docs/benchmarks.md).

The config (JSON, written by ``evalsvc.suites.kinds.lmeval``): ``model``, ``model_args``
(lm-eval's ``key=value,...`` string), ``engine`` (register ``evalsvc-engine-completions`` first,
``_lmeval_engine.py`` beside this file), ``task``, ``include`` (or null), ``limit``,
``num_fewshot`` (or null), ``seed`` (lm-eval's four seeds, as ``--seed S``),
``apply_chat_template``, ``output``, and ``greedy: true`` or ``runs``: ``[{"repeat": r,
"gen_kwargs": {...}}]``.

Contract: this file never imports evalsvc (lm-eval's Python may be another environment); an
exception ends it with a traceback on stderr (the caller's log) and exit status 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def task_manager(task: str, include: str | None, metadata: dict[str, Any]) -> Any:
    """lm-eval's task index: the include directory alone when it has the task, else with
    lm-eval's own tasks; ``metadata`` (the model arguments, as the command line passes them)
    reaches every task it loads."""
    from lm_eval.tasks import TaskManager  # type: ignore[import-not-found]

    if include:
        alone = TaskManager(include_path=include, include_defaults=False, metadata=metadata)
        if task in alone.all_tasks:
            return alone
        return TaskManager(include_path=include, metadata=metadata)
    return TaskManager(metadata=metadata)


def cli_model_args(text: str) -> dict[str, Any]:
    """``--model_args`` as lm-eval's command line parses it (``lm_eval._cli.utils``: JSON, or
    ``key=value`` pairs split outside brackets and quotes, ``none`` kept a string), else as
    ``simple_evaluate`` does (a version without that module)."""
    try:
        from lm_eval._cli.utils import (  # type: ignore[import-not-found]
            key_val_to_dict,
            try_parse_json,
        )
    except ImportError:
        from lm_eval.utils import simple_parse_args_string  # type: ignore[import-not-found]

        return dict(simple_parse_args_string(text))
    parsed = try_parse_json(text)
    return dict(parsed) if isinstance(parsed, dict) else dict(key_val_to_dict(text))


def greedy(cfg: dict[str, Any], tasks: Any, model_args: dict[str, Any]) -> None:
    """One evaluation, as ``lm_eval``'s command line (``lm_eval._cli.run``) runs it: the same
    ``simple_evaluate`` arguments (its defaults where evalsvc passes no flag), the tracker
    passed in, the results and samples saved by it, the results table printed to the log."""
    from lm_eval import simple_evaluate  # type: ignore[import-not-found]
    from lm_eval.loggers import EvaluationTracker  # type: ignore[import-not-found]
    from lm_eval.utils import make_table

    names = tasks.match_tasks([cfg["task"]])  # as the command line resolves --tasks
    if not names:
        raise ValueError(f"Tasks not found: {cfg['task']}")
    chat = bool(cfg.get("apply_chat_template"))
    seed = int(cfg["seed"])
    tracker = EvaluationTracker(output_path=cfg["output"])
    results = simple_evaluate(
        model=cfg["model"],
        model_args=model_args,
        tasks=names,
        num_fewshot=cfg.get("num_fewshot"),
        batch_size=1,  # the command line's defaults, recorded in results_*.json as it does
        device="cuda:0",
        limit=float(cfg["limit"]),  # --limit is a float on the command line
        log_samples=True,
        evaluation_tracker=tracker,
        apply_chat_template=chat,
        fewshot_as_multiturn=True if chat else None,
        gen_kwargs={},  # no --gen_kwargs: the task's own generation arguments
        task_manager=tasks,
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
        metadata=dict(model_args),
    )
    if results is None:  # not rank 0: nothing to write (never so for an API model)
        return
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for name in results["configs"]:
        tracker.save_results_samples(task_name=name, samples=samples[name])
    print(make_table(results), flush=True)


def sampled(cfg: dict[str, Any], tasks: Any, model_args: str) -> None:
    """One evaluation per sample index with one model, each run's logs whole or absent."""
    from lm_eval import simple_evaluate
    from lm_eval.api.registry import get_model  # type: ignore[import-not-found]
    from lm_eval.loggers import EvaluationTracker

    lm = get_model(cfg["model"]).create_from_arg_string(model_args)
    chat = bool(cfg.get("apply_chat_template"))
    seed = int(cfg["seed"])
    for run in cfg["runs"]:
        results = simple_evaluate(
            model=lm,
            tasks=[cfg["task"]],
            task_manager=tasks,
            num_fewshot=cfg.get("num_fewshot"),
            limit=cfg["limit"],
            log_samples=True,
            gen_kwargs=run["gen_kwargs"],
            apply_chat_template=chat,
            fewshot_as_multiturn=chat,  # the command line's default
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
        )
        # Written into a scratch name and renamed: a sample's directory is whole or absent.
        final = Path(cfg["output"]) / f"sample-{run['repeat']}"
        partial = final.with_name(final.name + ".partial")
        tracker = EvaluationTracker(output_path=str(partial))
        samples = results.pop("samples")
        tracker.save_results_aggregated(results=results, samples=samples)
        for name in results["configs"]:
            tracker.save_results_samples(task_name=name, samples=samples[name])
        partial.rename(final)
        print(f"sample {run['repeat']} done", flush=True)


def main(config_path: str) -> None:
    cfg = json.loads(Path(config_path).read_text(encoding="utf-8"))
    if cfg.get("greedy"):
        from lm_eval.utils import setup_logging

        setup_logging()  # the command line's log lines
    if cfg.get("engine"):
        sys.path.insert(0, str(Path(__file__).parent))
        from _lmeval_engine import register  # type: ignore[import-not-found]

        register()
    from lm_eval.utils import simple_parse_args_string

    if cfg.get("greedy"):
        model_args = cli_model_args(cfg["model_args"])
        greedy(cfg, task_manager(cfg["task"], cfg.get("include"), dict(model_args)), model_args)
    else:
        metadata = simple_parse_args_string(cfg["model_args"])
        sampled(cfg, task_manager(cfg["task"], cfg.get("include"), metadata), cfg["model_args"])


if __name__ == "__main__":
    main(sys.argv[1])
