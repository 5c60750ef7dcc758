"""The ``dataset`` kind without endpoints: loading, sampling, prompts, scorers, refusals and the
agreement pairing; and ``suites from-requests`` (production replay)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from evalsvc.cli.main import app
from evalsvc.domain import Provenance, Sample
from evalsvc.suites import SuiteError, catalog_dir, load_suite
from evalsvc.suites.kinds.dataset import DatasetParams, _length_labels, _Scorer, normalize

REPO = Path(__file__).resolve().parents[2]
QA = Path(catalog_dir()) / "data" / "dataset" / "qa.jsonl"


def cli(*args: str) -> Any:
    """The real CLI in-process (a subprocess costs ~20 s of imports on the shared test host)."""
    return CliRunner().invoke(app, list(args))

# A small multiple-choice set written here (capitals), turned into Parquet by the tests.
CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Japan", "Tokyo"), ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Russia", "Moscow"),
    ("China", "Beijing"), ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Norway", "Oslo"),
    ("Poland", "Warsaw"), ("Austria", "Vienna"), ("Ireland", "Dublin"), ("Kenya", "Nairobi"),
    ("Peru", "Lima"), ("Cuba", "Havana"), ("Thailand", "Bangkok"), ("Sweden", "Stockholm"),
]


def capitals_rows(seed: int = 5) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i, (country, capital) in enumerate(CAPITALS):
        others = rng.sample([c for _, c in CAPITALS if c != capital], 3)
        choices = [capital, *others]
        rng.shuffle(choices)
        rows.append(
            {
                "qid": f"cap-{i}",
                "country": country,
                "region": "Europe" if i % 2 else "World",
                "question": f"What is the capital of {country}?",
                "choices": choices,
                "answer": choices.index(capital),
            }
        )
    return rows


def write_yaml(path: Path, params: dict[str, Any], name: str = "ds", **extra: Any) -> Path:
    path.write_text(
        yaml.safe_dump({"name": name, "kind": "dataset", "seed": 3, "params": params, **extra})
    )
    return path


def mc_params(data: str) -> dict[str, Any]:
    return {
        "path": data,
        "id_column": "qid",
        "prompt": {"template": "{question}\n{choices}\nAnswer with the letter."},
        "reference": "answer",
        "scorer": "choice",
        "choices": "choices",
        "slices": ["region", "prompt_length"],
        "n": 12,
    }


def test_shipped_qa_file_is_the_generator_output() -> None:
    spec = importlib.util.spec_from_file_location("make_qa", REPO / "scripts/make_dataset_qa.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped = [json.loads(line) for line in QA.read_text().splitlines()]
    assert shipped == module.rows()
    assert len(shipped) == 300 and len({r["question"] for r in shipped}) == 300
    for row in shipped:  # every answer checks out against its question
        q, a = row["question"], int(row["answer"])
        if row["category"] == "addition":
            x, y = map(int, q.removeprefix("What is ").rstrip("?").split(" + "))
            assert a == x + y
        elif row["category"] == "subtraction":
            x, y = map(int, q.removeprefix("What is ").rstrip("?").split(" - "))
            assert a == x - y >= 0


def test_catalog_suite_samples_seeded_rows_with_slices() -> None:
    suite = load_suite("dataset-qa")
    items = asyncio.run(suite.plan(None, Provenance()))  # type: ignore[arg-type]
    assert len(items) == suite.item_count() == 100
    assert len({it.id for it in items}) == 100
    again = asyncio.run(load_suite("dataset-qa").plan(None, Provenance()))  # type: ignore[arg-type]
    assert [it.id for it in again] == [it.id for it in items]
    # --samples 40 is a prefix of the 100 (the same seeded permutation).
    small = suite.with_overrides(samples=40, seed=None)
    assert [it.id for it in asyncio.run(small.plan(None, Provenance()))] == [  # type: ignore[arg-type]
        it.id for it in items[:40]
    ]
    other = suite.with_overrides(samples=None, seed=1)
    assert [it.id for it in asyncio.run(other.plan(None, Provenance()))] != [  # type: ignore[arg-type]
        it.id for it in items
    ]
    rows = {json.loads(x)["id"]: json.loads(x) for x in QA.read_text().splitlines()}
    first = items[0]
    assert first.prompt == [
        {"role": "user", "content": rows[first.id]["question"] + " Answer with a number."}
    ]
    assert first.expected == [rows[first.id]["answer"]]
    cats = {it.metadata["slices"]["category"] for it in items}
    assert cats == {"addition", "subtraction", "multiplication", "counting", "units"}
    buckets = {it.metadata["slices"]["prompt length"] for it in items}
    assert 2 <= len(buckets) <= 3


def test_parquet_multiple_choice(tmp_path: Path) -> None:
    pd.DataFrame(capitals_rows()).to_parquet(tmp_path / "caps.parquet")
    suite = load_suite(str(write_yaml(tmp_path / "mc.yaml", mc_params("caps.parquet"))),
                       allow_paths=True)
    items = asyncio.run(suite.plan(None, Provenance()))  # type: ignore[arg-type]
    assert len(items) == 12
    by_id = {r["qid"]: r for r in capitals_rows()}
    it = items[0]
    row = by_id[it.id]
    text = it.prompt[0]["content"]  # type: ignore[index]
    assert text.startswith(row["question"]) and f"A. {row['choices'][0]}" in text
    assert it.expected == ["ABCD"[row["answer"]]]
    assert {it.metadata["slices"]["region"] for it in items} == {"Europe", "World"}


@pytest.mark.parametrize("fmt", ["json-list", "csv", "arrow-file", "saved-dir", "glob"])
def test_every_local_format_gives_the_same_items(tmp_path: Path, fmt: str) -> None:
    import datasets

    rows = [json.loads(x) for x in QA.read_text().splitlines()][:30]
    frame = pd.DataFrame(rows)
    if fmt == "json-list":
        (tmp_path / "d.json").write_text(json.dumps(rows))
        path = "d.json"
    elif fmt == "csv":
        frame.to_csv(tmp_path / "d.csv", index=False)
        path = "d.csv"
    elif fmt in ("arrow-file", "saved-dir"):
        datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
        arrow = next((tmp_path / "saved").glob("*.arrow"))
        path = f"saved/{arrow.name}" if fmt == "arrow-file" else "saved"
    else:
        (tmp_path / "parts").mkdir()
        frame[:15].to_parquet(tmp_path / "parts" / "a.parquet")
        frame[15:].to_parquet(tmp_path / "parts" / "b.parquet")
        path = "parts/*.parquet"
    params = {"path": path, "id_column": "id", "prompt": {"template": "{question}"},
              "reference": "answer", "scorer": "numeric", "n": 30}
    suite = load_suite(str(write_yaml(tmp_path / "s.yaml", params)), allow_paths=True)
    items = asyncio.run(suite.plan(None, Provenance()))  # type: ignore[arg-type]
    by_id = {r["id"]: r for r in rows}
    assert sorted(it.id for it in items) == sorted(by_id)
    for it in items:
        assert it.prompt == [{"role": "user", "content": by_id[it.id]["question"]}]
        # CSV reads the answers as integers: the numeric scorer's reference is the same number.
        assert float(it.expected[0]) == float(by_id[it.id]["answer"])


@pytest.mark.parametrize(
    ("scorer", "extra", "output", "reference", "score"),
    [
        ("exact", {}, " Paris \n", "Paris", 1),
        ("exact", {}, "Paris.", "Paris", 0),
        ("normalized", {}, "The answer is: the Eiffel Tower!", "Eiffel tower", 1),
        ("normalized", {}, "Eiffel Tower, in Paris", "Eiffel tower", 0),
        ("numeric", {}, "7 + 5 = 12", "12", 1),
        ("numeric", {}, "The answer is 1,200.", "1200", 1),
        ("numeric", {"tolerance": 0.001}, "about 3.14159", "3.14", 0),
        ("numeric", {"tolerance": 0.001}, "about 3.1405", "3.14", 1),
        ("regex", {"pattern": r"#### (\S+)"}, "work... #### 42", "42", 1),
        ("regex", {"pattern": r"#### (\S+)", "select": "last"}, "#### 1 #### 2", "2", 1),
        ("regex", {"pattern": r"#### (\S+)"}, "no marker 42", "42", 0),
        ("contains", {}, "I think it is Paris, France.", "paris", 1),
        ("contains", {}, "I think it is Parisian.", "paris", 0),
        ("contains", {}, "It is Lyon.", ["Paris", "Lyon"], 1),
    ],
)
def test_scorers(scorer: str, extra: dict[str, Any], output: str, reference: Any, score: int) -> None:
    p = DatasetParams.model_validate(
        {"path": "x.jsonl", "prompt": {"template": "{q}"}, "reference": "a", "scorer": scorer,
         **extra}
    )
    s = _Scorer(p)
    key = s.key(output)
    assert any(s.same(key, r) for r in s.ref_keys(reference)) == bool(score)


def test_choice_scorer() -> None:
    p = DatasetParams.model_validate(
        {"path": "x.jsonl", "prompt": {"template": "{q}"}, "reference": "a", "scorer": "choice",
         "choices": "c"}
    )
    s = _Scorer(p)
    opts = ["Paris", "Rome", "Oslo", "Lima"]
    assert s.key("The answer is B.", opts) == "B"
    assert s.key("a fine question; I pick C", opts) == "C"  # the article "a" is no option
    assert s.key("It must be Oslo.", opts) == "C"  # the option's text, when only one is named
    assert s.key("No idea.", opts) is None
    assert s.ref_keys(1, opts) == ["B"] and s.ref_keys("D", opts) == ["D"]
    assert s.ref_keys("rome", opts) == ["B"]
    with pytest.raises(ValueError, match="neither an option label"):
        s.ref_keys("Berlin", opts)


def test_normalize_is_squad() -> None:
    assert normalize("The  Quick, brown fox!") == "quick brown fox"
    assert normalize("An apple a day") == "apple day"


def test_length_buckets() -> None:
    assert _length_labels([10, 20, 30, 40, 50, 60], 3) == [
        "<30 chars", "<30 chars", "30-49 chars", "30-49 chars", ">=50 chars", ">=50 chars"
    ]
    assert _length_labels([5, 500], [100, 1000]) == ["<100 chars", "100-999 chars"]
    assert set(_length_labels([7, 7, 7], 3)) == {">=7 chars"}


# ---- refusals: exit 2 with the reason, before any request ------------------------------------


def refuse(path: Path, *match: str) -> str:
    with pytest.raises(SuiteError) as info:
        load_suite(str(path), allow_paths=True)
    text = str(info.value)
    assert str(path) in text
    for m in match:
        assert m in text, text
    return text


def test_missing_column_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"q": "2+2?", "a": "4"}\n')
    params = {"path": "d.jsonl", "prompt": {"template": "{question}"}, "reference": "answer"}
    text = refuse(write_yaml(tmp_path / "s.yaml", params), "missing columns", "'question'",
                  "'answer' (reference)", "columns: q, a")
    assert "prompt.template" in text
    params = {"path": "d.jsonl", "prompt": {"template": "{q}"}, "slices": ["topic"]}
    refuse(write_yaml(tmp_path / "s2.yaml", params), "'topic' (slices)")


def test_unreadable_files_are_refused(tmp_path: Path) -> None:
    params = {"path": "nope.jsonl", "prompt": {"template": "{q}"}}
    refuse(write_yaml(tmp_path / "a.yaml", params), "data file not found", "nope.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"q": "ok"}\nthis is not json\n')
    params = {"path": "bad.jsonl", "prompt": {"template": "{q}"}}
    refuse(write_yaml(tmp_path / "b.yaml", params), "cannot read as json")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 truncated")
    params = {"path": "bad.parquet", "prompt": {"template": "{q}"}}
    refuse(write_yaml(tmp_path / "c.yaml", params), "cannot read as parquet")
    (tmp_path / "d.txt").write_text("q\n")
    params = {"path": "d.txt", "prompt": {"template": "{q}"}}
    refuse(write_yaml(tmp_path / "d.yaml", params), "cannot tell the format")


def test_bad_parameters_are_refused(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"q": "2+2?", "a": "four"}\n')
    base = {"path": "d.jsonl", "prompt": {"template": "{q}"}, "reference": "a"}
    refuse(write_yaml(tmp_path / "a.yaml", {**base, "scorer": "fuzzy"}), "params.scorer",
           "'exact'", "'contains'")
    refuse(write_yaml(tmp_path / "b.yaml", {**base, "scorer": "numeric"}),
           "'four' is not a number")
    refuse(write_yaml(tmp_path / "c.yaml", {**base, "prompt": {"template": "{q.__class__}"}}),
           "plain column name")
    refuse(write_yaml(tmp_path / "d.yaml", {**base, "scorer": "regex"}), "needs a pattern")
    no_ref = {k: v for k, v in base.items() if k != "reference"}
    refuse(write_yaml(tmp_path / "e.yaml", {**no_ref, "scorer": "contains"}),
           "needs a reference column")
    refuse(write_yaml(tmp_path / "f.yaml", {"prompt": {"template": "{q}"}}), "exactly one of path")


def test_compare_refuses_before_any_request(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"q": "2+2?"}\n')
    bad = write_yaml(tmp_path / "s.yaml", {"path": "d.jsonl", "prompt": {"template": "{question}"}})
    # Port 9 (discard) has no server: were the suite not refused first, this would exit 4.
    result = cli("compare", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", "--suite", str(bad))
    assert result.exit_code == 2, result.output
    assert "missing column 'question'" in result.output


def test_hub_offline_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # This host cannot reach huggingface.co (nor may a test): offline mode, as HF_HUB_OFFLINE=1
    # sets it at import, fails at once instead of after 24 s of retries.
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path))
    params = {"hub": "evalsvc-test/not-cached", "prompt": {"template": "{q}"}}
    refuse(write_yaml(tmp_path / "h.yaml", params), "hub dataset 'evalsvc-test/not-cached'",
           "network access")


# ---- agreement: the baseline's second pass is the control ------------------------------------


def sample(role: str, item: str, output: str, repeat: int = 0, answer: Any = "x") -> Sample:
    return Sample(suite="ds", item_id=item, endpoint=role, repeat=repeat, output=output,
                  score=1.0, data={"answer": answer, "slices": {"prompt length": "all"}})


def test_agreement_pairs_second_baseline_pass_with_candidate(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"q": f"q{i}"}) + "\n" for i in range(4)))
    suite = load_suite(str(write_yaml(tmp_path / "s.yaml", {
        "path": "d.jsonl", "prompt": {"template": "{q}"}, "slices": ["prompt_length"],
        "compare": "agreement"})), allow_paths=True)
    assert suite.default_gate().metric == "agreement"
    base = [sample("baseline", f"row-{i}", f"a{i}", answer=f"a{i}") for i in range(4)]
    # The baseline repeats itself on rows 0-2; the candidate on rows 0, 1 and 3.
    base += [sample("baseline", f"row-{i}", "z", repeat=1, answer=("z" if i == 3 else f"a{i}"))
             for i in range(4)]
    cand = [sample("candidate:0", f"row-{i}", "c", answer=("z" if i == 2 else f"a{i}"))
            for i in range(4)]
    cand[1] = cand[1].model_copy(update={"error": "timeout", "score": None})
    a = suite.analyze(base, cand)
    assert a.keys == ["row-0", "row-2", "row-3"]
    assert a.baseline == [1.0, 1.0, 0.0] and a.candidate == [1.0, 0.0, 1.0]
    assert a.n_errors == 1
    assert a.details["baseline_self_agreement"] == pytest.approx(2 / 3)
    assert a.slices == {"prompt length": ["all", "all", "all"]}


# ---- production replay ----------------------------------------------------------------------


def request(content: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "prod", "messages": [{"role": "user", "content": content}], **extra}


def test_from_requests_writes_a_loadable_replay_suite(tmp_path: Path) -> None:
    lines = [
        request("What is 2+2?", user="alice@example.com", metadata={"tenant": "acme"},
                temperature=0.7, max_tokens=20),
        request("What is 2+2?", user="bob"),  # a duplicate conversation
        {"custom_id": "b1", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "prod", "messages": [
             {"role": "developer", "content": "Be brief."},
             {"role": "user", "name": "carol", "content": [{"type": "text", "text": "Hi"}]}]}},
        request([{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]),
        {"model": "prod", "messages": [{"role": "assistant", "content": None,
                                         "tool_calls": [{"id": "t"}]}]},
        {"model": "prod", "prompt": "a completions body"},
        *[request(f"Question {i}?") for i in range(30)],
    ]
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps(x) + "\n" for x in lines) + "\n")
    out = tmp_path / "replay" / "replay.yaml"
    cmd = ["suites", "from-requests", str(log), "-o", str(out), "-n", "20", "--seed", "4", "--json"]
    result = cli(*cmd)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["requests"] == 36 and summary["unique"] == 32 and summary["written"] == 20
    assert summary["skipped"] == {
        "non-text content (images, audio, files)": 1,
        "tool calls or tool results": 1,
        "no chat messages (not a chat-completions body)": 1,
    }
    assert summary["dropped_fields"]["user"] == 2 and summary["dropped_fields"]["metadata"] == 1
    assert summary["dropped_fields"]["messages[].name"] == 1
    data = out.with_suffix(".jsonl").read_text()
    assert "alice" not in data and "acme" not in data and "carol" not in data
    rows = [json.loads(x) for x in data.splitlines()]
    assert len(rows) == 20 and len({r["id"] for r in rows}) == 20
    suite = load_suite(str(out), allow_paths=True)
    # Quality, not wording: degeneration gated, meaning by identical answers (no judge), and
    # the summary (and the suite's description) say what it gates and what would decide.
    assert suite.default_gate().metric == "not_degenerate" and suite.item_count() == 20
    assert summary["compare"] == "quality" and suite.params.mode == "quality"
    assert "degenerate answers" in summary["gates"] and "--judge NAME" in summary["gates"]
    assert summary["gates"] in yaml.safe_load(out.read_text())["description"]
    human = cli(*cmd[:-1], "--force")
    assert "Gated on quality, not wording" in human.output
    # Seeded: the same sample again; another seed, another sample.
    assert cli(*cmd, "--force").exit_code == 0
    assert out.with_suffix(".jsonl").read_text() == data
    assert cli(*cmd[:-3], "--seed", "5", "--force").exit_code == 0
    assert out.with_suffix(".jsonl").read_text() != data
    # Existing output without --force; a line that is not JSON.
    result = cli(*cmd)
    assert result.exit_code == 2 and "exists" in result.output
    log.write_text(json.dumps(request("x")) + "\n{not json\n")
    result = cli(*cmd, "--force")
    assert result.exit_code == 2 and "requests.jsonl:2: not JSON" in result.output


def test_from_requests_keeps_roles_and_limits(tmp_path: Path) -> None:
    from evalsvc.services.replay import suite_from_requests

    log = tmp_path / "r.jsonl"
    log.write_text(json.dumps({"messages": [{"role": "developer", "content": "Be brief."},
                                            {"role": "user", "content": "Hi"}],
                               "max_completion_tokens": 900}) + "\n")
    suite_from_requests(log, tmp_path / "s.yaml", max_tokens=100)
    suite = load_suite(str(tmp_path / "s.yaml"), allow_paths=True)
    (item,) = asyncio.run(suite.plan(None, Provenance()))  # type: ignore[arg-type]
    assert item.prompt == [{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": "Hi"}]
    assert item.metadata["max_tokens"] == 100  # capped at the suite's max_tokens


def test_listing_counts_local_rows_as_a_full_load_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``suites list`` (``catalog(for_listing=True)``) counts a local JSON Lines or CSV file's
    rows with the standard library: the same count as reading it with ``datasets`` (blank
    lines skipped, JSON columns the union of the keys, a quoted line break inside a CSV field),
    the same missing-column refusal, and the items built on first use are the full load's."""
    from evalsvc.suites import catalog

    rows = [json.loads(x) for x in QA.read_text().splitlines()][:37]
    lines = [json.dumps(r) for r in rows]
    lines[5] = json.dumps({**rows[5], "note": "only here"})
    (tmp_path / "d.jsonl").write_text("\n".join(lines[:20]) + "\n\n   \n" + "\n".join(lines[20:]))
    frame = pd.DataFrame(rows)
    frame.loc[3, "question"] = "two\nlines?"
    frame.to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "d.csv").write_text((tmp_path / "d.csv").read_text() + "\n")
    base = {"id_column": "id", "prompt": {"template": "{question}"}, "reference": "answer"}
    for data in ("d.jsonl", "d.csv"):
        stem = data.replace(".", "-")
        for n in (None, 10, 500):
            write_yaml(tmp_path / f"{stem}-{n}.yaml", {**base, "path": data, "n": n},
                       name=f"{stem}-{n}")
    write_yaml(tmp_path / "broken.yaml", {**base, "path": "d.jsonl", "slices": ["topic"]},
               name="broken")
    monkeypatch.setenv("EVALSVC_SUITES_DIR", str(tmp_path))
    listed = {e.name: e for e in catalog(for_listing=True) if e.name.startswith(("d-", "broken"))}
    assert "broken" not in listed  # refused and skipped, as when loading it in full
    assert len(listed) == 6
    for name, suite in listed.items():
        full = load_suite(str(tmp_path / f"{name}.yaml"), allow_paths=True)
        n = int(name.rsplit("-", 1)[1]) if not name.endswith("None") else None
        assert suite.item_count() == full.item_count() == min(37, n or 37), name
        assert suite._built is None  # type: ignore[attr-defined]  # counted, not loaded
        planned = asyncio.run(suite.plan(None, Provenance()))  # type: ignore[arg-type]
        expected = asyncio.run(full.plan(None, Provenance()))  # type: ignore[arg-type]
        assert [(i.id, i.prompt, i.expected) for i in planned] == [
            (i.id, i.prompt, i.expected) for i in expected
        ]
        assert suite.load_warnings() == full.load_warnings()
