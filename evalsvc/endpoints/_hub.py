"""The served model's tokenizer from the Hugging Face hub: the probe's last resort.

Contract: ``hub_tokenizer(repo_ids)`` downloads ``tokenizer.json`` (required) and
``tokenizer_config.json`` / ``special_tokens_map.json`` (when the repo has them) of the first of
``repo_ids`` that has them, through ``huggingface_hub`` (which honours ``HF_ENDPOINT``, a mirror,
``HF_HUB_OFFLINE``, cached files only, and ``HF_TOKEN`` for gated repos), into the cache
``<EVALSVC_HOME>/hub`` (the hub cache's own layout: a second run reads it, offline too), and
returns ``HubTokenizer(directory, repo_id, commit)``. Each request waits ``HUB_TIMEOUT_S`` at
most; a ``tokenizer.json`` over ``MAX_TOKENIZER_BYTES`` is refused before it is downloaded (the
repo id is the endpoint's answer, so it bounds what an endpoint can make us store). Nothing but
these files is read: no model code, no weights.

Failure is ``HubError`` whose text says why in one line, starting with ``HUB_UNREACHABLE`` when
no answer came (the probe then records it and the missing-``tokenize`` refusal names it).
Results are remembered per repo id for the process (failures for ``RETRY_AFTER_S``), so a run's
baseline and candidates serving one model ask once.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsvc.settings import Settings

HUB_TIMEOUT_S = 5.0
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024
RETRY_AFTER_S = 300.0
HUB_UNREACHABLE = "the Hugging Face hub was not reachable"
_OPTIONAL = ("tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class HubTokenizer:
    directory: str
    repo_id: str
    commit: str | None


class HubError(Exception):
    """No tokenizer from the hub; ``str()`` is the one-line reason."""


_lock = threading.Lock()
_known: dict[str, tuple[float, HubTokenizer | HubError]] = {}


def hub_repo_ids(model: str | None, root: str | None) -> list[str]:
    """Hub repo ids worth asking for an endpoint's tokenizer: the served model's ``root`` (vLLM
    reports the id it loaded, when it was not a local path), then the served model id; each
    only if it is shaped like a repo id (``name`` or ``org/name``, no path)."""
    out: list[str] = []
    for name in (root, model):
        if not name or name in out or name.startswith(("/", ".", "~")) or name.count("/") > 1:
            continue
        if "\\" in name or ".." in name or name.endswith("/"):
            continue
        out.append(name)
    return out


def hub_tokenizer(repo_ids: Sequence[str]) -> HubTokenizer:
    """The first of ``repo_ids`` whose tokenizer the hub (or its cache) gives; ``HubError``."""
    if not repo_ids:
        raise HubError("the served model id is not a Hugging Face hub repo id")
    errors: list[HubError] = []
    for repo_id in repo_ids:
        with _lock:
            seen = _known.get(repo_id)
        if seen is not None and (
            isinstance(seen[1], HubTokenizer) or time.monotonic() - seen[0] < RETRY_AFTER_S
        ):
            result = seen[1]
        else:
            try:
                result = _download(repo_id)
            except HubError as exc:
                result = exc
            with _lock:
                _known[repo_id] = (time.monotonic(), result)
        if isinstance(result, HubTokenizer):
            return result
        errors.append(result)
    # The most telling reason: unreachable says it all; else the last repo's.
    unreachable = [e for e in errors if str(e).startswith(HUB_UNREACHABLE)]
    raise (unreachable or errors)[-1]


def _transport_errors() -> tuple[type[BaseException], ...]:
    """A request that got no answer, in whichever HTTP library this ``huggingface_hub`` uses
    (``httpx2`` from 2.x, ``httpx`` in 1.x, ``requests`` before): connection refused, DNS,
    timeouts."""
    found: list[type[BaseException]] = []
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"),
                         ("requests.exceptions", "ConnectionError"),
                         ("requests.exceptions", "Timeout")):
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def _download(repo_id: str) -> HubTokenizer:
    import huggingface_hub as hf
    from huggingface_hub import errors as hf_errors

    cache = Settings().home / "hub"
    no_answer = _transport_errors()
    unreachable: tuple[type[BaseException], ...] = (hf_errors.LocalEntryNotFoundError, *no_answer)
    try:
        try:
            meta = hf.get_hf_file_metadata(
                hf.hf_hub_url(repo_id, "tokenizer.json"), timeout=HUB_TIMEOUT_S
            )
        except hf_errors.OfflineModeIsEnabled:
            meta = None  # HF_HUB_OFFLINE: the cached copy, if any (hf_hub_download says)
        if meta is not None and meta.size is not None and meta.size > MAX_TOKENIZER_BYTES:
            raise HubError(
                f"{repo_id}: its tokenizer.json is {meta.size} bytes, more than the "
                f"{MAX_TOKENIZER_BYTES} evalsvc reads"
            )
        main = Path(_get(hf, repo_id, "tokenizer.json", cache))
        for name in _OPTIONAL:
            # Optional: a repo without it (or a cache without it, offline) still tokenizes.
            with contextlib.suppress(hf_errors.EntryNotFoundError, *no_answer):
                _get(hf, repo_id, name, cache)
    except HubError:
        raise
    except hf_errors.HFValidationError as exc:
        raise HubError(f"{repo_id!r} is not a Hugging Face hub repo id ({exc})") from None
    except (hf_errors.RepositoryNotFoundError, hf_errors.GatedRepoError) as exc:
        raise HubError(
            f"the hub has no repo {repo_id} this process may read ({type(exc).__name__}; a "
            "gated or private model needs HF_TOKEN)"
        ) from None
    except unreachable as exc:
        # No answer (connection refused, DNS, timeout) and nothing cached, or HF_HUB_OFFLINE
        # with nothing cached. (LocalEntryNotFoundError is an EntryNotFoundError: first.)
        raise HubError(f"{HUB_UNREACHABLE} for {repo_id} ({_short(exc)})") from None
    except hf_errors.EntryNotFoundError:
        raise HubError(f"the hub repo {repo_id} has no tokenizer.json") from None
    except hf_errors.HfHubHTTPError as exc:
        raise HubError(f"the hub answered {repo_id}'s tokenizer.json with an error "
                       f"({_short(exc)})") from None
    except OSError as exc:  # the cache directory (HTTP errors were caught above)
        raise HubError(f"{repo_id}: the hub cache {cache} failed ({_short(exc)})") from None
    return HubTokenizer(str(main.parent), repo_id, _commit(main))


def _get(hf: Any, repo_id: str, name: str, cache: Path) -> str:
    return str(
        hf.hf_hub_download(
            repo_id, name, cache_dir=cache, etag_timeout=HUB_TIMEOUT_S, tqdm_class=_quiet_tqdm()
        )
    )


def _commit(path: Path) -> str | None:
    """The commit a snapshot file belongs to (``.../snapshots/<commit>/tokenizer.json``)."""
    return path.parent.name if path.parent.parent.name == "snapshots" else None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _quiet_tqdm() -> Any:
    """A progress bar class that draws nothing: a tokenizer's few MB need none, and a bar would
    break into ``compare``'s own."""
    from tqdm.auto import tqdm  # type: ignore[import-untyped]

    class Quiet(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Quiet
