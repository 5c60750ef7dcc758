"""The environment of every subprocess a worker or the API server starts: minimal and explicit.

Contract: ``child_env(set_vars, keep=())`` returns a new mapping holding only

- the variables a program needs to run at all and to find its caches (``BASE_NAMES``: ``PATH``,
  ``HOME``, the locale, temporary directories, CA bundles, thread counts, the Hugging Face and
  XDG cache directories), copied from this process when set;
- the names in ``keep`` (a call site's own needs, e.g. proxies and pip settings for an install);
- ``set_vars``, which always win.

Nothing else is inherited. A worker's environment holds the operator's secrets
(``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``EVALSVC_DATABASE_URL``, registered endpoint
keys); a child that talks to an endpoint chosen by a submit token would hand them over (lm-eval
sends ``OPENAI_API_KEY`` as a Bearer header), so an allowlist, not a blocklist, decides
(docs/security.md, "Subprocesses"). The local endpoint launcher (``evalsvc local``, local mode:
the user's own vLLM servers on their own machine) is the one exception and keeps its own rule.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

BASE_NAMES: frozenset[str] = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "TMPDIR",
        "TEMP",
        "TMP",
        "XDG_CACHE_HOME",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_DATASETS_CACHE",
        "TRANSFORMERS_CACHE",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    }
)
"""What any child may inherit: no credential lives in these."""

#: A child still needs a search path when this process has none (a bare ``env -i`` start).
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def child_env(set_vars: Mapping[str, str] | None = None, *, keep: Iterable[str] = ()) -> dict[str, str]:
    """A minimal environment for a subprocess (see the module docstring)."""
    names = BASE_NAMES | frozenset(keep)
    env = {k: v for k, v in os.environ.items() if k in names}
    env.setdefault("PATH", _DEFAULT_PATH)
    env.update(set_vars or {})
    return env
