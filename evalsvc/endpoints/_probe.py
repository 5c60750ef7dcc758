"""Capability probe: what an endpoint serves and which API features actually work.

Contract: ``probe(client)`` sends a handful of tiny requests and returns a ``Provenance``. It
raises ``EndpointError`` only when the endpoint is unreachable or serves no model (or its
registered tokenizer, needed because it has no tokenize route, cannot be loaded); a feature that
fails is recorded as ``capabilities[name] = False``, never guessed. Suites declare the
capabilities they need and the runner refuses them up front (lm-eval's known failure mode is
scoring chance-level results from endpoints whose ``echo`` silently does nothing).

``OPTIONAL_CAPABILITIES`` (``tools``, ``json_schema``) cost a generation each and are probed
only when asked (``probe(client, optional=...)``: the runner asks for those its suites
``require``). Each is judged by what came back, not by the status: ``tools`` needs a request
with ``tools`` and ``tool_choice: auto`` accepted *and* ``tool_choice: required`` answered with
a parsed call (llama.cpp with a chat template that has no tool support accepts both and returns
plain text); ``json_schema`` needs a ``response_format`` JSON schema answered with JSON that
holds to it (an engine that ignores the field answers free text).

What the comparability guard (``evalsvc.gates``) compares, recorded where the engine says it
cheaply: ``chat_template_fingerprint``, a fixed conversation rendered by the engine (vLLM and
SGLang: ``POST /tokenize`` with ``messages``, then ``/detokenize``; llama.cpp:
``POST /apply-template``, else the ``chat_template`` of ``/props``), hashed; the sampling
defaults llama.cpp's ``/props`` reports (``generation_defaults``); the model's shape from
llama.cpp's ``/v1/models`` ``meta`` (``model_family``); and ``reasoning``, how the chat probe's
answer came back (a separate reasoning field, ``<think>`` inline, or no trace). vLLM exposes
neither its generation config nor its model's shape over HTTP: there the tokenizer and the
template stand for the model family. None of these costs a generation.

The tokenizer that counts tokens (``capabilities.tokenize``, ``tokenizer_source``): the engine's
own route; else the one registered with the endpoint; else the served model's tokenizer from the
Hugging Face hub (``_hub``), when the hub (or its cache) has it.

A server that answers but not at this base URL (no ``/v1``: ``http://host:8000``) is a
``BaseUrlError`` (a ``UrlError``: a usage error, exit 2) naming the base URL whose ``/models``
does answer, ``did you mean http://host:8000/v1?``, instead of an unreachable endpoint. A
server that answers ``/models`` with no model list at either URL (another HTTP server on that
port: a 404, an HTML page, JSON of another API) is a ``NotOpenAIServer`` (a ``BaseUrlError``,
exit 2): ``127.0.0.1:19401 answered 404 on /v1/models: not an OpenAI-compatible server``; a 401
or 403 there says the server wants a key. Unreachable (exit 4) is kept for a server that did not
answer at all (the client's error then names the fix: ``nothing listens on HOST:PORT``). An
answer the probe cannot read (a model list of the wrong shape, JSON nested past the parser's
depth) is ``NotOpenAIServer`` too, never an exception out of the probe: a capability whose
answer cannot be read is recorded ``False``, like one that is missing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from evalsvc.domain import Provenance
from evalsvc.endpoints._client import (
    Completion,
    EndpointClient,
    EndpointError,
    status_line,
    unicode_text,
)
from evalsvc.endpoints._engines import (
    ENGINES,
    EngineFacts,
    engine_from_owner,
    facts_from_info,
    parse_tokens,
)
from evalsvc.endpoints._hub import HubError, hub_repo_ids, hub_tokenizer
from evalsvc.endpoints._tokenizer import LocalTokenizer
from evalsvc.endpoints._urls import UrlError, redact_url

#: How ``tokenizer_source`` starts when the probe found no tokenizer (the reason follows).
NO_TOKENIZER = "none: no tokenize route, no registered tokenizer"

CAPABILITIES = ("chat", "completions", "logprobs", "echo", "prompt_logprobs", "tokenize", "metrics")
#: Probed only when a suite needs them (each costs a short generation).
OPTIONAL_CAPABILITIES = ("tools", "json_schema")

#: The probe's tool and schema: one enum value, so a constrained answer is a few tokens. Its
#: prompt holds "Say OK." like the chat probe's (test proxies let the probe's requests pass).
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "say_ok",
        "description": "Say OK.",
        "parameters": {
            "type": "object",
            "properties": {"word": {"type": "string", "enum": ["OK"]}},
            "required": ["word"],
        },
    },
}
_PROBE_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "say_ok",
        "schema": {
            "type": "object",
            "properties": {"word": {"type": "string", "enum": ["OK"]}},
            "required": ["word"],
            "additionalProperties": False,
        },
    },
}

#: A fixed conversation whose rendering fingerprints the chat template: two user turns around an
#: assistant turn (a template that treats them differently shows it); "Say OK." like every probe
#: request (test proxies let those pass).
_TEMPLATE_CHAT = [
    {"role": "user", "content": "Say OK."},
    {"role": "assistant", "content": "OK."},
    {"role": "user", "content": "Say OK."},
]
#: The keys of llama.cpp's ``/v1/models`` ``meta`` that quantization leaves alone (``size`` is
#: the file's bytes: it changes).
_FAMILY_KEYS = ("vocab_type", "n_vocab", "n_ctx_train", "n_embd", "n_params")

#: A fixed sentence whose token ids fingerprint the tokenizer (pairing by text still holds when
#: tokenizers differ, but per-token comparisons such as drift do not).
_FINGERPRINT_TEXT = "The quick brown fox jumps over 13 lazy dogs; naïve café ☕."


class BaseUrlError(EndpointError, UrlError):
    """The server answered, but not as an OpenAI API at this base URL (``/v1`` is missing, or
    it is another server); ``str()`` names the fix. A usage error (exit 2), not unreachable."""


class NotOpenAIServer(BaseUrlError):
    """The server answered ``/models`` without a model list (at this base URL and, when it
    lacks ``/v1``, under it), or answered the probe with what it cannot read."""


def _where(client: EndpointClient) -> tuple[str, str]:
    """``host:port`` of the endpoint (no credentials: the base URL is redacted) and the path
    of its ``/models`` route."""
    parts = urlsplit(client.base_url)
    host = (parts.netloc.rpartition("@")[2]) or client.base_url
    return host, f"{parts.path.rstrip('/')}/models"


def _not_openai(client: EndpointClient, failure: EndpointError) -> NotOpenAIServer:
    host, path = _where(client)
    code = failure.status or 0
    if code in (401, 403):
        fix = (
            "the server wants an API key: register the endpoint with one (`evalsvc endpoints "
            "add NAME URL --api-key-env VAR`) and pass NAME"
            if not client.api_key
            else "the server refused the endpoint's API key (check the variable its "
            "api_key_env names)"
        )
        return NotOpenAIServer(f"{host} answered {status_line(code)} on {path}: {fix}",
                               status=code)
    if 300 <= code < 400:
        return NotOpenAIServer(
            f"{host} answered {status_line(code)} on {path}: redirects are not followed "
            "(give the base URL of the model server itself)",
            status=code,
        )
    said = str(code) if code != 200 else "200 without a model list"
    return NotOpenAIServer(
        f"{host} answered {said} on {path}: not an OpenAI-compatible server — is the port "
        "right?",
        status=code,
    )


async def probe(client: EndpointClient, *, optional: Collection[str] = ()) -> Provenance:
    """Probe ``client``'s endpoint and fill ``client.model`` if it was not given, and
    ``client.provenance`` with what it returns; the ``OPTIONAL_CAPABILITIES`` named in
    ``optional`` are probed too. Raises ``EndpointError`` (``BaseUrlError`` when the server
    answered as something else than an OpenAI API at this URL), never what its answers do to
    a parser."""
    try:
        return await _probe(client, optional=optional)
    except EndpointError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError) as exc:
        # What the endpoint's answers did to the reading of them (a model list of numbers, an
        # id that is an object): the server answered, badly. Named by class, never quoted.
        host, _ = _where(client)
        raise NotOpenAIServer(
            f"{host} answered the probe with what an OpenAI-compatible server does not send "
            f"({type(exc).__name__} reading it): not an OpenAI-compatible server"
        ) from exc


async def _probe(client: EndpointClient, *, optional: Collection[str]) -> Provenance:
    try:
        models = await client.models()  # raises EndpointError when unreachable
    except EndpointError as exc:
        fixed = await _answering_base_url(client, exc)
        if fixed is None:
            if exc.status is None:  # no HTTP answer: unreachable, in the client's words
                raise
            raise _not_openai(client, exc) from exc
        raise BaseUrlError(
            f"{redact_url(client.base_url)} is not an OpenAI base URL (GET /models answered "
            f"{status_line(exc.status or 0)}); did you mean {redact_url(fixed)}?",
            status=exc.status,
        ) from exc
    if not models:
        raise EndpointError(f"{client.base_url} serves no model")
    chosen = _choose_model(models, client.model)
    if chosen is None:
        # Model ids are the endpoint's text: a few, short, so an error cannot carry a page.
        names = ", ".join(str(m.get("id"))[:64] for m in models[:5])
        raise EndpointError(
            f"{client.base_url} does not serve model {client.model!r} (it serves {names})"
        )
    served = str(chosen["id"])
    if "\x00" in served or unicode_text(served) != served:
        # Stored as text with the run: a lone surrogate or a NUL ended the run in the store.
        raise NotOpenAIServer(
            f"{_where(client)[0]} serves a model id that is not valid text (a lone surrogate "
            "or a NUL): not an OpenAI-compatible server"
        )
    client.model = served
    owner = engine_from_owner(chosen.get("owned_by"))
    facts = await _engine_facts(client, owner)
    engine = facts.engine if facts else owner
    prov = Provenance(
        model=client.model,
        root=chosen.get("root") or (facts.root if facts else None),
        max_context=_int(chosen.get("max_model_len")) or (facts.max_context if facts else None),
        engine=engine or chosen.get("owned_by"),
        version=facts.version if facts else None,
        kv_cache_dtype=facts.kv_cache_dtype if facts else None,
        quantization=facts.quantization if facts else None,
        dtype=facts.dtype if facts else None,
        probed_at=datetime.now(UTC),
    )
    caps: dict[str, bool] = {}
    if facts is not None:
        prov.generation_defaults = facts.extra.get("generation_defaults")
    prov.model_family = _model_family(chosen.get("meta"))

    chat = await client.chat([{"role": "user", "content": "Say OK."}], max_tokens=2)
    _raise_if_timed_out(client, "chat", chat)
    caps["chat"] = chat.ok
    if chat.ok:
        prov.reasoning = "parsed" if chat.reasoning else "inline" if "<think>" in chat.text else None
    comp = await client.complete("Hello", max_tokens=2, logprobs=1)
    _raise_if_timed_out(client, "completions", comp)
    caps["completions"] = comp.ok
    caps["logprobs"] = bool(comp.ok and comp.logprobs and comp.logprobs[0].logprob is not None)
    # echo + logprobs + max_tokens=0 is the loglikelihood path: it must return one logprob per
    # prompt token (the first is null). An engine that accepts the flag but returns nothing
    # would make every loglikelihood task score at chance, so check the content, not the status.
    echo = await client.complete(
        "The capital of France is Paris", max_tokens=0, logprobs=1, echo=True
    )
    caps["echo"] = bool(
        echo.ok
        and echo.logprobs
        and len(echo.logprobs) >= 3
        and any(t.logprob is not None for t in echo.logprobs)
    )
    plp = await client.complete("The capital of France is Paris", max_tokens=1, prompt_logprobs=1)
    caps["prompt_logprobs"] = bool(
        plp.ok and plp.prompt_logprobs and any(p is not None and p.top for p in plp.prompt_logprobs)
    )
    known = ENGINES.get(engine or "")
    client.tokenize_shape = known.tokenize if known else None
    caps["tokenize"] = False
    if known is None or known.tokenize is not None:
        try:
            ids = await client.tokenize(_FINGERPRINT_TEXT)
            caps["tokenize"] = bool(ids)
            prov.tokenizer_fingerprint = hashlib.sha256(repr(ids).encode()).hexdigest()[:16]
            prov.tokenizer_source = f"endpoint /tokenize ({engine or 'vLLM shape'})"
        except EndpointError:
            pass
    registered = client.endpoint.tokenizer
    if not caps["tokenize"] and registered:
        # An engine without a tokenize route: the model's own tokenizer, registered with the
        # endpoint, counts the tokens instead (never when the engine has a route: its own count
        # is the one the context limit applies to).
        try:
            client.local_tokenizer = LocalTokenizer(registered, source="the registered tokenizer")
        except ValueError as exc:
            raise EndpointError(str(exc)) from None
        ids = await client.tokenize(_FINGERPRINT_TEXT)
        caps["tokenize"] = bool(ids)
        prov.tokenizer_fingerprint = hashlib.sha256(repr(ids).encode()).hexdigest()[:16]
        prov.tokenizer_source = f"tokenizer: {registered} (registered)"
    elif not caps["tokenize"]:
        await _hub_tokenizer(client, prov, caps)

    await _chat_template(client, prov, facts)
    if prov.version is None:
        prov.version = await _version(client)
    metrics = await _metrics(client)
    caps["metrics"] = metrics is not None
    if metrics:
        _apply_metrics(prov, metrics)
    if prov.engine in (None, "vllm") and metrics and "vllm:cache_config_info" in metrics:
        prov.engine = "vllm"
    if "tools" in optional:
        caps["tools"] = await _serves_tools(client)
    if "json_schema" in optional:
        caps["json_schema"] = await _serves_json_schema(client)
    prov.capabilities = caps
    client.provenance = prov
    return prov


def _fingerprint(value: Any) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


async def _chat_template(
    client: EndpointClient, prov: Provenance, facts: EngineFacts | None
) -> None:
    """``chat_template_fingerprint`` and its source (the module contract); left unset when the
    engine renders no template over HTTP (TGI, a generic server)."""
    shape = client.tokenize_shape
    if shape == "llama.cpp":
        try:
            status, data = await client.request_json(
                "POST", f"{client.root_url}/apply-template", body={"messages": _TEMPLATE_CHAT}
            )
        except EndpointError:
            status, data = 0, None
        if status == 200 and isinstance(data, dict) and isinstance(data.get("prompt"), str):
            prov.chat_template_fingerprint = _fingerprint(data["prompt"])
            prov.chat_template_source = "llama.cpp /apply-template"
        elif facts is not None and isinstance(facts.extra.get("chat_template"), str):
            prov.chat_template_fingerprint = _fingerprint(facts.extra["chat_template"])
            prov.chat_template_source = "llama.cpp /props chat_template"
        return
    if shape not in ("vllm", None) or client.local_tokenizer is not None:
        return
    body: dict[str, Any] = {"messages": _TEMPLATE_CHAT, "add_generation_prompt": True}
    if client.model:
        body["model"] = client.model
    try:
        status, data = await client.request_json("POST", f"{client.root_url}/tokenize", body=body)
    except EndpointError:
        return
    ids = parse_tokens("vllm", data) if status == 200 else None
    if not ids:
        return
    # The rendered text, not the ids: a template is compared apart from the tokenizer (which
    # has its own fingerprint). An engine without /detokenize: the ids stand for it.
    try:
        status, text = await client.request_json(
            "POST", f"{client.root_url}/detokenize", body={"model": client.model, "tokens": ids}
        )
    except EndpointError:
        status, text = 0, None
    if status == 200 and isinstance(text, dict) and isinstance(text.get("prompt"), str):
        prov.chat_template_fingerprint = _fingerprint(text["prompt"])
        prov.chat_template_source = "/tokenize messages + /detokenize"
    else:
        prov.chat_template_fingerprint = _fingerprint(ids)
        prov.chat_template_source = "/tokenize messages (token ids)"


def _model_family(meta: Any) -> dict[str, Any] | None:
    """The shape quantization leaves alone from llama.cpp's ``/v1/models`` ``meta``."""
    if not isinstance(meta, dict):
        return None
    shape = {
        k: meta[k] for k in _FAMILY_KEYS if isinstance(meta.get(k), int | str) and meta[k] != ""
    }
    return shape or None


async def _serves_tools(client: EndpointClient) -> bool:
    """Whether the endpoint takes ``tools`` with ``tool_choice: auto`` and answers
    ``tool_choice: required`` with a parsed call (see the module contract)."""
    messages = [{"role": "user", "content": "Say OK. Call the say_ok tool."}]
    auto = await client.chat(messages, max_tokens=8, tools=[_PROBE_TOOL], tool_choice="auto")
    _raise_if_timed_out(client, "tools", auto)
    if not auto.ok:
        return False
    forced = await client.chat(
        messages, max_tokens=64, tools=[_PROBE_TOOL], tool_choice="required"
    )
    _raise_if_timed_out(client, "tools", forced)
    return bool(forced.ok and forced.tool_calls and forced.tool_calls[0].name == "say_ok")


async def _serves_json_schema(client: EndpointClient) -> bool:
    """Whether a ``response_format`` JSON schema comes back as JSON that holds to it."""
    out = await client.chat(
        [{"role": "user", "content": "Say OK. Answer in JSON."}],
        max_tokens=32,
        response_format=_PROBE_SCHEMA,
    )
    _raise_if_timed_out(client, "json_schema", out)
    if not out.ok:
        return False
    # A reasoning model served without a reasoning parser answers after its trace: the JSON
    # is what follows the last </think> (DeepSeek-R1/Qwen3 markers).
    text = out.text.rsplit("</think>", 1)[-1]
    try:
        return bool(json.loads(text) == {"word": "OK"})
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return False


async def _hub_tokenizer(client: EndpointClient, prov: Provenance, caps: dict[str, bool]) -> None:
    """Neither a tokenize route nor a registered tokenizer: the served model's own tokenizer
    from the Hugging Face hub (``_hub``: ``HF_ENDPOINT``, ``HF_HUB_OFFLINE``, cached under
    ``EVALSVC_HOME/hub``), recorded as the source; or, when none came, why not
    (``tokenizer_source`` ``none: ...``, which the missing-``tokenize`` refusal quotes)."""
    try:
        hub = await asyncio.to_thread(hub_tokenizer, hub_repo_ids(client.model, prov.root))
        client.local_tokenizer = LocalTokenizer(
            hub.directory, source=f"the hub tokenizer of {hub.repo_id}"
        )
    except (HubError, ValueError) as exc:
        prov.tokenizer_source = f"{NO_TOKENIZER}; {exc}"
        return
    ids = await client.tokenize(_FINGERPRINT_TEXT)
    caps["tokenize"] = bool(ids)
    prov.tokenizer_fingerprint = hashlib.sha256(repr(ids).encode()).hexdigest()[:16]
    at = f"@{hub.commit}" if hub.commit else ""
    prov.tokenizer_source = f"hub: {hub.repo_id}{at} ({hub.directory})"


async def _answering_base_url(client: EndpointClient, failure: EndpointError) -> str | None:
    """``{base}/v1`` when ``{base}/models`` got an HTTP answer without a model list and
    ``{base}/v1/models`` lists models (the URL missed its ``/v1``); None otherwise. Only a
    server that answered is asked again: an unreachable one stays an infrastructure error."""
    if failure.status is None or client.base_url.rstrip("/").endswith("/v1"):
        return None
    candidate = f"{client.base_url.rstrip('/')}/v1"
    try:
        status, data = await client.request_json("GET", f"{candidate}/models")
    except EndpointError:
        return None
    listed = status == 200 and isinstance(data, dict) and isinstance(data.get("data"), list)
    return candidate if listed else None


def _raise_if_timed_out(client: EndpointClient, route: str, result: Completion) -> None:
    """A 2-token request that ran out of time says the endpoint is overloaded or stuck, not that
    it lacks the feature: recording ``False`` would refuse suites as "does not support chat"
    (seen on a llama.cpp server queueing other clients' long prompts past the deadline)."""
    if (
        result.error is not None
        and result.status_code is None
        and result.error.startswith("timeout")
    ):
        raise EndpointError(
            f"{client.base_url} did not answer the probe's 2-token {route} request: {result.error}"
        )


async def _engine_facts(client: EndpointClient, owner: str | None) -> EngineFacts | None:
    """Ask the info routes of the engine ``owned_by`` named, or of every known engine in turn
    when it named none; merge what the first recognised engine's routes say."""
    candidates = [ENGINES[owner]] if owner else list(ENGINES.values())
    for engine in candidates:
        merged: EngineFacts | None = None
        for route in engine.info_routes:
            try:
                status, data = await client.request_json("GET", f"{client.root_url}{route}")
            except EndpointError:
                continue
            facts = facts_from_info(route, data) if status == 200 else None
            if facts is None or facts.engine != engine.name:
                continue
            merged = facts if merged is None else _merge(merged, facts)
        if merged is not None:
            return merged
    return None


def _merge(a: EngineFacts, b: EngineFacts) -> EngineFacts:
    for name in ("version", "max_context", "root", "kv_cache_dtype", "quantization", "dtype"):
        if getattr(a, name) is None:
            setattr(a, name, getattr(b, name))
    a.extra.update(b.extra)
    return a


def _choose_model(models: list[dict[str, Any]], wanted: str | None) -> dict[str, Any] | None:
    if wanted is None:
        return models[0]
    for m in models:
        if m.get("id") == wanted:
            return m
    return None


async def _version(client: EndpointClient) -> str | None:
    try:
        status, data = await client.request_json("GET", f"{client.root_url}/version")
    except EndpointError:
        return None
    if status == 200 and isinstance(data, dict) and data.get("version"):
        return str(data["version"])
    return None


async def _metrics(client: EndpointClient) -> dict[str, dict[str, str]] | None:
    """Prometheus ``/metrics`` as {info-metric name: labels}; None when the engine has none."""
    try:
        status, text = await client.get_text(f"{client.root_url}/metrics")
    except EndpointError:
        return None
    if status != 200:
        return None
    out: dict[str, dict[str, str]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith("_info") and sample.name not in out:
                    out[sample.name] = dict(sample.labels)
    except ValueError:
        return None
    return out


def _apply_metrics(prov: Provenance, metrics: dict[str, dict[str, str]]) -> None:
    cache = metrics.get("vllm:cache_config_info")
    if not cache:
        return
    prov.kv_cache_dtype = cache.get("cache_dtype")
    prov.block_size = _int(cache.get("block_size"))
    # vLLM reports the CPU backend's KV blocks in num_gpu_blocks too (the field name is historic).
    prov.num_gpu_blocks = _int(cache.get("num_gpu_blocks")) or _int(cache.get("num_cpu_blocks"))
    # Newer vLLM reports the capacity directly; older ones only blocks x block size.
    prov.kv_capacity_tokens = _int(cache.get("kv_cache_size_tokens"))
    if prov.kv_capacity_tokens is None and prov.block_size and prov.num_gpu_blocks:
        prov.kv_capacity_tokens = prov.block_size * prov.num_gpu_blocks
    prov.kv_cache_memory_bytes = _int(cache.get("kv_cache_memory_bytes"))
    prov.prefix_caching = (
        cache.get("enable_prefix_caching") == "True" if "enable_prefix_caching" in cache else None
    )
    quant = cache.get("quantization") or metrics.get("vllm:model_config_info", {}).get(
        "quantization"
    )
    if quant and quant != "None":
        prov.quantization = quant


def _int(value: Any) -> int | None:
    try:
        return None if value in (None, "", "None") else int(float(value))
    except (TypeError, ValueError):
        return None
