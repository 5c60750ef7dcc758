"""``/endpoints``: create, read, replace, delete; 404, 409 and 422 with clear messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Api


def test_endpoint_crud(api: Api) -> None:
    with api.client("admin") as admin:
        assert admin.get("/endpoints").json() == []
        resp = admin.post(
            "/endpoints",
            json={
                "name": "bf16",
                "url": "http://127.0.0.1:9001/v1/",
                "model": "smollm2-bf16",
                "api_key_env": "EVALSVC_ENDPOINT_KEY_BF16",
            },
        )
        assert resp.status_code == 201, resp.text
        assert resp.json() == {
            "name": "bf16",
            "url": "http://127.0.0.1:9001/v1",  # trailing slash dropped, as the CLI does
            "model": "smollm2-bf16",
            "api_key_env": "EVALSVC_ENDPOINT_KEY_BF16",
            "tokenizer": None,
        }
        admin.post("/endpoints", json={"name": "fp8", "url": "http://127.0.0.1:9002/v1"})
        assert [e["name"] for e in admin.get("/endpoints").json()] == ["bf16", "fp8"]

        resp = admin.put("/endpoints/fp8", json={"url": "http://127.0.0.2:8000/v1", "model": "m"})
        assert resp.status_code == 200
        assert resp.json()["url"] == "http://127.0.0.2:8000/v1"
        assert admin.get("/endpoints/fp8").json()["model"] == "m"

        assert admin.delete("/endpoints/fp8").status_code == 204
        assert admin.get("/endpoints/fp8").status_code == 404
    assert [e.name for e in api.store.list_endpoints()] == ["bf16"]


def test_unknown_endpoint_is_404(api: Api) -> None:
    with api.client("admin") as admin:
        for resp in (
            admin.get("/endpoints/nope"),
            admin.put("/endpoints/nope", json={"url": "http://127.0.0.1:1/v1"}),
            admin.delete("/endpoints/nope"),
        ):
            assert resp.status_code == 404
            assert resp.json()["detail"] == "no endpoint named 'nope'"


def test_duplicate_create_is_409_and_keeps_the_original(api: Api) -> None:
    with api.client("admin") as admin:
        admin.post("/endpoints", json={"name": "bf16", "url": "http://127.0.0.1:9001/v1"})
        resp = admin.post("/endpoints", json={"name": "bf16", "url": "http://evil:1/v1"})
        assert resp.status_code == 409
        assert "already exists" in resp.json()["detail"]
        assert admin.get("/endpoints/bf16").json()["url"] == "http://127.0.0.1:9001/v1"


def test_bad_input_is_422(api: Api) -> None:
    with api.client("admin") as admin:
        bad = [
            {"name": "x", "url": "127.0.0.1:9001"},  # not a URL
            {"name": "http://x", "url": "http://127.0.0.1:9001/v1"},  # name looks like a URL
            {"name": "x", "url": "http://127.0.0.1:9001/v1", "colour": "red"},  # extra field
            {"url": "http://127.0.0.1:9001/v1"},  # no name
        ]
        for body in bad:
            assert admin.post("/endpoints", json=body).status_code == 422, body
        resp = admin.post(
            "/endpoints", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert resp.status_code == 422


def test_a_tokenizer_path_is_read_on_the_server_only_under_its_root(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/security.md: without EVALSVC_TOKENIZER_ROOT a tokenizer path is refused over REST
    (422, nothing stored); with it, only an absolute path under it is registered."""
    root = tmp_path / "tokenizers"
    root.mkdir()
    body = {"name": "gen", "url": "http://127.0.0.1:9001/v1", "tokenizer": f"{root}/tok.json"}
    monkeypatch.delenv("EVALSVC_TOKENIZER_ROOT", raising=False)
    with api.client("admin") as admin:
        resp = admin.post("/endpoints", json=body)
        assert resp.status_code == 422
        assert "unless EVALSVC_TOKENIZER_ROOT" in resp.json()["detail"]
        monkeypatch.setenv("EVALSVC_TOKENIZER_ROOT", str(root))
        resp = admin.post("/endpoints", json={**body, "tokenizer": "/etc/passwd"})
        assert resp.status_code == 422
        assert "not an absolute path under EVALSVC_TOKENIZER_ROOT" in resp.json()["detail"]
        assert admin.get("/endpoints").json() == []
        resp = admin.post("/endpoints", json=body)
        assert resp.status_code == 201, resp.text
        assert admin.get("/endpoints/gen").json()["tokenizer"] == f"{root}/tok.json"
        resp = admin.put("/endpoints/gen", json={"url": body["url"], "tokenizer": "/tmp/x"})
        assert resp.status_code == 422
        assert admin.get("/endpoints/gen").json()["tokenizer"] == f"{root}/tok.json"
