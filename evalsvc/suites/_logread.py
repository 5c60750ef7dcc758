"""Budgeted reading of untrusted log files: JSON documents and zip members (``evalsvc.suites.logs``).

Contract: every function here reads bytes that someone else wrote (an uploaded log, a file a
pipeline produced) and either returns Python values whose size is bounded by the budgets in
``evalsvc.limits`` or raises :class:`LogBudgetError` / :class:`LogFormatError` (both
:class:`LogError`, a ``ValueError``) with a message naming the file *as the caller shows it* (``shown``: the upload's
own file name, never a server path), the line or zip member, and the budget or the fault.

- :func:`load_json` decodes one JSON document (a ``.json`` log, a samples line, a zip member):
  strict UTF-8, then a pre-scan of the raw bytes outside strings that bounds the nesting depth
  (Python's ``json`` recurses, so a document nested 100k deep is a ``RecursionError`` inside
  the parser) and the number of objects and arrays (each costs ~60-200 bytes of Python objects
  for 1-3 bytes of text: ``[{},{},…]`` amplifies ~24×), then ``json.loads`` with number hooks
  that refuse number literals longer than ``MAX_JSON_NUMBER_CHARS`` (Python refuses to convert
  integers of more than 4,300 digits with a ``ValueError`` of its own; ``1e400`` parses to
  ``inf``, which the callers refuse where a number is used).
- :func:`zip_members` lists a zip's members after checking its end-of-central-directory
  record (the member count is bounded before ``zipfile`` builds one object per entry);
  :func:`read_member` inflates one member in bounded steps (Zstandard, deflate or stored),
  stopping at the per-member and per-file inflated-byte budgets. ``zipfile``'s own reader
  cannot be used for this: for any method but deflate it inflates each compressed read whole
  (``ZipExtFile._read2``), so a 48 KB Zstandard member becomes 500 MiB in one call.

Reading files is all this module does: no sockets, no database.
"""

from __future__ import annotations

import io
import json
import re
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from evalsvc import limits

__all__ = [
    "LogBudgetError",
    "LogError",
    "LogFormatError",
    "ZipBudget",
    "check_zip_directory",
    "load_json",
    "read_capped",
    "read_member",
    "zip_members",
]


class LogError(ValueError):
    """A log cannot be read or paired as given (a usage error: exit 2, HTTP 422)."""


class LogFormatError(LogError):
    """The bytes are not what the format says (not UTF-8, not JSON, a broken zip)."""


class LogBudgetError(LogError):
    """The bytes are over one of the reading budgets (``evalsvc.limits``)."""


# A JSON string, closed or running to the end of the input. Possessive quantifiers (Python
# 3.11) make it linear: no backtracking, so an unterminated string full of escaped quotes cannot
# turn the scan quadratic. The lone-backslash-at-the-end case is ``\\?\Z``.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
# Every byte except the four brackets (bytes.translate's delete argument).
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[list(b"[{")] = 1
_OPEN[list(b"]}")] = -1
_DEPTH_CHUNK = 1 << 20


def _scan(raw: bytes, where: str, max_containers: int) -> None:
    """Bound the depth and the number of containers of a JSON text without parsing it."""
    skeleton = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    containers = skeleton.count(b"[") + skeleton.count(b"{")
    if containers > max_containers:
        raise LogBudgetError(
            f"{where}: {containers:,} JSON objects and arrays in one document; at most "
            f"{max_containers:,} are read"
        )
    depth = 0
    view = np.frombuffer(skeleton, dtype=np.uint8)
    for start in range(0, len(view), _DEPTH_CHUNK):
        steps = _OPEN[view[start : start + _DEPTH_CHUNK]].astype(np.int32)
        running = np.cumsum(steps) + depth
        if running.size and int(running.max()) > limits.MAX_JSON_DEPTH:
            raise LogBudgetError(
                f"{where}: JSON nested more than {limits.MAX_JSON_DEPTH} levels deep; a log "
                "is refused past that depth"
            )
        depth = int(running[-1]) if running.size else depth


def _number_hook(kind: Callable[[str], Any], where: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        if len(text) > limits.MAX_JSON_NUMBER_CHARS:
            raise LogBudgetError(
                f"{where}: a number of {len(text):,} characters; at most "
                f"{limits.MAX_JSON_NUMBER_CHARS} are read"
            )
        return kind(text)

    return parse


def load_json(raw: bytes, where: str, *, whole_file: bool = False) -> Any:
    """One JSON document from ``raw`` within the budgets (module docstring); ``where`` names
    it in every message (``results.json``, ``samples_x.jsonl:12``, ``log.eval, member m``).
    ``whole_file``: a log that is one JSON document (``MAX_JSON_FILE_CONTAINERS``), not a line
    or a zip member (``MAX_JSON_CONTAINERS``)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LogFormatError(
            f"{where}: not UTF-8 text (byte {exc.start:,} is {raw[exc.start:exc.start + 1]!r}); "
            "logs are read as UTF-8 JSON"
        ) from None
    _scan(
        raw,
        where,
        limits.MAX_JSON_FILE_CONTAINERS if whole_file else limits.MAX_JSON_CONTAINERS,
    )
    try:
        return json.loads(
            text,
            parse_int=_number_hook(int, where),
            parse_float=_number_hook(float, where),
        )
    except json.JSONDecodeError as exc:
        raise LogFormatError(f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:  # the scan bounds depth well below the limit; kept as a backstop
        raise LogBudgetError(f"{where}: JSON nested too deeply to read") from None


# ---- zip members ------------------------------------------------------------------------

#: zip compression methods read here: stored, deflate, and Zstandard (93), which Inspect uses.
_ZSTD = 93
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature ... file name length, extra field length


class ZipBudget:
    """The inflated bytes one zip file may still produce (``MAX_LOG_INFLATED_BYTES``)."""

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.left = limits.MAX_LOG_INFLATED_BYTES


_CENTRAL = struct.Struct("<4s24xHHH12x")  # signature ... name, extra, comment lengths


def check_zip_directory(fh: IO[bytes], shown: str) -> int:
    """The number of members of a zip, counted in its central directory entry by entry (46-byte
    headers, no ``ZipInfo`` objects) and refused (``LogBudgetError``) past ``MAX_LOG_MEMBERS``
    before ``zipfile`` builds one object per entry: ``zipfile`` parses the whole central
    directory whatever count the end record declares, and 64 MiB of minimal entries would be a
    million objects. Cheap (the API checks uploads with it); ``LogFormatError`` for no zip."""
    try:
        # zipfile's own reader of the end record (zip64 included); present since Python 2.
        end = zipfile._EndRecData(fh)  # type: ignore[attr-defined]
    except (OSError, zipfile.BadZipFile, struct.error):
        end = None
    if not end:
        raise LogFormatError(f"{shown}: not a zip file (an Inspect .eval log is one)")
    size_cd = int(end[zipfile._ECD_SIZE])  # type: ignore[attr-defined]
    offset_cd = int(end[zipfile._ECD_OFFSET])  # type: ignore[attr-defined]
    # Where the directory really starts: as zipfile computes it (data prepended to the zip).
    start = int(end[zipfile._ECD_LOCATION]) - size_cd  # type: ignore[attr-defined]
    if end[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64:  # type: ignore[attr-defined]
        start -= zipfile.sizeEndCentDir64 + zipfile.sizeEndCentDir64Locator  # type: ignore[attr-defined]
    if start < 0 or offset_cd < 0:
        raise LogFormatError(f"{shown}: not a readable zip file (bad central directory)")
    fh.seek(start)
    entries, read = 0, 0
    while read < size_cd:
        head = fh.read(_CENTRAL.size)
        if len(head) < _CENTRAL.size:
            break
        signature, name_len, extra_len, comment_len = _CENTRAL.unpack(head)
        if signature != b"PK\x01\x02":
            raise LogFormatError(f"{shown}: not a readable zip file (bad central directory)")
        entries += 1
        if entries > limits.MAX_LOG_MEMBERS:
            raise LogBudgetError(
                f"{shown}: more than {limits.MAX_LOG_MEMBERS:,} zip members; at most "
                f"{limits.MAX_LOG_MEMBERS:,} are read"
            )
        skip = name_len + extra_len + comment_len
        fh.seek(skip, io.SEEK_CUR)
        read += _CENTRAL.size + skip
    fh.seek(0)
    return entries


def zip_members(fh: IO[bytes], shown: str) -> zipfile.ZipFile:
    """The zip, its member count checked first (``check_zip_directory``)."""
    check_zip_directory(fh, shown)
    fh.seek(0)
    try:
        return zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise LogFormatError(f"{shown}: not a readable zip file ({exc})") from None


class _Slice(io.RawIOBase):
    """``n`` bytes of ``fh`` from its current position: a member's compressed data."""

    def __init__(self, fh: IO[bytes], n: int) -> None:
        self.fh, self.left = fh, n

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        want = min(len(view), self.left)
        if want <= 0:
            return 0
        data = self.fh.read(want)
        view[: len(data)] = data
        self.left -= len(data)
        return len(data)


def read_member(
    z: zipfile.ZipFile, fh: IO[bytes], info: zipfile.ZipInfo, budget: ZipBudget
) -> bytes:
    """One member inflated in steps of at most 1 MiB, refused (``LogBudgetError``) as soon as it
    passes ``MAX_LOG_MEMBER_BYTES`` or the file's remaining ``budget``."""
    where = f"{budget.shown}, member {info.filename[:200]}"
    if info.flag_bits & 0x1:
        raise LogFormatError(f"{where}: encrypted; logs are read unencrypted")
    fh.seek(info.header_offset)
    head = fh.read(_LOCAL_HEADER.size)
    if len(head) < _LOCAL_HEADER.size:
        raise LogFormatError(f"{where}: truncated zip")
    signature, name_len, extra_len = _LOCAL_HEADER.unpack(head)
    if signature != b"PK\x03\x04":
        raise LogFormatError(f"{where}: bad zip local header")
    fh.seek(info.header_offset + _LOCAL_HEADER.size + name_len + extra_len)
    raw = io.BufferedReader(_Slice(fh, info.compress_size), 1 << 16)
    cap = min(limits.MAX_LOG_MEMBER_BYTES, budget.left)
    out = bytearray()
    step = 1 << 20

    def take(chunk: bytes) -> None:
        out.extend(chunk)
        if len(out) > cap:
            which = (
                f"the {limits.MAX_LOG_MEMBER_BYTES:,}-byte budget of one member"
                if cap == limits.MAX_LOG_MEMBER_BYTES
                else f"the {limits.MAX_LOG_INFLATED_BYTES:,}-byte budget of the whole file"
            )
            raise LogBudgetError(f"{where}: inflates past {which}")

    try:
        if info.compress_type == zipfile.ZIP_STORED:
            while chunk := raw.read(step):
                take(chunk)
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            inflater = zlib.decompressobj(-15)
            pending = b""
            while True:
                pending = pending or raw.read(1 << 16)
                if not pending:
                    take(inflater.flush())
                    break
                take(inflater.decompress(pending, step))
                pending = inflater.unconsumed_tail
        elif info.compress_type == _ZSTD:
            import zstandard

            # The window a frame may declare is memory the decompressor allocates: 32 MiB is
            # above what any compression level uses for inputs under 32 MiB (zstd's level
            # table, windowLog <= 25 below level 20) and far below libzstd's own 2 GiB cap.
            reader = zstandard.ZstdDecompressor(max_window_size=1 << 25).stream_reader(
                raw, read_across_frames=True
            )
            while chunk := reader.read(step):
                take(chunk)
        else:
            raise LogFormatError(
                f"{where}: compression method {info.compress_type} is not read (stored, deflate "
                "or Zstandard)"
            )
    except (zlib.error, OSError, EOFError) as exc:
        raise LogFormatError(f"{where}: cannot inflate ({exc})") from None
    except Exception as exc:  # zstandard.ZstdError, without importing it for the other methods
        if type(exc).__name__ == "ZstdError":
            raise LogFormatError(f"{where}: cannot inflate ({exc})") from None
        raise
    if zlib.crc32(out) != info.CRC:
        raise LogFormatError(f"{where}: CRC mismatch (a damaged zip)")
    budget.left -= len(out)
    return bytes(out)


def read_capped(path: Path, shown: str) -> bytes:
    """A whole file, refused past ``MAX_LOG_BYTES`` before any byte is read."""
    size = path.stat().st_size
    if size > limits.MAX_LOG_BYTES:
        raise LogBudgetError(
            f"{shown}: {size:,} bytes; a log file is read up to {limits.MAX_LOG_BYTES:,} bytes"
        )
    return path.read_bytes()
