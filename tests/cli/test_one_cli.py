"""One resolver for run ids: every command that names a stored run takes its id or a unique
8+ character prefix, as ``runs list`` prints it (``baselines bless`` and ``plan --pilot-run``
took full ids only), and one way to name a suite (`suites show` takes a file, as `compare` and
`plan` do). A real run against the loopback fault server's well-formed endpoint."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.cli import run_cli
from tests.fixtures.runs import stored_ok_run

SUITE = "name: tiny-prefix\nkind: reasoning\nseed: 3\nparams:\n  n: 10\n  max_tokens: 8\n"


def test_bless_and_plan_take_a_run_id_prefix(tmp_path: Path) -> None:
    suite = tmp_path / "tiny-prefix.yaml"
    suite.write_text(SUITE)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    report = stored_ok_run(suite, url)
    run_id = str(report["run_id"])
    env = {"EVALSVC_DATABASE_URL": url}

    plan = run_cli("plan", "-s", str(suite), "--pilot-run", run_id[:8], "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)[0]["suite"] == "tiny-prefix"
    short = run_cli("plan", "-s", str(suite), "--pilot-run", run_id[:5], env=env)
    assert short.returncode == 2 and "at least 8 characters" in short.stderr, short.stderr

    # Labels, not roles: `runs show` names each side as every view does.
    shown = run_cli("runs", "show", run_id[:8], env={**env, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    progress = [line for line in shown.stdout.splitlines() if "progress:" in line]
    assert len(progress) == 2 and "candidate:0" not in shown.stdout, shown.stdout
    assert "tiny-prefix · baseline 127.0.0.1:" in progress[0]
    assert "tiny-prefix · candidate 127.0.0.1:" in progress[1] and "10/10" in progress[1]

    bless = run_cli("baselines", "bless", run_id[:8], "--json", env=env)
    assert bless.returncode == 0, bless.stderr
    (made,) = json.loads(bless.stdout)
    assert made["run_id"] == run_id  # stored under the full id, never the prefix
    none = run_cli("baselines", "bless", "ffffffff", env=env)
    assert none.returncode == 2 and "no run 'ffffffff'" in none.stderr, none.stderr


def test_suites_show_takes_a_suite_file_like_compare_and_plan(tmp_path: Path) -> None:
    suite = tmp_path / "own.yaml"
    suite.write_text(SUITE)
    shown = run_cli("suites", "show", str(suite), "--json")
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["path"] == str(suite) and detail["row"]["name"] == "tiny-prefix"
    assert detail["yaml"] == SUITE and detail["plan"][0]["suite"] == "tiny-prefix"
    text = run_cli("suites", "show", str(suite))
    assert text.returncode == 0 and text.stdout.startswith("tiny-prefix (reasoning)"), text.stdout
    missing = run_cli("suites", "show", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "no suite file" in missing.stderr, missing.stderr


def test_compare_help_says_margin_and_alpha_only_tighten_and_every_exit_code() -> None:
    r = run_cli("compare", "--help", env={"COLUMNS": "400"})
    text = " ".join(r.stdout.split())
    assert r.returncode == 0
    assert "Exit 0 pass, 1 fail, 2 usage or configuration error, 3 inconclusive, 4 " \
           "infrastructure error, 5 non-comparable" in text, text
    assert text.count("tighten only") >= 2  # --margin and --alpha


def test_suites_show_gives_the_suites_own_margin_before_the_kind_defaults_reason() -> None:
    """``suites show gpu`` read "a tighter 3-point margin is affordable" beside the 5-point
    margin lmeval-mc-gpu sets: a suite policy's margin now says so first."""
    r = run_cli("suites", "show", "gpu", "--json")
    assert r.returncode == 0, r.stderr
    gates = json.loads(r.stdout)["gates"]
    lm = gates["lmeval-mc-gpu"]
    assert lm["margin"] == 0.05 and lm["origin"]["margin"] == "suite policy"
    assert lm["rationale"].startswith("margin 0.05 set by this suite"), lm["rationale"]
    for name, gate in gates.items():  # the kind's own reason stays where its margin is used
        if gate["origin"].get("margin") != "suite policy":
            assert not gate["rationale"].startswith("margin "), name


def test_from_requests_skips_bad_lines_when_asked_and_says_when_a_prompt_changed(
    tmp_path: Path,
) -> None:
    """One bad line refused the whole log with no way past it; a request's ``tools`` were
    dropped without a word that the replayed prompt is not the one the model saw."""
    good = {"messages": [{"role": "user", "content": "What is 2 + 2?"}], "max_tokens": 16}
    tools = {"messages": [{"role": "user", "content": "Weather in Oslo?"}],
             "tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}]}
    log = tmp_path / "requests.jsonl"
    log.write_text(json.dumps(good) + "\n{not json\n" + json.dumps(tools) + "\n[1, 2]\n")
    refused = run_cli("suites", "from-requests", str(log), "-o", str(tmp_path / "a.yaml"))
    assert refused.returncode == 2, refused.stderr
    assert f"{log}:2: not JSON" in refused.stderr and "--skip-bad-lines" in refused.stderr
    assert not (tmp_path / "a.yaml").exists()

    ok = run_cli("suites", "from-requests", str(log), "-o", str(tmp_path / "b.yaml"),
                 "--skip-bad-lines", env={"COLUMNS": "300"})
    assert ok.returncode == 0, ok.stderr
    text = " ".join(ok.stderr.split())
    assert "skipped 2: unreadable line (not a JSON object) (lines 2, 4)" in text, text
    assert "changed prompts: 1 requests offered tools" in text, text
    summary = json.loads(run_cli("suites", "from-requests", str(log), "-o",
                                 str(tmp_path / "c.yaml"), "--skip-bad-lines", "--json").stdout)
    assert summary["written"] == 2 and summary["bad_lines"] == [2, 4]
    assert summary["changed_prompts"] == {"tools": 1}
    import yaml

    spec = yaml.safe_load((tmp_path / "c.yaml").read_text())
    assert "replayed without tools (1 requests)" in spec["description"], spec["description"]
