"""The OpenAPI contract, checked by schemathesis against the real server (issue 9: "the OpenAPI
documents every status and shape it returns"): property-based requests to every operation of
``/openapi.json`` with an admin token, on one store (PostgreSQL where the session has it). No
5xx, every status code and body as documented (statuses, content types, headers, response
schemas), schema-invalid requests refused.

Bounded: ``MAX_EXAMPLES`` examples per operation, derandomized, so a run is reproducible and
takes about 80 s on the shared 2-core machine (measured: 164 s for both stores at 30).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import positive_data_acceptance
from schemathesis.generation import GenerationMode

from tests.fixtures.db import PG_ENV

from .conftest import Api

# One store is enough for the API contract: the schema and the handlers' validation do not
# depend on it, and the store's own tests run on both. PostgreSQL where the session has one (the
# shared production store), else SQLite. Each case took about two minutes of a loaded 2-core
# host's CPU in `make test`.
_BACKEND = (
    pytest.param("postgresql", marks=pytest.mark.postgres)
    if os.environ.get(PG_ENV)
    else "sqlite"
)
pytestmark = [pytest.mark.slow, pytest.mark.parametrize("api_db_url", [_BACKEND], indirect=True)]

#: Seconds the schema's own request may take (schemathesis' default is 10): see the test.
REQUEST_TIMEOUT_S = 300

# Examples per operation and mode: 25 made this the costliest test that needs no model server
# (95 CPU-s of a `make test` on a 2-core AVX2 host, 2026-12-06).
MAX_EXAMPLES = 15


#: 422s that schema-valid data may get: what depends on the server's state (the catalog is in
#: the schema as an enum, registered endpoint names cannot be) or on a suite's gate kind.
STATE_REASONS = (
    "neither a URL",  # an endpoint name nobody registered
    "unknown suite",
    "gate options refused",  # a margin or alpha that would loosen the suite's policy
    "invalid cron",  # croniter's grammar is not a regex
    # The egress policy depends on the server's EVALSVC_ALLOWED_ENDPOINTS (docs/security.md),
    # not on the request's shape: an address it refuses is schema-valid and still refused.
    "always refused",
    "which server mode refuses",
    "is not in EVALSVC_ALLOWED_ENDPOINTS",
    "does not allow",
    "server mode only reads variables named",  # the key prefix is a setting too
    "resolved to no address",
    # URL parsing beyond the schema's pattern (port range, IDNA host names) is not a regex.
    "invalid endpoint URL",
    "has no host",  # a scheme the pattern admits followed by nothing a URL parser takes as a host
    # POST /gate-logs: what an uploaded file holds (a readable log of the same documents as the
    # other side's) is not in any schema; every such refusal carries this prefix.
    "uploaded logs refused: ",
    # POST /sweeps: rules across fields of the sweep spec that JSON Schema does not express
    # (names unique across configurations; a command configuration's template may come from
    # the spec's command_template).
    "configuration names must be unique",
    "no command and no command_template",
    # A registered tokenizer path is read on the server: accepted only under the server's
    # EVALSVC_TOKENIZER_ROOT (docs/security.md), a setting, not the request's shape.
    "a tokenizer path is read on the server",
    "is not an absolute path under EVALSVC_TOKENIZER_ROOT",
)


def state_dependent_422_only(ctx: Any, response: Any, case: Any) -> bool | None:
    """A schema-valid request is accepted, or refused for a reason of state (see above)."""
    if response.status_code == 422:
        detail = response.json().get("detail", "")
        if not any(reason in detail for reason in STATE_REASONS):
            raise AssertionError(f"schema-valid request refused with 422: {detail}")
    return None


def _run(operation: Any, mode: GenerationMode, base_url: str, headers: dict[str, str]) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        if mode == GenerationMode.POSITIVE:
            case.call_and_validate(
                base_url=base_url,
                headers=headers,
                excluded_checks=[positive_data_acceptance],
                additional_checks=[state_dependent_422_only],
            )
        else:
            case.call_and_validate(base_url=base_url, headers=headers)

    check()


def test_every_operation_keeps_its_contract(api: Api) -> None:
    """Positive and negative examples for every operation; every violation is collected so
    one report lists them all."""
    # The server builds its OpenAPI document on the first request: on a loaded 2-core host that
    # took more than schemathesis' default 10 s (a `make test` with five workers, 2026-12-06).
    # (Not the calls in `check`: Hypothesis derives its derandomized examples from that
    # function's source, so an edit there changes every example generated.)
    schema = schemathesis.openapi.from_url(f"{api.base_url}/openapi.json", timeout=REQUEST_TIMEOUT_S)
    headers = {"Authorization": f"Bearer {api.tokens['admin']}"}
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _run(operation, mode, api.base_url, headers)
            except Unsatisfiable:
                assert mode == GenerationMode.NEGATIVE  # nothing to get wrong: no parameters
            except BaseException as err:  # noqa: BLE001 - collect every operation's violations
                if isinstance(err, KeyboardInterrupt):
                    raise
                failures.append(f"{operation.label} ({mode.value}): {err}"[:4000])
    assert operations >= 15
    assert not failures, "\n\n".join(failures)
