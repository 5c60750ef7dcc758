"""Async client for OpenAI-compatible serving engines (vLLM, SGLang, trtllm-serve, llama.cpp, TGI).

Contract:
- One ``EndpointClient`` per endpoint; at most ``concurrency`` requests are in flight at once.
- Connect errors, 429 and 5xx are retried with exponential backoff (tenacity). Every attempt
  has a total deadline (``timeout_s``: wall time for the whole answer, streams included), so a
  server that drips one byte at a time or never ends its stream gets an error at the deadline.
  An attempt that ran into its deadline is not retried.
- Redirects are never followed (a 3xx is an error). Bodies are capped while they are read
  (``max_response_bytes``, ``max_stream_bytes``; settings ``EVALSVC_MAX_*``), counted after
  decoding. Requests ask for ``Accept-Encoding: identity``; a gzip or deflate body sent anyway
  is inflated in pieces of at most ``DECODE_CHUNK`` bytes (a gzip bomb costs one piece, then
  ends at the cap); other encodings are an error.
- Error texts carry the status line, never the response body: a run's errors are shown to every
  reader, and echoing bodies would let a client read pages the worker can reach.
- ``egress`` (``EgressPolicy``) decides where sockets may go and which ``api_key_env`` is
  resolved (from the environment, when the client is built for a run). The default, local,
  restricts nothing. In server mode every host name is resolved through ``GuardedResolver``
  (checked after DNS; the socket opens to the checked address), a literal address is judged
  by the static check when the client is built, and proxy variables are ignored. URLs with userinfo are refused in
  every mode. A refused endpoint sends nothing: every request fails with ``refusal``.
- Generation calls never raise for a failed request: they return a ``Completion`` whose ``error``
  names what went wrong, so that a run records the error as a sample and goes on. A body or
  stream event that is not JSON, or nests past the parser's depth, is such an error
  (``malformed JSON body: nested too deeply to read``), never an exception; the answer's texts
  (content, reasoning, tool names and arguments) come back as valid Unicode (``unicode_text``).
- A connection refused reads ``nothing listens on HOST:PORT — is the server running, is the
  port right? (connection refused: URL)``, a name that does not resolve ``cannot resolve the
  host name ...``.
- Token-level logprobs are normalised into ``TokenLogprob`` lists whichever API shape the engine
  used (chat ``logprobs.content`` or completions ``logprobs.tokens``/``top_logprobs``).
- Tool calls (``message.tool_calls``, or streamed ``delta.tool_calls`` merged by their
  ``index``: the name from the first piece, the argument text concatenated) become
  ``ToolCall`` lists on ``Completion.tool_calls`` with the arguments as the engine sent them
  (a string, parsed by whoever scores them: a malformed argument string is the engine's fault
  to be counted, not a transport error). ``chat`` passes ``tools``, ``tool_choice`` and
  ``response_format`` through as given.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit
from urllib.request import (  # type: ignore[attr-defined]  # public, not in typeshed
    getproxies_environment,
    proxy_bypass_environment,
)

import aiohttp
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from evalsvc.domain import EndpointRef, Provenance
from evalsvc.endpoints._egress import EgressPolicy, EgressRefused, GuardedResolver, resolve_checked
from evalsvc.endpoints._engines import TokenizeShape, parse_tokens, tokenize_request
from evalsvc.endpoints._tokenizer import LocalTokenizer
from evalsvc.endpoints._urls import UrlError, check_endpoint_url, redact_text
from evalsvc.settings import Settings


class EndpointError(Exception):
    """A request failed after retries; ``str()`` is a one-line reason fit for a sample's ``error``.
    ``status`` is the HTTP status when the server answered (None: no HTTP answer)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def status_line(code: int) -> str:
    """``HTTP 404 Not Found``, with the standard phrase: the server's own phrase is its text."""
    try:
        return f"HTTP {code} {HTTPStatus(code).phrase}"
    except ValueError:
        return f"HTTP {code}"


class _RetryableStatus(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status_line(status))
        self.status = status


#: What goes wrong on the wire (aiohttp): refused, reset or timed-out connections, bodies cut
#: short, answers that are not HTTP. ``ClientResponseError`` is only ever a protocol error here:
#: the client never calls ``raise_for_status``.
_TRANSPORT_ERRORS = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    aiohttp.ClientResponseError,
)


_T = TypeVar("_T")


def _is_retryable(exc: BaseException) -> bool:
    # Retry what a healthy server can recover from: refused/reset connections and connect
    # timeouts (server restarting or overloaded), 429 and 5xx. A 4xx other than 429 is our
    # fault, a refusal is policy and a spent deadline is the request's whole budget: no retry.
    return isinstance(exc, (*_TRANSPORT_ERRORS, _RetryableStatus))


@dataclass
class TokenLogprob:
    """One generated (or prompt) token with its logprob and the top alternatives."""

    token: str
    logprob: float | None
    top: dict[str, float] = field(default_factory=dict)


@dataclass
class ToolCall:
    """One function call of a chat answer, as the engine's tool parser returned it."""

    name: str
    arguments: str
    """The argument object as the JSON text the engine sent (an object sent instead is
    re-serialised); parsing and validating it is the scorer's job."""
    id: str | None = None


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
    tool_calls: list[ToolCall] | None = None
    """The answer's function calls (chat with ``tools``); ``None`` when it made none."""
    reasoning: str | None = None
    """The engine's separate reasoning text (``reasoning_content`` or ``reasoning`` of a chat
    message or of streamed deltas: vLLM, SGLang); ``None`` when it sent none. Markers inside
    ``text`` are split by the suites (``evalsvc.suites._thinking``), not here."""
    reasoning_tokens: int | None = None
    """``usage.completion_tokens_details.reasoning_tokens`` when the engine reports it."""

    @property
    def ok(self) -> bool:
        return self.error is None


_JSON_HEADERS = {"Content-Type": "application/json"}


def _env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP(S)_PROXY``, ``NO_PROXY``), if any."""
    parts = urlsplit(url)
    proxies = getproxies_environment()
    proxy = proxies.get(parts.scheme)
    if not proxy or proxy_bypass_environment(parts.netloc, proxies):
        return None
    return proxy


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
        egress: EgressPolicy | None = None,
        max_response_bytes: int | None = None,
        max_stream_bytes: int | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.egress = egress or EgressPolicy.local()
        self.base_url = redact_text(endpoint.url.rstrip("/"))
        self.root_url = root_url(self.base_url)
        self.model = endpoint.model
        #: What ``probe`` found (None before it ran): a helper endpoint's judge or embedder
        #: records it beside what it scored, so a later attempt can tell whether it changed.
        self.provenance: Provenance | None = None
        self.tokenize_shape: TokenizeShape | None = None
        #: The registered tokenizer (``EndpointRef.tokenizer``) the probe loaded because the
        #: engine has no tokenize route: ``tokenize`` counts with it instead of a request.
        self.local_tokenizer: LocalTokenizer | None = None
        """How this engine's ``/tokenize`` is spoken; set by the probe (default: vLLM's)."""
        self._sem = asyncio.Semaphore(max(1, concurrency))
        self._retries = max(1, retries)
        self._backoff_s = backoff_s
        self._timeout_s = timeout_s
        settings = Settings()
        self._max_body = settings.max_response_bytes if max_response_bytes is None else max_response_bytes
        self._max_stream = settings.max_stream_bytes if max_stream_bytes is None else max_stream_bytes
        self.refusal: str | None = None
        """Why this endpoint may not be called at all (every request fails with it, unsent)."""
        self.api_key: str | None = None
        """The resolved key (``egress.api_key``): sent as a bearer token, passed on to lm-eval."""
        try:
            check_endpoint_url(endpoint.url)
            self.egress.check_url(endpoint.url)
            self.api_key = self.egress.api_key(endpoint.api_key_env)
        except (UrlError, EgressRefused) as exc:
            self.refusal = f"refused before connecting: {exc}"
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        # No compression: bodies are capped as they are decoded (_decoded), and a compressed
        # answer gains nothing on the small JSON an endpoint sends.
        headers["Accept-Encoding"] = "identity"
        self._headers = headers
        self._pool_size = max(1, concurrency) + 4
        self._http: aiohttp.ClientSession | None = None
        # Proxy variables only in local mode: in server mode a proxy would connect on our
        # behalf, past the check. Read once: every request goes to this one host, and aiohttp's
        # trust_env re-reads the environment and ~/.netrc on every request (a third of the
        # client's CPU on the zero-latency stub).
        self._proxy = None if self.egress.server or self.refusal else _env_proxy(self.base_url)

    def _session(self) -> aiohttp.ClientSession:
        """The connection pool, made on first use (aiohttp binds it to the running loop).

        aiohttp rather than httpx: on the zero-latency stub httpx's pool cost several times
        the whole request (docs/benchmarks.md, "Evaluator speed"). Bodies are read raw
        (``auto_decompress=False``) and decoded here under the caps (``_decoded``); the total
        deadline is ``asyncio.timeout`` per attempt, aiohttp only bounds the connect."""
        if self._http is None:
            connector = aiohttp.TCPConnector(
                limit=self._pool_size,
                limit_per_host=0,
                # Server mode: every name is resolved and checked here, and the socket opens to
                # the checked address (a later DNS answer cannot steer it).
                resolver=GuardedResolver(self.egress) if self.egress.server else None,
                use_dns_cache=not self.egress.server,
            )
            self._http = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=min(10.0, self._timeout_s)
                ),
                auto_decompress=False,
                # SSL_CERT_FILE/SSL_CERT_DIR are read by OpenSSL's default verify paths in both
                # modes (private CAs stay usable).
                trust_env=False,  # the proxy is read once (_env_proxy), never per request
                cookie_jar=aiohttp.DummyCookieJar(),
                raise_for_status=False,
            )
        return self._http

    async def __aenter__(self) -> EndpointClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

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

    async def _attempts(self, once: Callable[[], Awaitable[_T]]) -> _T:
        """``once()``, retried as ``_retrying`` says. The first attempt runs outside tenacity:
        its per-request bookkeeping (``AsyncRetrying`` and its iteration) was 12% of the event
        loop's samples in a zero-latency run (py-spy, docs/benchmarks.md). A retryable failure
        of it is replayed into tenacity as its first attempt, so the attempt count and the
        backoff are what tenacity alone gives."""
        try:
            return await once()
        except BaseException as exc:
            if not _is_retryable(exc):
                raise
            first: BaseException | None = exc
        async for attempt in self._retrying():
            with attempt:
                if first is not None:
                    replay, first = first, None
                    raise replay
                return await once()
        raise AssertionError("unreachable: tenacity reraises the last failure")  # pragma: no cover

    def _check_status(self, resp: aiohttp.ClientResponse, url: str) -> None:
        code = resp.status
        if 300 <= code < 400:
            raise EndpointError(
                f"{status_line(code)} from {url}: redirects are not followed", status=code
            )
        if code == 429 or code >= 500:
            raise _RetryableStatus(code)

    def _request(
        self, method: str, url: str, body: dict[str, Any] | None
    ) -> aiohttp.client._RequestContextManager:
        return self._session().request(
            method,
            url,
            data=None if body is None else json.dumps(body).encode(),
            headers=_JSON_HEADERS if body is not None else None,
            allow_redirects=False,
            proxy=self._proxy,
        )

    def _failure(self, exc: BaseException, url: str, what: str = "answer") -> EndpointError:
        """The one-line error for what ``_send``/``_stream`` caught (never the body)."""
        if isinstance(exc, _RetryableStatus):
            return EndpointError(f"{exc} from {url}")
        if isinstance(exc, aiohttp.ServerTimeoutError):  # the connect bound, not the deadline
            return EndpointError(f"timeout: {type(exc).__name__} on {url}")
        if isinstance(exc, TimeoutError):
            return EndpointError(
                f"timeout: {what} not complete within {self._timeout_s:g} s on {url}"
            )
        if isinstance(exc, EgressRefused):
            return EndpointError(f"refused by the egress policy: {exc}")
        text = failure_class(exc)
        if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(
            exc.os_error, ConnectionRefusedError
        ):
            # "refused" kept in the words: error kinds count it as a lost connection.
            return EndpointError(f"{text} (connection refused: {url})")
        return EndpointError(f"{text} ({url})")

    async def _send(self, method: str, url: str, body: dict[str, Any] | None) -> tuple[int, bytes]:
        """One request with retries, a total deadline per attempt, and the body capped."""
        if self.refusal:
            raise EndpointError(self.refusal)

        async def once() -> tuple[int, bytes]:
            async with (
                self._sem,
                asyncio.timeout(self._timeout_s),
                self._request(method, url, body) as resp,
            ):
                self._check_status(resp, url)
                return resp.status, await _read_capped(resp, self._max_body)

        try:
            return await self._attempts(once)
        except (_RetryableStatus, TimeoutError, *_TRANSPORT_ERRORS, EgressRefused) as exc:
            raise self._failure(exc, url) from exc

    async def request_json(
        self, method: str, url: str, *, body: dict[str, Any] | None = None
    ) -> tuple[int, Any]:
        """Send one request with retries; return (status, parsed JSON). Raises ``EndpointError``."""
        status, data = await self._send(method, url, body)
        try:
            return status, json.loads(data)
        except RecursionError:
            # Python's parser recurses per level: ``[`` × 5,000 is a RecursionError, which a
            # caller catching ValueError let through (the probe called the server unreachable).
            raise EndpointError(
                f"malformed JSON body: nested too deeply to read ({status_line(status)})",
                status=status,
            ) from None
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, the int-digits limit
            raise EndpointError(
                f"malformed JSON body ({status_line(status)})", status=status
            ) from exc

    async def get_text(self, url: str) -> tuple[int, str]:
        """GET a text resource (e.g. ``/metrics``) with retries. Raises ``EndpointError``."""
        status, data = await self._send("GET", url, None)
        return status, data.decode(errors="replace")

    async def pinned_base_url(self) -> str:
        """The base URL for a process that connects on its own (lm-eval). In server mode an
        ``http`` URL's host is resolved and checked now and replaced by the checked address, so
        that process cannot be steered elsewhere by a later DNS answer; ``https`` keeps its
        name (certificates are issued to names). Raises ``EndpointError`` when refused."""
        if self.refusal:
            raise EndpointError(self.refusal)
        parts = urlsplit(self.base_url)
        if not self.egress.server or parts.scheme != "http" or not parts.hostname:
            return self.base_url
        try:
            port = parts.port or 80
            address = (await resolve_checked(self.egress, parts.hostname, port, 10.0))[0]
        except (EgressRefused, OSError, TimeoutError) as exc:
            raise EndpointError(f"refused by the egress policy: {exc}") from exc
        host = f"[{address}]" if address.version == 6 else str(address)
        return urlunsplit(parts._replace(netloc=f"{host}:{port}"))

    # ---- OpenAI routes ---------------------------------------------------------------------

    async def models(self) -> list[dict[str, Any]]:
        status, data = await self.request_json("GET", f"{self.base_url}/models")
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get("data"), list):
            raise EndpointError(
                f"/models answered {status_line(status)} without a model list", status=status
            )
        return list(data["data"])

    async def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` from the engine's own tokenizer route (no special tokens added
        where the engine allows it). The shape is the probed engine's (``self.tokenize_shape``:
        vLLM and SGLang, llama.cpp or TGI; ``evalsvc.endpoints._engines``), or the registered
        tokenizer's when the probe loaded one (``local_tokenizer``)."""
        if self.local_tokenizer is not None:
            return await self.local_tokenizer.tokenize(text)
        shape = self.tokenize_shape or "vllm"
        body = tokenize_request(shape, text, self.model)
        status, data = await self.request_json("POST", f"{self.root_url}/tokenize", body=body)
        ids = parse_tokens(shape, data) if status == 200 else None
        if ids is None:
            raise EndpointError(f"/tokenize answered {status_line(status)} without token ids")
        return ids

    async def embeddings(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order, from the OpenAI ``POST /embeddings`` route (vLLM with
        an embedding model, llama.cpp with ``--embeddings``, TEI). Raises ``EndpointError``."""
        body = {"model": self.model, "input": texts}
        status, data = await self.request_json("POST", f"{self.base_url}/embeddings", body=body)
        rows = data.get("data") if status == 200 and isinstance(data, dict) else None
        if not isinstance(rows, list) or len(rows) != len(texts):
            raise EndpointError(
                f"/embeddings answered {status_line(status)} without {len(texts)} vectors",
                status=status,
            )
        out: list[list[float]] = [[] for _ in texts]
        for pos, row in enumerate(rows):
            index = row.get("index", pos) if isinstance(row, dict) else None
            vector = row.get("embedding") if isinstance(row, dict) else None
            if (
                not isinstance(index, int)
                or not 0 <= index < len(texts)
                or not isinstance(vector, list)
                or not all(isinstance(x, int | float) for x in vector)
            ):
                raise EndpointError("/embeddings answered a malformed vector", status=status)
            out[index] = [float(x) for x in vector]
        return out

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
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        response_format: dict[str, Any] | None = None,
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
        if tools is not None:
            body["tools"] = tools
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
        if response_format is not None:
            body["response_format"] = response_format
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
            out = Completion(error=failure_class(exc))
        out.latency_s = time.perf_counter() - start
        return out

    async def _stream(self, url: str, body: dict[str, Any], start: float) -> Completion:
        if self.refusal:
            raise EndpointError(self.refusal)
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}

        async def once() -> Completion:
            out = Completion()
            pieces: list[str] = []
            thought: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            last: float | None = None
            async with (
                self._sem,
                asyncio.timeout(self._timeout_s),
                self._request("POST", url, body) as resp,
            ):
                self._check_status(resp, url)
                if resp.status != 200:
                    return Completion(error=status_line(resp.status), status_code=resp.status)
                async for chunk in _sse_events(resp, self._max_stream):
                    now = time.perf_counter()
                    delta_text = _chunk_text(chunk)
                    delta_thought = _chunk_reasoning(chunk)
                    if delta_thought:
                        thought.append(delta_thought)
                    if delta_text or delta_thought:
                        if out.ttft_s is None:
                            out.ttft_s = now - start
                        elif last is not None:
                            out.itl_s.append(now - last)
                        last = now
                        pieces.append(delta_text)
                    _merge_chunk(out, chunk)
                    _merge_tool_deltas(calls, chunk)
            out.text = unicode_text("".join(pieces))
            out.reasoning = unicode_text("".join(thought)) if thought else None
            out.tool_calls = _assembled_calls(calls)
            return out

        try:
            out = await self._attempts(once)
        except (_RetryableStatus, TimeoutError, *_TRANSPORT_ERRORS, EgressRefused) as exc:
            raise self._failure(exc, url, "stream") from exc
        if out.error:
            return out
        if out.finish_reason is None:
            # Every OpenAI-compatible engine ends a stream with a choice that says why it
            # stopped; a stream that closed without one (an empty 200, a proxy that cut it) is
            # a truncated answer, not an empty one, and must not be scored as one.
            out.error = "incomplete stream: it ended without a finish_reason"
        return out


def failure_class(exc: BaseException) -> str:
    """One line naming what failed, never quoting the peer: h11 and h2 put the offending status
    or header line into their messages (``illegal status line: bytearray(b'... secret_key=...')``)
    and a parser's message can quote the body, and run errors are shown to every reader.
    Socket errors (refused, reset, TLS verification) are the local OS's or ssl's words and are
    kept, on one line and redacted."""
    name = type(exc).__name__
    if isinstance(exc, aiohttp.ClientConnectorError):
        # The two a user meets first (a wrong port, a server not started, a mistyped host) in
        # words that name the fix, not aiohttp's ("Cannot connect to host ... ssl:default
        # [Connect call failed ...]").
        where = f"[{exc.host}]" if ":" in exc.host else exc.host
        if isinstance(exc.os_error, ConnectionRefusedError):
            return (f"nothing listens on {where}:{exc.port} — is the server running, is the "
                    "port right?")
        if isinstance(exc.os_error, socket.gaierror):
            return f"cannot resolve the host name {where[:200]} — is the host name right?"
    if isinstance(exc, aiohttp.ClientResponseError | aiohttp.ClientPayloadError):
        # aiohttp's message quotes the offending status line, header or body piece.
        return f"protocol error: the answer is not valid HTTP ({name})"
    if isinstance(exc, aiohttp.ClientConnectionError | OSError):
        detail = " ".join(str(exc).split())[:200]
        return f"{name}: {redact_text(detail) or 'connection failed'}"
    return f"{name} (details withheld: they could quote the endpoint's answer)"
#: Largest piece of decompressed output produced at once: what one in-flight request costs
#: at most beyond its capped body, however much a compressed chunk would inflate.
DECODE_CHUNK = 64 * 1024
#: zlib ``wbits`` per Content-Encoding: gzip framing, zlib framing (HTTP's "deflate").
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


async def _decoded(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The body decoded in pieces of at most ``DECODE_CHUNK`` bytes.

    The client asks for ``identity``; a server that compresses anyway is decoded here with a
    bounded streaming decompressor rather than by the HTTP library, whose decoders inflate
    each received chunk whole (a 64 kB piece of a gzip bomb is 64 MB). The callers count the decoded bytes
    against their caps, so a bomb costs one piece of memory and ends at the cap."""
    encoding = resp.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        async for raw in resp.content.iter_any():
            yield raw
        return
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise EndpointError(
            f"unsupported Content-Encoding {encoding[:40]!r} (identity was requested)"
        )
    inflater = zlib.decompressobj(wbits)
    first = encoding == "deflate"
    async for raw in resp.content.iter_any():
        data = raw
        while data and not inflater.eof:
            try:
                out = inflater.decompress(data, DECODE_CHUNK)
            except zlib.error as exc:
                if first:  # "deflate" sent raw, without the zlib header (a common mistake)
                    inflater, first = zlib.decompressobj(-zlib.MAX_WBITS), False
                    continue
                raise EndpointError(f"malformed {encoding} body: {exc}") from exc
            first = False
            data = inflater.unconsumed_tail
            if out:
                yield out
    rest = inflater.flush()
    if rest:
        yield rest


async def _read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """The (decoded) body, refused as soon as it exceeds ``cap`` bytes (0: no cap)."""
    declared = resp.headers.get("content-length", "")
    if cap and declared.isdigit() and int(declared) > cap:
        raise EndpointError(
            f"response body of {int(declared)} bytes exceeds the cap of {cap} bytes "
            "(EVALSVC_MAX_RESPONSE_BYTES); not read"
        )
    if declared.isdigit() and resp.headers.get("content-encoding", "").strip().lower() in (
        "", "identity"
    ):
        # A declared length within the cap, not compressed: the HTTP parser reads exactly that
        # many bytes, so one read is bounded by the cap (the piecewise path below costs an async
        # generator per answer: a zero-latency run spends a few % of its loop there).
        return await resp.read()
    parts: list[bytes] = []
    size = 0
    async for part in _decoded(resp):
        size += len(part)
        if cap and size > cap:
            raise EndpointError(
                f"response body exceeds the cap of {cap} bytes (EVALSVC_MAX_RESPONSE_BYTES); "
                "not read further"
            )
        parts.append(part)
    return b"".join(parts)


async def _sse_lines(resp: aiohttp.ClientResponse, cap: int) -> AsyncIterator[str]:
    """Lines of a stream; bytes are counted before splitting, so an endless line is capped too."""
    size = 0
    pending = b""
    async for part in _decoded(resp):
        size += len(part)
        if cap and size > cap:
            raise EndpointError(
                f"stream exceeds the cap of {cap} bytes (EVALSVC_MAX_STREAM_BYTES); stopped"
            )
        pending += part
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode(errors="replace")
    if pending:
        yield pending.rstrip(b"\r").decode(errors="replace")


async def _sse_events(
    resp: aiohttp.ClientResponse, cap: int = 0
) -> AsyncIterator[dict[str, Any]]:
    """Yield the JSON payloads of a server-sent-events stream until ``[DONE]``."""
    async for line in _sse_lines(resp, cap):
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            event = json.loads(payload)
        except RecursionError:
            raise EndpointError("malformed stream event: nested too deeply to read") from None
        except ValueError as exc:  # JSONDecodeError, the int-digits limit
            raise EndpointError("malformed stream event (not JSON)") from exc
        if isinstance(event, dict) and "error" in event:
            raise EndpointError("the stream sent an error event")
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


def _merge_tool_deltas(calls: dict[int, dict[str, Any]], chunk: dict[str, Any]) -> None:
    """Fold one stream chunk's ``delta.tool_calls`` into ``calls`` (by ``index``): OpenAI's
    streaming shape sends the id and name once and the argument text in pieces."""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        pieces = delta.get("tool_calls") if isinstance(delta, dict) else None
        if not isinstance(pieces, list):
            continue
        for position, piece in enumerate(pieces):
            if not isinstance(piece, dict):
                continue
            index = piece.get("index", position)
            call = calls.setdefault(int(index) if isinstance(index, int) else position,
                                    {"id": None, "name": "", "arguments": []})
            if piece.get("id"):
                call["id"] = str(piece["id"])
            fn = piece.get("function")
            if isinstance(fn, dict):
                if fn.get("name"):
                    call["name"] += str(fn["name"])
                args = fn.get("arguments")
                if args is not None:
                    call["arguments"].append(args if isinstance(args, str) else json.dumps(args))


def _assembled_calls(calls: dict[int, dict[str, Any]]) -> list[ToolCall] | None:
    if not calls:
        return None
    return [
        ToolCall(name=unicode_text(c["name"]), arguments=unicode_text("".join(c["arguments"])),
                 id=c["id"])
        for _, c in sorted(calls.items())
    ]


def _parse_tool_calls(raw: Any) -> list[ToolCall] | None:
    """``message.tool_calls`` of a non-streamed answer (entries without a function skipped)."""
    if not isinstance(raw, list):
        return None
    out = []
    for entry in raw:
        fn = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(fn, dict):
            continue
        args = fn.get("arguments")
        out.append(ToolCall(
            name=unicode_text(str(fn.get("name") or "")),
            arguments=unicode_text(args if isinstance(args, str) else json.dumps(args)),
            id=str(entry["id"]) if entry.get("id") else None,
        ))
    return out or None


def _reasoning_of(part: Any) -> str | None:
    """A message's or delta's reasoning text: ``reasoning_content`` (SGLang, vLLM before 0.10)
    or ``reasoning`` (vLLM since); non-text values are ignored."""
    if not isinstance(part, dict):
        return None
    for key in ("reasoning_content", "reasoning"):
        value = part.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _chunk_reasoning(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    return _reasoning_of(choices[0].get("delta")) or ""


def _reasoning_tokens(usage: dict[str, Any]) -> int | None:
    details = usage.get("completion_tokens_details")
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _merge_chunk(out: Completion, chunk: dict[str, Any]) -> None:
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        out.reasoning_tokens = _reasoning_tokens(usage) or out.reasoning_tokens
        out.prompt_tokens = usage.get("prompt_tokens", out.prompt_tokens)
        out.completion_tokens = usage.get("completion_tokens", out.completion_tokens)
    for choice in chunk.get("choices") or []:
        if choice.get("finish_reason"):
            out.finish_reason = choice["finish_reason"]
        lp = _parse_logprobs(choice.get("logprobs"))
        if lp:
            out.logprobs = (out.logprobs or []) + lp


def unicode_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD. ``json.loads`` turns ``"\\ud800"``
    into a string UTF-8 cannot encode, and the store writes UTF-8: one such answer ended a run
    with ``UnicodeEncodeError`` (RFC 7493, I-JSON, forbids them; a well-formed answer has none,
    so the check costs one encode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def _parse_response(data: Any, status: int) -> Completion:
    if status != 200:
        # The status line only: the body is the endpoint's text (see the module contract).
        return Completion(error=status_line(status), status_code=status)
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("choices"), list)
        or not data["choices"]
    ):
        return Completion(error="malformed response: no choices", status_code=status)
    choice = data["choices"][0]
    if not isinstance(choice, dict):
        return Completion(error="malformed response: choice is not an object", status_code=status)
    calls = None
    reasoning = None
    if isinstance(choice.get("message"), dict):
        text = choice["message"].get("content") or ""
        calls = _parse_tool_calls(choice["message"].get("tool_calls"))
        reasoning = _reasoning_of(choice["message"])
    else:
        text = choice.get("text") or ""
    usage: dict[str, Any] = data["usage"] if isinstance(data.get("usage"), dict) else {}
    out = Completion(
        text=unicode_text(str(text)),
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        logprobs=_parse_logprobs(choice.get("logprobs")),
        status_code=status,
        tool_calls=calls,
        reasoning=None if reasoning is None else unicode_text(reasoning),
        reasoning_tokens=_reasoning_tokens(usage),
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
