"""A query parameter a route does not take is refused on every route of ``/api/v1``, with the
ones it takes (``evalsvc/api/_openapi.py``, ``known_query_params``): FastAPI would ignore it, and
a misspelt filter would list everything as if it had been applied. The routes are read from the
server's own ``/openapi.json``, so a route added later is covered without being listed here."""

from __future__ import annotations

import re

from .conftest import Api

# Probes and scrapers may add parameters of their own: the health routes take anything.
_LENIENT = {"/api/v1/healthz", "/api/v1/metrics"}


def test_every_route_refuses_a_parameter_it_does_not_take(api: Api) -> None:
    with api.client("admin") as admin:
        doc = admin.get(f"{api.base_url}/openapi.json").json()
        checked = 0
        for path, item in doc["paths"].items():
            if path in _LENIENT:
                continue
            for method, operation in item.items():
                takes = sorted(p["name"] for p in operation.get("parameters", [])
                               if p["in"] == "query")
                url = re.sub(r"\{[^}]+\}", "0" * 32, path).removeprefix("/api/v1")
                resp = admin.request(method.upper(), url, params={"bogus": "1"})
                assert resp.status_code == 422, (method, path, resp.text)
                detail = resp.json()["detail"]
                assert detail == (f"unknown query parameter(s) 'bogus': {method.upper()} {url} "
                                  f"takes {', '.join(takes) or 'no query parameters'}"), detail
                checked += 1
        assert checked >= 30  # every route of the API, not a handful

        # The filters a pipeline misspells: refused, not ignored.
        runs = admin.get("/runs", params={"stauts": "failed", "limit": 5})
        assert runs.status_code == 422
        assert runs.json()["detail"] == ("unknown query parameter(s) 'stauts': GET /runs takes "
                                         "endpoint, limit, status, verdict")
        alerts = admin.get("/alerts", params={"knd": "error_streak"})
        assert alerts.status_code == 422 and "takes kind, limit, status" in alerts.json()["detail"]
        # The parameters a route takes still work (and the refused POSTs left nothing behind),
        # and a probe's own parameter is no error.
        assert admin.get("/runs", params={"status": "queued", "limit": 5}).json() == []
        assert admin.get("/endpoints").json() == [] and admin.get("/schedules").json() == []
        assert admin.get("/baselines", params={"revoked": "true"}).status_code == 200
        assert admin.get("/healthz", params={"probe": "lb-7"}).status_code == 200
