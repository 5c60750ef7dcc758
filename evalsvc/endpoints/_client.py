"""Async client for OpenAI-compatible serving engines (vLLM, SGLang, trtllm-serve, llama.cpp, TGI).

Contract:
- One ``EndpointClient`` per endpoint; at most ``concurrency`` requests are in flight at once.
- Connect errors, 429 and 5xx are retried with exponential backoff (tenacity); every request has
  a timeout.
- Generation calls never raise for a failed request: they return a ``Completion`` whose ``error``
  names what went wrong, so that a run records the error as a sample and goes on.
- Token-level logprobs are normalised into ``TokenLogprob`` lists whichever API shape the engine
  used (chat ``logprobs.content`` or completions ``logprobs.tokens``/``top_logprobs``).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from evalsvc.domain import EndpointRef


class EndpointError(Exception):
    """A request failed after retries; ``str()`` is a one-line reason fit for a sample's ``error``."""


class _RetryableStatus(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}: {response.text[:200]}")
        self.response = response


def _is_retryable(exc: BaseException) -> bool:
    # Retry what a healthy server can recover from: refused/reset connections and timeouts
    # (server restarting or overloaded), 429 and 5xx. A 4xx other than 429 is our fault: no retry.
    return isinstance(exc, (httpx.TransportError, _RetryableStatus))


@dataclass
class TokenLogprob:
    """One generated (or prompt) token with its logprob and the top alternatives."""

    token: str
    logprob: float | None
    top: dict[str, float] = field(default_factory=dict)


@dataclass
class Completion:
    """The normalised result of one generation request."""

    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    ttft_s: float | None = None
    """Time to first token; set only for streamed requests."""
    itl_s: list[float] = field(default_factory=list)
    """Inter-token (inter-chunk) latencies of a streamed request."""
    logprobs: list[TokenLogprob] | None = None
    prompt_logprobs: list[TokenLogprob | None] | None = None
    error: str | None = None
    status_code: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def root_url(base_url: str) -> str:
    """Server root for non-OpenAI routes (``/health``, ``/tokenize``, ``/metrics``)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class EndpointClient:
    """Bounded-concurrency async client for one endpoint. Use as an async context manager."""

    def __init__(
        self,
        endpoint: EndpointRef,
        *,
        concurrency: int = 8,
        timeout_s: float = 300.0,
        retries: int = 3,
        backoff_s: float = 0.5,
    ) -> None:
        self.endpoint = endpoint
        self.base_url = endpoint.url.rstrip("/")
        self.root_url = root_url(self.base_url)
        self.model = endpoint.model
        self._sem = asyncio.Semaphore(max(1, concurrency))
        self._retries = max(1, retries)
        self._backoff_s = backoff_s
        headers = {}
        if endpoint.api_key_env and os.environ.get(endpoint.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[endpoint.api_key_env]}"
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            headers=headers,
            limits=httpx.Limits(max_connections=max(1, concurrency) + 4),
        )

    async def __aenter__(self) -> EndpointClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # ---- low level -------------------------------------------------------------------------

    def _retrying(self) -> AsyncRetrying:
        return AsyncRetrying(
            retry=retry_if_exception(_is_retryable),
            stop=stop_after_attempt(self._retries),
            wait=wait_exponential_jitter(
                multiplier=self._backoff_s, jitter=self._backoff_s, max=10.0
            ),
            reraise=True,
        )

    async def request_json(
        self, method: str, url: str, *, body: dict[str, Any] | None = None
    ) -> tuple[int, Any]:
        """Send one request with retries; return (status, parsed JSON). Raises ``EndpointError``."""
        try:
            async for attempt in self._retrying():
                with attempt:
                    async with self._sem:
                        resp = await self._http.request(method, url, json=body)
                    if resp.status_code == 429 or resp.status_code >= 500:
                        raise _RetryableStatus(resp)
        except _RetryableStatus as exc:
            raise EndpointError(str(exc)) from exc
        except httpx.TimeoutException as exc:
            raise EndpointError(f"timeout: {type(exc).__name__} on {url}") from exc
        except httpx.TransportError as exc:
            raise EndpointError(
                f"{type(exc).__name__}: {exc or 'connection failed'} ({url})"
            ) from exc
        try:
            return resp.status_code, resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise EndpointError(
                f"malformed JSON body (HTTP {resp.status_code}): {resp.text[:120]!r}"
            ) from exc

    async def get_text(self, url: str) -> tuple[int, str]:
        """GET a text resource (e.g. ``/metrics``) with retries. Raises ``EndpointError``."""
        try:
            async for attempt in self._retrying():
                with attempt:
                    async with self._sem:
                        resp = await self._http.get(url)
                    if resp.status_code == 429 or resp.status_code >= 500:
                        raise _RetryableStatus(resp)
        except (_RetryableStatus, httpx.TransportError) as exc:
            raise EndpointError(f"{type(exc).__name__}: {exc}") from exc
        return resp.status_code, resp.text

    # ---- OpenAI routes ---------------------------------------------------------------------

    async def models(self) -> list[dict[str, Any]]:
        status, data = await self.request_json("GET", f"{self.base_url}/models")
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get("data"), list):
            raise EndpointError(f"/models answered HTTP {status} without a model list")
        return list(data["data"])

    async def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` from vLLM's ``/tokenize`` (no special tokens added)."""
        body: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
        if self.model:
            body["model"] = self.model
        status, data = await self.request_json("POST", f"{self.root_url}/tokenize", body=body)
        if status != 200 or not isinstance(data, dict) or "tokens" not in data:
            raise EndpointError(f"/tokenize answered HTTP {status}: {str(data)[:120]}")
        return list(data["tokens"])

    async def chat(
        self,
        messages: list[dict[str, str]],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        seed: int | None = None,
        logprobs: bool = False,
        top_logprobs: int = 0,
        stop: list[str] | None = None,
        stream: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> Completion:
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if seed is not None:
            body["seed"] = seed
        if logprobs:
            body["logprobs"] = True
            if top_logprobs:
                body["top_logprobs"] = top_logprobs
        if stop:
            body["stop"] = stop
        body.update(extra or {})
        return await self._generate("chat/completions", body, stream=stream)

    async def complete(
        self,
        prompt: str,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        seed: int | None = None,
        logprobs: int | None = None,
        echo: bool = False,
        prompt_logprobs: int | None = None,
        stop: list[str] | None = None,
        stream: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> Completion:
        body: dict[str, Any] = {
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if seed is not None:
            body["seed"] = seed
        if logprobs is not None:
            body["logprobs"] = logprobs
        if echo:
            body["echo"] = True
        if prompt_logprobs is not None:
            # vLLM extension; other engines ignore or reject it (the probe finds out which).
            body["prompt_logprobs"] = prompt_logprobs
        if stop:
            body["stop"] = stop
        body.update(extra or {})
        return await self._generate("completions", body, stream=stream)

    async def _generate(self, route: str, body: dict[str, Any], *, stream: bool) -> Completion:
        if self.model and "model" not in body:
            body["model"] = self.model
        url = f"{self.base_url}/{route}"
        start = time.perf_counter()
        try:
            if stream:
                out = await self._stream(url, body, start)
            else:
                status, data = await self.request_json("POST", url, body=body)
                out = _parse_response(data, status)
        except EndpointError as exc:
            out = Completion(error=str(exc))
        except Exception as exc:  # noqa: BLE001 - a failed request must become a recorded error
            out = Completion(error=f"{type(exc).__name__}: {exc}")
        out.latency_s = time.perf_counter() - start
        return out

    async def _stream(self, url: str, body: dict[str, Any], start: float) -> Completion:
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        out = Completion()
        pieces: list[str] = []
        last: float | None = None
        async for attempt in self._retrying():
            with attempt:
                pieces.clear()
                out = Completion()
                last = None
                try:
                    async with self._sem, self._http.stream("POST", url, json=body) as resp:
                        if resp.status_code == 429 or resp.status_code >= 500:
                            await resp.aread()
                            raise _RetryableStatus(resp)
                        if resp.status_code != 200:
                            text = (await resp.aread()).decode(errors="replace")
                            return Completion(
                                error=f"HTTP {resp.status_code}: {text[:200]}",
                                status_code=resp.status_code,
                            )
                        async for chunk in _sse_events(resp):
                            now = time.perf_counter()
                            delta_text = _chunk_text(chunk)
                            if delta_text:
                                if out.ttft_s is None:
                                    out.ttft_s = now - start
                                elif last is not None:
                                    out.itl_s.append(now - last)
                                last = now
                                pieces.append(delta_text)
                            _merge_chunk(out, chunk)
                except httpx.TimeoutException as exc:
                    raise EndpointError(f"timeout: {type(exc).__name__} on {url}") from exc
        out.text = "".join(pieces)
        return out


async def _sse_events(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Yield the JSON payloads of a server-sent-events stream until ``[DONE]``."""
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            event = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise EndpointError(f"malformed stream event: {payload[:120]!r}") from exc
        if isinstance(event, dict) and "error" in event:
            raise EndpointError(f"stream error: {str(event['error'])[:200]}")
        if isinstance(event, dict):
            yield event


def _chunk_text(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if "delta" in choice:
        return str((choice.get("delta") or {}).get("content") or "")
    return str(choice.get("text") or "")


def _merge_chunk(out: Completion, chunk: dict[str, Any]) -> None:
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        out.prompt_tokens = usage.get("prompt_tokens", out.prompt_tokens)
        out.completion_tokens = usage.get("completion_tokens", out.completion_tokens)
    for choice in chunk.get("choices") or []:
        if choice.get("finish_reason"):
            out.finish_reason = choice["finish_reason"]
        lp = _parse_logprobs(choice.get("logprobs"))
        if lp:
            out.logprobs = (out.logprobs or []) + lp


def _parse_response(data: Any, status: int) -> Completion:
    if status != 200:
        message = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(message, dict):
            message = message.get("message", message)
        return Completion(error=f"HTTP {status}: {str(message)[:200]}", status_code=status)
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("choices"), list)
        or not data["choices"]
    ):
        return Completion(
            error=f"malformed response: no choices in {str(data)[:120]!r}", status_code=status
        )
    choice = data["choices"][0]
    if not isinstance(choice, dict):
        return Completion(error="malformed response: choice is not an object", status_code=status)
    if isinstance(choice.get("message"), dict):
        text = choice["message"].get("content") or ""
    else:
        text = choice.get("text") or ""
    usage: dict[str, Any] = data["usage"] if isinstance(data.get("usage"), dict) else {}
    out = Completion(
        text=str(text),
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        logprobs=_parse_logprobs(choice.get("logprobs")),
        status_code=status,
    )
    raw_prompt_lp = choice.get("prompt_logprobs", data.get("prompt_logprobs"))
    if isinstance(raw_prompt_lp, list):
        out.prompt_logprobs = [_parse_prompt_position(p) for p in raw_prompt_lp]
    return out


def _parse_logprobs(raw: Any) -> list[TokenLogprob] | None:
    """Normalise chat (``content: [...]``) and completions (parallel lists) logprob shapes."""
    if not isinstance(raw, dict):
        return None
    if isinstance(raw.get("content"), list):
        result = []
        for entry in raw["content"]:
            top = {
                str(alt.get("token")): float(alt.get("logprob"))
                for alt in entry.get("top_logprobs") or []
                if alt.get("logprob") is not None
            }
            result.append(TokenLogprob(str(entry.get("token")), _float(entry.get("logprob")), top))
        return result
    tokens = raw.get("tokens")
    if isinstance(tokens, list):
        lps = raw.get("token_logprobs") or [None] * len(tokens)
        tops = raw.get("top_logprobs") or [None] * len(tokens)
        return [
            TokenLogprob(
                str(tok),
                _float(lp),
                {str(k): float(v) for k, v in (top or {}).items() if v is not None},
            )
            for tok, lp, top in zip(tokens, lps, tops, strict=False)
        ]
    return None


def _parse_prompt_position(raw: Any) -> TokenLogprob | None:
    """vLLM's ``prompt_logprobs``: per position ``{token_id: {logprob, rank, decoded_token}}``.

    vLLM always includes the actual prompt token beside the top-k, so ``top`` is keyed by token
    id (as a string) and the caller, who knows the prompt ids, picks the reference token.
    """
    if not isinstance(raw, dict):
        return None
    top: dict[str, float] = {}
    for tok_id, info in raw.items():
        if isinstance(info, dict) and info.get("logprob") is not None:
            top[str(tok_id)] = float(info["logprob"])
    return TokenLogprob(token="", logprob=None, top=top)


def _float(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None
