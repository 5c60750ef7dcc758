"""Where the suite catalog and its data files live (no registry, no kinds: both import this).

Contract: ``packaged_catalog_dir()`` is the catalog shipped in the package (package data found
through ``importlib.resources``); ``catalog_dir()`` is where the kinds read their data files:
``EVALSVC_SUITES_DIR`` when it has a ``data/`` of its own, else the packaged catalog.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from evalsvc.settings import Settings


class CatalogNotOnDisk(ValueError):
    """The package data is not on the file system (a zipped install)."""


def packaged_catalog_dir() -> Path:
    """The catalog shipped in the package (``evalsvc/suites/catalog``, package data found
    through ``importlib.resources``)."""
    root = resources.files("evalsvc.suites") / "catalog"
    # A wheel or editable install puts package data on the file system; the kinds read data
    # files by path (and lmeval runs a subprocess in data/), so a zipped install is refused.
    if not isinstance(root, Path):
        raise CatalogNotOnDisk(f"the suite catalog is not on the file system ({root}); set EVALSVC_SUITES_DIR")
    return root


def catalog_dir() -> Path:
    """Where the kinds read their data files (``<dir>/data/...``): ``EVALSVC_SUITES_DIR`` when it
    has a ``data/`` directory of its own, else the packaged catalog."""
    override = Settings().suites_dir
    if override is not None and (override / "data").is_dir():
        return override
    return packaged_catalog_dir()


