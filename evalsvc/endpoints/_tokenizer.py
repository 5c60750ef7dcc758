"""A model's own tokenizer read from a local file, behind the same ``tokenize`` call as the
endpoint client's ``/tokenize``.

Contract: ``LocalTokenizer(path, source=...)`` loads a Hugging Face ``tokenizer.json`` (the file,
or a checkpoint directory holding one) now, so that a bad path fails when it is given, with a
``ValueError`` naming ``source`` (``params.tokenizer`` of a suite, or an endpoint's registered
``tokenizer``). A GGUF file is refused with the reason: reading its vocabulary needs the ``gguf``
package, which is not a dependency; the checkpoint's ``tokenizer.json`` is the same tokenizer.
``under_root(path, root)`` is the server-mode guard on such paths (docs/security.md).
"""

from __future__ import annotations

import os
from pathlib import Path


class LocalTokenizer:
    """The checkpoint's Hugging Face tokenizer behind the same ``tokenize`` call as the client."""

    def __init__(self, path: str, *, source: str = "params.tokenizer") -> None:
        from tokenizers import Tokenizer

        self.path = path
        file = Path(path).expanduser()
        if file.is_dir():
            file = file / "tokenizer.json"
        if file.suffix.lower() == ".gguf":
            raise ValueError(
                f"{source}: {path!r} is a GGUF file; give the checkpoint's tokenizer.json (or its "
                "directory) instead: a GGUF vocabulary is not read here"
            )
        if not file.is_file():
            raise ValueError(f"{source}: no tokenizer.json at {path!r}")
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as err:  # tokenizers raises a bare Exception for an unreadable file
            raise ValueError(f"{source}: {file} is not a tokenizer.json: {err}") from err

    async def tokenize(self, text: str) -> list[int]:
        # The same call as vLLM's /tokenize with add_special_tokens=False.
        return list(self._tok.encode(text, add_special_tokens=False).ids)


def under_root(path: str, root: str | None) -> bool:
    """Whether ``path`` is an absolute path that, symbolic links and ``..`` resolved, lies
    inside ``root`` (resolved the same way); never, without a root."""
    if not root or not os.path.isabs(path):
        return False
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    return os.path.commonpath([real, base]) == base
