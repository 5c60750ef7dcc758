"""The catalog's rows for ``evalsvc suites list``, kept between processes so that listing the
catalog does not import every suite kind (docs/benchmarks.md, "CLI start-up").

Contract: ``listing(path)`` returns ``(rows, broken)``, what ``catalog.suite_rows()`` and
``evalsvc.suites.broken_kinds()`` return, and replays the warnings the catalog logged while the
rows were built (a skipped file, a plugin not loaded) through the same loggers. It reads them
from the JSON file at ``path`` when the state they were computed from is unchanged, else builds
them (importing the kinds, parsing every catalog file) and writes the file. The state compared:
evalsvc's version, the interpreter, the settings (``Settings``, hashed: a token is never
written), the ``evalsvc.suites`` entry points with their distributions' versions, every file
under the catalog directories (packaged and ``EVALSVC_SUITES_DIR``, by content) and every
``.py`` file of evalsvc (by size and modification time), and every other file or directory the
build read (a plugin kind's modules, a suite's data file outside the catalog: recorded with an
audit hook while building) the same way. Any difference, a missing or unreadable cache file, or one of
another format rebuilds; a cache that cannot be written (a read-only home) is skipped. A
build that raises writes nothing. The REST API (a long-running process) lists without it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
import threading
from importlib.metadata import EntryPoint, entry_points
from importlib.util import find_spec
from pathlib import Path
from typing import Any

_FORMAT = 1

_recording: list[str] | None = None
_hook_lock = threading.Lock()
_hook_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Audit hooks cannot be removed; this one costs a comparison while nothing is recorded.
    rec = _recording
    if rec is None or not args:
        return
    if event in ("open", "os.listdir", "os.scandir"):
        path = args[0]
        if isinstance(path, str | bytes | os.PathLike):
            rec.append(os.fsdecode(path))


def _install_hook() -> None:
    global _hook_installed
    with _hook_lock:
        if not _hook_installed:
            sys.addaudithook(_audit)
            _hook_installed = True


_HASHED_BYTES = 1 << 20
_CODE = (".py", ".so", ".pyd")


def _stat(path: str) -> list[Any]:
    """What identifies a file's state: code by size and modification time; a data file (a
    catalog YAML, a suite's data) up to 1 MiB by its content, because a rewrite within the
    file system's timestamp granularity can keep both."""
    try:
        st = os.stat(path)
        if (os.path.isfile(path) and st.st_size <= _HASHED_BYTES
                and not path.endswith(_CODE)):
            with open(path, "rb") as f:
                return [path, st.st_size, hashlib.sha1(f.read(), usedforsecurity=False).hexdigest()]
    except OSError:
        return [path, None, None]
    return [path, st.st_mtime_ns, st.st_size]


def _walk(root: Path, suffix: str | None = None) -> list[str]:
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        out.append(dirpath)  # a directory's mtime moves when a file is added or removed
        out += [os.path.join(dirpath, f) for f in sorted(filenames)
                if suffix is None or f.endswith(suffix)]
    return out


def _package_dir() -> Path:
    # find_spec of the top-level package imports nothing below it (evalsvc.suites would load
    # the suite base classes and numpy).
    spec = find_spec("evalsvc")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _dist(ep: EntryPoint) -> str:
    # The distribution's metadata directory (``name-version.dist-info``) names its version
    # without parsing its METADATA (about 5 ms a distribution).
    path = getattr(ep.dist, "_path", None)
    if path is not None:
        return str(path)
    return f"{ep.dist.name} {ep.dist.version}" if ep.dist else ""


def _state() -> tuple[str, list[str]]:
    """The key (a digest of what is not a file) and the files whose stat must match."""
    from evalsvc import __version__
    from evalsvc.settings import Settings

    settings = Settings()
    plugins = sorted((ep.name, ep.value, _dist(ep)) for ep in entry_points(group="evalsvc.suites"))
    key = json.dumps([_FORMAT, __version__, sys.version, sys.executable, sys.prefix,
                      settings.model_dump_json(), plugins, sorted(sys.path[1:])])
    package = _package_dir()
    files = _walk(package, ".py") + _walk(package / "suites" / "catalog")
    if settings.suites_dir is not None and settings.suites_dir.is_dir():
        files += _walk(settings.suites_dir)
    return hashlib.sha256(key.encode()).hexdigest(), files


def _read(path: Path, key: str, stats: list[list[Any]]) -> dict[str, Any] | None:
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("key") != key:
        return None
    if cached.get("files") != stats:
        return None
    read = cached.get("read")
    if not isinstance(read, list) or any(_stat(str(r[0])) != r for r in read):
        return None
    return cached


class _Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[list[Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append([record.name, record.levelno, record.getMessage()])


def _build() -> dict[str, Any]:
    global _recording
    from evalsvc.services.catalog import suite_rows

    _install_hook()
    before = set(sys.modules)
    top = logging.getLogger("evalsvc")
    recorder = _Recorder()
    # The warnings are kept to replay on every listing; while building they go to the
    # recorder only, and are replayed (once) like a cached listing's.
    propagate, top.propagate = top.propagate, False
    top.addHandler(recorder)
    read: list[str] = []
    _recording = read
    try:
        from evalsvc.suites import broken_kinds

        rows = suite_rows()
        broken = broken_kinds()
    finally:
        _recording = None
        top.removeHandler(recorder)
        top.propagate = propagate
        _replay(recorder.records)
    modules = [getattr(sys.modules[m], "__file__", None) for m in set(sys.modules) - before]
    read += [m for m in modules if m]
    read = sorted({os.path.abspath(p) for p in read if _kept(p)})
    return {"rows": rows, "broken": broken, "warnings": recorder.records,
            "read": [_stat(p) for p in read]}


def _kept(path: str) -> bool:
    # Left out: byte code (its source is recorded), the import system's scans of sys.path
    # (the modules it found are recorded) and distribution metadata (the entry points are in
    # the key; the rest of it, other packages' entry points, does not make a row).
    if "__pycache__" in path or path.endswith(".pyc") or path in ("", "."):
        return False
    if ".dist-info" in path or ".egg-info" in path:
        return False
    return path not in sys.path


def _replay(records: list[list[Any]]) -> None:
    for name, level, message in records:
        logging.getLogger(str(name)).log(int(level), "%s", message)


def _write(path: Path, payload: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".catalog-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(payload, f)
        os.replace(tmp, path)  # atomic: a concurrent listing reads the old file or the new one
    except OSError:
        return


def default_path() -> Path:
    """``<EVALSVC_HOME>/cache/catalog-listing.json``."""
    from evalsvc.settings import Settings

    return Settings().home / "cache" / "catalog-listing.json"


def listing(path: Path | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The catalog's rows and the kinds that failed to load, from the cache when it is current.
    Raises what building them raises (``SuiteError``)."""
    path = default_path() if path is None else path
    key, files = _state()
    # Stat before building: a file changed while the rows are built fails the next check.
    stats = [_stat(f) for f in files]
    cached = _read(path, key, stats)
    if cached is not None:
        _replay(cached.get("warnings") or [])
        return cached["rows"], cached["broken"]
    built = _build()
    _write(path, {"key": key, "files": stats, **built})
    return built["rows"], built["broken"]
