"""Answer similarity for reference-free suites: token F1, ROUGE-L and embedding cosine.

Contract: ``similarity(measure, a, b)`` is a score in ``[0, 1]`` of how close two free-text
answers are (symmetric for every measure here); ``embedding_similarity(u, v)`` is the cosine of
two embedding vectors clipped to ``[0, 1]``. No sockets here: the embeddings come from the
embedding endpoint through the runner's post-pass (``_reference_free``).

- ``token_f1``: the F-measure of the two answers' bags of tokens (precision and recall of the
  common tokens, counted with multiplicity): SQuAD's token F1 (Rajpurkar et al. 2016, arXiv
  1606.05250) without its answer normalization, which is ROUGE-1's F-measure (Lin 2004,
  "ROUGE: A Package for Automatic Evaluation of Summaries"). Computed by Google Research's
  ``rouge-score`` package (``rouge1``), the reference implementation most evaluation
  frameworks use (Hugging Face ``evaluate``, lm-eval's ``rouge`` metrics, HELM).
- ``rouge_l``: the F-measure of the longest common subsequence of tokens (Lin 2004, section 3),
  ``rouge-score``'s ``rougeL``: word order counts, so a reordered answer scores lower than the
  same words in the same order.

Tokens: lower-cased runs of Unicode word characters (``\\w+``). ``rouge-score``'s own tokenizer
keeps ``[a-z0-9]`` only, so an answer in Chinese, Russian or Greek would be empty to it and every
pair of them would score 0; on ASCII text the two tokenizers agree (tests check the scores
against the package's with its own tokenizer). No stemming, so the scores do not depend on an
English stemmer. Two answers that are identical (two empty answers included) score 1; one empty
answer against a non-empty one scores 0.

Cost: ``rouge-score`` imports NLTK (about a second), so it is imported on first use only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from evalsvc.domain import Sample, provenance_fingerprint

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import EndpointClient

Measure = Literal["rouge_l", "token_f1", "embedding"]
TEXT_MEASURES: tuple[str, ...] = ("rouge_l", "token_f1")
_WORD = re.compile(r"\w+", re.UNICODE)
_ROUGE_KEY = {"rouge_l": "rougeL", "token_f1": "rouge1"}


class _Tokenizer:
    """``rouge-score``'s tokenizer interface (``tokenize(text) -> list[str]``), Unicode-aware."""

    def tokenize(self, text: str) -> list[str]:
        return _WORD.findall(text.lower())


@lru_cache(maxsize=1)
def _scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=False, tokenizer=_Tokenizer())


def similarity(measure: str, a: str, b: str) -> float:
    """``measure`` (``rouge_l`` or ``token_f1``) of answers ``a`` and ``b``, in ``[0, 1]``."""
    if measure not in _ROUGE_KEY:
        raise ValueError(f"unknown text similarity {measure!r}; one of {', '.join(_ROUGE_KEY)}")
    if a == b:
        return 1.0
    score = _scorer().score(a or "", b or "")[_ROUGE_KEY[measure]].fmeasure
    return float(min(max(score, 0.0), 1.0))


def embedding_similarity(u: Sequence[float] | None, v: Sequence[float] | None) -> float | None:
    """Cosine of two embeddings, clipped at 0 (an answer is not "less than unrelated"); None
    when either is missing or a zero vector."""
    if not u or not v or len(u) != len(v):
        return None
    dot = math.fsum(x * y for x, y in zip(u, v, strict=True))
    nu = math.sqrt(math.fsum(x * x for x in u))
    nv = math.sqrt(math.fsum(y * y for y in v))
    if nu == 0.0 or nv == 0.0:
        return None
    return float(min(max(dot / (nu * nv), 0.0), 1.0))


# ---- the pair post-pass ----------------------------------------------------------------------

PAIR_FIELD = "vs_baseline"
"""The sample ``data`` field holding an answer's comparison with the baseline's first answer."""


def helper_fingerprint(client: EndpointClient | None) -> str | None:
    """The provenance fingerprint of a probed helper endpoint (a judge, an embedder): what its
    records carry, so an answer scored by another one (an earlier attempt's, a blessed
    baseline's) is scored again; None for no client or one never probed."""
    prov = client.provenance if client is not None else None
    return provenance_fingerprint(prov) if prov is not None else None


async def score_pairs(
    items: Sequence[Any],
    samples: Sequence[Sample],
    same: Callable[[Any, Any], bool],
    embedder: EndpointClient | None,
) -> list[Sample]:
    """Every answer compared with the baseline's first answer to the same item (the baseline's
    second pass, repeat 1, and each candidate's answer): ``data["vs_baseline"]`` gets
    ``same_answer`` (``same`` on the scorer's extracted answers), ``rouge_l``, ``token_f1`` and,
    with an ``embedder`` (an OpenAI ``/embeddings`` endpoint), ``embedding``; a candidate's
    score becomes 1 for the same answer and 0 for a changed one, so the flips page lists the
    changed answers. Returns the changed samples: those already compared are left alone,
    unless an ``embedder`` is given and the comparison's ``embedding_endpoint`` (the embedder's
    ``helper_fingerprint``) is not this one's (an earlier attempt's or a blessed baseline's
    embeddings come from another model: the pair is compared again)."""
    embedder_fp = helper_fingerprint(embedder)
    by_item: dict[str, list[Sample]] = {}
    for s in samples:
        by_item.setdefault(s.item_id, []).append(s)
    wanted: list[tuple[Sample, Sample]] = []
    for item in items:
        mine = by_item.get(item.id, [])
        first = next((s for s in mine if s.endpoint == "baseline" and s.repeat == 0), None)
        if first is None or first.error is not None:
            continue
        for s in mine:
            if s.error is not None or _compared(s.data.get(PAIR_FIELD), embedder, embedder_fp):
                continue
            if (s.endpoint == "baseline" and s.repeat == 1) or (
                s.endpoint != "baseline" and s.repeat == 0
            ):
                wanted.append((first, s))
    vectors: dict[str, list[float]] = {}
    embed_error: str | None = None
    if embedder is not None and wanted:
        texts = list(dict.fromkeys(t for f, s in wanted for t in (f.output, s.output)))
        try:
            for start in range(0, len(texts), EMBED_BATCH):
                batch = texts[start : start + EMBED_BATCH]
                vectors.update(zip(batch, await embedder.embeddings(batch), strict=True))
        except Exception as exc:  # noqa: BLE001 - an endpoint's failure is recorded per pair
            embed_error = str(exc)[:500]
    out: list[Sample] = []
    for first, s in wanted:
        record: dict[str, Any] = {
            "same_answer": bool(same(s.data.get("answer"), first.data.get("answer"))),
            "rouge_l": similarity("rouge_l", first.output, s.output),
            "token_f1": similarity("token_f1", first.output, s.output),
        }
        if embedder is not None:
            record["embedding"] = embedding_similarity(
                vectors.get(first.output), vectors.get(s.output)
            )
            record["embedding_endpoint"] = embedder_fp
            if record["embedding"] is None:
                record["embedding_error"] = embed_error or "no embedding for this answer"
        update: dict[str, Any] = {"data": {**s.data, PAIR_FIELD: record}}
        if s.endpoint != "baseline":
            update["score"] = 1.0 if record["same_answer"] else 0.0
        out.append(s.model_copy(update=update))
    return out


def _compared(record: Any, embedder: EndpointClient | None, fingerprint: str | None) -> bool:
    """Whether a stored comparison stands: present and, with an embedder, made by this one."""
    if not isinstance(record, dict):
        return False
    return embedder is None or record.get("embedding_endpoint") == fingerprint


#: Texts per ``/embeddings`` request (OpenAI accepts 2,048 inputs; engines often fewer).
EMBED_BATCH = 64
