"""The test session's own early stop of the local servers (``tests/fixtures/server_groups.py``):
the vLLM servers stop once every vLLM group the session collected is done on whichever worker,
never while one still runs or where the session did not start them; llama.cpp's when its one
group is done. ``local.down`` is recorded instead of called: these tests must not stop a real
session's servers."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import server_groups


@dataclass
class _Marker:
    args: tuple[str, ...]


@dataclass
class _Item:
    group: str | None
    config: Any = field(default=None)

    def get_closest_marker(self, name: str) -> _Marker | None:
        return _Marker((self.group,)) if name == "xdist_group" and self.group else None


@dataclass
class _Config:
    workerinput: dict[str, str]


@pytest.fixture
def downs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    from evalsvc import local

    calls: list[str] = []
    monkeypatch.setattr(local, "down", lambda engine=None: calls.append(engine))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(server_groups, "_present", set())
    monkeypatch.setattr(server_groups, "_owned", {})
    monkeypatch.delenv(server_groups.KEEP_ENV, raising=False)
    return calls


def _item(group: str | None, run: str = "run-1") -> Any:
    return _Item(group, _Config({"testrunuid": run}))


def test_vllm_servers_stop_when_the_last_of_both_groups_is_done(downs: list[str]) -> None:
    server_groups.collected([_item("local-endpoints"), _item("local-endpoints-2"), _item(None)])
    server_groups.started("vllm", None)
    # Inside a group, or a group's last test while the other group still runs: nothing stops.
    server_groups.after_test(_item("local-endpoints"), _item("local-endpoints"))
    server_groups.after_test(_item("local-endpoints"), _item(None))
    assert downs == []
    # The other worker's group ends (nextitem: none, the worker's queue is empty).
    server_groups.after_test(_item("local-endpoints-2"), None)
    assert downs == ["vllm"]


def test_a_group_that_was_not_collected_is_not_waited_for(downs: list[str]) -> None:
    server_groups.collected([_item("local-endpoints-2"), _item(None)])
    server_groups.started("vllm", None)
    server_groups.after_test(_item("local-endpoints-2"), _item(None))
    assert downs == ["vllm"]


def test_servers_the_session_did_not_start_are_left_running(
    downs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server_groups.collected([_item("local-endpoints"), _item("llamacpp")])
    server_groups.started("vllm", object())  # a developer's `evalsvc local up` was serving
    server_groups.after_test(_item("local-endpoints"), None)
    server_groups.started("llamacpp", None)
    monkeypatch.setenv(server_groups.KEEP_ENV, "1")
    server_groups.started("llamacpp", None)  # kept on request
    server_groups.after_test(_item(server_groups.LLAMACPP_GROUP), _item(None))
    assert downs == []


def test_another_runs_markers_do_not_count(downs: list[str]) -> None:
    server_groups.collected([_item("local-endpoints"), _item("local-endpoints-2")])
    server_groups.started("vllm", None)
    server_groups.after_test(_item("local-endpoints-2", run="an-earlier-run"), None)
    server_groups.after_test(_item("local-endpoints", run="run-1"), None)
    assert downs == []
    server_groups.after_test(_item("local-endpoints-2", run="run-1"), None)
    assert downs == ["vllm"]


def test_llamacpp_servers_stop_when_their_group_is_done(downs: list[str]) -> None:
    server_groups.started("llamacpp", None)
    group = server_groups.LLAMACPP_GROUP
    server_groups.after_test(_item(group), _item(group))
    assert downs == []
    server_groups.after_test(_item(group), _item("local-endpoints"))
    assert downs == ["llamacpp"]
