"""The one place a scored answer is separated from its thinking trace.

Contract: ``Suite.sample`` (every send loop calls it, never ``solve`` directly) hands a kind
that scores answers (``Suite.scores_answers``) an :class:`AnswerClient` instead of the endpoint
client. Its ``chat`` and ``complete`` return the endpoint's ``Completion`` with ``text`` the
answer alone and ``reasoning`` the thinking (``evalsvc.suites._thinking.trace``), so the kind
scores the answer without knowing thinking exists; the trace record of the item's last
generation goes into the sample's ``data["thinking"]``. Every other attribute is the endpoint
client's. Suites still never open sockets: the proxy only calls the client it wraps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from evalsvc.suites._thinking import SOURCE_ESTIMATE, ThinkingPolicy, trace

if TYPE_CHECKING:
    from evalsvc.endpoints import Completion, EndpointClient


class AnswerClient:
    """An endpoint client whose generations come back split into answer and thinking."""

    def __init__(self, client: EndpointClient, policy: ThinkingPolicy) -> None:
        self._client = client
        self._policy = policy
        self.record: dict[str, Any] | None = None
        """The trace of the last generation (``None`` before one, or when it errored)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def chat(self, *args: Any, **kwargs: Any) -> Completion:
        return await self._split(await self._client.chat(*args, **kwargs))

    async def complete(self, *args: Any, **kwargs: Any) -> Completion:
        return await self._split(await self._client.complete(*args, **kwargs))

    async def _split(self, out: Completion) -> Completion:
        if not out.ok:
            self.record = None
            return out
        answer, thinking, record = trace(
            out.text,
            out.reasoning,
            policy=self._policy,
            finish_reason=out.finish_reason,
            completion_tokens=out.completion_tokens,
            reasoning_tokens=out.reasoning_tokens,
        )
        if self._policy.count == "tokenize" and record["tokens_source"] == SOURCE_ESTIMATE:
            try:
                ids = await self._client.tokenize(thinking)
            except Exception as exc:  # noqa: BLE001 - the estimate stands, and says why
                record["tokenize_error"] = type(exc).__name__
            else:
                answer, thinking, record = trace(
                    out.text,
                    out.reasoning,
                    policy=self._policy,
                    finish_reason=out.finish_reason,
                    completion_tokens=out.completion_tokens,
                    tokenized_thinking=len(ids),
                )
        self.record = record
        return replace(out, text=answer, reasoning=thinking or None)
