"""Suite-kind registry and the YAML catalog.

Contract:
- ``@register`` adds a kind; outside packages add kinds through the ``evalsvc.suites`` entry-point
  group, loaded lazily the first time a kind is looked up.
- ``load_suite(name_or_path)`` returns a ready ``Suite``; ``resolve(names)`` expands sets.
- A name resolves in the catalog only. A file path is read only with ``allow_paths=True``
  (the CLI, in-process) and only when it looks like one (contains ``/`` or ends in
  ``.yaml``/``.yml``): a bare name such as ``pyproject.toml`` is never read from the working
  directory, and nothing that came over HTTP is read from disk.
- Suite and set files are at most ``evalsvc.limits.MAX_YAML_BYTES``, UTF-8, and have no YAML
  aliases (an alias bomb in a 1 kB file expands to gigabytes when its value is used).
- Every bad input raises ``SuiteError`` whose message names the file, the line and the field, or
  lists the known names.
"""

from __future__ import annotations

import difflib
import logging
import os
import threading
import typing
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from evalsvc import limits
from evalsvc.settings import Settings
from evalsvc.suites._base import _LISTING, Suite, SuiteSpec
from evalsvc.suites._paths import CatalogNotOnDisk, packaged_catalog_dir

_KINDS: dict[str, type[Suite]] = {}
_BROKEN: dict[str, str] = {}
_ENTRY_POINTS_LOADED = False
# Loading is once per process and may race: the API serves requests on a thread pool and a
# worker runs suites concurrently. A reader must never see the flag set before the kinds are in.
_ENTRY_POINTS_LOCK = threading.Lock()
_log = logging.getLogger(__name__)
S = TypeVar("S", bound=type[Suite])


class SuiteError(ValueError):
    """A suite could not be found or its YAML is invalid (CLI exit 2)."""


def register(cls: S) -> S:
    """Class decorator: register a suite kind under ``cls.kind`` (for kinds defined in code, such
    as tests; packages, the built-in kinds included, use the ``evalsvc.suites`` entry points)."""
    existing = _KINDS.get(cls.kind)
    if existing is not None and existing is not cls:
        raise ValueError(f"suite kind {cls.kind!r} registered twice ({existing} and {cls})")
    _KINDS[cls.kind] = cls
    return cls


def suite_kinds() -> dict[str, type[Suite]]:
    """Every registered kind by name: the entry points of group ``evalsvc.suites`` (the built-in
    kinds are registered there too, in evalsvc's own pyproject.toml) and ``@register``."""
    _load_entry_points()
    return dict(_KINDS)


def broken_kinds() -> dict[str, str]:
    """Entry points that could not be loaded, by name, with the reason (shown, never raised)."""
    _load_entry_points()
    return dict(_BROKEN)


def _load_entry_points() -> None:
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:  # set only after every kind is registered (below)
        return
    with _ENTRY_POINTS_LOCK:
        if _ENTRY_POINTS_LOADED:
            return
        for ep in entry_points(group="evalsvc.suites"):
            _load_entry_point(ep)
        _ENTRY_POINTS_LOADED = True


def _load_entry_point(ep: EntryPoint) -> None:
    # Each load is guarded: one broken plugin must never break the catalog, `suites list`
    # or GET /suites; it is reported by name and its suites fail as "unknown kind".
    try:
        cls = ep.load()
    except Exception as exc:  # noqa: BLE001 - any error of a third-party import
        _BROKEN[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}"[:500]
        _log.warning("suite kind plugin %r not loaded: %s", ep.name, _BROKEN[ep.name])
        return
    if not (isinstance(cls, type) and issubclass(cls, Suite)):
        _BROKEN[ep.name] = f"{ep.value} is not a Suite subclass"
        return
    taken = _KINDS.get(cls.kind)
    if taken is not None and taken is not cls:
        _BROKEN[ep.name] = f"{ep.value}: kind {cls.kind!r} is already {taken.__qualname__}"
        return
    _KINDS[cls.kind] = cls


def _catalog_files() -> dict[str, Path]:
    # EVALSVC_SUITES_DIR adds suites and sets to the packaged catalog; a file of the same name
    # replaces the packaged one.
    files: dict[str, Path] = {}
    override = Settings().suites_dir
    try:
        packaged = packaged_catalog_dir()
    except CatalogNotOnDisk as exc:
        raise SuiteError(str(exc)) from None
    for root in (packaged, override):
        if root is None or not root.is_dir():
            continue
        files |= {p.stem: p for p in sorted(root.glob("*.yaml"))}
        files |= {p.stem: p for p in sorted((root / "sets").glob("*.yaml"))}
    return files


def catalog(*, for_listing: bool = False) -> list[Suite | SuiteSet]:
    """Every suite and set in the catalog, parsed. A file that cannot be loaded (bad YAML, an
    invalid spec, a missing data file) is skipped with a warning naming it and why, so one
    broken file in ``EVALSVC_SUITES_DIR`` never hides the others (``suites list``, ``GET
    /suites``); loading it by name still raises its ``SuiteError``. ``for_listing``: the
    suites are only listed (``_base.listing_only``), so a kind may defer expensive reading
    (the dataset kind counts a local JSON Lines or CSV file's rows without ``datasets``)."""
    loaded: list[Suite | SuiteSet] = []
    token = _LISTING.set(for_listing)
    try:
        for path in _catalog_files().values():
            try:
                loaded.append(_load_file(path))
            except SuiteError as exc:
                # SuiteError names the file (and line) already; say so only when it does not.
                where = "" if str(path) in str(exc) else f"{path}: "
                _log.warning("suite catalog: skipped %s%s (fix or remove the file)", where, exc)
    finally:
        _LISTING.reset(token)
    return loaded


class SuiteSet:
    """A named list of suites (``sets/*.yaml`` of the catalog: ``name``, ``description``, ``suites``)."""

    def __init__(self, name: str, description: str, suites: list[str]) -> None:
        self.name = name
        self.description = description
        self.suites = suites


def resolve(names: Iterable[str], *, allow_paths: bool = False) -> list[Suite]:
    """Expand names, sets (and, with ``allow_paths``, YAML paths) into suites, in order,
    without duplicates."""
    out: list[Suite] = []
    seen: set[str] = set()
    loaded_names: set[str] = set()  # each name or set is read once, however often it is given

    def add(name: str, depth: int) -> None:
        if depth > 5:
            raise SuiteError(f"suite set nesting too deep at {name!r}")
        if name in loaded_names:
            return
        loaded_names.add(name)
        loaded = _load_name(name, allow_paths=allow_paths)
        if isinstance(loaded, SuiteSet):
            for sub in loaded.suites:
                add(sub, depth + 1)
        elif loaded.name not in seen:
            seen.add(loaded.name)
            out.append(loaded)

    for name in names:
        add(name, 0)
    return out


def catalog_path(name: str) -> Path:
    """The catalog file of a suite or set name (``evalsvc suites show``); ``SuiteError`` with
    the same message as loading an unknown name."""
    files = _catalog_files()
    if name not in files:
        _load_name(name, allow_paths=False)  # raises: not a catalog name
    return files[name]


def load_suite(name_or_path: str, *, allow_paths: bool = False) -> Suite:
    loaded = _load_name(name_or_path, allow_paths=allow_paths)
    if isinstance(loaded, SuiteSet):
        raise SuiteError(f"{name_or_path!r} is a suite set; use resolve()")
    return loaded


def is_path(name_or_path: str) -> bool:
    """Whether a suite argument names a file (``a/b.yaml``, ``x.yml``) rather than a catalog entry."""
    return "/" in name_or_path or os.sep in name_or_path or name_or_path.endswith((".yaml", ".yml"))


def _load_name(name_or_path: str, *, allow_paths: bool) -> Suite | SuiteSet:
    if is_path(name_or_path):
        if not allow_paths:
            raise SuiteError(
                f"{name_or_path!r}: only catalog suite or set names are accepted here, not "
                "file paths: put the file in the directory named by EVALSVC_SUITES_DIR (on a "
                "server: the API's and its workers') and give its name, or run it in-process "
                "with `evalsvc compare`"
            )
        path = Path(name_or_path)
        if not path.is_file():
            raise SuiteError(f"suite file not found: {name_or_path}")
        return _load_file(path)
    files = _catalog_files()
    if name_or_path not in files:
        known = ", ".join(sorted(files)) or "(catalog empty)"
        raise SuiteError(
            f"unknown suite {name_or_path!r}{did_you_mean(name_or_path, files)}; known suites: "
            f"{known}"
        )
    return _load_file(files[name_or_path])


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases: a suite file has no use for them, and each alias
    multiplies what a value expands to (billion laughs: nine levels of ten aliases in under
    1 kB become 10⁹ strings when the value is printed)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed in suite files", event.start_mark
            )
        return super().compose_node(parent, index)


def _read_text(path: Path) -> str:
    try:
        size = path.stat().st_size
        if size > limits.MAX_YAML_BYTES:
            raise SuiteError(
                f"{path}: {size} bytes; suite and set files have at most "
                f"{limits.MAX_YAML_BYTES} bytes"
            )
        with path.open("rb") as fh:
            raw = fh.read(limits.MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if len(raw) > limits.MAX_YAML_BYTES:  # grew since stat, or not a regular file
        raise SuiteError(f"{path}: suite and set files have at most {limits.MAX_YAML_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SuiteError(
            f"{path}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8"
        ) from exc


def read_yaml(path: Path) -> Any:
    """A YAML file under the suite files' rules (size cap, UTF-8, no NUL, no aliases), parsed
    safely; ``SuiteError`` names the file and line. Also for run specs (``schedules add
    --spec``)."""
    return _parse(path)[1]


def _parse(path: Path) -> tuple[Any, Any]:
    text = _read_text(path)
    if "\x00" in text:
        raise SuiteError(f"{path}: contains NUL characters")
    try:
        node = yaml.compose(text, Loader=_NoAliasLoader)
        data = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise SuiteError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from exc
    return node, data


def _load_file(path: Path) -> Suite | SuiteSet:
    node, data = _parse(path)
    if not isinstance(data, dict):
        raise SuiteError(f"{path}:1: a suite file must be a mapping")
    if "suites" in data and "kind" not in data:
        return _suite_set(path, node, data)
    if "kind" not in data:
        # Neither a suite (no kind) nor a set (no suites): a mistyped ``suites`` is a set's
        # mistake, which the suite model's errors ("kind required") would not name.
        for key in data:
            if isinstance(key, str) and did_you_mean(key, ["suites"]):
                raise SuiteError(
                    f"{path}:{_line(node, (key,))}: field '{key}': unknown key (did you mean "
                    "'suites'?): a set lists its suites under 'suites', a suite needs a 'kind'"
                )
    try:
        spec = SuiteSpec.model_validate(data).located_at(path.resolve().parent)
    except ValidationError as exc:
        raise SuiteError(_format_error(path, node, exc, model=SuiteSpec)) from exc
    for field_name, bound in (("name", 200), ("description", limits.MAX_DESCRIPTION)):
        if len(getattr(spec, field_name)) > bound:
            raise SuiteError(
                f"{path}:{_line(node, (field_name,))}: field '{field_name}': at most {bound} "
                "characters"
            )
    kind_cls = suite_kinds().get(spec.kind)
    if kind_cls is None:
        raise SuiteError(
            f"{path}:{_line(node, ('kind',))}: field 'kind': unknown suite kind {spec.kind!r}"
            f"{did_you_mean(spec.kind, suite_kinds())}; known kinds: "
            f"{', '.join(sorted(suite_kinds()))}"
        )
    try:
        return kind_cls(spec)
    except ValidationError as exc:
        raise SuiteError(
            _format_error(path, node, exc, prefix=("params",), model=kind_cls.Params)
        ) from exc
    except ValueError as exc:  # a kind's own check of its parameters (a missing file, ...)
        raise SuiteError(f"{path}:{_line(node, ('params',))}: {exc}") from exc


def _suite_set(path: Path, node: Any, data: dict[str, Any]) -> SuiteSet:
    names = data.get("suites")
    if (
        not isinstance(names, list)
        or not all(isinstance(n, str) for n in names)
        or not 0 < len(names) <= limits.MAX_SUITES
    ):
        raise SuiteError(
            f"{path}:{_line(node, ('suites',))}: field 'suites' must be a list of 1 to "
            f"{limits.MAX_SUITES} names"
        )
    for key in ("name", "description"):
        value = data.get(key, path.stem if key == "name" else "")
        bound = 200 if key == "name" else limits.MAX_DESCRIPTION
        if not isinstance(value, str) or len(value) > bound:
            raise SuiteError(
                f"{path}:{_line(node, (key,))}: field '{key}' must be a string of at most "
                f"{bound} characters"
            )
    return SuiteSet(str(data.get("name", path.stem)), str(data.get("description", "")), names)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to a mistyped ``word`` (difflib's
    ratio of at least 0.6, its default cut-off), else ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _format_error(
    path: Path,
    node: Any,
    exc: ValidationError,
    prefix: tuple[str, ...] = (),
    model: type[BaseModel] | None = None,
) -> str:
    lines = []
    for err in exc.errors():
        loc = prefix + tuple(str(p) for p in err["loc"])
        msg = err["msg"]
        keys = _model_keys(model, tuple(err["loc"])[:-1]) if model is not None else None
        if err["type"] == "extra_forbidden" and keys:
            # A misspelt key: name the nearest valid one, else every valid one.
            hint = did_you_mean(loc[-1], keys) or f" (valid keys: {', '.join(sorted(keys))})"
            msg = f"unknown key{hint}"
        lines.append(f"{path}:{_line(node, loc)}: field '{'.'.join(loc)}': {msg}")
    return "\n".join(lines)


def _model_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """The field names (aliases where set) of the model nested at ``loc`` inside ``model``
    (through optional, list and dict fields), or None when ``loc`` leads to no model."""
    current: Any = model
    for key in loc:
        if isinstance(key, int):  # a list index: _nested_model already unwrapped the list
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(key))
        if field is None:
            return None
        current = _nested_model(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return None


def _nested_model(annotation: Any) -> Any:
    """The first pydantic model inside ``annotation`` (``X | None``, ``list[X]``, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def _line(node: Any, loc: tuple[str, ...]) -> int:
    """1-based line of the deepest YAML node on ``loc`` (falls back to the parent's line)."""
    line = node.start_mark.line + 1 if node is not None else 1
    for key in loc:
        if not isinstance(node, yaml.MappingNode):
            break
        for k, v in node.value:
            if k.value == key:
                line = k.start_mark.line + 1
                node = v
                break
        else:
            break
    return line
