"""``/baselines`` and ``evalsvc baselines`` over runs the real runner made (in-process
``evalsvc.services.runs.compare`` against loopback servers of known behaviour,
``tests/runner/level_server.py``), on SQLite and PostgreSQL: bless (admin), list, show, revoke;
a reader may not bless; an unknown run is 404, two runs 422 with the fix; the CLI blesses and
lists the same rows; ``options.blessed_baseline`` is a run option over REST; the run page's
button blesses (same-origin form, admin token) and the next run's page says it reused it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.services import runs
from tests.fixtures.cli import run_cli
from tests.runner.level_server import level_server

from .conftest import Api

SEED = 5
SUITE = f"""\
name: rest-bless
kind: reasoning
seed: {SEED}
params:
  n: 20
  max_tokens: 16
  tasks: [{{family: arithmetic, level: 1}}]
"""


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Any, Any]]:
    acc = dict.fromkeys(range(1, 6), 0.8)
    with level_server(acc, [SEED], per_level=30) as b, level_server(acc, [SEED], per_level=30) as c:
        yield b, c


def _runs(api: Api, pair: tuple[Any, Any], tmp_path: Path, n: int) -> list[str]:
    suite = tmp_path / "rest-bless.yaml"
    suite.write_text(SUITE)
    spec = RunSpec(baseline=EndpointRef(url=pair[0].url), candidates=[EndpointRef(url=pair[1].url)],
                   suites=[str(suite)], options=RunOptions(concurrency=4))
    return [runs.compare(spec, store=api.store)["run_id"] for _ in range(n)]


def test_bless_list_show_revoke_over_rest_and_cli(api: Api, pair: Any, tmp_path: Path) -> None:
    ids = _runs(api, pair, tmp_path, 3)
    with api.client("read") as reader:
        assert reader.post("/baselines", json={"runs": ids[:1]}).status_code == 403
    with api.client("admin") as admin:
        two = admin.post("/baselines", json={"runs": ids[:2]})
        assert two.status_code == 422 and "at least 3 runs" in two.json()["detail"]
        unknown = admin.post("/baselines", json={"runs": ["nosuchrun"]})
        assert unknown.status_code == 404 and "evalsvc runs list" in unknown.json()["detail"]
        made = admin.post("/baselines", json={"runs": ids, "note": "weekly"})
        assert made.status_code == 201, made.text
        (blessing,) = made.json()
        assert blessing["run_id"] == ids[0] and blessing["blessed_by"] == "t-admin"
        assert blessing["noise"]["runs"] == 3 and blessing["stale"] is False
    with api.client("read") as reader:
        assert [b["id"] for b in reader.get("/baselines").json()] == [blessing["id"]]
        shown = reader.get(f"/baselines/{blessing['id']}").json()
        assert shown["key"]["suite"] == "rest-bless" and shown["items"] == 20
        assert reader.get("/baselines/nosuch").status_code == 404

    env = {"EVALSVC_DATABASE_URL": api.db_url}
    listed = run_cli("baselines", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [b["id"] for b in json.loads(listed.stdout)] == [blessing["id"]]
    cli = run_cli("baselines", "bless", ids[1], "--note", "from the CLI", env=env)
    assert cli.returncode == 0 and "blessed" in cli.stderr, cli.stderr
    refused = run_cli("baselines", "bless", ids[0], "--suite", "nosuch", env=env)
    assert refused.returncode == 2 and "has no suite nosuch" in refused.stderr

    with api.client("admin") as admin:
        gone = admin.post(f"/baselines/{blessing['id']}/revoke")
        assert gone.status_code == 200 and gone.json()["revoked_by"] == "t-admin"
    with api.client("read") as reader:
        left = reader.get("/baselines").json()
        assert blessing["id"] not in [b["id"] for b in left] and len(left) == 1


def test_the_opt_out_is_a_run_option(api: Api, pair: Any) -> None:
    body = {"baseline": {"url": pair[0].url}, "candidates": [{"url": pair[1].url}],
            "suites": ["reasoning-smoke"], "options": {"blessed_baseline": False}}
    with api.client("submit") as submitter:
        made = submitter.post("/runs", json=body)
        assert made.status_code in (201, 202), made.text
        run = api.store.get_run(made.json()["id"])
        assert run is not None and run.spec.options.blessed_baseline is False
        wrong = submitter.post("/runs", json={**body, "options": {"blessed_baseline": "maybe"}})
        assert wrong.status_code == 422


def _csrf(html: str) -> str:
    found = re.search(r'id="bless-form">\s*<input type="hidden" name="csrf" value="([^"]+)"', html)
    assert found is not None, "the run page offers no bless form"
    return found.group(1)


def test_the_run_page_blesses_and_shows_the_reuse(api: Api, pair: Any, tmp_path: Path) -> None:
    [first] = _runs(api, pair, tmp_path, 1)
    with httpx.Client(base_url=api.base_url, cookies={"evalsvc_token": api.tokens["read"]}) as web:
        token = _csrf(web.get(f"/runs/{first}").text)
        refused = web.post(f"/runs/{first}/bless", data={"csrf": token})
        assert refused.status_code == 403 and "lacks the &#39;admin&#39; scope" in refused.text
    with httpx.Client(base_url=api.base_url, cookies={"evalsvc_token": api.tokens["admin"]}) as web:
        page = web.get(f"/runs/{first}").text
        assert "Bless baseline" in page
        stale = web.post(f"/runs/{first}/bless", data={"csrf": "not-the-token"})
        assert stale.status_code == 403
        done = web.post(f"/runs/{first}/bless", data={"csrf": _csrf(page)},
                        follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"].endswith("#baseline")
        (blessing,) = api.store.blessed.list_all()
        assert blessing["run_id"] == first and blessing["blessed_by"] == "t-admin"
        page = web.get(f"/runs/{first}").text
        assert "Refresh blessed baseline" in page and blessing["id"] in page
        [second] = _runs(api, pair, tmp_path, 1)
        page = web.get(f"/runs/{second}").text
        assert f"baseline reused from blessing {blessing['id']}" in page
