"""Static files, compressed and cacheable: the dashboard's ``/static`` and the API docs' assets
(both views use it; it imports neither).

Contract: :class:`CachedStatic` is Starlette's ``StaticFiles`` (ETag, Last-Modified, 304 on
``If-None-Match``, path checks) plus

* ``Cache-Control``: vendored third-party files (``vendor/``, the API-docs bundles) are cached
  for a week (``public, max-age=604800``); evalsvc's own CSS/JS are revalidated on each use
  (``no-cache``: a 304 with no body when unchanged), so an upgrade shows at once;
* gzip for text types when the client accepts it (``Content-Encoding: gzip``, ``Vary:
  Accept-Encoding``), compressed once per file version and kept in memory (echarts.min.js is
  1.1 MB raw, about 360 kB gzipped; compressing it on every request would cost the CPU
  the runs need).

:func:`gzip_response` does the same for one in-memory asset (the rewritten ReDoc bundle).
"""

from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

__all__ = ["CachedStatic", "gzip_response", "IMMUTABLE", "REVALIDATE"]

IMMUTABLE = "public, max-age=604800"
REVALIDATE = "no-cache"
_COMPRESSIBLE = (".js", ".css", ".svg", ".json", ".html", ".txt", ".map", ".md")
#: Files below this size are sent as they are (gzip's header would eat the gain).
_MIN_GZIP = 1024


def _accepts_gzip(scope: Scope) -> bool:
    return "gzip" in Headers(scope=scope).get("accept-encoding", "").lower()


class CachedStatic(StaticFiles):
    """``StaticFiles`` with cache headers and precompressed gzip (module doc).

    ``vendored``: relative path prefixes of third-party files (cached for a week); ``True``
    marks every file as vendored."""

    def __init__(self, *, directory: str | os.PathLike[str], vendored: tuple[str, ...] | bool = ()):
        super().__init__(directory=directory)
        self._vendored = vendored
        self._gz: dict[tuple[str, int, int], bytes] = {}
        self._lock = threading.Lock()

    def _cache_control(self, scope: Scope) -> str:
        if self._vendored is True:
            return IMMUTABLE
        rel = self.get_path(scope)
        vendored = self._vendored if isinstance(self._vendored, tuple) else ()
        return IMMUTABLE if rel.startswith(vendored) and vendored else REVALIDATE

    def _compressed(self, path: Path, stat: os.stat_result) -> bytes:
        key = (str(path), int(stat.st_mtime_ns), int(stat.st_size))
        with self._lock:
            hit = self._gz.get(key)
        if hit is None:
            hit = gzip.compress(path.read_bytes(), compresslevel=6, mtime=0)
            with self._lock:
                self._gz = {k: v for k, v in self._gz.items() if k[0] != key[0]}
                self._gz[key] = hit
        return hit

    def file_response(
        self,
        full_path: Any,
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = self._cache_control(scope)
        path = Path(full_path)
        if (
            isinstance(response, FileResponse)
            and status_code == 200
            and path.suffix in _COMPRESSIBLE
            and stat_result.st_size >= _MIN_GZIP
        ):
            response.headers["Vary"] = "Accept-Encoding"
            if _accepts_gzip(scope):
                body = self._compressed(path, stat_result)
                headers = {
                    k: v for k, v in response.headers.items() if k.lower() != "content-length"
                }
                headers["Content-Encoding"] = "gzip"
                return Response(body, status_code=200, headers=headers,
                                media_type=response.media_type)
        return response


def gzip_response(
    body: bytes, compressed: bytes, *, media_type: str, scope: Scope, etag: str
) -> Response:
    """One in-memory asset, gzipped when accepted, cached like a vendored file, with ETag/304."""
    headers = {"Cache-Control": IMMUTABLE, "ETag": etag, "Vary": "Accept-Encoding"}
    if Headers(scope=scope).get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    if _accepts_gzip(scope):
        headers["Content-Encoding"] = "gzip"
        return Response(compressed, media_type=media_type, headers=headers)
    return Response(body, media_type=media_type, headers=headers)
