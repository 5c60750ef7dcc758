"""``/suites``: the suite catalog (``read`` scope); the same rows as ``evalsvc suites list``."""

from __future__ import annotations

from fastapi import APIRouter

from evalsvc.api._schemas import SuiteRead
from evalsvc.services.catalog import suite_rows
from evalsvc.web.auth import ReadScope

router = APIRouter(prefix="/suites", tags=["suites"])


@router.get("", response_model=list[SuiteRead])
def list_suites(_: ReadScope) -> list[SuiteRead]:
    """Every suite and suite set of the catalog."""
    return [SuiteRead.model_validate(row) for row in suite_rows()]
