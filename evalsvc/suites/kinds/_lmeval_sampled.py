"""A sampled lm-eval suite's k samples in one lm-eval process: run as a script by lm-eval's Python.

``python _lmeval_sampled.py <config.json>`` evaluates one task once per sample index with
lm-eval's documented Python API (``lm_eval.simple_evaluate`` with a ``TaskManager``, the
"external library usage" of its README), each run with that sample's generation arguments, and
writes each run's logs as lm-eval's command line does with ``--log_samples`` (an
``EvaluationTracker``) under ``<output>/sample-<r>/``. A run's directory exists only once it is
complete, so after a failure the caller keeps the samples already finished.

Why not one ``lm_eval`` command per sample index: each command indexes lm-eval's few thousand
task files before it starts (about 10 of its 13 CPU-seconds for the bundled
``evalsvc_gen`` on a 2-core host); here the task manager, the model and the imports are made
once, a task of the include directory is first looked up there alone (as the preflight does),
and each further sample costs what its requests cost (40 documents: 3.0–3.4 CPU-s for 3
samples in one process, 12.8–13.1 for each command; docs/benchmarks.md).

The config (JSON, written by ``evalsvc.suites.kinds.lmeval``): ``model``, ``model_args`` (lm-eval's
``key=value,...`` string), ``engine`` (register ``evalsvc-engine-completions`` first,
``_lmeval_engine.py`` beside this file), ``task``, ``include`` (or null), ``limit``,
``num_fewshot`` (or null), ``seed`` (lm-eval's four seeds, as ``--seed S``),
``apply_chat_template``, ``output`` and ``runs``: ``[{"repeat": r, "gen_kwargs": {...}}]``.

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


def main(config_path: str) -> None:
    cfg = json.loads(Path(config_path).read_text(encoding="utf-8"))
    if cfg.get("engine"):
        sys.path.insert(0, str(Path(__file__).parent))
        from _lmeval_engine import register  # type: ignore[import-not-found]

        register()
    from lm_eval import simple_evaluate  # type: ignore[import-not-found]
    from lm_eval.api.registry import get_model  # type: ignore[import-not-found]
    from lm_eval.loggers import EvaluationTracker  # type: ignore[import-not-found]
    from lm_eval.utils import simple_parse_args_string  # type: ignore[import-not-found]

    metadata = simple_parse_args_string(cfg["model_args"])
    tasks = task_manager(cfg["task"], cfg.get("include"), metadata)
    lm = get_model(cfg["model"]).create_from_arg_string(cfg["model_args"])
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


if __name__ == "__main__":
    main(sys.argv[1])
