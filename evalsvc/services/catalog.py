"""The suite catalog as rows: what ``evalsvc suites list`` prints and ``GET /api/v1/suites`` returns.

Contract: ``suite_rows`` reads the catalog (``evalsvc.suites.catalog``) and returns one plain dict
per suite or suite set; it raises ``evalsvc.suites.SuiteError`` when a catalog file is broken
(a server-side configuration error, not bad user input). No formatting, no I/O beyond reading
the catalog.
"""

from __future__ import annotations

from typing import Any

from evalsvc.suites import SuiteSet, catalog


def suite_rows() -> list[dict[str, Any]]:
    """One dict per catalog entry.

    Suites: ``name``, ``kind``, ``version``, ``items`` (None when only known after planning),
    ``description``. Sets: ``name``, ``kind="set"``, ``items=None``, ``description``, ``suites``.
    """
    rows: list[dict[str, Any]] = []
    for entry in catalog():
        if isinstance(entry, SuiteSet):
            rows.append(
                {
                    "name": entry.name,
                    "kind": "set",
                    "items": None,
                    "description": entry.description,
                    "suites": entry.suites,
                }
            )
        else:
            rows.append(
                {
                    "name": entry.name,
                    "kind": entry.kind,
                    "version": entry.version,
                    "items": entry.item_count(),
                    "description": entry.spec.description or entry.description,
                }
            )
    return rows
