"""The one exception → exit code mapping of the CLI (docs/cli.md, "Exit codes"): usage and
configuration errors are 2, infrastructure errors 4, and no exception ever maps to a verdict's
code (1 fail, 3 inconclusive)."""

from __future__ import annotations

import httpx
import pytest
from pydantic import BaseModel, ValidationError

from evalsvc.cli._exit import exit_code
from evalsvc.cli.rest import NotTheApi
from evalsvc.db import (
    Conflict,
    DatabaseConfigError,
    DatabaseNotAtHead,
    DatabaseUnavailable,
    DatabaseWriteRefused,
    InvalidData,
    StoreError,
)
from evalsvc.endpoints import EgressRefused
from evalsvc.runner import CapabilityError, InfrastructureError
from evalsvc.services.history import (
    AmbiguousRunId,
    RunAlreadyFinished,
    RunNotFinished,
    RunNotFound,
)
from evalsvc.services.registry import NotFound
from evalsvc.services.runs import UsageError
from evalsvc.suites import SuiteError


def _validation_error() -> ValidationError:
    class M(BaseModel):
        n: int

    try:
        M.model_validate({"n": "x"})
    except ValidationError as err:
        return err
    raise AssertionError("pydantic accepted a string for an int")


USAGE = [
    UsageError("unknown suite"),
    CapabilityError("no logprobs"),
    SuiteError("broken catalog entry"),
    _validation_error(),
    Conflict("taken"),
    DatabaseNotAtHead("run evalsvc db upgrade"),
    DatabaseConfigError("not a URL"),
    InvalidData("too long"),
    NotFound("no endpoint"),
    RunNotFound("no run"),
    AmbiguousRunId("two runs"),
    RunAlreadyFinished("finished"),
    RunNotFinished("running"),
    EgressRefused("credentials in URL"),
]
INFRA = [
    InfrastructureError("endpoint down"),
    DatabaseUnavailable("unreachable"),
    DatabaseWriteRefused("read-only"),
    StoreError("anything else the database says"),
    KeyboardInterrupt("signal 15"),
    NotTheApi("an SSO page"),
    httpx.ConnectError("refused"),
    RuntimeError("unforeseen"),
]


@pytest.mark.parametrize("exc", USAGE, ids=lambda e: type(e).__name__)
def test_usage_and_configuration_errors_exit_2(exc: BaseException) -> None:
    assert exit_code(exc) == 2


@pytest.mark.parametrize("exc", INFRA, ids=lambda e: type(e).__name__)
def test_infrastructure_errors_exit_4(exc: BaseException) -> None:
    assert exit_code(exc) == 4
