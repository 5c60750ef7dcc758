"""``evalsvc suites list`` from the cache of the last listing (evalsvc.services.catalog_cache):
the same rows as a listing built from the catalog, a module set that holds no suite kind and no
data-science, database or HTTP library, and a rebuild whenever what the rows come from changes
(a suite file, a suite's data file outside the catalog, a broken file's warning replayed).

The tests assert which modules a command loaded and what it printed, never its time
(docs/benchmarks.md, "CLI start-up", has the timings). Each command runs in a fresh interpreter
with its own ``EVALSVC_HOME``, as a user's would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

# Loaded by building the rows (the kinds, their gates and statistics), never by a cached listing.
NOT_LOADED = (
    "numpy", "scipy", "sqlalchemy", "alembic", "aiohttp", "fastapi", "pandas", "pyarrow",
    "datasets", "yaml", "jsonschema", "evalsvc.suites", "evalsvc.domain", "evalsvc.gates",
    "evalsvc.stats",
)

_PROBE = """
import contextlib, io, json, sys
from evalsvc.cli.main import app
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        app(sys.argv[1:], prog_name="evalsvc")
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue(),
                  "modules": sorted(sys.modules)}))
"""


def _run(home: Path, *args: str, suites_dir: Path | None = None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALSVC_")}
    env["EVALSVC_HOME"] = str(home)
    env["COLUMNS"] = "200"
    if suites_dir is not None:
        env["EVALSVC_SUITES_DIR"] = str(suites_dir)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True, text=True, timeout=180, check=True, env=env,
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _loaded(result: dict[str, Any]) -> list[str]:
    mods = set(result["modules"])
    return [m for m in NOT_LOADED if m in mods or any(x.startswith(m + ".") for x in mods)]


def _rows(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assert result["code"] == 0, result["err"]
    return {r["name"]: r for r in json.loads(result["out"])}


def _suite(path: Path, data: str, n: int | None, name: str = "mine") -> None:
    params = {"path": data, "n": n, "prompt": {"template": "{question}"}, "reference": "answer"}
    path.write_text(yaml.safe_dump({"name": name, "kind": "dataset", "seed": 3, "params": params}))


def test_a_cached_listing_equals_a_built_one_and_loads_no_kind(tmp_path: Path) -> None:
    home = tmp_path / "home"
    built = _run(home, "suites", "list", "--json")
    assert (home / "cache" / "catalog-listing.json").is_file()
    cached = _run(home, "suites", "list", "--json")
    assert cached["out"] == built["out"]  # byte for byte
    assert "needle-smoke" in _rows(cached) and "gpu" in _rows(cached)
    assert _loaded(built), "the first listing builds the rows (imports the kinds)"
    assert _loaded(cached) == [], f"a cached listing imported {_loaded(cached)}"
    assert not any(m.startswith("evalsvc.suites.kinds") for m in cached["modules"])

    table = _run(home, "suites", "list")
    assert table["code"] == 0 and "needle-smoke" in table["out"] and _loaded(table) == []

    # The rows are what the service gives the REST API (which lists without the cache).
    from evalsvc.services.catalog import suite_rows

    env_rows = {r["name"]: r for r in json.loads(json.dumps(suite_rows()))}
    assert {k: v for k, v in _rows(cached).items() if k in env_rows} == env_rows


def test_version_and_help_load_only_what_they_show(tmp_path: Path) -> None:
    version = _run(tmp_path, "--version")
    assert version["code"] == 0 and version["out"].startswith("evalsvc ")
    # --version answers before any command's module is imported.
    assert [m for m in version["modules"] if m.startswith("evalsvc.cli.")] == ["evalsvc.cli.main"]
    helped = _run(tmp_path, "--help")
    for command in ("compare", "gate-logs", "plan", "suites", "runs", "local", "tokens"):
        assert command in helped["out"]
    typo = _run(tmp_path, "sute")
    assert typo["code"] == 2 and "Did you mean 'suites'?" in typo["err"]


def test_the_cache_follows_the_catalog_and_the_data(tmp_path: Path) -> None:
    home, mine, data = tmp_path / "home", tmp_path / "suites", tmp_path / "data"
    mine.mkdir()
    data.mkdir()
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(30)]
    qa = data / "qa.jsonl"  # outside the catalog: found by the build, not by the catalog walk
    qa.write_text("\n".join(json.dumps(r) for r in rows[:12]) + "\n")
    _suite(mine / "mine.yaml", str(qa), None)

    first = _rows(_run(home, "suites", "list", "--json", suites_dir=mine))
    assert first["mine"]["items"] == 12
    assert _loaded(_run(home, "suites", "list", "--json", suites_dir=mine)) == []  # cached

    qa.write_text("\n".join(json.dumps(r) for r in rows) + "\n")  # the data file grows
    assert _rows(_run(home, "suites", "list", "--json", suites_dir=mine))["mine"]["items"] == 30

    _suite(mine / "mine.yaml", str(qa), 7)  # the suite file changes
    (mine / "broken.yaml").write_text("name: broken\nkind: no-such-kind\n")  # a file is added
    changed = _run(home, "suites", "list", "--json", suites_dir=mine)
    assert _rows(changed)["mine"]["items"] == 7
    assert "broken" not in _rows(changed) and "broken.yaml" in changed["err"]
    again = _run(home, "suites", "list", "--json", suites_dir=mine)
    assert _loaded(again) == [] and again["out"] == changed["out"]
    assert again["err"] == changed["err"]  # the skipped file's warning, replayed

    (mine / "mine.yaml").unlink()
    assert "mine" not in _rows(_run(home, "suites", "list", "--json", suites_dir=mine))
    # Another catalog directory is another state: listed from its own build.
    assert "mine" not in _rows(_run(home, "suites", "list", "--json"))
